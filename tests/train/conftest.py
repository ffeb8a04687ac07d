"""Fixtures for the trainer tests: a dense-reward custom task (the tiny model is tests/conftest.py's
``tiny_model_dir``)."""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
TESTS_TRAIN = os.path.dirname(os.path.abspath(__file__))
if TESTS_TRAIN not in sys.path:  # makes ``dense_reward`` (a reward_fn) and ``train_helpers`` importable
    sys.path.insert(0, TESTS_TRAIN)

from train_helpers import EVAL_PROMPTS, TRAIN_PROMPTS, write_jsonl  # noqa: E402


@pytest.fixture(scope="session")
def task_files(tmp_path_factory):
    """(train.jsonl, eval.jsonl) of a custom task scored by ``dense_reward:sevens``."""
    d = tmp_path_factory.mktemp("task")
    return write_jsonl(d / "train.jsonl", TRAIN_PROMPTS), write_jsonl(d / "eval.jsonl", EVAL_PROMPTS)
