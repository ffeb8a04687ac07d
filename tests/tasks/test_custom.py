"""Custom tasks: a reward module written to tmp_path and put on sys.path."""

from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

import pytest

from ugrpo.tasks import CustomTask, RowError, VerifierContractError, get_task, score

REWARDS = '''
import math

def exact(completions, answers):
    return [float(c.strip() == a) for c, a in zip(completions, answers)]

def with_fields(completions, answers, prompts, difficulty=None):
    # reward 1 only if correct and the row is "hard": checks the extra column arrives aligned
    return [float(c == a and d == "hard") for c, a, d in zip(completions, answers, difficulty)]

def kwargs_sink(completions, answers, **row_fields):
    assert sorted(row_fields) == ["difficulty", "prompts", "source_id"], sorted(row_fields)
    return [1.0] * len(completions)

def raises(completions, answers):
    raise KeyError("user bug in reward")

def wrong_length(completions, answers):
    return [1.0]

def not_a_list(completions, answers):
    return 1.0

def mixed(completions, answers):
    return [1, True, None, math.nan, "0.5", math.inf, 0.25]

NOT_CALLABLE = 3
'''

ROWS = [
    {"prompt": "2+2=", "answer": "4", "difficulty": "easy", "source_id": 1},
    {"prompt": "10*10=", "answer": "100", "difficulty": "hard", "source_id": 2},
    {"prompt": "7-9=", "answer": -2, "difficulty": "hard"},
]


@pytest.fixture
def reward_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"user_rewards_{uuid.uuid4().hex[:8]}"  # unique: no stale module from another test
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(REWARDS))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def test_loads_rows_and_scores_with_user_function(reward_module: str, data: Path) -> None:
    task = get_task("custom", data_path=str(data), reward_fn=f"{reward_module}:exact", eval_path=str(data))
    assert isinstance(task, CustomTask)
    ps = task.train_problems()
    assert [p.prompt for p in ps] == ["2+2=", "10*10=", "7-9="]
    assert [p.answer for p in ps] == ["4", "100", "-2"]  # numbers become text
    assert ps[0].meta == {"difficulty": "easy", "source_id": 1} and ps[0].id == "custom-train-0"
    assert task.eval_problems()[2].id == "custom-eval-2"
    res = score(task, ["4", " 100 ", "2"], ps)
    assert res.rewards == [1.0, 1.0, 0.0] and not any(res.unscorable)


def test_extra_fields_are_passed_as_aligned_lists(reward_module: str, data: Path) -> None:
    task = get_task("custom", data_path=str(data), reward_fn=f"{reward_module}:with_fields")
    ps = task.train_problems()
    assert task.verify(["4", "100", "-2"], ps) == [0.0, 1.0, 1.0]
    sink = get_task("custom", data_path=str(data), reward_fn=f"{reward_module}:kwargs_sink")
    assert sink.verify(["a", "b", "c"], sink.train_problems()) == [1.0, 1.0, 1.0]


def test_raising_reward_fn_is_counted_not_a_crash(reward_module: str, data: Path) -> None:
    task = get_task("custom", data_path=str(data), reward_fn=f"{reward_module}:raises")
    ps = task.train_problems()
    res = score(task, ["4", "100", "-2"], ps)
    assert res.rewards == [0.0, 0.0, 0.0] and all(res.unscorable)
    assert res.n_errors == 3 and res.n_timeouts == 0 and res.n_parse_failures == 0
    assert res.first_error is not None and "Traceback" in res.first_error and "user bug in reward" in res.first_error


def test_a_reward_fn_raising_on_some_batches_is_one_warning_line_per_run(data: Path, caplog) -> None:
    """Rewards zeroed on part of a run are told once per run (each run builds its own task: the second run of a
    sweep in the same process is told too), on one line naming the exception, the count and the metric to read."""
    import logging

    def picky(completions, answers):
        if "100" in completions:
            raise ValueError("cannot score '100'")
        return [float(c == a) for c, a in zip(completions, answers)]

    for run in range(2):
        task = get_task("custom", data_path=str(data), reward_fn=picky)
        ps = task.train_problems()
        with caplog.at_level(logging.WARNING, logger="ugrpo.tasks.base"):
            caplog.clear()
            counts = [score(task, batch, ps).n_errors for batch in (["4", "1", "-2"], ["4", "100", "-2"],
                                                                     ["100", "100", "0"])]
        assert counts == [0, 3, 3], run
        logged = [r.getMessage() for r in caplog.records]
        assert len(logged) == 1 and "\n" not in logged[0], (run, logged)
        assert "raised ValueError: cannot score '100' on a batch of 3 completions" in logged[0], logged[0]
        assert "n_errors" in logged[0] and "metrics.jsonl" in logged[0] and "Not logged again" in logged[0]


@pytest.mark.parametrize("fn", ["wrong_length", "not_a_list"])
def test_wrong_shape_is_an_error(reward_module: str, data: Path, fn: str) -> None:
    task = get_task("custom", data_path=str(data), reward_fn=f"{reward_module}:{fn}")
    with pytest.raises(VerifierContractError, match="one float or None per completion"):
        score(task, ["4", "100", "-2"], task.train_problems())


def test_none_nan_and_non_numbers_are_unscorable_and_counted(reward_module: str, data: Path) -> None:
    task = get_task("custom", data_path=str(data), reward_fn=f"{reward_module}:mixed")
    p = task.train_problems()[0]
    res = score(task, ["x"] * 7, [p] * 7)
    assert res.rewards == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.25]
    assert res.unscorable == [False, False, True, True, True, True, False]
    assert res.n_parse_failures == 1  # the None
    assert res.n_errors == 3  # nan, "0.5" (a string), inf
    assert res.first_error is not None and "nan" in res.first_error


def test_callable_reward_fn(data: Path) -> None:
    task = get_task("custom", data_path=str(data), reward_fn=lambda completions, answers: [0.5] * len(completions))
    assert task.verify(["a"], task.train_problems()[:1]) == [0.5]


@pytest.mark.parametrize(
    "spec,match",
    [
        ("no_colon", "must be 'module:function'"),
        ("a:b:c", "must be 'module:function'"),
        ("surely_not_a_module_xyz:f", "cannot import module 'surely_not_a_module_xyz'.*sys.path or PYTHONPATH"),
        ("{mod}:missing", "has no function 'missing'; its callables are: .*exact"),
        ("{mod}:NOT_CALLABLE", "is a int, not a function"),
    ],
)
def test_bad_reward_fn_specs(reward_module: str, data: Path, spec: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        get_task("custom", data_path=str(data), reward_fn=spec.format(mod=reward_module))


def test_bad_rows_and_options(reward_module: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": "p", "answer": "a"}) + "\n" + json.dumps({"question": "p",
                                                                                    "answer": "a"}) + "\n")
    fn = f"{reward_module}:exact"
    with pytest.raises(RowError, match=r"bad\.jsonl:line 2: field 'prompt' is missing"):
        get_task("custom", data_path=str(path), reward_fn=fn).train_problems()
    task = get_task("custom", data_path=str(path), reward_fn=fn, on_bad_row="skip")
    assert len(task.train_problems()) == 1 and len(task.bad_rows("train")) == 1
    renamed = get_task("custom", data_path=str(path), reward_fn=fn, prompt_field="question", on_bad_row="skip")
    assert [p.prompt for p in renamed.train_problems()] == ["p"]
    with pytest.raises(ValueError, match="eval_path is not set"):
        task.eval_problems()
    with pytest.raises(TypeError, match="missing required option.*reward_fn"):
        get_task("custom", data_path=str(path))
    with pytest.raises(TypeError, match="unknown option.*answer_key.*valid options are"):
        get_task("custom", data_path=str(path), reward_fn=fn, answer_key="x")
