"""Lemma 1 (eq. (6)) and the Hoeffding decomposition (eq. (2)): docs/math.md M5-M7."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ugrpo.stats.advantages import compute_advantages
from ugrpo.stats.estimator import policy_gradient, prompt_gradients
from ugrpo.stats.ustat import grpo_kernel, hoeffding_decomposition, pairwise_ustatistic

from ._enumerate import DT, enumerate_group, linear_softmax, prompt_moments_exact, softmax_bandit, true_grads


@pytest.mark.parametrize("G", [2, 3, 4, 6])
def test_ustatistic_equals_loo_estimator(G):
    gen = torch.Generator().manual_seed(G)
    W = torch.randn(G, 5, generator=gen, dtype=DT)
    Z = torch.randn(G, generator=gen, dtype=DT)
    loo = policy_gradient(W[None], compute_advantages(Z[None], baseline="grpo").advantages)
    torch.testing.assert_close(pairwise_ustatistic(W, Z), loo, rtol=1e-13, atol=1e-14)


@settings(max_examples=30, deadline=None)
@given(G=st.integers(2, 6), seed=st.integers(0, 10_000))
def test_ustatistic_equals_loo_binary_rewards(G, seed):
    gen = torch.Generator().manual_seed(seed)
    W = torch.randn(G, 3, generator=gen, dtype=DT)
    Z = (torch.rand(G, generator=gen) < 0.5).to(DT)
    loo = policy_gradient(W[None], compute_advantages(Z[None], baseline="grpo").advantages)
    torch.testing.assert_close(pairwise_ustatistic(W, Z), loo, rtol=1e-13, atol=1e-14)


def test_kernel_is_symmetric_and_hand_value():
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([3.0, -1.0])
    torch.testing.assert_close(grpo_kernel(a, b, 2.0, 0.5), grpo_kernel(b, a, 0.5, 2.0))
    torch.testing.assert_close(grpo_kernel(a, b, 2.0, 0.5), torch.tensor([-1.5, 2.25]))


def test_decomposition_sums_to_grpo_any_value():
    gen = torch.Generator().manual_seed(0)
    W = torch.randn(3, 5, 4, generator=gen, dtype=DT)
    Z = torch.rand(3, 5, generator=gen, dtype=DT)
    V = torch.rand(3, generator=gen, dtype=DT)
    g = torch.randn(3, 4, generator=gen, dtype=DT)
    parts = hoeffding_decomposition(W, Z, V, g)
    grpo = prompt_gradients(W, compute_advantages(Z, baseline="grpo").advantages)
    torch.testing.assert_close(parts.estimate, grpo, rtol=1e-13, atol=1e-14)
    for b in range(3):  # batched == one at a time
        one = hoeffding_decomposition(W[b], Z[b], V[b], g[b])
        torch.testing.assert_close(one.residual, parts.residual[b], rtol=1e-13, atol=1e-14)
        torch.testing.assert_close(one.first_order, parts.first_order[b], rtol=1e-13, atol=1e-14)


def test_residual_matches_brute_force_double_sum():
    gen = torch.Generator().manual_seed(1)
    G, V = 4, 0.3
    W = torch.randn(G, 3, generator=gen, dtype=DT)
    Z = torch.rand(G, generator=gen, dtype=DT)
    brute = -sum(W[i] * (Z[k] - V) for i in range(G) for k in range(G) if i != k) / (G * (G - 1))
    parts = hoeffding_decomposition(W, Z, V, torch.zeros(3, dtype=DT))
    torch.testing.assert_close(parts.residual, brute, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("make,G", [(lambda: softmax_bandit(1, 3, seed=3), 3),
                                     (lambda: softmax_bandit(1, 2, seed=4), 4),
                                     (lambda: linear_softmax(1, 3, 4, seed=5), 3)])
def test_residual_mean_zero_orthogonal_and_variance(make, G):
    """Exact enumeration: E residual = 0, E<first, residual> = 0, E||first||^2 = trS/G, E||res||^2 = c3/(G(G-1))."""
    b = make()
    m = prompt_moments_exact(b, 0)
    probs, W, Z = enumerate_group(b, 0, G)
    N = probs.shape[0]
    parts = hoeffding_decomposition(W, Z, torch.full((N,), m.value, dtype=DT), true_grads(b)[0].expand(N, -1))
    E = lambda x: (probs.reshape(-1, *[1] * (x.ndim - 1)) * x).sum(0)  # noqa: E731
    torch.testing.assert_close(E(parts.residual), torch.zeros(b.D, dtype=DT), atol=1e-14, rtol=0)
    torch.testing.assert_close(E(parts.first_order), torch.zeros(b.D, dtype=DT), atol=1e-14, rtol=0)
    assert abs(float(E((parts.first_order * parts.residual).sum(1))) ) < 1e-14
    assert float(E((parts.first_order**2).sum(1))) == pytest.approx(m.tr_sigma_oracle / G, rel=1e-12)
    assert float(E((parts.residual**2).sum(1))) == pytest.approx(m.c3 / (G * (G - 1)), rel=1e-12)
    # sanity: the residual is not identically 0 in this policy, so the checks above have teeth
    assert float(E((parts.residual**2).sum(1))) > 1e-4


def test_errors_name_the_problem():
    W = torch.zeros(3, 2)
    with pytest.raises(ValueError, match="does not match"):
        pairwise_ustatistic(W, torch.zeros(4))
    with pytest.raises(ValueError, match="G >= 2"):
        pairwise_ustatistic(torch.zeros(1, 2), torch.zeros(1))
    with pytest.raises(ValueError, match="non-finite"):
        pairwise_ustatistic(W, torch.tensor([0.0, float("nan"), 1.0]))
    with pytest.raises(ValueError, match="value must have shape"):
        hoeffding_decomposition(torch.zeros(2, 3, 2), torch.zeros(2, 3), 0.5, torch.zeros(2, 2))
    with pytest.raises(ValueError, match="true_grad must have shape"):
        hoeffding_decomposition(W, torch.zeros(3), 0.5, torch.zeros(3))
