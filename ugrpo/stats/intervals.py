"""95% intervals for means, paired differences and ratios of means: the one place the experiments take them from.

All are normal-theory intervals estimate +- 1.96 SE (the Monte-Carlo experiments average hundreds of
independent repetitions), except :func:`t_interval`, a Student-t interval for a handful of seeds.

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

__all__ = ["Z95", "normal_interval", "mean_interval", "t_interval", "difference_interval", "ratio_interval"]

Z95 = 1.96
"""the normal quantile of a two-sided 95% interval, as every report prints it"""


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
    dict with ``ratio``, ``ci_low``, ``ci_high`` (all None when the corrected denominator is not positive).
    """
    A, Bm = float(a.mean()) - a_sub, float(b.mean()) - b_sub
    if Bm <= 0:
        return {"ratio": None, "ci_low": None, "ci_high": None}
    r = A / Bm
    var = (float((a - r * b).var(correction=1)) / (a.numel() * Bm**2) + ((Bm - A) / Bm**2 * common_sd) ** 2
           + (A / Bm**2 * b_sd) ** 2)
    lo, hi = normal_interval(r, math.sqrt(var))
    return {"ratio": r, "ci_low": lo, "ci_high": hi}
