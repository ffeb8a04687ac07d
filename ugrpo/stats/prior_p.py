"""The population of success rates p on a grid, fitted to a history (docs/math.md M46), and each prompt's posterior.

Used by :mod:`ugrpo.stats.predict` (the one per-prompt predictor): :func:`fit_p_prior` fits the population to all
visited prompts' counts (s_x successes in n_x samples), :func:`posterior_weights` is Bayes' rule for each prompt on
the fixed grid :data:`P_GRID`. Pure numpy/scipy.
"""

from __future__ import annotations

import functools
import math

import numpy as np

__all__ = ["P_GRID", "NODES", "MAX_COMPONENTS", "FIT_CACHE", "fit_beta_prior", "fit_p_prior", "clear_fit_cache",
           "posterior_weights", "posterior_nodes"]

P_GRID = 1.0 / (1.0 + np.exp(-np.linspace(-8.0, 8.0, 81)))
"""the success rates the p prior lives on: 81 points, equally spaced in logit from 3.4e-4 to 1 - 3.4e-4"""
NODES = 64
"""points of each prompt's own posterior grid (:func:`posterior_nodes`)"""
MAX_COMPONENTS = 3
"""most Beta components of the p population (chosen by BIC, M46)"""
FIT_CACHE = 8
"""fits :func:`fit_p_prior` remembers (least recently used first out; each holds its visited prompts' counts, 16
bytes a prompt, and 81 weights)"""


def _log_lik(successes: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """(n, K) binomial log likelihood s log p_k + (n - s) log(1 - p_k) on :data:`P_GRID` (fractional counts)."""
    s, n = np.asarray(successes, dtype=np.float64), np.asarray(samples, dtype=np.float64)
    return s[:, None] * np.log(P_GRID)[None] + (n - s)[:, None] * np.log1p(-P_GRID)[None]


def fit_beta_prior(successes: np.ndarray, samples: np.ndarray, *, grid: int = 41) -> tuple[float, float]:
    """Beta(a, b) maximising the beta-binomial marginal likelihood of all visited prompts' (s_x, n_x) over a log
    grid of a, b in [0.05, 50] (the base of :func:`fit_p_prior`, docs/math.md M46; fractional counts allowed).

    The log likelihood of a cell is sum_x (log B(a + s_x, b + f_x) - log B(a, b)), f_x = n_x - s_x, evaluated
    with ``betaln``; the grid's first maximum (in row-major order) is returned. When the prompts have few distinct
    n_x, the grid is first screened with the same sum written in log-gammas, whose only term in both a and b,
    log Gamma(a + b + n_x), needs one value per distinct n_x: only the cells within 1e-8 of the sum's magnitude of
    the screen's maximum are evaluated with ``betaln``. Either form's rounding is below about (distinct pairs) x
    1e-16 of that magnitude, so every cell left out is below the grid's maximum and the result is the full grid's
    (tested against it).

    Examples
    --------
    >>> fit_beta_prior(np.zeros(3), np.zeros(3))  # nothing visited: the uniform prior
    (1.0, 1.0)
    """
    from scipy.special import betaln

    s = np.asarray(successes, dtype=np.float64)
    n = np.asarray(samples, dtype=np.float64)
    seen = n > 0
    if seen.sum() < 2:
        return 1.0, 1.0
    pairs, count = np.unique(np.stack([s[seen], n[seen] - s[seen]], 1), axis=0, return_counts=True)
    s, f = pairs[:, 0], pairs[:, 1]                                             # distinct (s_x, n_x - s_x)
    v = np.exp(np.linspace(np.log(0.05), np.log(50.0), grid))
    n_vals, n_idx = np.unique(s + f, return_inverse=True)
    cells = _screen(v, s, f, count, n_vals, n_idx) if 2 * len(n_vals) <= len(s) else np.arange(grid * grid)
    i, j = np.divmod(cells, grid)
    ll = ((betaln(v[i, None] + s, v[j, None] + f) - betaln(v[i], v[j])[:, None]) * count).sum(-1)
    i, j = np.divmod(int(cells[int(np.argmax(ll))]), grid)
    return float(v[i]), float(v[j])


def _screen(v: np.ndarray, s: np.ndarray, f: np.ndarray, count: np.ndarray, n_vals: np.ndarray,
            n_idx: np.ndarray) -> np.ndarray:
    """Row-major indices of the (a, b) grid cells whose beta-binomial log likelihood, in log-gammas
    (:func:`fit_beta_prior`), is within 1e-8 of its magnitude of the grid's maximum."""
    from scipy.special import gammaln

    total, g_v, ab = count.sum(), gammaln(v), v[:, None] + v[None]
    ga, gb = gammaln(v[:, None] + s), gammaln(v[:, None] + f)                   # (grid, U)
    gn = gammaln(ab[..., None] + n_vals)                                         # (grid, grid, distinct n)
    per_n = np.bincount(n_idx, weights=count, minlength=len(n_vals))
    ll = (ga @ count - total * g_v)[:, None] + (gb @ count - total * g_v)[None] - gn @ per_n + total * gammaln(ab)
    size = (np.abs(ga) @ count + np.abs(gb) @ count).max() + np.abs(gn).max((0, 1)) @ per_n \
        + 3 * total * np.abs(g_v).max() + total * np.abs(gammaln(ab)).max()
    return np.flatnonzero(ll.ravel() >= ll.max() - 1e-8 * size)


_LOG_P, _LOG_Q = np.log(P_GRID), np.log1p(-P_GRID)


def _beta_logit_density(a: float, b: float) -> np.ndarray:
    """(K,) Beta(a, b) on :data:`P_GRID` in the logit measure (p^a (1-p)^b), normalised."""
    return _beta_logit_densities(np.array([a]), np.array([b]))[0]


def _beta_logit_densities(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(J, K) the Beta(a_j, b_j) of :func:`_beta_logit_density`, one row each (one array operation)."""
    lw = a[:, None] * _LOG_P + b[:, None] * _LOG_Q
    w = np.exp(lw - lw.max(1, keepdims=True))
    return w / w.sum(1, keepdims=True)


def _beta_from_logs(lp: float, lq: float, a: float, b: float) -> tuple[float, float]:
    """The Beta(a, b) whose E log p and E log(1-p) are (lp, lq): Newton on psi(a) - psi(a+b) = lp,
    psi(b) - psi(a+b) = lq (the M-step of EM for a Beta prior, M46), from (a, b), kept in [0.02, 200]."""
    return _betas_from_logs([lp], [lq], [(a, b)])[0]


def _betas_from_logs(lp: list[float], lq: list[float],
                     start: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """:func:`_beta_from_logs` for J components at once: each its own Newton (up to 12 steps, stopped when its
    step is below 1e-8), the digamma and trigamma (zeta(2, .) = polygamma(1, .)) of all active components in one
    call per step, the rest in Python floats (so each component's iterates are those of the scalar Newton)."""
    from scipy.special import digamma, zeta

    x0, x1 = [math.log(a) for a, _ in start], [math.log(b) for _, b in start]
    lo, hi = math.log(0.02), math.log(200.0)
    active = range(len(start))
    for _ in range(12):
        ab = [u for j in active for u in (math.exp(x0[j]), math.exp(x1[j]))]
        v = np.array([u for a, b in zip(ab[::2], ab[1::2]) for u in (a, b, a + b)])
        d, t = digamma(v).tolist(), zeta(2.0, v).tolist()
        still = []
        for i, j in enumerate(active):
            a, b, k = ab[2 * i], ab[2 * i + 1], 3 * i
            d2, t2 = d[k + 2], t[k + 2]
            r0, r1 = d[k] - d2 - lp[j], d[k + 1] - d2 - lq[j]
            j00, j01, j10, j11 = (t[k] - t2) * a, -t2 * b, -t2 * a, (t[k + 1] - t2) * b  # d r / d log(a, b)
            det = j00 * j11 - j01 * j10
            det = det if det != 0.0 else np.float64(det)  # numpy's inf / nan step, as the scalar Newton had
            # max(-1, min(1, .)) and min(hi, max(lo, .)) written out (NaN -> 1 and lo, as min/max give)
            s0, s1 = -(j11 * r0 - j01 * r1) / det, -(j00 * r1 - j10 * r0) / det
            s0 = (s0 if s0 > -1.0 else -1.0) if s0 < 1.0 else 1.0
            s1 = (s1 if s1 > -1.0 else -1.0) if s1 < 1.0 else 1.0
            y0, y1 = x0[j] + s0, x1[j] + s1
            y0, y1 = y0 if y0 > lo else lo, y1 if y1 > lo else lo
            x0[j], x1[j] = y0 if y0 < hi else hi, y1 if y1 < hi else hi
            if abs(s0) >= 1e-8 or abs(s1) >= 1e-8:
                still.append(j)
        active = still
        if not active:
            break
    return [(math.exp(a), math.exp(b)) for a, b in zip(x0, x1)]


def logsumexp(a: np.ndarray, axis: int, keepdims: bool = False) -> np.ndarray:
    """log sum exp along ``axis`` (max-shifted; a plain numpy version, faster than scipy's for small arrays)."""
    m = a.max(axis=axis, keepdims=True)
    out = m + np.log(np.exp(a - m).sum(axis=axis, keepdims=True))
    return out if keepdims else np.squeeze(out, axis=axis)


def _mixture_em(L: np.ndarray, c: np.ndarray, starts: list[list[tuple[float, float]]],
                steps: int) -> list[tuple[float, list[tuple[float, float]], np.ndarray]]:
    """EM for a mixture of J Betas on the grid from each of S starts (J components each, equal weights), run side
    by side: per start (mean log likelihood per prompt, components, weights); L (U, K) are the prompts'
    log-likelihoods on :data:`P_GRID`, c (U,) their normalised counts. A start stops when its log likelihood gains
    less than 1e-7 in a step (or after ``steps``).

    The S J components are one axis of (S J, U, K) arrays, component-major, so every sum of one start's E-step
    runs over the same numbers in the same order as an EM of that start alone (the fit is that EM's to the last
    bit; tested against it): the batching only saves numpy's per-call overhead, which dominates at these sizes."""
    if not starts:
        return []
    J, U = len(starts[0]), len(L)
    comps = [list(x) for x in starts]
    weights = np.full((len(starts), J), 1.0 / J)
    ll = [-np.inf] * len(starts)
    out: list = [None] * len(starts)
    active = list(range(len(starts)))
    for _ in range(int(steps)):
        k = len(active)
        a, b = np.array([comps[i] for i in active]).reshape(k * J, 2).T
        dens = np.log(_beta_logit_densities(a, b) + 1e-300)                         # (k J, K)
        joint = L[None] + dens[:, None]                                              # (k J, U, K)
        lse = logsumexp(joint, axis=2, keepdims=True)                                # (k J, U, 1)
        lm = (np.ascontiguousarray(lse[:, :, 0].reshape(k, J, U).transpose(0, 2, 1))
              + np.log(weights[active])[:, None])                                    # (k, U, J), C order
        tot = logsumexp(lm, axis=2)                                                  # (k, U)
        ll_new = (c * tot).sum(1).tolist()
        resp = np.exp(lm - tot[:, :, None]) * c[:, None]                             # (k, U, J)
        wpost = resp.transpose(0, 2, 1).reshape(k * J, U, 1) * np.exp(joint - lse)   # (k J, U, K)
        mass = np.maximum(resp.sum(1), 1e-12)                                        # (k, J)
        new = _betas_from_logs(((wpost * _LOG_P).reshape(k * J, -1).sum(1) / mass.ravel()).tolist(),
                               ((wpost * _LOG_Q).reshape(k * J, -1).sum(1) / mass.ravel()).tolist(),
                               [ab for i in active for ab in comps[i]])
        weights[active] = mass / mass.sum(1, keepdims=True)
        still = []
        for r, i in enumerate(active):
            comps[i] = new[r * J:(r + 1) * J]
            if ll_new[r] - ll[i] < 1e-7:
                out[i] = (ll_new[r], comps[i], weights[i].copy())
            else:
                ll[i] = ll_new[r]
                still.append(i)
        active = still
        if not active:
            break
    for i in active:  # ran out of steps
        out[i] = (ll[i], comps[i], weights[i].copy())
    return out


def fit_p_prior(successes: np.ndarray, samples: np.ndarray, *, steps: int = 100) -> np.ndarray:
    """(K,) weights on :data:`P_GRID`: the population of p fitted to all visited prompts (docs/math.md M46).

    A mixture of up to :data:`MAX_COMPONENTS` Betas, fitted by EM to the marginal (beta-binomial) likelihood of the
    prompts' (s_x, n_x) on the grid, the number of components chosen by BIC (each added one costs 3 parameters; the
    search stops at the first J that does not improve it):
    one Beta when the pool is one population, a bulk near 1/2 plus a few rare prompts near 0 when it is two (which
    one Beta cannot be). Each component keeps a Beta's smooth tails, so a prompt's posterior is never sharper than
    its own data and a smooth population allow. Fewer than two visited prompts: Beta(1, 1).

    The last :data:`FIT_CACHE` fits are remembered, keyed on the visited prompts' exact counts (and ``steps``), so
    refitting unchanged counts returns the same weights without the EM; :func:`clear_fit_cache` forgets them.

    Examples
    --------
    >>> w = fit_p_prior(np.zeros(3), np.zeros(3))  # nothing visited: Beta(1, 1), uniform in p
    >>> round(float(w @ P_GRID), 6)
    0.5
    """
    s = np.asarray(successes, dtype=np.float64)
    n = np.asarray(samples, dtype=np.float64)
    seen = n > 0
    if seen.sum() < 2:
        return _beta_logit_density(1.0, 1.0)
    return _fit_seen(np.ascontiguousarray(s[seen]).tobytes(), np.ascontiguousarray(n[seen]).tobytes(),
                     int(steps)).copy()


def clear_fit_cache() -> None:
    """Forget :func:`fit_p_prior`'s memo (a benchmark timing repeated fits of one history calls this first)."""
    _fit_seen.cache_clear()


@functools.lru_cache(maxsize=FIT_CACHE)
def _fit_seen(s_bytes: bytes, n_bytes: bytes, steps: int) -> np.ndarray:
    """:func:`fit_p_prior` of the visited prompts' counts (float64 bytes), memoised on them exactly: the guard's
    fold that the last step did not visit is refitted to the same counts (docs/allocation.md A8)."""
    s, n = np.frombuffer(s_bytes), np.frombuffer(n_bytes)
    pairs, count = np.unique(np.stack([s, n], 1), axis=0, return_counts=True)
    L = _log_lik(pairs[:, 0], pairs[:, 1])                                       # (U, K)
    c = count / count.sum()
    N = float(len(n))
    rate = (pairs[:, 0] + 0.5) / (pairs[:, 1] + 1.0)
    best = (-np.inf, None, None)
    for J in range(1, MAX_COMPONENTS + 1):
        starts = [[fit_beta_prior(s, n)]] if J == 1 else [_split_start(rate, c, q) for q in _SPLITS[J]]
        improved = False
        for ll, comps, weights in _mixture_em(L, c, [x for x in starts if x is not None], steps):
            bic = N * ll - 0.5 * (3 * J - 1) * np.log(N)
            if bic > best[0]:
                best, improved = (bic, comps, weights), True
        if not improved:  # BIC stopped improving: more components will not be kept
            break
    _, comps, weights = best
    w = sum(wj * _beta_logit_density(a, b) for wj, (a, b) in zip(weights, comps))
    w.flags.writeable = False  # the memo's copy: fit_p_prior hands out copies
    return w


_SPLITS = {2: ((0.1,), (0.5,), (0.9,)), 3: ((0.1, 0.9), (0.33, 0.67))}


def _split_start(rate: np.ndarray, c: np.ndarray, qs: tuple[float, ...]) -> list[tuple[float, float]] | None:
    """Starting components: the prompts split at the weighted quantiles ``qs`` of their success rates, one Beta at
    each group's mean rate with a moderate spread (a + b = 4); None when a group would be empty."""
    order = np.argsort(rate)
    cum = np.cumsum(c[order])
    edges = [0] + [int(np.clip(np.searchsorted(cum, q), 1, len(rate) - 1)) for q in qs] + [len(rate)]
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        idx = order[lo:hi]
        if len(idx) == 0:
            return None
        m = float(np.clip(np.average(rate[idx], weights=c[idx]), 0.01, 0.99))
        out.append((4.0 * m, 4.0 * (1 - m)))
    return out


def posterior_weights(prior: np.ndarray, successes: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """(n, K) posterior of p on the grid: prior times binomial likelihood, normalised (Bayes' rule, M46)."""
    ll = _log_lik(successes, samples) + np.log(np.maximum(prior, 1e-300))[None]
    pw = np.exp(ll - ll.max(1, keepdims=True))
    return pw / pw.sum(1, keepdims=True)


def _log_prior(prior: np.ndarray, t: np.ndarray) -> np.ndarray:
    """log density of the grid prior in the logit measure at logits t inside the grid's range: linear interpolation
    of log w_k between grid points."""
    return np.interp(t, np.log(P_GRID / (1 - P_GRID)), np.log(np.maximum(prior, 1e-300)))


def posterior_nodes(prior: np.ndarray, successes: np.ndarray, samples: np.ndarray,
                    nodes: int = NODES) -> tuple[np.ndarray, np.ndarray]:
    """((n, nodes) values, (n, nodes) weights): each prompt's posterior of p on its own logit grid (M46).

    The grid spans the likelihood, logit((s + 1/2)/(n - s + 1/2)) -+ 5 sd with sd = ((s + 1/2)(n - s + 1/2) /
    (n + 1))^(-1/2) (its curvature), cut to the prior's support (the logits of :data:`P_GRID`'s ends), equally
    spaced, so it resolves the posterior however many samples a prompt has (as n grows the posterior mean tends to
    the prompt's own frequency s/n, unlike on a fixed grid); the weights are the prior's density
    (:func:`_log_prior`) times the binomial likelihood, normalised.
    """
    s = np.asarray(successes, dtype=np.float64)[:, None]
    n = np.asarray(samples, dtype=np.float64)[:, None]
    centre = np.log((s + 0.5) / (n - s + 0.5))
    sd = 1.0 / np.sqrt((s + 0.5) * (n - s + 0.5) / (n + 1.0))
    T = float(np.log(P_GRID[-1] / (1 - P_GRID[-1])))                             # the prior's support: [-T, T]
    lo, hi = np.clip(centre - 5 * sd, -T, T), np.clip(centre + 5 * sd, -T, T)
    lo, hi = np.minimum(lo, hi - 1e-6), np.maximum(hi, lo + 1e-6)
    t = lo + (hi - lo) * np.linspace(0.0, 1.0, int(nodes))[None]                  # (n, nodes)
    p = 1.0 / (1.0 + np.exp(-t))
    ll = s * np.log(p) + (n - s) * np.log1p(-p) + _log_prior(prior, t)
    w = np.exp(ll - ll.max(1, keepdims=True))
    return p, w / w.sum(1, keepdims=True)
