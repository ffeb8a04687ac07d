"""The allocation certificate's posterior interval (ugrpo.stats.certificate, docs/math.md M45)."""

from __future__ import annotations

import numpy as np
import pytest

from ugrpo.stats.allocation import best_uniform
from ugrpo.stats.certificate import (
    HistoryPosterior,
    certificate,
    draw_moments,
    fit_beta_prior,
    history_posterior,
)
from ugrpo.stats.exact_mse import prompt_error
from ugrpo.stats.history import bernoulli_stats

P_TRUE = np.array([0.02, 0.1, 0.3, 0.5, 0.7, 0.95])
M1 = np.array([2.0, 1.5, 1.0, 0.8, 0.6, 0.5])
M0 = np.array([0.5, 0.7, 1.0, 1.2, 1.5, 2.5])


def _sums(scale: float, g2: float = 0.0) -> dict:
    """History sums of 6 prompts as if each had `scale` samples with exact frequencies and moments."""
    n = np.full(6, scale)
    k1 = n * P_TRUE
    w = 0.2  # within-prompt coefficient of variation of ||W||^2
    return {"visits": n / 4, "samples": n, "successes": k1, "w2_success": k1 * M1, "w2_failure": (n - k1) * M0,
            "t0_sum": n / 4 * g2, "w4_success": k1 * M1**2 * (1 + w**2),
            "w4_failure": (n - k1) * M0**2 * (1 + w**2), "t0_sq": n / 4 * (g2**2 + 1e-4)}


def _exact(p: np.ndarray, m1: np.ndarray, m0: np.ndarray, g2: np.ndarray):
    return bernoulli_stats((p, p**2, p**3), m1, m0, g2)


def test_huge_counts_collapse_the_interval_to_the_exact_ratio():
    h = _sums(1e9)
    idx = np.arange(6)
    post = history_posterior(idx, **h)
    ex = _exact(P_TRUE, M1, M0, np.zeros(6))
    sizes = np.array([2, 3, 6, 9, 8, 4])
    c = certificate(post, sizes, 5, ex.c2, ex.c3, seed=1)
    want = prompt_error(ex.c2, ex.c3, sizes).sum() / prompt_error(ex.c2, ex.c3, np.full(6, 5)).sum()
    assert c.plugin == pytest.approx(want, rel=1e-12)
    assert c.ratio_low <= c.ratio <= c.ratio_high
    assert c.ratio_low == pytest.approx(want, rel=1e-3) and c.ratio_high == pytest.approx(want, rel=1e-3)
    assert c.ratio_high - c.ratio_low > 0  # draws, not a copy of the plug-in


def test_posterior_means_are_the_data_means_with_huge_counts():
    post = history_posterior(np.arange(6), **_sums(1e9, g2=0.01))
    np.testing.assert_allclose(post.m1, M1, rtol=1e-4)
    np.testing.assert_allclose(post.m0, M0, rtol=1e-4)
    np.testing.assert_allclose(post.g2, 0.01, rtol=1e-3)
    np.testing.assert_allclose(post.a / (post.a + post.b), P_TRUE, rtol=1e-6)


def test_beta_draws_match_the_closed_form_posterior_means():
    """m_z, ||g||^2 fixed: E[c2], E[c3] over Beta(a, b) draws are M38's polynomials in E p, E p^2, E p^3."""
    a, b = np.array([1.0, 2.0, 0.5, 7.0]), np.array([3.0, 2.0, 0.5, 1.0])
    m1, m0, g2 = np.array([1.0, 2.0, 0.5, 3.0]), np.array([2.0, 1.0, 1.5, 0.2]), np.zeros(4)
    post = HistoryPosterior(a=a, b=b, m1=m1, m0=m0, shape1=np.full(4, np.inf), shape0=np.full(4, np.inf), g2=g2,
                            g2_sd=np.zeros(4))
    c2, c3 = draw_moments(post, np.random.default_rng(3), 200_000)
    e1 = a / (a + b)
    e2 = e1 * (a + 1) / (a + b + 1)
    e3 = e2 * (a + 2) / (a + b + 2)
    want = bernoulli_stats((e1, e2, e3), m1, m0, g2)
    for draws, exact in ((c2, want.c2), (c3, want.c3)):
        se = draws.std(0) / np.sqrt(len(draws))
        assert (np.abs(draws.mean(0) - exact) < 4 * se).all(), (draws.mean(0), exact, se)


def test_gamma_draws_of_m_have_the_posterior_mean():
    post = history_posterior(np.arange(6), **_sums(40.0))
    assert np.isfinite(post.shape1).all() and (post.shape1 > 1).all()
    fixed_p = HistoryPosterior(a=np.full(6, 1e12) * P_TRUE, b=np.full(6, 1e12) * (1 - P_TRUE), m1=post.m1,
                               m0=post.m0, shape1=post.shape1, shape0=post.shape0, g2=np.zeros(6),
                               g2_sd=np.zeros(6))
    c2, c3 = draw_moments(fixed_p, np.random.default_rng(4), 100_000)
    p = P_TRUE
    e_w2 = c3 / (p * (1 - p))                      # p m1 + (1-p) m0 per draw, linear in the draws of m
    want = p * post.m1 + (1 - p) * post.m0
    se = e_w2.std(0) / np.sqrt(len(e_w2))
    assert (np.abs(e_w2.mean(0) - want) < 4 * se).all()


def test_without_second_moments_scores_are_held_at_the_per_prompt_means():
    h = _sums(40.0)
    post = history_posterior(np.arange(6), *(h[k] for k in ("visits", "samples", "successes", "w2_success",
                                                               "w2_failure", "t0_sum")))
    assert not np.isfinite(post.shape1).any() and (post.g2_sd == 0).all()
    np.testing.assert_allclose(post.m1, M1, rtol=1e-12)
    np.testing.assert_allclose(post.m0, M0, rtol=1e-12)
    c2, _ = draw_moments(post, np.random.default_rng(0), 3)
    p = np.random.default_rng(0).beta(post.a, post.b, size=(3, 6))  # the same stream: the only random part
    np.testing.assert_allclose(c2, p * (1 - p) * ((1 - p) * M1 + p * M0), rtol=1e-12)


def test_fit_beta_prior_recovers_a_beta_population():
    rng = np.random.default_rng(0)
    p = rng.beta(0.3, 0.6, size=4000)
    n = np.full(4000, 8.0)
    a, b = fit_beta_prior(rng.binomial(8, p).astype(float), n)
    assert 0.3 / 1.3 < a < 0.3 * 1.3 and 0.6 / 1.3 < b < 0.6 * 1.3
    assert fit_beta_prior(np.zeros(3), np.zeros(3)) == (1.0, 1.0)  # no history: the uniform prior


def test_full_ratio_against_best_uniform_with_a_degenerate_posterior():
    post = history_posterior(np.arange(6), **_sums(1e9))
    ex = _exact(P_TRUE, M1, M0, np.zeros(6))
    sizes = np.array([2, 3, 6, 9, 8, 4])
    c1 = 0.05
    c = certificate(post, sizes, 5, ex.c2, ex.c3, c1=(c1, c1, c1), g_min=2, g_max=32, seed=0)
    G, mse_u = best_uniform(c1, ex.c2.mean(), ex.c3.mean(), 32, g_min=2, g_max=32)  # N = sum G_b = 32
    want = (c1 / 6 + prompt_error(ex.c2, ex.c3, sizes).sum() / 36) / mse_u
    assert c.g_star == G
    assert c.full_ratio_low <= c.full_ratio <= c.full_ratio_high
    assert c.full_ratio == pytest.approx(want, rel=1e-3) and c.full_ratio_low == pytest.approx(want, rel=1e-3)


def test_certificate_is_seeded():
    post = history_posterior(np.arange(6), **_sums(20.0))
    ex = _exact(P_TRUE, M1, M0, np.zeros(6))
    sizes = np.array([2, 3, 6, 9, 8, 4])
    assert certificate(post, sizes, 5, ex.c2, ex.c3, seed=7) == certificate(post, sizes, 5, ex.c2, ex.c3, seed=7)
