"""The Algorithm 1 gradient estimate (paper eq. (5), (8); docs/math.md M1)."""

import pytest
import torch

from ugrpo.stats.estimator import policy_gradient, prompt_gradients


def test_matches_double_loop():
    gen = torch.Generator().manual_seed(0)
    W = torch.randn(3, 4, 5, generator=gen, dtype=torch.float64)
    A = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    per = torch.stack([sum(W[b, g] * A[b, g] for g in range(4)) / 4 for b in range(3)])
    torch.testing.assert_close(prompt_gradients(W, A), per)
    torch.testing.assert_close(policy_gradient(W, A), per.mean(0))


def test_shape_errors():
    with pytest.raises(ValueError, match=r"scores must have shape \(B, G, D\)"):
        policy_gradient(torch.zeros(4, 5), torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"advantages shape \(2, 4\) does not match scores \(B, G\) = \(3, 4\)"):
        policy_gradient(torch.zeros(3, 4, 5), torch.zeros(2, 4))
