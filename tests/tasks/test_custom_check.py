"""The check of a custom task's reward function before the run (:func:`ugrpo.tasks.custom_check.check_reward_fn`):
called once as training calls it, on a row's gold answer; no model."""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import pytest

from ugrpo.errors import RewardFunctionError
from ugrpo.tasks import get_task
from ugrpo.tasks.custom_check import check_reward_fn

REWARDS = '''
import time

def correct(prompts, completions, answer, **kwargs):  # TRL's signature
    return [float(c == a) for c, a in zip(completions, answer)]

def keywords_only(completions, **kwargs):  # TRL's keyword form: the answers come as kwargs["answer"]
    return [float(c == a) for c, a in zip(completions, kwargs["answer"])]

def exact(completions, answers, **fields):
    return [float(c == a) for c, a in zip(completions, answers)]

def boxed_only(completions, answers):
    return [float(c == f"\\\\boxed{{{a}}}") for c, a in zip(completions, answers)]

def unscorable(completions, answers):
    return [None for _ in completions]

def raises(completions, answers):
    raise KeyError("no boxed answer")

def not_a_list(completions, answers):
    return 1.0

def two_values(completions, answers):
    return [1.0, 1.0]

def text(completions, answers):
    return ["1.0" for _ in completions]

def slow(completions, answers):
    time.sleep(2)
    return [1.0 for _ in completions]
'''


@pytest.fixture
def task_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``task_of("fn", **options)``: a custom task on two rows scored by ``fn`` of a fresh reward module."""
    module = f"check_rewards_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(REWARDS))
    monkeypatch.syspath_prepend(str(tmp_path))
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [{"prompt": "2+2=", "answer": "4", "level": 1},
                                                          {"prompt": "3*3=", "answer": "9", "level": 2}]))
    return lambda fn, **options: get_task("custom", data_path=str(data), reward_fn=f"{module}:{fn}", **options)


def _error(task) -> str:
    with pytest.raises(RewardFunctionError) as e:
        check_reward_fn(task, task.train_problems()[0])
    return str(e.value)


@pytest.mark.parametrize("fn,words", [("correct", "got multiple values for argument 'prompts'"),
                                      ("keywords_only", "takes 1 positional argument but 2 were given")])
def test_a_trl_signature_is_an_error_that_names_the_spec_the_convention_and_the_fix(task_of, fn, words):
    task = task_of(fn)
    msg = _error(task)
    assert msg.startswith(f"task.options.reward_fn {task.reward_fn!r} on the gold answer of ")
    assert "rows.jsonl:line 1 ('4'): TypeError: " in msg and words in msg
    assert "calls fn(completions, answers, **row_fields)" in msg
    assert ("TRL reward functions take (prompts, completions, ...); ugrpo's custom task passes completions and "
            "answers positionally") in msg
    assert f"def reward(completions, answers, **fields): return {fn}(completions=completions, answer=answers" in msg


def test_the_suggested_wrapper_makes_a_trl_function_pass(task_of):
    """The wrapper the message shows, applied to TRL's ``correct``: the check passes (the gold answer scores 1)."""
    task = task_of("correct")
    trl = task.__dict__["_fn"]

    def reward(completions, answers, **fields):
        return trl(completions=completions, answer=answers, **fields)

    wrapped = get_task("custom", data_path=task.data_path, reward_fn=reward)
    assert check_reward_fn(wrapped, wrapped.train_problems()[0]) is None


def test_an_exception_or_a_broken_return_is_an_error_without_the_trl_hint(task_of):
    msg = _error(task_of("raises"))
    assert "KeyError: 'no boxed answer'" in msg and "calls fn(completions, answers, **row_fields)" in msg
    assert "it must return None, not raise" in msg and "TRL" not in msg
    msg = _error(task_of("not_a_list"))
    assert "returned float; it must return a list with one float or None per completion" in msg
    assert "calls fn(completions, answers, **row_fields)" in msg
    assert "returned 2 values for 1 completions; it must return exactly one float" in _error(task_of("two_values"))
    assert "returned ['1.0'] (str); each value must be a number" in _error(task_of("text"))


def test_a_gold_answer_scoring_zero_or_none_warns_and_a_right_function_says_nothing(task_of):
    for fn, value in (("boxed_only", "0.0"), ("unscorable", "None")):
        task = task_of(fn)
        warning = check_reward_fn(task, task.train_problems()[1])
        assert warning is not None and "\n" not in warning
        assert warning.startswith(f"task.options.reward_fn {task.reward_fn!r} on the gold answer of ")
        assert f"rows.jsonl:line 2 ('9'): reward {value};" in warning
    task = task_of("exact")
    assert check_reward_fn(task, task.train_problems()[0]) is None


def test_a_call_past_the_timeout_warns(task_of):
    task = task_of("slow", timeout=0.2)
    warning = check_reward_fn(task, task.train_problems()[0])
    assert warning is not None and "no reward within 0.2 s (task.options.timeout)" in warning
