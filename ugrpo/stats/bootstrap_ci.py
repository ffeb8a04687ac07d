"""Bootstrap intervals for the scaling-law constants (docs/math.md M20, M39): the interval methods and the
:class:`~ugrpo.stats.intervals.Interval` they produce (``Estimate`` is its name here). Pure numpy on replicates
already computed by :mod:`ugrpo.stats.components`.

* ``percentile``: quantiles of the replicates (M20; under-covers at small pilots);
* ``studentized``: symmetric bootstrap-t, estimate -+ q_level(|t|) se (Hall 1988);
* ``studentized-equal-tailed``: [estimate - q_hi(t) se, estimate - q_lo(t) se];
* ``studentized-log`` (the default): the symmetric bootstrap-t of log(x + s) for c1, mapped back (M39).

Every interval is clipped to [0, inf), the range of c1, c2, c3.
"""

from __future__ import annotations

import math

import numpy as np

from .intervals import Interval

__all__ = ["METHODS", "MAX_LOG_HALF_WIDTH", "Estimate", "summarise"]

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

    Percentile: quantiles of the replicates. Bootstrap-t with t = (rep - point) / rep_se: symmetric,
    point -+ q_level(|t|) se; equal-tailed, [point - q_hi(t) se, point - q_lo(t) se]. "studentized-log"
    with a ``shift`` s: the symmetric bootstrap-t of log(x + s) (:func:`_log_t_interval`); without a shift
    (c2, c3), or where that is undefined, the symmetric bootstrap-t. The Interval's ``kind`` names the method that
    made it (``"95% bootstrap studentized"`` where studentized-log fell back to it).
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
