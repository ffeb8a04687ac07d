"""ustat-is at exact spend (docs/math.md M88): every batch spends exactly N within the bounds, the sizes are the
weighted within-batch optimum (brute force), and the weighted estimate stays unbiased, with the MSE of M88, when the
sizes depend on the drawn batch (enumeration of every draw and every outcome)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from ugrpo.stats.allocation import PromptStats
from ugrpo.stats.exact_mse import prompt_error
from ugrpo.stats.prompt_is import PromptLaw, batch_sizes, between_mse, exact_spend_sizes, is_law, within_mse

from ._enumerate import batch_outcomes, loo_estimates, prompt_moments_exact, softmax_bandit, true_grads


def _stats(P: int, seed: int) -> PromptStats:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 1, P)
    return PromptStats(value=p, c2=rng.gamma(1.0, 1.0, P), c3=rng.gamma(1.0, 2.0, P), g_norm2=rng.gamma(1.0, 0.5, P))


def test_every_batch_spends_exactly_n_within_the_bounds_at_the_weighted_optimum():
    """200 batches drawn from a ustat-is law: sum G_b = N, g_min <= G_b <= g_max; on small batches the sizes minimise
    sum_b w_b^2 f_b(G_b) over every composition of N (brute force)."""
    st = _stats(40, 0)
    law = is_law("ustat-is", st, 8, 48, lam=0.2, g_min=2, g_max=20)
    assert abs(law.expected_samples - 48) < 1.0 and law.sizes.min() < law.sizes.max()  # G_x varies: not N per batch
    rng = np.random.default_rng(1)
    spent_joint = set()
    for _ in range(200):
        idx = law.draw(rng)
        sizes = batch_sizes(law, st, idx, 48, spend="exact", g_min=3, g_max=12)
        assert sizes.sum() == 48 and sizes.min() >= 3 and sizes.max() <= 12
        spent_joint.add(int(law.sizes[idx].sum()))
    assert len(spent_joint) > 1  # M56's G_x would have spent different totals on these batches
    for seed in range(5):  # brute force on B = 3 prompts, N = 15
        small = _stats(3, 10 + seed)
        w = np.random.default_rng(seed).uniform(0.2, 3.0, 3)
        got = exact_spend_sizes(small, w, 15, g_min=2, g_max=9)

        comps = np.array([G for G in itertools.product(range(2, 10), repeat=3) if sum(G) == 15], dtype=float)
        costs = (w**2 * prompt_error(small.c2, small.c3, comps)).sum(1)  # every composition of N = 15
        got_cost = float((w**2 * prompt_error(small.c2, small.c3, got.astype(float))).sum())
        assert got.sum() == 15 and got_cost == pytest.approx(float(costs.min()), rel=1e-12)


def test_weighted_estimate_with_draw_dependent_sizes_is_unbiased_with_the_m88_mse_by_enumeration():
    """3 prompts, B = 2 drawn iid from q, N = 7 split by exact_spend_sizes from (wrong) predicted moments: over every
    draw (probability q_a q_b) and every outcome of its G_b samples, E ghat = mean_x g(x) to 1e-12 and E||ghat - g||^2
    = between + E_draw (1/B^2) sum_b w_b^2 f_b(G_b) (M88) with the true f."""
    b = softmax_bandit(3, 2, seed=7)
    true = PromptStats.from_moments([prompt_moments_exact(b, x) for x in range(3)])
    pred = PromptStats(value=true.value, c2=true.c2 * np.array([3.0, 0.5, 1.0]), c3=true.c3 * np.array([0.3, 2.0, 1.0]),
                       g_norm2=true.g_norm2)
    q = np.array([0.5, 0.2, 0.3])
    law = PromptLaw("ustat-is", q, np.array([2, 3, 4]), 2, 0.1, np.nan, np.nan)
    B, N, P = 2, 7, 3
    g = true_grads(b).mean(0)
    mean, mse, within, seen = torch.zeros_like(g), 0.0, 0.0, set()
    cache = {}
    for draw in itertools.product(range(P), repeat=B):
        idx = np.array(draw)
        pq = float(np.prod(q[idx]))
        sizes = batch_sizes(law, pred, idx, N, spend="exact", g_min=2, g_max=5)
        assert sizes.sum() == N
        seen.add(tuple(sizes.tolist()))
        w = law.weights(idx)
        terms = []
        for x, G, wx in zip(draw, sizes.tolist(), w):
            if (x, G) not in cache:
                cache[(x, G)] = loo_estimates(b, x, G)
            probs_x, est_x = cache[(x, G)]
            terms.append((probs_x, est_x * wx))
        probs, total = batch_outcomes(terms)
        mean += pq * torch.einsum("n,nd->d", probs, total)
        mse += pq * float((probs * ((total - g) ** 2).sum(-1)).sum())
        t = true.take(idx)
        within += pq * within_mse(w, t, sizes)
    assert len(seen) >= 3  # the sizes depend on the draw
    torch.testing.assert_close(mean, g, rtol=1e-10, atol=1e-12)
    assert between_mse(q, B, true, float((g**2).sum())) + within == pytest.approx(mse, rel=1e-10)


def test_expected_spend_and_the_one_g_rule_keep_the_laws_sizes():
    st = _stats(20, 3)
    idx = np.array([0, 5, 5, 19])
    for rule, spend in (("ustat-is", "expected"), ("uniform-is", "exact"), ("uniform-is", "expected")):
        law = is_law(rule, st, 4, 32, lam=0.2, g_min=2, g_max=16)
        assert batch_sizes(law, st, idx, 32, spend=spend, g_min=2, g_max=16).tolist() == law.sizes[idx].tolist()
    with pytest.raises(ValueError, match=r"is_spend='always' is not valid; choose one of \['expected', 'exact'\]"):
        batch_sizes(law, st, idx, 32, spend="always", g_min=2, g_max=16)
