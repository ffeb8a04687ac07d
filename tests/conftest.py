"""Test-wide settings: no network, deterministic torch."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """One intra-op thread for the whole suite: the models here are tiny (threads gain nothing), CI has
    2 cores, and sampled tokens must not depend on how many threads reduced a matmul; restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
