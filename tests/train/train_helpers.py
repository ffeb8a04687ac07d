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
