"""The allocation certificate with an interval: predicted MSE ratio of chosen G_b against uniform G, before a step.

M33 gives the within-batch MSE (1/B^2) sum_b f_b(G_b) of any fixed sizes. The certificate (docs/math.md M45, M60,
M61) is the posterior of the ratio chosen / uniform G under the one predictor's hierarchical model of the history
(:mod:`ugrpo.stats.predict`, M46-M49): joint draws of every prompt's (p, c2, c3) (:func:`ugrpo.stats.predict.draw`),
each giving the within-batch MSE of the chosen and of the uniform sizes and their ratio. Several posteriors share
the draws equally: the trainer passes one per draw of the population model
(:func:`ugrpo.stats.population.population_posteriors`, M60), so an error of the fitted population is shared by
all B prompts of a draw instead of averaging out. The point is the draws' median; the interval is their
equal-tailed quantiles, widened on the log-ratio scale about the median by the factor :func:`widening` of the
history (M61: calibrated by simulation on development instances, never on the benchmark's). With c1 (the G*
monitor, drawn from a normal matching its interval, cut at 0) the full-MSE ratio against the best single G at the
same N is drawn too. Its frequentist coverage is measured in benchmarks/bench_certificate_calibration.py and
stated wherever it is shown (docs/allocation.md A6).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .exact_mse import prompt_error, uniform_mse
from .predict import Posterior, draw_mixture

__all__ = ["Certificate", "certificate", "ratio_interval", "widening", "samples_per_prompt", "WIDEN"]

WIDEN: tuple[tuple[float, float], ...] = ((25.0, 2.3), (125.0, 1.65), (math.inf, 1.15))
"""(upper end of the history's samples per visited prompt, widening factor) (M61): the smallest factor with which
the development cells of that history size together covered 95% and each at least 90%
(benchmarks/results/certificate_widening.json, ``bench_certificate_calibration.py --fit-widening`` on seed offsets
100 and 200, never the benchmark's own instances)"""


@dataclass(frozen=True)
class Certificate:
    """Predicted ratios with intervals (``*_low``, ``*_high``: the draws' 2.5% and 97.5% quantiles widened by
    ``widen`` on the log scale about the median, M61; nominal 95%, measured coverage in docs/allocation.md A6).

    ``ratio``: posterior median of the within-batch MSE of the chosen sizes over uniform G (M33); ``plugin``: the
    same ratio at the plug-in moments; ``full_ratio``: posterior median of c1/B + within over the best single G*
    at the same N (None without c1), ``g_star`` the plug-in G*; ``ratio_low_posterior``, ``ratio_high_posterior``:
    the draws' quantiles before the widening; ``widen``: the factor used.
    """

    ratio: float
    plugin: float
    ratio_low: float
    ratio_high: float
    full_ratio: float | None = None
    full_ratio_low: float | None = None
    full_ratio_high: float | None = None
    g_star: int | None = None
    ratio_low_posterior: float | None = None
    ratio_high_posterior: float | None = None
    widen: float = 1.0


def samples_per_prompt(history) -> float:
    """Mean samples per visited prompt of a history (sums or ``.sums``; 0 when nothing was visited)."""
    s = history.sums if hasattr(history, "sums") else history
    if not isinstance(s, Mapping) or "samples" not in s:
        raise ValueError("samples_per_prompt needs the history sums (a mapping with 'samples')")
    n = np.asarray(s["samples"], dtype=np.float64)
    return float(n.sum() / max(int((n > 0).sum()), 1))


def widening(history, table: Sequence[tuple[float, float]] = WIDEN) -> float:
    """The interval's widening factor for a history (M61): :data:`WIDEN`'s factor for its samples per visited prompt.

    Examples
    --------
    >>> widening({"samples": np.array([8.0, 0.0])}, ((25.0, 1.8), (math.inf, 1.2)))
    1.8
    """
    n = samples_per_prompt(history)
    return float(next(k for hi, k in table if n < hi))


def ratio_interval(r: np.ndarray, level: float = 0.95, widen: float = 1.0) -> tuple[float, float, float, float, float]:
    """(low, median, high, posterior low, posterior high) of positive ratio draws ``r`` (M45, M61).

    The posterior quantiles are the draws' equal-tailed ``level`` quantiles; the interval widens them by ``widen``
    on the log scale about the median (it stays positive and holds the median).

    Examples
    --------
    >>> lo, med, hi, plo, phi = ratio_interval(np.array([0.5, 1.0, 2.0]), level=1.0, widen=2.0)
    >>> round(lo, 3), med, round(hi, 3), plo, phi
    (0.25, 1.0, 4.0, 0.5, 2.0)
    """
    if not widen >= 1.0:
        raise ValueError(f"widen={widen!r} must be >= 1 (a factor on the interval's half-widths)")
    plo, med, phi = (float(v) for v in np.quantile(r, (0.5 - level / 2, 0.5, 0.5 + level / 2)))
    if not (plo > 0 and med > 0):
        return plo, med, phi, plo, phi
    lm = math.log(med)
    return math.exp(lm - widen * (lm - math.log(plo))), med, math.exp(lm + widen * (math.log(phi) - lm)), plo, phi


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
                g_max: int | None = None, draws: int = 1000, seed: int = 0, level: float = 0.95,
                widen: float = 1.0) -> Certificate:
    """Predicted MSE ratios of ``sizes`` (B,) against uniform ``group_size`` (and G* with c1), with intervals.

    The point is the posterior median (always inside the interval); the plug-in ratio is returned as ``plugin``.

    Parameters
    ----------
    post : the predictor's :class:`~ugrpo.stats.predict.Posterior` of the B prompts, or several sharing the draws
        (one per draw of the population model, :func:`ugrpo.stats.population.population_posteriors`, M60; or
        bootstrap replicates, M51)
    sizes : the chosen G_b, sum N
    group_size : the uniform G of the within-batch ratio (N = B G)
    plug_c2, plug_c3 : the plug-in (posterior-mean) c2, c3 that chose ``sizes`` (the point certificate)
    c1 : (estimate, ci_low, ci_high) of the between-prompt variance, e.g. from the G* monitor; None: no full ratio
    g_min, g_max : the candidates for G* (divisors of N in [g_min, g_max])
    draws, seed, level : posterior draws, their seed, the interval's level (equal-tailed quantiles)
    widen : the widening factor of the intervals (:func:`widening`, M61; 1: the posterior quantiles)
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
    lo, med, hi, plo, phi = ratio_interval(r, level, widen)
    out = dict(ratio=med, plugin=float(pc / pu) if pu > 0 else 1.0, ratio_low=lo, ratio_high=hi,
               ratio_low_posterior=plo, ratio_high_posterior=phi, widen=float(widen))
    if c1 is not None:
        est, c_lo, c_hi = (float(v) for v in c1)
        cands = np.array([G for G in range(max(2, g_min), (g_max or N) + 1) if N % G == 0])
        if not len(cands):
            raise ValueError(f"no group size in [{g_min}, {g_max}] divides N = {N}")
        sd = max(c_hi - c_lo, 0.0) / (2 * 1.959963984540054)
        c1d = np.clip(est + sd * rng.standard_normal(draws), 0.0, None)
        full = (c1d / B + wc) / _best_uniform(c1d, c2.mean(1), c3.mean(1), N, cands).min(1)
        plug = _best_uniform(np.array([max(est, 0.0)]), plug_c2.mean()[None], plug_c3.mean()[None], N, cands)[0]
        flo, fmed, fhi, _, _ = ratio_interval(full, level, widen)
        out.update(full_ratio=fmed, full_ratio_low=flo, full_ratio_high=fhi, g_star=int(cands[int(np.argmin(plug))]))
    return Certificate(**out)
