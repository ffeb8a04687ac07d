"""Fixtures for the trainer tests: a randomly initialised tiny model and a dense-reward custom task."""

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
def tiny_random_model(tmp_path_factory):
    """Folder of a random ~1 M-parameter Qwen2 over the character tokenizer (no warm-up, no cache)."""
    from ugrpo.lm.tiny import build_tiny_model
    from ugrpo.lm.tokenizer import build_char_tokenizer

    folder = tmp_path_factory.mktemp("tiny-random")
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, seed=0, max_position_embeddings=64)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def task_files(tmp_path_factory):
    """(train.jsonl, eval.jsonl) of a custom task scored by ``dense_reward:sevens``."""
    d = tmp_path_factory.mktemp("task")
    return write_jsonl(d / "train.jsonl", TRAIN_PROMPTS), write_jsonl(d / "eval.jsonl", EVAL_PROMPTS)
