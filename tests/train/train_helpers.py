"""Helpers shared by the trainer tests (imported with tests/train on sys.path)."""

from __future__ import annotations

import json
import os

TESTS_TRAIN = os.path.dirname(os.path.abspath(__file__))
TRAIN_PROMPTS = ["12+7=", "3*4=", "25-(10+5)=", "24/6=", "20+30-15=", "9*9=", "48/8=", "7+8+9=", "60-25=", "11*3="]
EVAL_PROMPTS = ["15+25=", "6*7=", "81/9=", "30-(4+6)="]


def write_jsonl(path, prompts) -> str:
    with open(path, "w") as f:
        for p in prompts:
            f.write(json.dumps({"prompt": p, "answer": "7"}) + "\n")
    return str(path)


def small_config(model: str, task_files, **overrides) -> dict:
    """A config dict for a few-second run of the random tiny model on the dense-reward task.

    ``overrides`` use dotted keys with ``__`` for dots: ``optim__lr=1e-3``.
    """
    train, ev = task_files
    cfg: dict = {
        "model": {"name": model},
        "task": {"name": "custom", "options": {"data_path": train, "eval_path": ev,
                                               "reward_fn": "dense_reward:sevens"}},
        "budget": {"samples_per_step": 8, "group_size": 4},
        "sampling": {"max_new_tokens": 5},
        "steps": 4,
        "optim": {"name": "adamw", "lr": 1e-2},
        "eval": {"every": 2, "n_problems": 4, "pass1_samples": 2},
        "checkpoint_every": 2,
        "seed": 3,
    }
    for key, value in overrides.items():
        node = cfg
        *parents, last = key.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return cfg


def killed_and_resumed(cfg, out, *, at: int = 3) -> None:
    """Run ``cfg`` into ``out``, killed (KeyboardInterrupt) after step ``at``, then resume it to the end."""
    import pytest

    from ugrpo.train.loop import train

    def kill(step, row):
        if step == at:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(cfg, out, on_step=kill)
    from pathlib import Path

    assert not (Path(out) / f"checkpoints/step-{at + 1}").exists()  # the kill came before that step's checkpoint
    train(cfg, out, resume=True)


def metrics_rows(out) -> list[dict]:
    """The rows of a run folder's ``metrics.jsonl``."""
    from pathlib import Path

    return [json.loads(x) for x in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def assert_same_parameters(a_out, b_out, step: int = 4) -> None:
    """The step-``step`` checkpoints of two run folders hold the same tensors (to 1e-6)."""
    from pathlib import Path

    import torch
    from safetensors.torch import load_file

    a = load_file(str(Path(a_out) / f"checkpoints/step-{step}/model.safetensors"))
    b = load_file(str(Path(b_out) / f"checkpoints/step-{step}/model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-6)
