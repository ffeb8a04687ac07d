"""Fixtures of the lm tests (``tokenizer`` and ``model`` come from tests/conftest.py)."""

import pytest
import torch

from ugrpo.lm.tiny import build_tiny_model


@pytest.fixture(scope="session")
def peaked_model(tokenizer):
    """A random tiny model whose logits are spread out (final norm scaled by 5; top token ~0.58 at T=1), so the
    next-token distribution is far from uniform: a sharper target for distribution tests."""
    m = build_tiny_model(tokenizer, seed=1)
    with torch.no_grad():
        m.model.norm.weight.mul_(5.0)
    m.eval()
    return m
