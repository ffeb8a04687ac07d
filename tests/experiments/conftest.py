"""Fixtures for the experiment-command tests: small exact envs written to disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ugrpo.cli import main as cli_main
from ugrpo.envs.generate import random_env
from ugrpo.envs.io import save_env


@pytest.fixture(scope="session")
def bandit_env_path(tmp_path_factory) -> Path:
    """A 5-prompt, 3-arm softmax bandit (D = 15) with heterogeneous prompts."""
    path = tmp_path_factory.mktemp("envs") / "bandit.json"
    save_env(random_env("softmax_bandit", n_prompts=5, n_actions=3, logit_scale=0.8, seed=3), path)
    return path


@pytest.fixture(scope="session")
def linear_env_path(tmp_path_factory) -> Path:
    """A linear-softmax policy (d = 3) over 6 prompts x 4 actions."""
    path = tmp_path_factory.mktemp("envs") / "linear.json"
    save_env(random_env("linear_softmax", n_prompts=6, n_actions=4, dim=3, seed=5), path)
    return path


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """Run ``ugrpo ARGV`` in-process; return (exit code, stdout, stderr)."""
    rc = cli_main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def results(out: Path) -> dict:
    return json.loads((Path(out) / "results.json").read_text())


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines() if line.strip()]


def assert_png(path: Path) -> None:
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert len(data) > 5000, f"{path} is suspiciously small ({len(data)} bytes)"


def starts_with_digit(completions, answers):
    """Reward of the LM test task: 1 when the completion starts with a digit (a random model: ~45%)."""
    return [float(c[:1].isdigit()) for c in completions]


@pytest.fixture(scope="module")
def task_args(tmp_path_factory) -> list[str]:
    """A custom task of 20 arithmetic prompts whose reward a random model earns often (rewards vary)."""
    path = tmp_path_factory.mktemp("task") / "train.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{i}+{i + 1}=",
                                        "answer": str(2 * i + 1)}) + "\n" for i in range(20)))
    return ["--task", "custom", "--task-option", f"data_path={path}",
            "--task-option", "reward_fn=tests.experiments.conftest:starts_with_digit"]
