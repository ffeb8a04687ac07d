"""The batched EM of the p population (ugrpo.stats.prior_p, docs/math.md M46) against the unbatched one it replaced
(tests/stats/_em_reference.py: one start at a time, a scalar Newton per component), and fit_p_prior's memo."""

from __future__ import annotations

import numpy as np
import pytest

from tests.stats._em_reference import beta_from_logs, fit_beta_prior_reference, fit_p_prior_reference
from ugrpo.stats import prior_p
from ugrpo.stats.prior_p import FIT_CACHE, _betas_from_logs, clear_fit_cache, fit_beta_prior, fit_p_prior


def _pool(seed: int, P: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(successes, samples) of P prompts: n in 4..40 and p from one Beta (``one``), a bulk plus 5% rare prompts
    at p = 0.01 (``rare``), fractional counts (``frac``, as the guard's weighted folds), or a third unvisited."""
    rng = np.random.default_rng(seed)
    n = rng.integers(4, 41, P).astype(float)
    p = rng.beta(0.3, 0.5, P) if kind != "rare" else np.where(rng.random(P) < 0.05, 0.01, rng.beta(4, 4, P))
    s = rng.binomial(n.astype(int), p).astype(float)
    if kind == "frac":
        u = rng.uniform(0.3, 1.0, P)
        s, n = s * u, n * u
    if kind == "unvisited":
        n = np.where(rng.random(P) < 1 / 3, 0.0, n)
        s = np.where(n > 0, s, 0.0)
    return s, n


POOLS = [(0, 200, "one"), (1, 200, "rare"), (2, 60, "frac"), (3, 120, "unvisited"), (4, 2, "one"), (5, 30, "rare")]
EDGE = [(np.zeros(5), np.full(5, 8.0)), (np.full(4, 8.0), np.full(4, 8.0)),
        (np.array([0.0, 3.0]), np.array([4.0, 4.0])), (np.zeros(3), np.zeros(3)),
        (np.r_[np.full(95, 100.0), np.full(5, 3.0)], np.full(100, 200.0))]


@pytest.mark.parametrize("pool", POOLS + list(range(len(EDGE))), ids=str)
def test_batched_em_is_the_unbatched_fit(pool):
    """Same fitted population as the one-start-at-a-time EM (bit for bit on the machine it was written on; 1e-12
    allowed for another numpy's summation order)."""
    s, n = _pool(*pool) if isinstance(pool, tuple) else EDGE[pool]
    clear_fit_cache()
    got, want = fit_p_prior(s, n), fit_p_prior_reference(s, n)
    assert got.shape == want.shape and got.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_the_screened_beta_start_is_the_full_grids_maximum():
    """fit_beta_prior screens the grid in log-gammas when the prompts have few distinct n; the cell it returns is
    the full betaln grid's first maximum: on pools of one group size (the screen's case), several, many (no
    screen), a symmetric pool (s = n - s: the grid is symmetric, its maxima come in pairs), identical prompts (a
    ridge rising to the grid's corner) and huge counts (log-gammas of 1e8)."""
    rng = np.random.default_rng(11)
    cases = [(np.r_[np.full(50, 4.0), np.zeros(50), np.full(50, 8.0)], np.full(150, 8.0)),
             (np.full(40, 3.0), np.full(40, 12.0)),
             (rng.binomial(10**8, rng.beta(2, 3, 30)).astype(float), np.full(30, 1e8))]
    for k in range(30):
        P = int(rng.integers(3, 300))
        n = rng.choice([8.0, 16.0, 32.0][: 1 + k % 3], P) if k % 4 else rng.integers(1, 41, P).astype(float)
        cases.append((rng.binomial(n.astype(int), rng.beta(*rng.uniform(0.1, 4, 2), P)).astype(float), n))
    for s, n in cases:
        assert fit_beta_prior(s, n) == fit_beta_prior_reference(s, n)


def test_the_batched_newton_is_each_components_scalar_newton():
    """Several M-steps solved together end where each solved alone does (the components stop at different steps)."""
    from scipy.special import digamma

    truth = [(0.3, 0.7), (2.0, 5.0), (40.0, 12.0), (150.0, 0.05)]
    lp = [float(digamma(a) - digamma(a + b)) for a, b in truth]
    lq = [float(digamma(b) - digamma(a + b)) for a, b in truth]
    starts = [(1.0, 1.0), (1.5, 4.0), (30.0, 10.0), (1.0, 1.0)]
    got = _betas_from_logs(lp, lq, starts)
    assert got == [beta_from_logs(lp[j], lq[j], *starts[j]) for j in range(4)]
    np.testing.assert_allclose(got[:3], truth[:3], rtol=1e-6)


def test_the_memo_returns_the_fit_of_the_same_counts_and_nothing_else():
    s, n = _pool(7, 80, "one")
    clear_fit_cache()
    first = fit_p_prior(s, n)
    first[:] = 0.0                                                   # the caller's copy: the memo is not touched
    again = fit_p_prior(s.copy(), n.copy())
    assert prior_p._fit_seen.cache_info().hits == 1
    np.testing.assert_array_equal(again, fit_p_prior_reference(s, n))
    s2 = s.copy()
    s2[np.argmax(n > s)] += 1.0                                      # one more success on one prompt: a new fit
    np.testing.assert_array_equal(fit_p_prior(s2, n), fit_p_prior_reference(s2, n))
    assert prior_p._fit_seen.cache_info().hits == 1
    np.testing.assert_array_equal(fit_p_prior(s, n, steps=5), fit_p_prior_reference(s, n, steps=5))
    for k in range(FIT_CACHE + 2):                                   # bounded: the oldest fits are forgotten
        fit_p_prior(s + (np.arange(len(s)) == k) * (n > s), n, steps=3)
    assert prior_p._fit_seen.cache_info().currsize == FIT_CACHE
    clear_fit_cache()
    assert prior_p._fit_seen.cache_info().currsize == 0
