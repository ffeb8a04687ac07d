"""The p-dependent score model of the one predictor (docs/math.md M85, M86) against closed forms: the joint posterior
of p and the log moments against brute-force integration on a grid, the regression calibration recovering a
planted line on a synthetic population, and eta's fit at its fixed point."""

from __future__ import annotations

import numpy as np
import pytest

from ugrpo.stats.predict import Hyper, check_sums, random_effects
from ugrpo.stats.predict_hyper import _bivariate, _eta_obs, _log_means
from ugrpo.stats.predict_posterior import _divisor, _e_parts, _fit, _parts
from ugrpo.stats.prior_p import P_GRID, posterior_nodes


def _one_prompt(successes: float, samples: float = 8.0) -> dict:
    k1, k0 = successes, samples - successes
    return check_sums({"visits": np.array([2.0]), "samples": np.array([samples]), "successes": np.array([k1]),
                       "w2_success": np.array([k1 * 0.3]), "w2_failure": np.array([k0 * 2.0]),
                       "t0_sum": np.array([0.01]), "w4_success": np.array([k1 * 0.3**2 * 1.5]),
                       "w4_failure": np.array([k0 * 4.0 * 1.2])})


@pytest.mark.parametrize("successes", [0.0, 3.0, 8.0])
def test_joint_posterior_of_p_and_the_log_moments_is_bayes_rule_on_a_grid(successes):
    """Given p the log moments are N(mu + (beta c(p), 0), Sigma), c = log(1-p) cut to the fitted range; the
    posterior of (p, theta) is prior x binomial x N(y; theta, V). Integrated by brute force over p's grid and a fine
    theta grid, the predictor's E[p^i (1-p)^j m_1^a m_0^b] (its means and its eta divisor) agree."""
    prior = np.exp(-0.5 * ((np.log(P_GRID / (1 - P_GRID)) - 1.0) / 2.0) ** 2)
    h = Hyper(p_prior=prior / prior.sum(), scores=True, mu=np.array([0.4, 0.2]), beta=1.5,
              cov=np.array([[0.8, 0.3], [0.3, 0.5]]), cv2=np.array([0.5, 0.2]), c_range=(-3.0, -0.05))
    s = _one_prompt(successes)
    parts = _parts(s, h)
    y, v, _ = _log_means(s, True, h.cv2)
    pv, pw0 = (a[0] for a in posterior_nodes(h.p_prior, s["successes"], s["samples"]))
    c = np.clip(np.log1p(-pv), *h.c_range)                                                        # (K,)
    t = np.linspace(-8.0, 8.0, 321)
    T1, T0 = np.meshgrid(t, t, indexing="ij")
    th = np.stack([T1, T0], -1)                                                                   # (n, n, 2)
    inv = np.linalg.inv(h.cov)
    lik = np.ones_like(T1)
    for z in range(2):
        if v[0, z] < 1e10:
            lik = lik * np.exp(-0.5 * (y[0, z] - th[..., z]) ** 2 / v[0, z])
    joint = []
    for k in range(len(pv)):
        d = th - (h.mu + np.array([h.beta * c[k], 0.0]))
        joint.append(pw0[k] * np.exp(-0.5 * np.einsum("abi,ij,abj->ab", d, inv, d)) * lik)
    joint = np.array(joint)                                                                       # (K, n, n)
    joint /= joint.sum()
    m1, m0 = np.exp(T1), np.exp(T0)

    def brute(i, j, a, b):
        return float((joint * (pv**i * (1 - pv) ** j)[:, None, None] * (m1**a * m0**b)[None]).sum())

    e, m2var, d = (x[0] for x in _e_parts(parts))
    assert e == pytest.approx(brute(1, 2, 1, 0) + brute(2, 1, 0, 1), rel=1e-6)
    assert m2var == pytest.approx(brute(2, 1, 1, 0) + brute(1, 2, 0, 1), rel=1e-6)
    assert d == pytest.approx(brute(2, 3, 1, 0) + brute(3, 2, 0, 1), rel=1e-6)
    mean, cv2 = (x[0] for x in _divisor(parts))
    sq = brute(4, 6, 2, 0) + 2 * brute(5, 5, 1, 1) + brute(6, 4, 0, 2)
    assert mean == pytest.approx(d, rel=1e-12) and cv2 == pytest.approx(sq / d**2 - 1, rel=1e-5)
    # the marginal of p moved by the scores: the likelihood of y enters p's weights (M86)
    assert float((parts["pw"][0] * pv).sum()) == pytest.approx(float((joint.sum((1, 2)) * pv).sum()), rel=1e-6)


def test_regression_calibration_recovers_a_planted_line():
    """J prompts with covariate posterior mean cbar_x and posterior variance w_x (c = cbar + N(0, w), independent of
    cbar), log m_1 = mu_1 + beta c + N(0, tau_1^2), log m_0 = mu_0 + N(0, tau_0^2) (correlated residuals), y = theta
    + N(0, v): E[y_1 | cbar] = mu_1 + beta cbar, Var = tau_1^2 + v + beta^2 w, so the line, the spreads and the
    correlation are recovered (4 standard errors)."""
    rng = np.random.default_rng(0)
    J = 20_000
    mu, beta, tau2, rho = np.array([0.5, -1.0]), 2.0, np.array([0.3, 0.2]), 0.5
    cbar, w = rng.uniform(-4, 0, J), rng.uniform(0, 0.5, J)
    c = cbar + np.sqrt(w) * rng.standard_normal(J)
    e0 = rng.standard_normal(J)
    e1 = rho * e0 + np.sqrt(1 - rho**2) * rng.standard_normal(J)
    theta = mu + np.sqrt(tau2) * np.stack([e0, e1], 1)
    theta[:, 0] += beta * c
    v = rng.uniform(0.05, 0.4, (J, 2))
    y = theta + np.sqrt(v) * rng.standard_normal((J, 2))
    m, b, cov, c_range = _bivariate(y, v, cbar, w)
    tot = tau2 + v.mean(0) + np.array([beta**2 * w.mean(), 0.0])
    se_b = np.sqrt(tot[0] / (J * cbar.var()))
    assert abs(b - beta) < 4 * se_b, (b, beta, se_b)
    assert abs(m[0] - mu[0]) < 4 * (se_b * abs(cbar.mean()) + np.sqrt(tot[0] / J))
    assert abs(m[1] - mu[1]) < 4 * np.sqrt(tot[1] / J)
    se_t = np.sqrt(2 * tot**2 / J + np.array([(beta**2 * w).var(), 0.0]) / J + v.var(0) / J)
    assert np.all(np.abs(np.diag(cov) - tau2) < 4 * se_t), (np.diag(cov), tau2, se_t)
    want = rho * np.sqrt(tau2[0] * tau2[1])
    assert abs(cov[0, 1] - want) < 4 * np.sqrt(tot[0] * tot[1] / J), (cov[0, 1], want)
    assert c_range == (cbar.min(), cbar.max())
    # a line that explains nothing (y_1 uncorrelated with cbar: F = 0) is not kept: M47's fit
    cb = np.array([-3.0, -2.0, -1.0, -2.0])
    y0 = np.stack([np.array([1.0, 2.0, 1.0, 0.0]), np.zeros(4)], 1)               # sum (y - mean)(cb - mean) = 0
    m3, b3, cov3, r3 = _bivariate(y0, np.full((4, 2), 0.1), cb, np.zeros(4))
    assert b3 == 0.0 and np.isinf(r3).all() and m3[0] == pytest.approx(1.0)
    # without a covariate (or fewer than 3 prompts) it is M47's Hedges fit: no slope, the range unbounded
    m2, b2, cov2, r2 = _bivariate(y, v)
    assert b2 == 0.0 and np.isinf(r2).all()
    assert m2[0] == pytest.approx(y[:, 0].mean()) and cov2[0, 0] == pytest.approx(random_effects(y[:, 0], v[:, 0])[1])


def test_eta_is_fitted_at_the_fixed_point_of_its_second_moment():
    """M85: eta_mu, tau^2 solve the random-effects fit whose observation variances are kappa noise_x + (eta_mu^2 +
    tau^2) cv2_x (the divisor's uncertainty times E eta^2)."""
    rng = np.random.default_rng(3)
    P = 40
    p = rng.uniform(0.1, 0.95, P)
    n = np.full(P, 16.0)
    k1 = np.round(n * p)
    m1, m0 = np.exp(rng.normal(0, 1, P)), np.exp(rng.normal(0.5, 0.5, P))
    eta = rng.uniform(0.2, 1.5, P)
    g2 = eta * (p * (1 - p)) ** 2 * ((1 - p) * m1 + p * m0)
    vis = n / 4
    s = check_sums({"visits": vis, "samples": n, "successes": k1, "w2_success": k1 * m1, "w2_failure": (n - k1) * m0,
                    "t0_sum": vis * g2 * rng.uniform(0.5, 1.5, P), "w4_success": k1 * m1**2 * 1.3,
                    "w4_failure": (n - k1) * m0**2 * 1.3, "t0_sq": vis * g2**2 * 2.0})
    h, parts = _fit(s, True)
    r, noise, cv2, ok = _eta_obs(s, parts)
    assert h.kappa > 0 and ok.sum() > 10 and cv2[ok].max() > 0
    mu, tau2 = random_effects(r[ok], h.kappa * noise[ok] + (h.eta_mu**2 + h.eta_tau2) * cv2[ok], weighted=True)
    assert mu == pytest.approx(h.eta_mu, rel=1e-6) and tau2 == pytest.approx(h.eta_tau2, rel=1e-6, abs=1e-12)
