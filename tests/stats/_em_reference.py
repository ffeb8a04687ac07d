"""The p population's EM as it was before it was batched (ugrpo.stats.prior_p before the emfast branch): one start
at a time, a Python loop over the components for the densities and the M-step, a scalar Newton per component
(docs/math.md M46), started from the one-Beta fit on the full (a, b) grid with ``betaln`` in every cell. The
reference the batched fit is tested against (tests/stats/test_prior_p.py) and timed against
(benchmarks/bench_p_prior.py); kept verbatim but for names.
"""

from __future__ import annotations

import math

import numpy as np

from ugrpo.stats.prior_p import (
    _SPLITS,
    MAX_COMPONENTS,
    P_GRID,
    _log_lik,
    _split_start,
    logsumexp,
)


def beta_logit_density(a: float, b: float) -> np.ndarray:
    """(K,) Beta(a, b) on P_GRID in the logit measure, normalised."""
    lw = a * np.log(P_GRID) + b * np.log1p(-P_GRID)
    w = np.exp(lw - lw.max())
    return w / w.sum()


def beta_from_logs(lp: float, lq: float, a: float, b: float) -> tuple[float, float]:
    """The scalar Newton of the M-step (psi(a) - psi(a+b) = lp, psi(b) - psi(a+b) = lq), from (a, b)."""
    from scipy.special import digamma, polygamma

    x0, x1 = math.log(a), math.log(b)
    lo, hi = math.log(0.02), math.log(200.0)
    for _ in range(12):
        a, b = math.exp(x0), math.exp(x1)
        d = digamma(np.array([a, b, a + b]))
        t = polygamma(1, np.array([a, b, a + b]))
        r0, r1 = d[0] - d[2] - lp, d[1] - d[2] - lq
        j00, j01, j10, j11 = (t[0] - t[2]) * a, -t[2] * b, -t[2] * a, (t[1] - t[2]) * b
        det = j00 * j11 - j01 * j10
        s0 = max(-1.0, min(1.0, -(j11 * r0 - j01 * r1) / det))
        s1 = max(-1.0, min(1.0, -(j00 * r1 - j10 * r0) / det))
        x0, x1 = min(hi, max(lo, x0 + s0)), min(hi, max(lo, x1 + s1))
        if max(abs(s0), abs(s1)) < 1e-8:
            break
    return math.exp(x0), math.exp(x1)


def mixture_em(L: np.ndarray, c: np.ndarray, comps: list[tuple[float, float]], weights: np.ndarray,
               steps: int) -> tuple[float, list[tuple[float, float]], np.ndarray]:
    """EM for a mixture of Betas on the grid from one start: (mean log likelihood, components, weights)."""
    lp, lq = np.log(P_GRID), np.log1p(-P_GRID)
    ll = -np.inf
    for _ in range(int(steps)):
        dens = np.log(np.stack([beta_logit_density(a, b) for a, b in comps]) + 1e-300)    # (J, K)
        joint = L[:, None, :] + dens[None]                                                 # (U, J, K)
        lm = logsumexp(joint, axis=2) + np.log(weights)[None]                              # (U, J)
        tot = logsumexp(lm, axis=1)                                                        # (U,)
        ll_new = float((c * tot).sum())
        resp = np.exp(lm - tot[:, None]) * c[:, None]                                      # (U, J)
        post = np.exp(joint - logsumexp(joint, axis=2, keepdims=True))                     # (U, J, K)
        mass = np.maximum(resp.sum(0), 1e-12)
        comps = [beta_from_logs(float((resp[:, j, None] * post[:, j] * lp).sum() / mass[j]),
                                float((resp[:, j, None] * post[:, j] * lq).sum() / mass[j]), *comps[j])
                 for j in range(len(comps))]
        weights = mass / mass.sum()
        if ll_new - ll < 1e-7:
            break
        ll = ll_new
    return ll_new, comps, weights


def fit_p_prior_reference(successes: np.ndarray, samples: np.ndarray, *, steps: int = 100) -> np.ndarray:
    """(K,) the fitted p population, one EM per start in turn (the unbatched fit_p_prior)."""
    s = np.asarray(successes, dtype=np.float64)
    n = np.asarray(samples, dtype=np.float64)
    seen = n > 0
    if seen.sum() < 2:
        return beta_logit_density(1.0, 1.0)
    pairs, count = np.unique(np.stack([s[seen], n[seen]], 1), axis=0, return_counts=True)
    L = _log_lik(pairs[:, 0], pairs[:, 1])
    c = count / count.sum()
    N = float(seen.sum())
    rate = (pairs[:, 0] + 0.5) / (pairs[:, 1] + 1.0)
    best = (-np.inf, None, None)
    for J in range(1, MAX_COMPONENTS + 1):
        starts = [[fit_beta_prior_reference(s, n)]] if J == 1 else [_split_start(rate, c, q) for q in _SPLITS[J]]
        improved = False
        for comps in (x for x in starts if x is not None):
            ll, comps, weights = mixture_em(L, c, comps, np.full(J, 1.0 / J), steps)
            bic = N * ll - 0.5 * (3 * J - 1) * np.log(N)
            if bic > best[0]:
                best, improved = (bic, comps, weights), True
        if not improved:
            break
    _, comps, weights = best
    return sum(wj * beta_logit_density(a, b) for wj, (a, b) in zip(weights, comps))


def fit_beta_prior_reference(successes: np.ndarray, samples: np.ndarray, *, grid: int = 41) -> tuple[float, float]:
    """The Beta start on the full (a, b) grid with ``betaln`` in every cell (fit_beta_prior before the screen)."""
    from scipy.special import betaln

    s = np.asarray(successes, dtype=np.float64)
    n = np.asarray(samples, dtype=np.float64)
    seen = n > 0
    if seen.sum() < 2:
        return 1.0, 1.0
    pairs, count = np.unique(np.stack([s[seen], n[seen] - s[seen]], 1), axis=0, return_counts=True)
    s, f = pairs[:, 0], pairs[:, 1]
    v = np.exp(np.linspace(np.log(0.05), np.log(50.0), grid))
    A, Bp = v[:, None, None], v[None, :, None]
    ll = ((betaln(A + s, Bp + f) - betaln(A, Bp)) * count).sum(-1)
    i, j = np.unravel_index(int(np.argmax(ll)), ll.shape)
    return float(v[i]), float(v[j])
