"""Bootstrap intervals for the scaling-law constants (docs/math.md M20, M39): the interval methods and the
:class:`~ugrpo.stats.intervals.Interval` they produce (``Estimate`` is its name here). Pure numpy on replicates
already computed by :mod:`ugrpo.stats.components`.

* ``percentile``: quantiles of the replicates (M20; under-covers at small pilots);
* ``studentized``: symmetric bootstrap-t, estimate -+ q_level(|t|) se (Hall 1988);
* ``studentized-equal-tailed``: [estimate - q_hi(t) se, estimate - q_lo(t) se];
* ``studentized-log`` (the default): the symmetric bootstrap-t of log(x + s), mapped back: c1 with s its pilot's
  within-prompt noise term, c2 and c3 with s = 0 (M39).

Every interval is clipped to [0, inf), the range of c1, c2, c3. :func:`confidence_draws` turns the same
studentised replicates into draws of a confidence distribution of (c1, c2, c3) whose central intervals are those
intervals (docs/math.md M41); the planner decides on c1's draws, c2 and c3 at their estimates (M80).
"""

from __future__ import annotations

import math

import numpy as np

from .intervals import Interval

__all__ = ["METHODS", "MAX_LOG_HALF_WIDTH", "Estimate", "summarise", "log_shifts", "confidence_draws"]

MAX_LOG_HALF_WIDTH = 1.0
"""studentized-log: the largest half-width on the log(c1 + s) scale used (a factor e either way); wider falls back
to the plain symmetric bootstrap-t (docs/math.md M39)."""

METHODS = ("studentized-log", "studentized", "studentized-equal-tailed", "percentile")
"""Bootstrap interval methods (docs/math.md M39): symmetric bootstrap-t with c1 on the log(c1 + s) scale (the default:
it covers best at small pilots), symmetric bootstrap-t, equal-tailed bootstrap-t, or percentile."""


Estimate = Interval
"""A point estimate with its bootstrap interval (clipped to [0, inf), the constants' range) and its bootstrap sd as
``se``: an :class:`~ugrpo.stats.intervals.Interval` of kind ``"95% bootstrap <method>"``."""


def _kind(level: float, method: str) -> str:
    """What a bootstrap interval is: ``'95% bootstrap studentized-log'``."""
    return f"{100 * level:g}% bootstrap {method}"


def summarise(point: float, reps: np.ndarray, level: float, method: str = "percentile",
               se: float = float("nan"), rep_se: np.ndarray | None = None, shift: float | None = None) -> Interval:
    """Point, interval clipped at 0, bootstrap sd (docs/math.md M39).

    Percentile: quantiles of the replicates. Bootstrap-t with t = (rep - point) / rep_se: symmetric, point -+
    q_level(|t|) se; equal-tailed, [point - q_hi(t) se, point - q_lo(t) se]. "studentized-log" with a ``shift`` s: the
    symmetric bootstrap-t of log(x + s) (:func:`_log_t_interval`; c1 with its s, c2 and c3 with s = 0); without a shift,
    or where that is undefined, the symmetric bootstrap-t. The Interval's ``kind`` names the method that made it (``"95%
    bootstrap studentized"`` where studentized-log fell back to it).
    """
    keep = np.isfinite(reps)
    if keep.sum() < 2:
        return Interval(point, float("nan"), float("nan"), float("nan"), _kind(level, method))
    q = [(1 - level) / 2, (1 + level) / 2]
    sd = float(reps[keep].std(ddof=1))
    if method == "percentile":
        lo, hi = np.quantile(reps[keep], q)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (reps - point) / rep_se
        t = t[keep & np.isfinite(t)]  # a resample with one distinct prompt has SE 0: its t is undefined, dropped
        if t.size < 2 or not se > 0:
            return Interval(point, max(point, 0.0), max(point, 0.0), sd, _kind(level, method))
        log_ci = _log_t_interval(point, reps, level, se, rep_se, shift) if method == "studentized-log" else None
        if log_ci is not None:
            lo, hi = log_ci
        elif method in ("studentized", "studentized-log"):  # symmetric: point -+ q_level(|t|) se (Hall 1988)
            half = float(np.quantile(np.abs(t), level)) * se
            lo, hi = point - half, point + half
            method = "studentized"
        else:
            t_lo, t_hi = np.quantile(t, q)
            lo, hi = point - t_hi * se, point - t_lo * se
    return Interval(point, max(float(lo), 0.0), max(float(hi), 0.0), sd, _kind(level, method))


def _log_t_interval(point: float, reps: np.ndarray, level: float, se: float, rep_se: np.ndarray,
                    shift: float | None) -> tuple[float, float] | None:
    """Symmetric bootstrap-t on the scale u = log(x + s), mapped back: exp(u -+ q_level(|t_u|) se_u) - s (M39).

    se_u = se / (x + s) (delta method), t_u = (log(x*_r + s) - log(x + s)) / (se*_r / (x*_r + s)); a replicate
    with x*_r + s <= 0 has t_u = -inf (kept: it counts as an extreme). None (use the untransformed interval)
    when there is no shift, x + s <= 0, or the half-width on the log scale exceeds MAX_LOG_HALF_WIDTH (there
    the first-order linearisation behind se_u is meaningless and the mapped-back upper end explodes).
    """
    if shift is None or not point + shift > 0:
        return None
    keep = np.isfinite(reps) & np.isfinite(rep_se) & (rep_se > 0)
    x, x_se = reps[keep] + shift, rep_se[keep]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(x > 0, x * (np.log(np.where(x > 0, x, 1.0)) - np.log(point + shift)) / x_se, -np.inf)
    if t.size < 2:
        return None
    with np.errstate(invalid="ignore"):  # inf - inf while interpolating among the -inf: NaN
        half = float(np.quantile(np.abs(t), level)) * se / (point + shift)
    if not half <= MAX_LOG_HALF_WIDTH:  # NaN too
        return None
    return (point + shift) * math.exp(-half) - shift, (point + shift) * math.exp(half) - shift


def log_shifts(c1_shift: float | None) -> tuple[float | None, float, float]:
    """The shifts s of ``studentized-log``'s scales log(c + s) for (c1, c2, c3) (M39): c1's pilot's within-prompt
    noise term, 0 for c2 and c3 (positive constants, means of right-skewed per-prompt terms)."""
    return c1_shift, 0.0, 0.0


def confidence_draws(point: np.ndarray, reps: np.ndarray, method: str, se: np.ndarray | None = None,
                     rep_se: np.ndarray | None = None, shift: float | None = None, level: float = 0.95) -> np.ndarray:
    """Draws (2R, 3) of a confidence distribution of (c1, c2, c3) from R bootstrap replicates (docs/math.md M41).

    Bootstrap-t methods: replicate r has t_r = (c*_r - c) / se*_r, and gives the two draws c -+ t_r se (the pivot and
    its mirror image, one sign for all three constants so that their dependence is kept); symmetric, so the central
    ``level`` interval of the draws is the symmetric bootstrap-t interval. ``studentized-log``: c1's draws are x exp(-+
    t_u se_u) - s on the log(c1 + s) scale (:func:`_log_t_interval`'s t_u; +inf where x*_r <= 0), and c2's and c3's on
    the log scale of the constant itself (:func:`log_shifts`), each as long as its interval is defined (else the plain
    ones). ``studentized-equal-tailed``: only c - t_r se (whose
    quantiles are the equal-tailed interval). ``percentile`` (or no standard errors): the replicates themselves.
    An estimate below 0 (the constants' range starts there) is taken as 0, its replicates moved with it (the same
    t's): the distribution is never more sure that a constant is 0 than an estimate of exactly 0 would make it.
    Rows with a non-finite replicate or a zero standard error are dropped; the draws are not clipped.

    Examples
    --------
    >>> reps = np.array([[1.2, 2.0, 3.3], [0.8, 2.2, 2.9]]); rse = np.full((2, 3), 0.1)
    >>> confidence_draws(np.array([1.0, 2.1, 3.0]), reps, "studentized", np.full(3, 0.1), rse).round(2).tolist()
    [[0.8, 2.2, 2.7], [1.2, 2.0, 3.1], [1.2, 2.0, 3.3], [0.8, 2.2, 2.9]]
    """
    point, reps = np.asarray(point, dtype=float), np.asarray(reps, dtype=float).reshape(-1, 3)
    below = np.minimum(point, 0.0)                                   # an estimate below 0 is taken as 0
    point, reps = point - below, reps - below
    if method == "percentile" or se is None or rep_se is None:
        return reps[np.isfinite(reps).all(axis=1)]
    rep_se = np.asarray(rep_se, dtype=float).reshape(-1, 3)
    keep = np.isfinite(reps).all(axis=1) & np.isfinite(rep_se).all(axis=1) & (rep_se > 0).all(axis=1)
    reps, rep_se = reps[keep], rep_se[keep]
    se = np.asarray(se, dtype=float)
    t = (reps - point) / rep_se                                      # (R, 3)
    signs = (-1.0,) if method == "studentized-equal-tailed" else (-1.0, 1.0)
    out = np.concatenate([point + sign * t * se for sign in signs])  # (2R, 3)
    if method != "studentized-log":
        return out
    for k, s_k in enumerate(log_shifts(shift)):
        if _log_t_interval(point[k], reps[:, k], level, float(se[k]), rep_se[:, k], s_k) is None:
            continue
        x, xs = point[k] + s_k, reps[:, k] + s_k
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            tu = np.where(xs > 0, xs * (np.log(np.where(xs > 0, xs, 1.0)) - np.log(x)) / rep_se[:, k], -np.inf)
            u = np.concatenate([sign * tu for sign in signs]) * se[k] / x
            out[:, k] = x * np.exp(u) - s_k
    return out
