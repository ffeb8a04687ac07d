"""The allocation certificate's interval (ugrpo.stats.certificate, docs/math.md M45, M51, M60, M61), on the one
predictor's posterior (ugrpo.stats.predict) and the draws of its population model (ugrpo.stats.population)."""

from __future__ import annotations

import numpy as np
import pytest

from ugrpo.stats.allocation import best_uniform
from ugrpo.stats.certificate import WIDEN, certificate, ratio_interval, samples_per_prompt, widening
from ugrpo.stats.exact_mse import prompt_error
from ugrpo.stats.history import bernoulli_stats
from ugrpo.stats.population import population_posteriors
from ugrpo.stats.predict import bootstrap_posteriors, draw_mixture, posterior, posterior_means

P_TRUE = np.array([0.02, 0.1, 0.3, 0.5, 0.7, 0.95])
M1 = np.array([2.0, 1.5, 1.0, 0.8, 0.6, 0.5])
M0 = np.array([0.5, 0.7, 1.0, 1.2, 1.5, 2.5])


def _sums(n: float) -> dict:
    """History sums of 6 prompts as if each had n samples at the exact frequencies and moments (||g||^2 = 0)."""
    k1 = n * P_TRUE
    w = 0.2  # within-prompt coefficient of variation of ||W||^2
    return {"visits": np.full(6, n / 4), "samples": np.full(6, n), "successes": k1, "w2_success": k1 * M1,
            "w2_failure": (n - k1) * M0, "t0_sum": np.zeros(6), "w4_success": k1 * M1**2 * (1 + w**2),
            "w4_failure": (n - k1) * M0**2 * (1 + w**2), "t0_sq": np.full(6, n / 4 * 1e-4)}


def _exact():
    return bernoulli_stats((P_TRUE, P_TRUE**2, P_TRUE**3), M1, M0, np.zeros(6))


def test_huge_counts_collapse_the_interval_to_the_exact_ratio():
    post = posterior(_sums(1e9))
    ex = _exact()
    sizes = np.array([2, 3, 6, 9, 8, 2])
    st = posterior_means(post)
    c = certificate(post, sizes, 5, st.c2, st.c3, seed=1)
    want = prompt_error(ex.c2, ex.c3, sizes).sum() / prompt_error(ex.c2, ex.c3, np.full(6, 5)).sum()
    assert c.plugin == pytest.approx(want, rel=1e-3)
    assert c.ratio_low <= c.ratio <= c.ratio_high
    assert c.ratio_low == pytest.approx(want, rel=2e-3) and c.ratio_high == pytest.approx(want, rel=2e-3)
    assert c.ratio_high - c.ratio_low > 0  # draws, not a copy of the plug-in


def test_the_interval_is_the_quantiles_of_the_draws_of_the_ratio():
    post = posterior(_sums(40.0))
    st = posterior_means(post)
    sizes = np.array([2, 3, 6, 9, 8, 2])
    c = certificate(post, sizes, 5, st.c2, st.c3, seed=3, draws=2000)
    c2, c3 = draw_mixture(post, np.random.default_rng(3), 2000)   # the certificate's own stream
    r = prompt_error(c2, c3, sizes.astype(float)).sum(1) / prompt_error(c2, c3, np.full(6, 5.0)).sum(1)
    lo, med, hi = np.quantile(r, (0.025, 0.5, 0.975))
    assert (c.ratio_low, c.ratio, c.ratio_high) == pytest.approx((lo, med, hi), rel=1e-12)
    assert c.plugin == pytest.approx(prompt_error(st.c2, st.c3, sizes).sum()
                                     / prompt_error(st.c2, st.c3, np.full(6, 5)).sum(), rel=1e-12)


def test_bootstrap_replicates_share_the_draws_and_widen_nothing_with_huge_counts():
    s = _sums(1e9)
    posts = bootstrap_posteriors(s, None, scores=True, replicates=4, rng=np.random.default_rng(0))
    assert len(posts) == 4
    c2, _ = draw_mixture(posts, np.random.default_rng(1), 10)        # 3 + 3 + 2 + 2 draws
    assert c2.shape == (10, 6)
    ex = _exact()
    np.testing.assert_allclose(c2.mean(0), ex.c2, rtol=5e-3)         # every replicate: the prompts' own moments
    assert len(bootstrap_posteriors({k: np.zeros(3) for k in s}, None, scores=True, replicates=4,
                                    rng=np.random.default_rng(0))) == 1  # nothing visited: one posterior


def test_full_ratio_against_best_uniform_with_a_degenerate_posterior():
    post = posterior(_sums(1e9))
    st = posterior_means(post)
    sizes = np.array([2, 3, 6, 9, 8, 4])
    c1 = 0.05
    c = certificate(post, sizes, 5, st.c2, st.c3, c1=(c1, c1, c1), g_min=2, g_max=32, seed=0)
    ex = _exact()
    G, mse_u = best_uniform(c1, ex.c2.mean(), ex.c3.mean(), 32, g_min=2, g_max=32)  # N = sum G_b = 32
    want = (c1 / 6 + prompt_error(ex.c2, ex.c3, sizes).sum() / 36) / mse_u
    assert c.g_star == G
    assert c.full_ratio_low <= c.full_ratio <= c.full_ratio_high
    assert c.full_ratio == pytest.approx(want, rel=3e-3) and c.full_ratio_low == pytest.approx(want, rel=3e-3)


def test_certificate_is_seeded():
    post = posterior(_sums(20.0))
    st = posterior_means(post)
    sizes = np.array([2, 3, 6, 9, 8, 2])
    assert certificate(post, sizes, 5, st.c2, st.c3, seed=7) == certificate(post, sizes, 5, st.c2, st.c3, seed=7)


def test_ratio_interval_widens_the_log_half_widths_about_the_median():
    r = np.exp(np.random.default_rng(0).normal(-0.2, 0.1, 4001))
    lo, med, hi, plo, phi = ratio_interval(r, 0.95, 1.0)
    assert (lo, hi) == (plo, phi) and plo < med < phi
    assert (plo, med, phi) == pytest.approx(tuple(np.quantile(r, (0.025, 0.5, 0.975))), rel=1e-12)
    lo2, med2, hi2, plo2, phi2 = ratio_interval(r, 0.95, 1.7)
    assert (med2, plo2, phi2) == (med, plo, phi)
    assert np.log(med / lo2) == pytest.approx(1.7 * np.log(med / plo), rel=1e-12)
    assert np.log(hi2 / med) == pytest.approx(1.7 * np.log(phi / med), rel=1e-12)
    with pytest.raises(ValueError, match="widen"):
        ratio_interval(r, 0.95, 0.9)


def test_widening_is_looked_up_by_samples_per_visited_prompt():
    table = ((25.0, 2.0), (125.0, 1.5), (float("inf"), 1.1))
    assert samples_per_prompt({"samples": np.array([8.0, 16.0, 0.0])}) == 12.0   # the unvisited prompt not counted
    assert widening({"samples": np.array([8.0, 16.0, 0.0])}, table) == 2.0
    assert widening({"samples": np.array([25.0])}, table) == 1.5
    assert widening({"samples": np.array([500.0])}, table) == 1.1
    assert widening({"samples": np.zeros(3)}, table) == 2.0                     # nothing visited: the widest
    with pytest.raises(ValueError, match="samples"):
        samples_per_prompt({"visits": np.ones(2)})


def test_the_widening_factors_are_the_committed_development_fit():
    import json
    from pathlib import Path

    fit = json.loads((Path(__file__).resolve().parents[2] / "benchmarks/results/certificate_widening.json").read_text())
    assert fit["target"] == 0.95 and 0 not in fit["seed_offsets"]            # never the benchmark's own instances
    got = [(b["samples_per_prompt_below"], b["widen"]) for b in fit["buckets"]]
    assert got == [(None if np.isinf(hi) else hi, k) for hi, k in WIDEN]


def test_certificate_reports_the_widened_and_the_posterior_interval():
    post = posterior(_sums(40.0))
    st = posterior_means(post)
    sizes = np.array([2, 3, 6, 9, 8, 2])
    plain = certificate(post, sizes, 5, st.c2, st.c3, seed=3)
    wide = certificate(post, sizes, 5, st.c2, st.c3, seed=3, widen=2.0)
    assert (plain.ratio_low, plain.ratio_high, plain.widen) == \
        (plain.ratio_low_posterior, plain.ratio_high_posterior, 1.0)
    assert (wide.ratio, wide.ratio_low_posterior, wide.ratio_high_posterior) == \
        (plain.ratio, plain.ratio_low, plain.ratio_high)
    assert wide.ratio_low < plain.ratio_low and wide.ratio_high > plain.ratio_high and wide.widen == 2.0


def test_population_draws_collapse_with_huge_counts_and_widen_a_thin_history():
    ex = _exact()
    sizes = np.array([2, 3, 6, 9, 8, 2])
    want = prompt_error(ex.c2, ex.c3, sizes).sum() / prompt_error(ex.c2, ex.c3, np.full(6, 5)).sum()
    s = _sums(1e9)
    post = posterior(s)
    st = posterior_means(post)
    c = certificate(population_posteriors(s, np.arange(6), post.hyper, rng=np.random.default_rng(0)), sizes, 5,
                    st.c2, st.c3, seed=1)
    assert c.ratio_low == pytest.approx(want, rel=3e-3) and c.ratio_high == pytest.approx(want, rel=3e-3)
    thin = _sums(8.0)
    post = posterior(thin)
    st = posterior_means(post)
    one = certificate(post, sizes, 5, st.c2, st.c3, seed=1)
    many = certificate(population_posteriors(thin, np.arange(6), post.hyper, rng=np.random.default_rng(0)), sizes, 5,
                       st.c2, st.c3, seed=1)
    assert many.ratio_high - many.ratio_low > one.ratio_high - one.ratio_low   # the fit's own error, shared
