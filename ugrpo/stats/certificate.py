"""The allocation certificate with an interval: predicted MSE ratio of chosen G_b against uniform, before a step.

M33 gives the within-batch MSE (1/B^2) sum_b f_b(G_b) of any fixed sizes. The certificate (docs/math.md M45, M51)
is the posterior of the ratio chosen / uniform G under the one predictor's hierarchical model of the history
(:mod:`ugrpo.stats.predict`, M46-M49): joint draws of every prompt's (p, c2, c3) (:func:`ugrpo.stats.predict.draw`),
each giving the within-batch MSE of the chosen and of the uniform sizes and their ratio; the interval is the draws'
equal-tailed quantiles and the point their median. Several posteriors (e.g. one per bootstrap replicate of the
fitted population, :func:`ugrpo.stats.predict.bootstrap_posteriors`) share the draws equally, which carries the
uncertainty of the population model itself into the interval (M51). With c1 (the G* monitor, drawn from a normal
matching its interval, cut at 0) the full-MSE ratio against the best single G at the same N is drawn too. This is a
posterior interval, not a confidence interval: its frequentist coverage is measured in
benchmarks/bench_certificate_calibration.py and stated wherever it is shown (docs/allocation.md A6).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .exact_mse import prompt_error, uniform_mse
from .predict import Posterior, draw_mixture

__all__ = ["Certificate", "certificate"]


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


def _within(c2: np.ndarray, c3: np.ndarray, G: np.ndarray) -> np.ndarray:
    """(1/B^2) sum_b f_b(G_b) over the last axis (M33)."""
    G = np.asarray(G, dtype=np.float64)
    return prompt_error(c2, c3, G).sum(-1) / c2.shape[-1] ** 2


def _best_uniform(c1: np.ndarray, c2: np.ndarray, c3: np.ndarray, N: int, cands: np.ndarray) -> np.ndarray:
    """(D, K) full MSE of uniform G for each candidate: (c1 + c2/G + c3/(G(G-1))) G / N (M11)."""
    G = cands[None, :].astype(np.float64)
    return uniform_mse(c1[:, None], c2[:, None], c3[:, None], N, G)


def certificate(post: Posterior | Sequence[Posterior], sizes: np.ndarray, group_size: int, plug_c2: np.ndarray,
                plug_c3: np.ndarray, *, c1: tuple[float, float, float] | None = None, g_min: int = 2,
                g_max: int | None = None, draws: int = 1000, seed: int = 0, level: float = 0.95) -> Certificate:
    """Predicted MSE ratios of ``sizes`` (B,) against uniform ``group_size`` (and G* with c1), with intervals.

    The point is the posterior median (always inside the interval); the plug-in ratio is returned as ``plugin``.

    Parameters
    ----------
    post : the predictor's :class:`~ugrpo.stats.predict.Posterior` of the B prompts, or several (bootstrap
        replicates of the population model, M51) sharing the draws
    sizes : the chosen G_b, sum N
    group_size : the uniform G of the within-batch ratio (N = B G)
    plug_c2, plug_c3 : the plug-in (posterior-mean) c2, c3 that chose ``sizes`` (the point certificate)
    c1 : (estimate, ci_low, ci_high) of the between-prompt variance, e.g. from the G* monitor; None: no full ratio
    g_min, g_max : the candidates for G* (divisors of N in [g_min, g_max])
    draws, seed, level : posterior draws, their seed, the interval's level (equal-tailed quantiles)
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    B = len(sizes)
    N = int(sizes.sum())
    rng = np.random.default_rng(seed)
    c2, c3 = draw_mixture(post, rng, draws)
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
