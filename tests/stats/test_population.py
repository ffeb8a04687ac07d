"""Draws of the population model for the certificate (ugrpo.stats.population, docs/math.md M60)."""

from __future__ import annotations

import numpy as np
import pytest

from ugrpo.stats.population import POOL, _laplace, _log_post, p_basis, p_population_draws, population_posteriors
from ugrpo.stats.predict import posterior
from ugrpo.stats.prior_p import P_GRID, _log_lik, fit_p_prior


def _problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    s = np.array([0.0, 1.0, 4.0, 8.0, 3.0])
    n = np.array([8.0, 8.0, 8.0, 8.0, 12.0])
    L = np.exp(_log_lik(s, n))
    c = rng.integers(1, 20, size=5).astype(float)
    base = rng.dirichlet(np.ones(len(P_GRID)))
    return L, c, np.log(base), p_basis()


def test_log_posterior_gradient_and_hessian_match_finite_differences():
    L, c, lb, Q = _problem()
    delta = np.random.default_rng(1).normal(0, 0.5, Q.shape[1])
    f, g, H = _log_post(delta, L, c, lb, Q, 2.0)
    h = 1e-6
    e = np.eye(len(delta))
    g_num = np.array([(_log_post(delta + h * e[i], L, c, lb, Q, 2.0)[0]
                       - _log_post(delta - h * e[i], L, c, lb, Q, 2.0)[0]) / (2 * h) for i in range(len(delta))])
    H_num = np.stack([(_log_post(delta + h * e[i], L, c, lb, Q, 2.0)[1]
                       - _log_post(delta - h * e[i], L, c, lb, Q, 2.0)[1]) / (2 * h) for i in range(len(delta))])
    np.testing.assert_allclose(g, g_num, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(H, H_num, rtol=1e-4, atol=1e-5)


def test_the_laplace_centre_is_the_posterior_mode():
    L, c, lb, Q = _problem(2)
    delta, ev, V = _laplace(L, c, np.exp(lb), Q, 3.0, steps=50)
    f, g, H = _log_post(delta, L, c, lb, Q, 3.0)
    assert np.abs(g).max() < 1e-5 * max(1.0, float(c.sum()))
    assert (ev >= 1 / 9.0 - 1e-12).all()   # the precision is at least the prior's
    for d in np.random.default_rng(3).normal(0, 0.1, (5, len(delta))):  # nearby points are lower
        assert _log_post(delta + d, L, c, lb, Q, 3.0)[0] <= f + 1e-9


def test_the_bulk_is_pinned_the_unresolved_tail_is_not():
    # 200 prompts with 400 samples near p = 0.5, 50 prompts that never succeeded in 8 samples
    s = np.r_[np.random.default_rng(0).binomial(400, 0.5, 200).astype(float), np.zeros(50)]
    n = np.r_[np.full(200, 400.0), np.full(50, 8.0)]
    w = p_population_draws(s, n, fit_p_prior(s, n), 64, np.random.default_rng(4))
    assert w.shape == (64, len(P_GRID)) and np.allclose(w.sum(1), 1.0)
    bulk = w[:, (P_GRID > 0.4) & (P_GRID < 0.6)].sum(1)
    low = P_GRID < 0.05
    tail_mean = (w[:, low] @ P_GRID[low]) / w[:, low].sum(1)         # where the never-successful prompts sit
    assert abs(bulk.mean() - 0.8) < 0.05 and bulk.std() < 0.03        # 200 of 250 prompts, known to +-0.03
    assert tail_mean.max() / tail_mean.min() > 2.5                    # 0 of 8 cannot tell 0.008 from 0.002
    assert tail_mean.max() < 0.02                                     # ... but does exclude 0.02 for all 50


def test_nothing_visited_gives_the_defended_prior():
    z = np.zeros(5)
    w = p_population_draws(z, z, np.full(len(P_GRID), 1.0 / len(P_GRID)), 3, np.random.default_rng(0))
    np.testing.assert_allclose(w, 1.0 / len(P_GRID))


def _history(P: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    n = np.where(np.arange(P) < P - 10, 8.0, 0.0)                     # the last 10 prompts never visited
    p = rng.beta(0.5, 0.5, P)
    k1 = rng.binomial(n.astype(int), p).astype(float)
    m1, m0 = np.exp(rng.normal(0, 1, P)), np.exp(rng.normal(0, 1, P))
    return {"visits": n / 4, "samples": n, "successes": k1, "w2_success": k1 * m1, "w2_failure": (n - k1) * m0,
            "t0_sum": np.zeros(P), "w4_success": 2 * k1 * m1**2, "w4_failure": 2 * (n - k1) * m0**2,
            "t0_sq": n / 4 * 1e-4}


def test_population_posteriors_are_the_batch_under_each_draw_with_a_pool_of_visited_donors():
    h = _history(400)
    idx = np.array([0, 5, 395, 399])                                  # two visited, two never visited
    post = posterior(h, idx)
    posts = population_posteriors(h, idx, post.hyper, rng=np.random.default_rng(0), replicates=5)
    assert len(posts) == 5
    for p in posts:
        assert len(p) == 4 and p.seen.tolist() == [True, True, False, False]
        assert len(p.pool) == POOL and p.pool.seen.all()              # 390 visited: a random 256 of them
        assert p.hyper.scores and not np.array_equal(p.hyper.p_prior, post.hyper.p_prior)
    assert len({float(p.hyper.cov[0, 0]) for p in posts}) == 5        # each draw refits the score part
    again = population_posteriors(h, idx, post.hyper, rng=np.random.default_rng(0), replicates=5)
    np.testing.assert_array_equal(again[3].pw, posts[3].pw)           # seeded


def test_without_scores_only_p_is_drawn():
    h = _history(50)
    idx = np.arange(3)
    post = posterior(h, idx, scores=False)
    posts = population_posteriors(h, idx, post.hyper, rng=np.random.default_rng(0), replicates=3)
    for p in posts:
        assert not p.hyper.scores and np.array_equal(p.hyper.cov, post.hyper.cov)


@pytest.mark.parametrize("bad", [{"samples": -np.ones(3)}])
def test_bad_history_is_an_error_naming_the_field(bad):
    h = {**_history(3), **bad}
    with pytest.raises(ValueError, match="samples"):
        population_posteriors(h, np.arange(2), posterior(_history(3)).hyper, rng=np.random.default_rng(0))
