"""The one per-prompt predictor (ugrpo.stats.predict, ugrpo.stats.prior_p; docs/math.md M46-M49) against closed forms:
the method-of-moments estimators on constructed pools, the conjugate normal update, Bayes' rule on the p grid, the
exact limits (no history: the prior; huge counts: the prompt's own moments), a rare large-norm prompt keeping its
own estimate, the g-model's derivatives, and seeded Monte Carlo of the draws against the posterior means."""

from __future__ import annotations

import numpy as np
import pytest

from ugrpo.stats.history import bernoulli_stats
from ugrpo.stats.predict import (
    REQUIRED,
    check_sums,
    draw,
    fit_hyper,
    posterior,
    posterior_means,
    predict,
    random_effects,
    reward_variance,
)
from ugrpo.stats.predict_posterior import _normal_update
from ugrpo.stats.prior_p import P_GRID, _beta_from_logs, fit_p_prior, posterior_weights

P_TRUE = np.array([0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9])
M1 = np.array([2.0, 1.5, 1.0, 0.8, 0.6, 0.5, 3.0])
M0 = np.array([0.5, 0.7, 1.0, 1.2, 1.5, 2.5, 0.4])
CV = 0.3  # within-prompt coefficient of variation of ||W||^2


def _sums(n: float, eta: float = 0.1) -> dict:
    """History sums of 7 prompts as if each had n samples (n/4 visits of 4) at the exact frequencies and moments, a
    per-visit T0 with mean ||g||^2 = eta p^2 (1-p)^2 ((1-p) m1 + p m0) and a small spread."""
    k1 = n * P_TRUE
    g2 = eta * (P_TRUE * (1 - P_TRUE)) ** 2 * ((1 - P_TRUE) * M1 + P_TRUE * M0)
    v = n / 4
    return {"visits": np.full(7, v), "samples": np.full(7, n), "successes": k1, "w2_success": k1 * M1,
            "w2_failure": (n - k1) * M0, "t0_sum": v * g2, "w4_success": k1 * M1**2 * (1 + CV**2),
            "w4_failure": (n - k1) * M0**2 * (1 + CV**2), "t0_sq": v * (g2**2 + (0.05 * P_TRUE * M1) ** 2)}


def test_random_effects_closed_forms():
    y, v = np.array([0.0, 2.0, 4.0]), np.array([1.0, 1.0, 1.0])
    assert random_effects(y, v) == pytest.approx((2.0, 4.0 - 1.0))          # s_y^2 = 4, mean v = 1
    # DerSimonian-Laird: w = 1, Q = 8, S1 = 3, S2 = 3 -> tau^2 = (8 - 2) / (3 - 1) = 3
    assert random_effects(y, v, weighted=True) == pytest.approx((2.0, 3.0))
    y2, v2 = np.array([0.0, 4.0]), np.array([1.0, 2.0])                     # w = (1, 1/2): mu_FE = 4/3
    q = 1 * (4 / 3) ** 2 + 0.5 * (8 / 3) ** 2
    s1, s2 = 1.5, 1.25
    tau2 = (q - 1) / (s1 - s2 / s1)
    assert tau2 == pytest.approx(6.5)
    mu = (4 / (2 + tau2)) / (1 / (1 + tau2) + 1 / (2 + tau2))
    assert random_effects(y2, v2, weighted=True) == pytest.approx((mu, tau2))
    assert random_effects(np.array([1.0]), np.array([1.0])) == (1.0, 0.0)  # one observation: no spread
    assert random_effects(np.array([1.0, 1.0]), np.array([5.0, 5.0]))[1] == 0.0  # noise only: cut at 0


def test_normal_update_is_the_conjugate_formula():
    mu, cov = np.array([0.5, -1.0]), np.array([[2.0, 0.6], [0.6, 1.0]])
    y = np.array([[1.5, 0.0], [3.0, 0.0]])
    v = np.array([[0.5, 1e20], [0.25, 0.8]])                                # prompt 0: reward 0 never seen
    mean, post, slope = _normal_update(mu, cov, y, v)
    assert not slope.any()  # no slope in p given (M86)
    # one observed component: the scalar normal-normal formula, and the regression for the other
    t2, vv = cov[0, 0], v[0, 0]
    assert mean[0, 0] == pytest.approx((t2 * y[0, 0] + vv * mu[0]) / (t2 + vv), rel=1e-12)
    assert post[0, 0, 0] == pytest.approx(t2 * vv / (t2 + vv), rel=1e-12)
    assert mean[0, 1] == pytest.approx(mu[1] + cov[1, 0] / cov[0, 0] * (mean[0, 0] - mu[0]), rel=1e-9)
    # both observed: the precision form (cov^-1 + V^-1)^-1 (cov^-1 mu + V^-1 y)
    P = np.linalg.inv(np.linalg.inv(cov) + np.diag(1 / v[1]))
    np.testing.assert_allclose(post[1], P, rtol=1e-10)
    np.testing.assert_allclose(mean[1], P @ (np.linalg.inv(cov) @ mu + y[1] / v[1]), rtol=1e-10)


def test_posterior_weights_are_bayes_rule_and_the_grid_fit_finds_two_bumps():
    prior = np.exp(-np.linspace(-3, 3, len(P_GRID)) ** 2)
    prior /= prior.sum()
    pw = posterior_weights(prior, np.array([3.0]), np.array([5.0]))[0]
    want = prior * P_GRID**3 * (1 - P_GRID) ** 2
    np.testing.assert_allclose(pw, want / want.sum(), rtol=1e-10)
    # a pool of 95 prompts at p = 0.5 and 5 at p = 0.015, 200 samples each, counts at their expectations
    s = np.r_[np.full(95, 100.0), np.full(5, 3.0)]
    w = fit_p_prior(s, np.full(100, 200.0))
    assert 0.035 < w[P_GRID < 0.05].sum() < 0.07                          # the rare bump (one Beta has none)
    assert w[(P_GRID > 0.4) & (P_GRID < 0.6)].sum() > 0.85
    u = fit_p_prior(np.zeros(4), np.zeros(4))                               # nothing visited: uniform in p
    assert w @ P_GRID != pytest.approx(0.5) and u @ P_GRID == pytest.approx(0.5)


def test_the_em_m_step_matches_the_beta_sufficient_statistics():
    """_beta_from_logs solves psi(a) - psi(a+b) = E log p, psi(b) - psi(a+b) = E log(1-p) (the Beta MLE)."""
    from scipy.special import digamma

    for a, b in ((0.3, 0.7), (2.0, 5.0), (40.0, 12.0)):
        lp, lq = digamma(a) - digamma(a + b), digamma(b) - digamma(a + b)
        assert _beta_from_logs(lp, lq, 1.0, 1.0) == pytest.approx((a, b), rel=1e-6)


def test_one_beta_pool_keeps_one_component():
    """A pool drawn from one Beta: the BIC keeps one component, close to beta-binomial ML of that Beta."""
    rng = np.random.default_rng(0)
    p = rng.beta(0.8, 2.0, size=3000)
    s = rng.binomial(16, p).astype(float)
    w = fit_p_prior(s, np.full(3000, 16.0))
    mean = float(w @ P_GRID)
    assert mean == pytest.approx(0.8 / 2.8, abs=0.02)
    dens = 0.8 * np.log(P_GRID) + 2.0 * np.log1p(-P_GRID)
    ref = np.exp(dens - dens.max())
    ref /= ref.sum()
    assert np.abs(np.cumsum(w) - np.cumsum(ref)).max() < 0.05           # Kolmogorov distance to the truth


def test_no_history_is_the_prior_and_every_prompt_gets_the_same_moments():
    z = {k: np.zeros(5) for k in REQUIRED}
    st = predict(z)
    q = float(P_GRID * (1 - P_GRID) @ fit_p_prior(np.zeros(5), np.zeros(5)))  # E p(1-p) under uniform p
    np.testing.assert_allclose(st.c2, q, rtol=1e-12)                       # m = 1, ||g||^2 = 0: c2 = c3 = E p(1-p)
    np.testing.assert_allclose(st.c3, q, rtol=1e-12)
    assert q == pytest.approx(1 / 6, rel=2e-3)
    post = posterior(z)
    assert not post.seen.any()
    _, c2, _ = draw(post, np.random.default_rng(0), 4000)
    assert (np.abs(c2.mean(0) - q) < 4 * c2.std(0) / np.sqrt(len(c2))).all()
    assert abs(np.corrcoef(c2[:, 0], c2[:, 1])[0, 1]) < 0.1               # unseen prompts are drawn independently


def test_huge_counts_give_the_prompts_own_moments():
    s = _sums(1e8, eta=0.2)
    st = predict(s)
    g2 = 0.2 * (P_TRUE * (1 - P_TRUE)) ** 2 * ((1 - P_TRUE) * M1 + P_TRUE * M0)
    want = bernoulli_stats((P_TRUE, P_TRUE**2, P_TRUE**3), M1, M0, g2)
    for key in ("value", "c2", "c3", "g_norm2"):
        np.testing.assert_allclose(getattr(st, key), getattr(want, key), rtol=2e-3, err_msg=key)
    assert fit_hyper(s).cv2 == pytest.approx([CV**2, CV**2], rel=1e-6)   # the pooled within-prompt spread


def test_a_rare_prompt_with_huge_scores_keeps_its_own_estimate_after_a_handful_of_samples():
    """50 ordinary prompts (||W||^2 near 1, log-spread 0.3) and one with 1000x larger ||W||^2, 8 failures each."""
    P = 51
    m0 = np.r_[np.exp(0.3 * np.linspace(-1.7, 1.7, 50)), 1000.0]
    k0 = np.full(P, 8.0)
    s = {"visits": np.full(P, 2.0), "samples": k0, "successes": np.zeros(P), "w2_success": np.zeros(P),
         "w2_failure": k0 * m0, "t0_sum": np.zeros(P), "w4_success": np.zeros(P),
         "w4_failure": k0 * m0**2 * (1 + CV**2), "t0_sq": np.zeros(P)}
    post = posterior(s)
    em0 = np.exp(post.logm[:, 1] + post.logm_cov[:, 1, 1] / 2)
    assert em0[-1] > 0.8 * 1000.0                                          # strong evidence, weak shrinkage
    np.testing.assert_allclose(em0[:50], m0[:50], rtol=0.35)
    # without second moments (cv2 = 1, an over-stated spread) it still keeps more than half
    s2 = {k: v for k, v in s.items() if k not in ("w4_success", "w4_failure", "t0_sq")}
    p2 = posterior(s2)
    assert np.exp(p2.logm[-1, 1] + p2.logm_cov[-1, 1, 1] / 2) > 0.5 * 1000.0


def test_draws_average_to_the_posterior_means_and_unseen_prompts_to_the_pool():
    s = _sums(40.0, eta=0.1)
    s = {k: np.r_[v, 0.0] for k, v in s.items()}                          # prompt 7 never visited
    post = posterior(s)
    st = posterior_means(post)
    p, c2, c3 = draw(post, np.random.default_rng(1), 100_000)
    for d, want in ((p, st.value), (c2, st.c2), (c3, st.c3)):
        se = d.std(0) / np.sqrt(len(d))
        assert (np.abs(d.mean(0) - want) < 4 * se).all(), (d.mean(0), want, se)
    pool = posterior_means(post.pool)
    assert st.c2[7] == pytest.approx(pool.c2.mean()) and st.value[7] == pytest.approx(pool.value.mean())
    assert reward_variance(post)[7] == pytest.approx(reward_variance(post.pool).mean())


def test_without_scores_c2_and_c3_are_the_reward_variance():
    st = predict(_sums(40.0), scores=False)
    post = posterior(_sums(40.0), scores=False)
    np.testing.assert_allclose(st.c2, st.c3)
    np.testing.assert_allclose(st.c2, reward_variance(post))
    assert (st.g_norm2 == 0).all()


@pytest.mark.parametrize("field,value,match", [
    ("w2_success", np.nan, "'w2_success' entry 2 is nan"),
    ("samples", -1.0, "'samples' entry 2 is -1.0"),
    ("successes", 1e6, "'successes' entry 2 .* exceeds 'samples'"),
])
def test_bad_history_entries_name_the_field(field, value, match):
    s = _sums(40.0)
    s[field] = s[field].copy()
    s[field][2] = value
    with pytest.raises(ValueError, match=match):
        check_sums(s)
    with pytest.raises(ValueError, match=match):
        predict(s)
    with pytest.raises(ValueError, match="field 'visits' is missing"):
        predict({k: v for k, v in s.items() if k != "visits"})
