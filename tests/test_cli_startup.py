"""What the command line imports before it needs it (issue 23 item 2): ``--help`` and an input error found without a
model import no torch, transformers, trl or matplotlib; torch's thread count is still set when a command imports it.

Each case runs in a fresh interpreter (this process has torch imported already) through a ``-c`` wrapper that
runs :func:`ugrpo.cli.main` and then prints which heavy modules are in ``sys.modules``. No timings here: they are
measured by ``benchmarks/bench_cli_startup.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "trl", "matplotlib", "peft", "accelerate")
WRAPPER = f"""
import json, sys
from ugrpo.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code
heavy = [m for m in {HEAVY!r} if m in sys.modules]
threads = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None
print("RESULT " + json.dumps({{"rc": rc, "heavy": heavy, "threads": threads}}), file=sys.stderr)
"""


def cli(argv, tmp_path, **env_changes) -> tuple[dict, str]:
    """Run ``ugrpo argv`` in a fresh interpreter; (the wrapper's result, the command's stderr without it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("UGRPO_THREADS", "OMP_NUM_THREADS")}
    env.update({"PYTHONPATH": str(ROOT), **env_changes})
    done = subprocess.run([sys.executable, "-c", WRAPPER, *map(str, argv)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    lines = done.stderr.splitlines()
    result = next(json.loads(x[len("RESULT "):]) for x in lines if x.startswith("RESULT "))
    return result, "\n".join(x for x in lines if not x.startswith("RESULT "))


@pytest.mark.parametrize("command", ["train", "mse", "plan", "sweep", "gap", "allocate", "make-env", "demo",
                                     "pretrain-tiny", "reproduce"])
def test_help_imports_no_torch(command, tmp_path):
    result, _ = cli([command, "--help"], tmp_path)
    assert result["rc"] == 0 and result["heavy"] == [], result


INPUT_ERRORS = [  # (overrides, a piece of the one error line): found before the model loads, and before torch
    pytest.param(["--budget.group-size", "3"], "choose G among the divisors of N from 2 up: [2, 4, 8", id="divisors"),
    pytest.param(["--model.name", "{tmp}/no-such-model"], "model.name: local model folder", id="missing-folder"),
    pytest.param(["--model.name", "tiny:huge"], "unknown tiny model strength 'huge'", id="tiny-name"),
    pytest.param(["--task.name", "gsm8k"], "--task.options.train_path path/to/train.jsonl", id="gsm8k-no-data"),
    pytest.param(["--allocation", "ustat", "--allocation.g-max", "4"], "allocation.g_max=4 is below "
                 "budget.group_size G=8", id="g-max-below-G"),
    pytest.param(["--report-to", "tensorboard,nope"], "report_to='nope' is not valid", id="report-to-name"),
]


@pytest.mark.parametrize(("overrides", "message"), INPUT_ERRORS)
def test_an_input_error_imports_no_torch_and_leaves_no_folder(overrides, message, tmp_path):
    out = tmp_path / "run"
    result, err = cli(["train", "--out", out, *[o.replace("{tmp}", str(tmp_path)) for o in overrides]], tmp_path)
    assert result["rc"] == 2 and result["heavy"] == [], (result, err)
    assert len(err.splitlines()) == 1 and err.startswith("ugrpo train: error: ") and message in err, err
    assert not out.exists()
    if "model.name" in message:  # someone's own model: not a tiny model to build
        assert "pretrain-tiny" not in err
    if "train_path" in message:  # the flags, never Python syntax
        assert "--task-option train_path=path/to/train.jsonl" in err and "train_path='" not in err


def test_a_missing_trl_config_is_one_line_without_torch(tmp_path):
    result, err = cli(["plan", "--trl-config", tmp_path / "grpo.yaml", "--out", tmp_path / "run"], tmp_path)
    assert result["rc"] == 2 and result["heavy"] == [], (result, err)
    assert err == f"ugrpo plan: error: --trl-config {tmp_path / 'grpo.yaml'}: file not found", err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv", [["mse"], ["allocate", "--budget", "64"], ["sweep", "--budget", "64"],
                                  ["plan", "--pilot-batch", "8", "--pilot-group", "4", "--budget", "32"]],
                         ids=lambda a: a[0])
def test_a_missing_env_file_is_one_line_without_torch(argv, tmp_path):
    """``--env`` naming no file: the one error line comes before torch is imported (it took 3-4 s after it)."""
    missing = tmp_path / "no-such-env.json"
    result, err = cli([*argv, "--env", missing, "--out", tmp_path / "run"], tmp_path)
    assert result["rc"] == 2 and result["heavy"] == [], (result, err)
    assert err == f"ugrpo {argv[0]}: error: --env {missing}: file not found; give an env JSON written by `ugrpo " \
                  "make-env` or builtin:demo", err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", ["plan", "mse"])
def test_task_help_lists_every_task(command, capsys):
    from ugrpo.cli import main
    from ugrpo.tasks.registry import TASK_NAMES
    from ugrpo.train.config import describe_fields

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"the task ({', '.join(TASK_NAMES)})" in text and "gsm_symbolic" in TASK_NAMES
    doc = next(f.doc for f in describe_fields() if f.name == "task.name")
    assert all(name in doc for name in TASK_NAMES), doc


def test_the_thread_count_is_set_when_the_command_imports_torch(tmp_path):
    """make-env imports torch part way: the default 1 thread (said once, before the first output) or --threads N
    is in force once it has."""
    argv = ["make-env", "--kind", "softmax_bandit", "--prompts", "2", "--actions", "2", "--out"]
    result, err = cli([*argv, tmp_path / "a.json"], tmp_path)
    assert result == {"rc": 0, "heavy": ["torch"], "threads": 1}, (result, err)
    assert err.count("ugrpo: 1 torch thread") == 1, err
    result, err = cli([*argv, tmp_path / "b.json", "--threads", "2"], tmp_path)
    assert result == {"rc": 0, "heavy": ["torch"], "threads": 2} and "torch thread" not in err, (result, err)
    result, err = cli([*argv, tmp_path / "c.json"], tmp_path, UGRPO_THREADS="3")
    assert result["threads"] == 3 and "torch thread" not in err, (result, err)
    result, err = cli([*argv, tmp_path / "d.json", "--threads", "0"], tmp_path)  # an input error, before torch
    assert result["rc"] == 2 and result["heavy"] == [] and "--threads 0" in err, (result, err)
