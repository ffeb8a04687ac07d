"""Intervals for quantities with a bounded range: accuracies and other proportions.

An interval printed or drawn for an accuracy must stay inside [0, 1]. Two tools:

- :func:`wilson_interval` -- the Wilson score interval of a proportion observed on ``n`` items
  (Wilson 1927). It never leaves [0, 1] and, unlike the Wald interval p +- 1.96 sqrt(p(1-p)/n), keeps
  close to its nominal coverage at small ``n`` and near 0 or 1 (Brown, Cai & DasGupta 2001).
- :func:`clip_interval` -- an interval for a mean (e.g. a t-interval over seeds) cut to the range the
  quantity can take. Cutting never removes the true value (it lies inside the range), so the coverage
  is unchanged; reports that clip say so.
"""

from __future__ import annotations

import math

__all__ = ["wilson_interval", "clip_interval"]

Z95 = 1.959963984540054
"""The 0.975 quantile of the standard normal."""


def wilson_interval(p_hat: float, n: int, *, z: float = Z95) -> tuple[float, float]:
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
