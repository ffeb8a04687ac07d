"""95% intervals: the one place the experiments and reports take them from.

- means, paired differences and ratios of means: normal-theory intervals estimate +- 1.96 SE (the Monte-Carlo
  experiments average hundreds of independent repetitions); :func:`t_interval`, a Student-t interval for a
  handful of seeds;
- quantities with a bounded range (accuracies, proportions), whose interval must stay inside [0, 1]:
  :func:`wilson_interval`, the Wilson score interval of a proportion observed on ``n`` items (Wilson 1927; it
  never leaves [0, 1] and, unlike the Wald interval, keeps close to its nominal coverage at small ``n`` and near
  0 or 1, Brown, Cai & DasGupta 2001); :func:`clip_interval`, an interval for a mean cut to the range the
  quantity can take (cutting never removes the true value, so the coverage is unchanged; reports that clip say
  so).

>>> r = mean_interval([1.0, 2.0, 3.0])
>>> r["mean"], round(r["se"], 6), round(r["ci_high"] - r["mean"], 6)
(2.0, 0.57735, 1.131607)
>>> round(t_interval([1.0, 2.0, 3.0])["ci_high"], 4)
4.4841
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = ["Z95", "Q975", "normal_interval", "mean_interval", "t_interval", "difference_interval", "welch_half_width",
           "ratio_interval", "wilson_interval", "clip_interval"]

Z95 = 1.96
"""the normal quantile of a two-sided 95% interval, rounded as the reports print it (mean +- 1.96 SE)"""

Q975 = 1.959963984540054
"""the 0.975 quantile of the standard normal, unrounded (the Wilson interval's default)"""


def normal_interval(estimate: float, se: float) -> tuple[float, float]:
    """``(estimate - 1.96 se, estimate + 1.96 se)``."""
    return estimate - Z95 * se, estimate + Z95 * se


def mean_interval(values: Sequence[float] | Tensor) -> dict[str, Any]:
    """Sample mean with SE = sample std (divisor n - 1) / sqrt(n) and a normal 95% interval.

    Parameters
    ----------
    values : sequence or 1-D tensor of n >= 1 numbers (computed in float64)

    Returns
    -------
    dict with ``mean``, ``se``, ``ci_low``, ``ci_high`` and ``n``; for n = 1 the last three but ``n`` are None.
    """
    t = torch.as_tensor(values if isinstance(values, Tensor) else list(values), dtype=torch.float64).reshape(-1)
    n = t.numel()
    if n == 0:
        raise ValueError("mean_interval needs at least one value")
    m = float(t.mean())
    if n < 2:
        return {"mean": m, "se": None, "ci_low": None, "ci_high": None, "n": n}
    se = float(t.std(correction=1)) / math.sqrt(n)
    lo, hi = normal_interval(m, se)
    return {"mean": m, "se": se, "ci_low": lo, "ci_high": hi, "n": n}


def t_interval(values: Sequence[float]) -> dict[str, Any]:
    """Mean with a 95% Student-t interval mean +- t_{0.975, n-1} s/sqrt(n); n = 1 -> no interval.

    Returns
    -------
    dict with ``mean``, ``se``, ``ci_low``, ``ci_high``, ``n`` (None for n = 1).
    """
    from scipy.stats import t as student_t

    n = len(values)
    m = sum(values) / n
    if n < 2:
        return {"mean": m, "se": None, "ci_low": None, "ci_high": None, "n": n}
    se = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1) / n)
    h = float(student_t.ppf(0.975, n - 1)) * se
    return {"mean": m, "se": se, "ci_low": m - h, "ci_high": m + h, "n": n}


def difference_interval(a: Tensor, b: Tensor, shift: float = 0.0) -> dict[str, float]:
    """Mean of the paired differences a - b (plus ``shift``) with a normal 95% interval.

    Returns
    -------
    dict with ``mean``, ``ci_low``, ``ci_high``.
    """
    d = a - b
    m, se = float(d.mean()) + shift, float(d.std(correction=1)) / math.sqrt(d.numel())
    lo, hi = normal_interval(m, se)
    return {"mean": m, "ci_low": lo, "ci_high": hi}


def welch_half_width(se_a: float | None, se_b: float | None, n_a: int, n_b: int) -> float | None:
    """Half-width of the 95% Welch interval of a difference of two independent means (Welch-Satterthwaite df).

    Examples
    --------
    >>> round(welch_half_width(1.0, 1.0, 10, 10), 4)  # df = 18: t_0.975 * sqrt(2)
    2.9712
    """
    from scipy.stats import t as student_t

    if se_a is None or se_b is None:
        return None
    v = se_a**2 + se_b**2
    if v == 0:
        return 0.0
    df = v**2 / (se_a**4 / (n_a - 1) + se_b**4 / (n_b - 1))
    return float(student_t.ppf(0.975, df)) * v**0.5


def ratio_interval(a: Tensor, b: Tensor, a_sub: float = 0.0, b_sub: float = 0.0, *, common_sd: float = 0.0,
                   b_sd: float = 0.0) -> dict[str, float | None]:
    """(mean a - a_sub) / (mean b - b_sub) with a delta-method 95% interval over paired repetitions.

    Parameters
    ----------
    a, b : (R,) paired repetitions
    a_sub, b_sub : corrections subtracted from the two means
    common_sd : sd of a shift common to a and b (e.g. a reference's realised error)
    b_sd : sd of a shift of b alone

    Returns
    -------
    dict with ``ratio``, ``ci_low``, ``ci_high`` (all None when the corrected denominator is not positive). The
    quantities compared are nonnegative (mean squared errors), so the interval is cut at 0 (the point, an unbiased
    numerator over the denominator, may lie below it when the correction exceeds the noise).
    """
    A, Bm = float(a.mean()) - a_sub, float(b.mean()) - b_sub
    if Bm <= 0:
        return {"ratio": None, "ci_low": None, "ci_high": None}
    r = A / Bm
    var = (float((a - r * b).var(correction=1)) / (a.numel() * Bm**2) + ((Bm - A) / Bm**2 * common_sd) ** 2
           + (A / Bm**2 * b_sd) ** 2)
    lo, hi = clip_interval(*normal_interval(r, math.sqrt(var)), hi=math.inf)
    return {"ratio": r, "ci_low": lo, "ci_high": hi}


def wilson_interval(p_hat: float, n: int, *, z: float = Q975) -> tuple[float, float]:
    """Wilson score interval of a proportion.

    Parameters
    ----------
    p_hat : float
        Observed proportion (successes / n), in [0, 1].
    n : int
        Number of items it was observed on, >= 1.
    z : float
        Normal quantile (default: 95% two-sided).

    Returns
    -------
    (low, high) : tuple of float
        ``(c - h, c + h)`` with ``c = (p + z^2/(2n)) / (1 + z^2/n)`` and
        ``h = z sqrt(p(1-p)/n + z^2/(4n^2)) / (1 + z^2/n)``; always inside [0, 1].

    Examples
    --------
    >>> lo, hi = wilson_interval(0.0, 10)
    >>> (lo, round(hi, 4))
    (0.0, 0.2775)
    >>> [round(v, 4) for v in wilson_interval(0.5, 100)]
    [0.4038, 0.5962]
    """
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"wilson_interval: n={n!r} must be an integer >= 1")
    if not 0.0 <= p_hat <= 1.0:
        raise ValueError(f"wilson_interval: p_hat={p_hat!r} must be a proportion in [0, 1]")
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p_hat + z2 / (2 * n)) / denom
    half = z * math.sqrt(p_hat * (1.0 - p_hat) / n + z2 / (4 * n * n)) / denom
    low = 0.0 if p_hat == 0.0 else max(0.0, centre - half)  # exact end points (no rounding past p_hat)
    high = 1.0 if p_hat == 1.0 else min(1.0, centre + half)
    return min(low, p_hat), max(high, p_hat)


def clip_interval(low: float | None, high: float | None, *, lo: float = 0.0,
                  hi: float = 1.0) -> tuple[float | None, float | None]:
    """``(low, high)`` cut to ``[lo, hi]`` (None stays None: no interval).

    >>> clip_interval(-0.1, 1.04)
    (0.0, 1.0)
    >>> clip_interval(None, None)
    (None, None)
    """
    if low is None or high is None:
        return None, None
    return min(max(low, lo), hi), max(min(high, hi), lo)
