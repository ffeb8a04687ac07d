"""95% intervals: the one place the experiments and reports take them from, as one type, :class:`Interval`.

- means, paired differences and ratios of means: normal-theory intervals estimate +- 1.96 SE (the Monte-Carlo
  experiments average hundreds of independent repetitions); :func:`t_interval`, a Student-t interval for a
  handful of seeds; :func:`ratio_interval` and every mean over R repetitions with a correction of known spread
  added (``ugrpo mse --model``) use the Student-t quantile with the Welch-Satterthwaite degrees of freedom
  (:func:`satterthwaite_df`, :func:`t_quantile`), which is 1.96 at many repetitions and 4.30 at 3;
- quantities with a bounded range (accuracies, proportions), whose interval must stay inside [0, 1]:
  :func:`wilson_interval`, the Wilson score interval of a proportion observed on ``n`` items (Wilson 1927; it
  never leaves [0, 1] and, unlike the Wald interval, keeps close to its nominal coverage at small ``n`` and near
  0 or 1, Brown, Cai & DasGupta 2001); :meth:`Interval.clip`, an interval for a mean cut to the range the
  quantity can take (cutting never removes the true value, so the coverage is unchanged; reports that clip say
  so).

Every function that returns an interval returns an :class:`Interval` (estimate, end points, standard error,
sample size and ``kind``, what the interval is); the bootstrap intervals of the scaling-law constants
(:mod:`ugrpo.stats.bootstrap_ci`) and of the planner's ratio to the best G (:mod:`ugrpo.stats.band`) are
Intervals too. ``Interval.to_dict`` writes the JSON object the results files hold. :func:`normal_interval`
and :func:`clip_interval` are the end-point arithmetic underneath (pairs of numbers).

>>> r = mean_interval([1.0, 2.0, 3.0])
>>> r.estimate, round(r.se, 6), round(r.ci_high - r.estimate, 6)
(2.0, 0.57735, 1.131607)
>>> round(t_interval([1.0, 2.0, 3.0]).ci_high, 4)
4.4841
>>> list(r.to_dict("mean", "se", "ci_low", "ci_high", "n"))
['mean', 'se', 'ci_low', 'ci_high', 'n']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where a tensor is used, so that ``ugrpo sweep --help`` needs none
    from torch import Tensor

__all__ = ["Z95", "Q975", "TOO_SMALL", "MEAN_KEYS", "RATIO_KEYS", "ESTIMATE_KEYS", "Interval", "normal_interval",
           "mean_interval", "t_interval", "t_quantile", "satterthwaite_df", "paired_t_interval", "paired_verdict",
           "difference_interval",
           "welch_half_width", "ratio_interval", "wilson_interval", "clip_interval"]

Z95 = 1.96
"""the normal quantile of a two-sided 95% interval, rounded as the reports print it (mean +- 1.96 SE)"""

Q975 = 1.959963984540054
"""the 0.975 quantile of the standard normal, unrounded (the Wilson interval's default)"""

TOO_SMALL = "too small to decide"
"""the verdict of a comparison whose intervals cannot decide it (they overlap, or contain the bound), or of a run
too small to give the interval the verdict needs; every verdict in the reports uses these words"""

MEAN_KEYS = ("mean", "ci_low", "ci_high")
"""the JSON object of a mean or a paired difference in the results files (:meth:`Interval.to_dict`)"""
RATIO_KEYS = ("ratio", "ci_low", "ci_high")
"""the JSON object of a ratio"""
ESTIMATE_KEYS = ("estimate", "ci_low", "ci_high", "se")
"""the JSON object of a bootstrap estimate (c1, c2, c3)"""


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided interval, and what the interval is.

    Attributes
    ----------
    estimate : the point estimate (None: there is none, e.g. a ratio whose denominator is not positive)
    ci_low, ci_high : the end points (None: no interval, e.g. from one value; or that end is unbounded)
    se : the standard error behind the interval (the bootstrap sd for a bootstrap interval), when there is one
    kind : what the interval is, e.g. ``"95% Student t"`` or ``"95% bootstrap percentile"``
    n : the number of values it was computed from, when that is its sample size

    Examples
    --------
    >>> iv = Interval(0.5, -0.1, 1.1, kind="95% normal")
    >>> iv.clip().to_dict("mean", "ci_low", "ci_high")
    {'mean': 0.5, 'ci_low': 0.0, 'ci_high': 1.0}
    """

    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    se: float | None = None
    kind: str = ""
    n: int | None = None

    def clip(self, lo: float = 0.0, hi: float = 1.0) -> Interval:
        """The interval cut to ``[lo, hi]``, the range of the quantity (:func:`clip_interval`; None stays None)."""
        low, high = clip_interval(self.ci_low, self.ci_high, lo=lo, hi=hi)
        return replace(self, ci_low=low, ci_high=high)

    def to_dict(self, *keys: str) -> dict[str, Any]:
        """The JSON object the results files hold: ``keys`` in this order, each ``"ci_low"``, ``"ci_high"``,
        ``"se"``, ``"n"``, ``"kind"`` (those fields) or another name, the estimate's (default: ``"estimate"``,
        ``"ci_low"``, ``"ci_high"``); the files' shapes: :data:`MEAN_KEYS`, :data:`RATIO_KEYS`,
        :data:`ESTIMATE_KEYS`."""
        fields = {"ci_low": self.ci_low, "ci_high": self.ci_high, "se": self.se, "n": self.n, "kind": self.kind}
        return {k: fields[k] if k in fields else self.estimate for k in keys or ("estimate", "ci_low", "ci_high")}


def normal_interval(estimate: float, se: float) -> tuple[float, float]:
    """End points ``(estimate - 1.96 se, estimate + 1.96 se)``."""
    return estimate - Z95 * se, estimate + Z95 * se


def mean_interval(values: Sequence[float] | Tensor) -> Interval:
    """Sample mean with SE = sample std (divisor n - 1) / sqrt(n) and a normal 95% interval.

    Parameters
    ----------
    values : sequence or 1-D tensor of n >= 1 numbers (computed in float64)

    Returns
    -------
    Interval of kind ``"95% normal"`` with ``se`` and ``n``; for n = 1 no interval (se, ci_low, ci_high None).
    """
    import torch

    t = torch.as_tensor(values if isinstance(values, torch.Tensor) else list(values), dtype=torch.float64).reshape(-1)
    n = t.numel()
    if n == 0:
        raise ValueError("mean_interval needs at least one value")
    m = float(t.mean())
    if n < 2:
        return Interval(m, None, None, None, "95% normal", n)
    se = float(t.std(correction=1)) / math.sqrt(n)
    lo, hi = normal_interval(m, se)
    return Interval(m, lo, hi, se, "95% normal", n)


def t_quantile(df: float) -> float:
    """t_{0.975, df}, the Student-t quantile of a two-sided 95% interval (df = inf: the normal 1.95996...).

    >>> round(t_quantile(2), 4), round(t_quantile(math.inf), 4)
    (4.3027, 1.96)
    """
    from scipy.stats import t as student_t

    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    return float(student_t.ppf(0.975, df)) if math.isfinite(df) else Q975


def satterthwaite_df(se_sampled: float, n: int, extra_sd: float = 0.0) -> float:
    """Degrees of freedom of SE^2 = se_sampled^2 + extra_sd^2 when se_sampled^2 is a sample variance over n
    repetitions (n - 1 df) and extra_sd is a spread taken as known (Welch-Satterthwaite: the df of a sum of
    variance terms, a known term having infinitely many): (n - 1) (SE^2 / se_sampled^2)^2; inf when se_sampled = 0.

    >>> satterthwaite_df(1.0, 3), satterthwaite_df(1.0, 3, 1.0), satterthwaite_df(0.0, 3, 1.0)
    (2.0, 8.0, inf)
    """
    if n < 2:
        raise ValueError(f"a sample variance needs n >= 2 repetitions, got {n}")
    if se_sampled <= 0:
        return math.inf
    return (n - 1) * ((se_sampled**2 + extra_sd**2) / se_sampled**2) ** 2


def t_interval(values: Sequence[float]) -> Interval:
    """Mean with a 95% Student-t interval mean +- t_{0.975, n-1} s/sqrt(n); n = 1 -> no interval.

    Returns
    -------
    Interval of kind ``"95% Student t"`` with ``se`` and ``n`` (se and the end points None for n = 1).
    """
    from scipy.stats import t as student_t

    n = len(values)
    m = sum(values) / n
    if n < 2:
        return Interval(m, None, None, None, "95% Student t", n)
    se = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1) / n)
    h = float(student_t.ppf(0.975, n - 1)) * se
    return Interval(m, m - h, m + h, se, "95% Student t", n)


def paired_t_interval(a: Sequence[float], b: Sequence[float]) -> Interval:
    """Mean of the paired differences a_i - b_i (runs paired by seed) with a 95% Student-t interval.

    Examples
    --------
    >>> iv = paired_t_interval([1.0, 2.0, 3.5], [1.5, 2.2, 3.6])
    >>> round(iv.estimate, 4), iv.ci_high < 0, iv.kind
    (-0.2667, False, '95% Student t, paired difference')
    """
    if len(a) != len(b) or not len(a):
        raise ValueError(f"paired_t_interval needs two equally long, non-empty sequences; got {len(a)} and {len(b)}")
    return replace(t_interval([float(x) - float(y) for x, y in zip(a, b)]), kind="95% Student t, paired difference")


def paired_verdict(diff: Interval, lower: str, higher: str) -> str:
    """The verdict of a paired comparison from the interval of the differences (:func:`paired_t_interval`): ``lower``
    when the whole interval is below 0, ``higher`` when above, else :data:`TOO_SMALL` with the reason.

    >>> paired_verdict(Interval(-1.0, -2.0, -0.5), "lower gap than uniform", "higher gap than uniform")
    'lower gap than uniform (95% paired interval of the difference below 0)'
    >>> paired_verdict(Interval(-1.0, -2.0, 0.5), "lower", "higher")
    'too small to decide (the 95% paired interval of the difference contains 0)'
    """
    if diff.ci_low is None or diff.ci_high is None:
        return f"{TOO_SMALL} (one seed: no interval)"
    if diff.ci_high < 0:
        return f"{lower} (95% paired interval of the difference below 0)"
    if diff.ci_low > 0:
        return f"{higher} (95% paired interval of the difference above 0)"
    return f"{TOO_SMALL} (the 95% paired interval of the difference contains 0)"


def difference_interval(a: Tensor, b: Tensor, shift: float = 0.0) -> Interval:
    """Mean of the paired differences a - b (plus ``shift``) with a normal 95% interval.

    Returns
    -------
    Interval of kind ``"95% normal, paired difference"`` (its JSON object: ``to_dict(*MEAN_KEYS)``).
    """
    d = a - b
    m, se = float(d.mean()) + shift, float(d.std(correction=1)) / math.sqrt(d.numel())
    lo, hi = normal_interval(m, se)
    return Interval(m, lo, hi, se, "95% normal, paired difference", d.numel())


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
                   b_sd: float = 0.0) -> Interval:
    """(mean a - a_sub) / (mean b - b_sub) with a delta-method 95% interval over paired repetitions: r -+ t se, t the
    Student-t quantile at the Satterthwaite degrees of freedom (:func:`satterthwaite_df`: R - 1 for the part
    estimated from the R pairs, the shifts of known spread ``common_sd``, ``b_sd`` adding none), so a handful of
    repetitions gets a wide interval (t = 4.30 at R = 3 without shifts) and many get r -+ 1.96 se.

    Parameters
    ----------
    a, b : (R,) paired repetitions
    a_sub, b_sub : corrections subtracted from the two means
    common_sd : sd of a shift common to a and b (e.g. a reference's realised error)
    b_sd : sd of a shift of b alone

    Returns
    -------
    Interval of kind ``"95% delta method, ratio of paired means"`` (its JSON object: ``to_dict(*RATIO_KEYS)``; all
    None when the corrected denominator is not positive). The quantities compared are nonnegative (mean squared
    errors), so the interval is cut at 0 (the point, an unbiased numerator over the denominator, may lie below it
    when the correction exceeds the noise).
    """
    kind = "95% delta method, ratio of paired means"
    A, Bm = float(a.mean()) - a_sub, float(b.mean()) - b_sub
    if Bm <= 0:
        return Interval(None, None, None, None, kind, a.numel())
    r = A / Bm
    sampled = float((a - r * b).var(correction=1)) / (a.numel() * Bm**2)
    known = ((Bm - A) / Bm**2 * common_sd) ** 2 + (A / Bm**2 * b_sd) ** 2
    se = math.sqrt(sampled + known)
    h = t_quantile(satterthwaite_df(math.sqrt(sampled), a.numel(), math.sqrt(known))) * se
    return Interval(r, r - h, r + h, se, kind, a.numel()).clip(hi=math.inf)


def wilson_interval(p_hat: float, n: int, *, z: float = Q975) -> Interval:
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
    Interval
        estimate ``p_hat``, end points ``(c - h, c + h)`` with ``c = (p + z^2/(2n)) / (1 + z^2/n)`` and
        ``h = z sqrt(p(1-p)/n + z^2/(4n^2)) / (1 + z^2/n)``, always inside [0, 1]; kind ``"95% Wilson score"``.

    Examples
    --------
    >>> w = wilson_interval(0.0, 10)
    >>> (w.ci_low, round(w.ci_high, 4))
    (0.0, 0.2775)
    >>> w = wilson_interval(0.5, 100)
    >>> [round(v, 4) for v in (w.ci_low, w.ci_high)]
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
    kind = "95% Wilson score" if z == Q975 else f"Wilson score, z = {z:g}"
    return Interval(p_hat, min(low, p_hat), max(high, p_hat), None, kind, n)


def clip_interval(low: float | None, high: float | None, *, lo: float = 0.0,
                  hi: float = 1.0) -> tuple[float | None, float | None]:
    """End points ``(low, high)`` cut to ``[lo, hi]`` (None stays None: no interval); see :meth:`Interval.clip`.

    >>> clip_interval(-0.1, 1.04)
    (0.0, 1.0)
    >>> clip_interval(None, None)
    (None, None)
    """
    if low is None or high is None:
        return None, None
    return min(max(low, lo), hi), max(min(high, hi), lo)
