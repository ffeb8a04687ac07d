"""Every command that takes a custom task checks its reward function once before any model work, as ``ugrpo train``
does (tests/train/test_reward_check.py): ``mse --model``, ``plan --model``, ``sweep --config`` and ``reproduce
--task``. The function is examples/arith_reward.py:correct (TRL's signature) on the rows of
examples/arith-mixed.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from ugrpo.experiments.reproduce import run as reproduce_run
from ugrpo.experiments.sweep import executors
from ugrpo.lm import loading

from .conftest import run_cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TRAIN = EXAMPLES / "data" / "arith-mixed-train.jsonl"
TRL_FN = "arith_reward:correct"
OPTIONS = ["--task-option", f"data_path={TRAIN}", "--task-option", f"reward_fn={TRL_FN}"]


@pytest.fixture
def no_model_work(monkeypatch):
    """examples/ on the import path; loading a model or starting a training run fails the test."""
    monkeypatch.syspath_prepend(str(EXAMPLES))

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded or a run started before the reward function was checked")

    monkeypatch.setattr(loading, "load_policy", refuse)
    monkeypatch.setattr(executors, "train_one", refuse)
    monkeypatch.setattr(reproduce_run, "_fig4", refuse)


def _assert_one_error_line(command: str, rc: int, err: str) -> None:
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"ugrpo {command}: error: task.options.reward_fn {TRL_FN!r} on the gold answer of "
                          f"{TRAIN}:line 1 ('1'): TypeError: correct() got multiple values for argument 'prompts'. "
                          "ugrpo's custom task calls fn(completions, answers, **row_fields)"), err
    assert "TRL reward functions take (prompts, completions, ...)" in err
    assert "return correct(completions=completions, answer=answers, **fields)" in err


@pytest.mark.parametrize("command, argv", [
    ("mse", ["--model", "tiny:instruct", "--task", "custom", *OPTIONS, "--groups", "4", "--reps", "2",
             "--prompts", "4", "--no-progress"]),
    ("plan", ["--model", "tiny:instruct", "--task", "custom", *OPTIONS, "--pilot-batch", "4", "--pilot-group", "4",
              "--budget", "16"]),
    ("sweep", ["--config", EXAMPLES / "arith-mixed.yaml", "--set", f"task.options.data_path={TRAIN}",
               "--set", f"task.options.reward_fn={TRL_FN}", "--budget", "32", "--groups", "8", "--seeds", "1",
               "--steps", "1", "--workers", "1", "--no-progress"]),
    ("reproduce", ["--scale", "smoke", "--task", "custom", *OPTIONS, "--workers", "1", "--no-progress"]),
])
def test_a_trl_signature_is_one_error_line_before_any_model_work(command, argv, tmp_path, capsys, no_model_work):
    out = tmp_path / "out"
    rc, _, err = run_cli([command, *argv, "--out", out], capsys)
    _assert_one_error_line(command, rc, err)
    assert not out.exists()  # checked before the run folder


def test_a_sweep_checks_once_before_its_first_run_and_a_zero_gold_reward_is_one_warning(tmp_path, capsys, monkeypatch):
    """Four runs, one check (in the driver, before the first run): a gold answer scoring 0 is one warning line."""
    from ugrpo.errors import UserError
    from ugrpo.tasks import custom_check

    (tmp_path / "zero_reward_cmds.py").write_text("def zero(completions, answers, **fields):\n"
                                                  "    return [0.0 for _ in completions]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    calls, seen = [], []
    real = custom_check.check_reward_fn
    monkeypatch.setattr(custom_check, "check_reward_fn", lambda *a: calls.append(a) or real(*a))

    def first_run(spec, folder):
        seen.append((len(calls), capsys.readouterr().err))
        raise UserError("stopped at the first run")

    monkeypatch.setattr(executors, "train_one", first_run)
    rc, _, err = run_cli(["sweep", "--config", EXAMPLES / "arith-mixed.yaml", "--set",
                          f"task.options.data_path={TRAIN}", "--set", "task.options.reward_fn=zero_reward_cmds:zero",
                          "--budget", "32", "--groups", "4,8", "--seeds", "2", "--steps", "1", "--workers", "1",
                          "--no-progress", "--out", tmp_path / "out"], capsys)
    assert rc == 2 and "stopped at the first run" in err
    (n_checks, before), = seen
    warnings = [line for line in before.splitlines() if line.startswith("warning:")]
    assert n_checks == 1 and len(warnings) == 1, before
    assert warnings[0].startswith("warning: task.options.reward_fn 'zero_reward_cmds:zero' on the gold answer of ")
    assert "reward 0.0;" in warnings[0]
