"""The allocation certificate with an interval: predicted MSE ratio of chosen G_b against uniform, before a step.

M33 gives the within-batch MSE (1/B^2) sum_b f_b(G_b) of any fixed sizes; M38 predicts each prompt's f_b from
its history. The certificate (docs/math.md M45) is the posterior of the ratio chosen / uniform G under an
empirical-Bayes hierarchical model of the history, each part conjugate and drawn exactly:

* p_x ~ Beta(a + s_x, b + n_x - s_x), (a, b) fitted to all prompts' counts (:func:`fit_beta_prior`);
* m_z(x) = E[||W||^2 | Z = z, x]: Gamma per-sample model (pooled within-prompt shape) with an inverse-gamma
  population prior (mean and between-prompt variance by one-way ANOVA): conjugate on the Gamma rate;
* ||g(x)||^2: normal per-visit T0 (M14) with a normal population prior (ANOVA), truncated to the range the
  drawn (p, m_1, m_0) allow: [0, min(p^2 m_1, (1-p)^2 m_0)] (E W = 0 gives g = p E[W | Z=1], then Jensen).

Without the second-moment sums (``w4_*``, ``t0_sq``) m_z and ||g||^2 are held at their per-prompt means (p only).
Each draw gives c2, c3 (M38's polynomials), the within-batch MSE of the chosen and of the uniform sizes and their
ratio; the interval is the draws' 2.5% and 97.5% quantiles and the point their median. With c1 (the G* monitor,
drawn from a normal matching its interval, cut at 0) the full-MSE ratio against the best single G at the same N
is drawn too. This is a posterior interval, not a confidence interval: its frequentist coverage is measured in
benchmarks/bench_certificate_calibration.py and stated wherever it is shown (docs/allocation.md A6).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .exact_mse import prompt_error, uniform_mse

__all__ = ["HistoryPosterior", "Certificate", "history_posterior", "fit_beta_prior", "draw_moments", "certificate"]


@dataclass(frozen=True)
class HistoryPosterior:
    """Posterior of the B drawn prompts' moments (arrays of shape (B,), docs/math.md M45).

    Attributes
    ----------
    a, b : Beta posterior parameters of p
    m1, m0 : posterior means of E[||W||^2 | Z = 1], E[||W||^2 | Z = 0]
    shape1, shape0 : Gamma shapes A of their rate posteriors: a draw is m (A - 1) / Gamma(A, 1) (inf: held fixed)
    g2, g2_sd : posterior mean and standard deviation of ||g(x)||^2 (normal, cut at 0; sd 0: held fixed)
    """

    a: np.ndarray
    b: np.ndarray
    m1: np.ndarray
    m0: np.ndarray
    shape1: np.ndarray
    shape0: np.ndarray
    g2: np.ndarray
    g2_sd: np.ndarray


@dataclass(frozen=True)
class Certificate:
    """Predicted ratios with posterior intervals (``*_low``, ``*_high``: 2.5% and 97.5% quantiles of the draws).

    ``ratio``: posterior median of the within-batch MSE of the chosen sizes over uniform G (M33); ``plugin``: the
    same ratio at the plug-in moments; ``full_ratio``: posterior median of c1/B + within over the best single G*
    at the same N (None without c1), ``g_star`` the plug-in G*.
    """

    ratio: float
    plugin: float
    ratio_low: float
    ratio_high: float
    full_ratio: float | None = None
    full_ratio_low: float | None = None
    full_ratio_high: float | None = None
    g_star: int | None = None


def _anova(k: np.ndarray, s: np.ndarray, q: np.ndarray) -> tuple[float, float, float]:
    """(pooled mean, within variance, between variance >= 0) of per-unit observations from per-prompt weights k,
    sums s and sums of squares q (one-way random-effects ANOVA, method of moments; nan when not estimable)."""
    seen = k > 0
    K, J = float(k[seen].sum()), int(seen.sum())
    if J < 2 or K - J <= 0:
        return (float(s.sum() / K) if K > 0 else np.nan), np.nan, np.nan
    mu = float(s[seen].sum() / K)
    mean = s[seen] / k[seen]
    within = float(max((q[seen] - s[seen] * mean).sum(), 0.0) / (K - J))
    between_ss = float((k[seen] * (mean - mu) ** 2).sum())
    tau2 = (between_ss - within * (J - 1)) / (K - (k[seen] ** 2).sum() / K)
    return mu, within, max(tau2, 0.0)


def _gamma_posterior(k: np.ndarray, s: np.ndarray, q: np.ndarray | None, fallback: float,
                     idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(posterior mean, Gamma shape A) of each prompt's mean of a positive per-sample quantity (M45): samples
    Gamma(nu, rate nu/m) with the pooled within shape nu = mu^2/within, prior on the rate Gamma(alpha0, beta0)
    with m's prior mean mu and between-prompt variance tau2 (empirical Bayes, :func:`_anova`)."""
    mu, within, tau2 = _anova(k, s, q) if q is not None else (np.nan, np.nan, np.nan)
    if not (np.isfinite(mu) and np.isfinite(within) and within > 0 and mu > 0):
        m = np.where(k > 0, s / np.maximum(k, 1e-300), fallback if not np.isfinite(mu) else mu)
        return m[idx], np.full(len(idx), np.inf)
    nu = mu**2 / within
    alpha0 = 2.0 + mu**2 / max(tau2, 1e-12 * mu**2)            # inverse-gamma prior of m: mean mu, variance tau2
    beta0 = mu * (alpha0 - 1.0) / nu
    A = alpha0 + nu * k[idx]
    return nu * (beta0 + s[idx]) / (A - 1.0), A


def _normal_posterior(v: np.ndarray, s: np.ndarray, q: np.ndarray | None,
                      idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(posterior mean, sd) of each prompt's ||g(x)||^2 from per-visit T0 (normal-normal, empirical Bayes)."""
    mu, within, tau2 = _anova(v, s, q) if q is not None else (np.nan, np.nan, np.nan)
    if not (np.isfinite(within) and np.isfinite(tau2) and within > 0):
        g = np.where(v > 0, s / np.maximum(v, 1e-300), max(mu, 0.0) if np.isfinite(mu) else 0.0)
        return np.clip(g[idx], 0.0, None), np.zeros(len(idx))
    prec = 1.0 / max(tau2, 1e-12 * within) + v[idx] / within
    return (mu / max(tau2, 1e-12 * within) + s[idx] / within) / prec, np.sqrt(1.0 / prec)


def history_posterior(idx: np.ndarray, visits: np.ndarray, samples: np.ndarray, successes: np.ndarray,
                      w2_success: np.ndarray, w2_failure: np.ndarray, t0_sum: np.ndarray, *,
                      w4_success: np.ndarray | None = None, w4_failure: np.ndarray | None = None,
                      t0_sq: np.ndarray | None = None, prior_a: float = 1.0, prior_b: float = 1.0
                      ) -> HistoryPosterior:
    """The empirical-Bayes posterior of the prompts ``idx`` from the history sums of all P prompts (M45).

    Parameters
    ----------
    idx : (B,) the drawn prompts
    visits, samples, successes, w2_success, w2_failure, t0_sum : (P,) the history sums of
        :func:`ugrpo.stats.history.history_stats`
    w4_success, w4_failure, t0_sq : (P,) sums of z ||W||^4, (1 - z) ||W||^4 and of squared per-visit T0; without
        them m_z and ||g||^2 are held at their per-prompt (or pooled) means
    prior_a, prior_b : the Beta prior of p (:func:`fit_beta_prior` gives the empirical-Bayes one)
    """
    f = lambda v: None if v is None else np.asarray(v, dtype=np.float64)  # noqa: E731
    k1, visits = f(successes), f(visits)
    k0 = f(samples) - k1
    i = np.asarray(idx, dtype=np.int64)
    n = k1.sum() + k0.sum()
    pool = (f(w2_success).sum() + f(w2_failure).sum()) / n if n > 0 else 1.0
    m1, A1 = _gamma_posterior(k1, f(w2_success), f(w4_success), pool, i)
    m0, A0 = _gamma_posterior(k0, f(w2_failure), f(w4_failure), pool, i)
    g2, g2_sd = _normal_posterior(visits, f(t0_sum), f(t0_sq), i)
    return HistoryPosterior(a=prior_a + k1[i], b=prior_b + k0[i], m1=m1, m0=m0, shape1=A1, shape0=A0, g2=g2,
                            g2_sd=g2_sd)


def _draw_m(rng: np.random.Generator, m: np.ndarray, A: np.ndarray, D: int) -> np.ndarray:
    fixed = ~np.isfinite(A)
    g = rng.gamma(np.where(fixed, 2.0, A), size=(D, len(m)))
    return np.where(fixed, m, m * (np.where(fixed, 2.0, A) - 1.0) / g)


def _draw_truncated(rng: np.random.Generator, mu: np.ndarray, sd: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Draws of N(mu, sd^2) truncated to [0, upper] (shapes broadcast to upper's (D, B)), by the inverse CDF;
    sd = 0: mu cut to [0, upper]."""
    from scipy.special import ndtr, ndtri

    safe = np.where(sd > 0, sd, 1.0)
    lo, hi = ndtr(-mu / safe), ndtr((upper - mu) / safe)
    u = lo + (hi - lo) * rng.uniform(size=upper.shape)
    x = mu + safe * ndtri(np.clip(u, 1e-300, 1 - 1e-16))
    return np.clip(np.where(sd > 0, x, mu), 0.0, upper)


def draw_moments(post: HistoryPosterior, rng: np.random.Generator, D: int) -> tuple[np.ndarray, np.ndarray]:
    """(D, B) draws of c2 and c3 (M38's polynomials at drawn p, m_z, ||g||^2)."""
    B = len(post.a)
    p = rng.beta(post.a, post.b, size=(D, B))
    m1 = _draw_m(rng, post.m1, post.shape1, D)
    m0 = _draw_m(rng, post.m0, post.shape0, D)
    # ||g||^2 = p^2 ||E[W | Z=1]||^2 = (1-p)^2 ||E[W | Z=0]||^2 (E W = 0) <= min(p^2 m_1, (1-p)^2 m_0) (Jensen)
    g2 = _draw_truncated(rng, post.g2, post.g2_sd, np.minimum(p**2 * m1, (1 - p) ** 2 * m0))
    q = p * (1 - p)
    c2 = np.clip(q * ((1 - p) * m1 + p * m0) - g2, 0.0, None)
    c3 = q * (p * m1 + (1 - p) * m0) + g2
    return c2, c3


def _within(c2: np.ndarray, c3: np.ndarray, G: np.ndarray) -> np.ndarray:
    """(1/B^2) sum_b f_b(G_b) over the last axis (M33)."""
    G = np.asarray(G, dtype=np.float64)
    return prompt_error(c2, c3, G).sum(-1) / c2.shape[-1] ** 2


def _best_uniform(c1: np.ndarray, c2: np.ndarray, c3: np.ndarray, N: int, cands: np.ndarray) -> np.ndarray:
    """(D, K) full MSE of uniform G for each candidate: (c1 + c2/G + c3/(G(G-1))) G / N (M11)."""
    G = cands[None, :].astype(np.float64)
    return uniform_mse(c1[:, None], c2[:, None], c3[:, None], N, G)


def certificate(post: HistoryPosterior, sizes: np.ndarray, group_size: int, plug_c2: np.ndarray,
                plug_c3: np.ndarray, *, c1: tuple[float, float, float] | None = None, g_min: int = 2,
                g_max: int | None = None, draws: int = 1000, seed: int = 0, level: float = 0.95) -> Certificate:
    """Predicted MSE ratios of ``sizes`` (B,) against uniform ``group_size`` (and G* with c1), with intervals.

    The point is the posterior median (always inside the interval); the plug-in ratio is returned as ``plugin``.

    Parameters
    ----------
    post : :func:`history_posterior` of the B prompts
    sizes : the chosen G_b, sum N
    group_size : the uniform G of the within-batch ratio (N = B G)
    plug_c2, plug_c3 : the plug-in (posterior-mean) c2, c3 of M38 that chose ``sizes`` (the point certificate)
    c1 : (estimate, ci_low, ci_high) of the between-prompt variance, e.g. from the G* monitor; None: no full ratio
    g_min, g_max : the candidates for G* (divisors of N in [g_min, g_max])
    draws, seed, level : posterior draws, their seed, the interval's level (equal-tailed quantiles)
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    B = len(sizes)
    N = int(sizes.sum())
    rng = np.random.default_rng(seed)
    c2, c3 = draw_moments(post, rng, draws)
    uni = np.full(B, group_size)
    wc, wu = _within(c2, c3, sizes), _within(c2, c3, uni)
    r = np.where(wu > 0, wc / np.where(wu > 0, wu, 1.0), 1.0)
    pc, pu = _within(plug_c2, plug_c3, sizes), _within(plug_c2, plug_c3, uni)
    q = (0.5 - level / 2, 0.5 + level / 2)
    lo, med, hi = np.quantile(r, (q[0], 0.5, q[1]))
    out = dict(ratio=float(med), plugin=float(pc / pu) if pu > 0 else 1.0, ratio_low=float(lo), ratio_high=float(hi))
    if c1 is not None:
        est, c_lo, c_hi = (float(v) for v in c1)
        cands = np.array([G for G in range(max(2, g_min), (g_max or N) + 1) if N % G == 0])
        if not len(cands):
            raise ValueError(f"no group size in [{g_min}, {g_max}] divides N = {N}")
        sd = max(c_hi - c_lo, 0.0) / (2 * 1.959963984540054)
        c1d = np.clip(est + sd * rng.standard_normal(draws), 0.0, None)
        full = (c1d / B + wc) / _best_uniform(c1d, c2.mean(1), c3.mean(1), N, cands).min(1)
        plug = _best_uniform(np.array([max(est, 0.0)]), plug_c2.mean()[None], plug_c3.mean()[None], N, cands)[0]
        flo, fmed, fhi = np.quantile(full, (q[0], 0.5, q[1]))
        out.update(full_ratio=float(fmed), full_ratio_low=float(flo),
                   full_ratio_high=float(fhi), g_star=int(cands[int(np.argmin(plug))]))
    return Certificate(**out)


def fit_beta_prior(successes: np.ndarray, samples: np.ndarray, *, grid: int = 41) -> tuple[float, float]:
    """Empirical-Bayes Beta(a, b) prior of p: maximiser of the beta-binomial marginal likelihood of all visited
    prompts' (s_x, n_x) over a log grid of a, b in [0.05, 50] (docs/math.md M45; fractional counts allowed).

    With this prior the posterior of a drawn prompt's p is its conditional law given its history when prompts'
    p follow a Beta population, which is what makes the posterior interval a frequentist one over batches.
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
    A, Bp = v[:, None, None], v[None, :, None]
    ll = ((betaln(A + s, Bp + f) - betaln(A, Bp)) * count).sum(-1)             # (grid, grid)
    i, j = np.unravel_index(int(np.argmax(ll)), ll.shape)
    return float(v[i]), float(v[j])
