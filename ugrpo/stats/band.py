"""The near-optimal band of group sizes, its bootstrap probabilities and the G to use (docs/math.md M40-M42).

The bound of Theorem 7 is flat near its minimum, so the useful answer is not one G* but the
*band*: the candidates whose predicted MSE at budget N is within a tolerance (default 5%) of the
smallest,

    band(c) = {G : bound(c, G) <= (1 + tol) min_G' bound(c, G')}          (M40)

From bootstrap replicates c* of (c1, c2, c3) (each clipped to [0, inf), the constants' range):

* ``probability[G]`` = share of replicates whose band contains G;
* ``expected_ratio[G]`` = mean over replicates of bound(c*, G) / min_G' bound(c*, G'), the
  expected relative excess MSE of choosing G;
* the recommended G minimises ``expected_ratio`` over the replicates with c1* > 0 (M41): the
  bootstrap distribution conditioned on c1 > 0, as a flat prior on c1 >= 0 would give, rather
  than clipped (clipping piles the negative replicates into a point mass at c1 = 0, where the
  largest G wins). It always commits (no "only when c1 is clearly positive" rule, whose answers
  are biased toward small G by selection). When fewer than 5% of the replicates have c1* > 0
  (c1's estimate well below 0), it is the minimax choice instead: the G whose largest ratio to the
  best over c1 in [0, c1_upper] (c2, c3 at their estimates) is smallest (the planner passes the larger
  of c1's upper confidence limit and 2 bootstrap SEs);
* the confidence band: every G with probability >= (1 - level)/2, plus the recommendation.

How many prompts pin the band down (M42): the spread of the replicates around the estimate
shrinks like 1/sqrt(B0), so a pilot of f B0 prompts is emulated by c + (c* - c)/sqrt(f); the
smallest f whose confidence band is the point band is reported.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .exact_mse import uniform_mse
from .intervals import Interval

__all__ = ["DEFAULT_TOLERANCE", "MIN_N_BOOT", "check_n_boot", "BandResult", "bound_table", "near_optimal_band",
           "bootstrap_band", "pilot_size_needed", "ratio_to_best_interval"]

DEFAULT_TOLERANCE = 0.05
"""Default tolerance of the band: within 5% of the smallest predicted MSE."""
MIN_N_BOOT = 2
"""fewest bootstrap replicates of (c1, c2, c3) a planner's intervals and band can be computed from"""


def check_n_boot(n_boot: int, flag: str = "--n-boot") -> None:
    """Refuse fewer than :data:`MIN_N_BOOT` bootstrap replicates, naming the option ``flag`` that set them.

    >>> check_n_boot(1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: --n-boot 1: the intervals on c1, c2, c3 and G* ... need at least 2; give --n-boot 200 or more ...
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < MIN_N_BOOT:
        raise ValueError(f"{flag} {n_boot}: the intervals on c1, c2, c3 and G* come from bootstrap replicates and need "
                         f"at least {MIN_N_BOOT}; give {flag} 200 or more (1000 by default)")


_FACTORS = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 24.0, 32.0, 48.0, 64.0)


def bound_table(consts: np.ndarray, N: int, cands: Sequence[int]) -> np.ndarray:
    """bound(c, G) = c1 G/N + c2/N + c3/(N(G-1)) for rows of constants (R, 3), clipped at 0: (R, n_candidates)."""
    c = np.maximum(np.atleast_2d(np.asarray(consts, dtype=float)), 0.0)
    g = np.asarray(cands, dtype=float)[None, :]
    return uniform_mse(c[:, :1], c[:, 1:2], c[:, 2:3], N, g)


def near_optimal_band(c1: float, c2: float, c3: float, N: int, cands: Sequence[int],
                      tol: float = DEFAULT_TOLERANCE) -> list[int]:
    """The candidates G whose bound is within ``tol`` of the smallest (docs/math.md M40).

    Examples
    --------
    >>> near_optimal_band(1.0, 5.0, 49.0, 1024, [2, 4, 8, 16, 32])
    [8]
    >>> near_optimal_band(1.0, 5.0, 49.0, 1024, [2, 4, 8, 16, 32], tol=0.5)
    [4, 8, 16]
    """
    row = bound_table([c1, c2, c3], N, cands)[0]
    return [int(g) for g, v in zip(cands, row) if v <= (1 + tol) * row.min()]


@dataclass(frozen=True)
class BandResult:
    """The band from bootstrap replicates (docs/math.md M40-M41).

    Attributes
    ----------
    candidates : the group sizes, ascending
    point_band : the band of the point estimates
    probability : per candidate, the share of replicates whose band contains it
    expected_ratio : per candidate, mean of bound(c*, G) / min bound(c*, .) over the replicates with c1* > 0
    recommended : argmin of expected_ratio
    confidence_band : candidates with probability >= (1 - level)/2, and the recommendation
    tolerance, level : as given
    n_replicates : replicates used (non-finite ones dropped)
    """

    candidates: tuple[int, ...]
    point_band: tuple[int, ...]
    probability: tuple[float, ...]
    expected_ratio: tuple[float, ...]
    recommended: int
    confidence_band: tuple[int, ...]
    tolerance: float
    level: float
    n_replicates: int

    @property
    def low(self) -> int:
        return min(self.confidence_band)

    @property
    def high(self) -> int:
        return max(self.confidence_band)


def _finite_rows(replicates) -> np.ndarray:
    reps = np.asarray(replicates, dtype=float).reshape(-1, 3)
    return reps[np.isfinite(reps).all(axis=1)]


def _band_stats(reps: np.ndarray, N: int, cands: Sequence[int], tol: float, worst: bool = False):
    tab = bound_table(reps, N, cands)                            # (R, n)
    best = tab.min(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(best > 0, tab / np.where(best > 0, best, 1.0), 1.0)
    return (ratio <= 1 + tol).mean(axis=0), (ratio.max(axis=0) if worst else ratio.mean(axis=0))


def _minimax(c2: float, c3: float, c1_upper: float, N: int, cands: Sequence[int]) -> int:
    """The G whose worst ratio to the best over c1 in [0, c1_upper] (c2, c3 fixed) is smallest."""
    grid = np.column_stack([np.linspace(0.0, max(c1_upper, 0.0), 201), np.full(201, c2), np.full(201, c3)])
    _, ratio = _band_stats(grid, N, cands, 0.0, worst=True)
    return sorted(cands)[int(np.argmin(ratio))]


def bootstrap_band(point: Sequence[float], replicates, N: int, cands: Sequence[int], *,
                   tol: float = DEFAULT_TOLERANCE, level: float = 0.95, c1_upper: float | None = None) -> BandResult:
    """Band, probabilities, recommended G and confidence band from replicates (R, 3) of (c1, c2, c3) (M40-M41).

    Examples
    --------
    >>> reps = np.array([[1.0, 5.0, 49.0], [0.5, 5.0, 49.0], [2.0, 5.0, 49.0]])
    >>> r = bootstrap_band((1.0, 5.0, 49.0), reps, 1024, [2, 4, 8, 16, 32])
    >>> r.point_band, r.recommended, r.confidence_band
    ((8,), 8, (4, 8, 16))
    """
    if not tol > 0:
        raise ValueError(f"band tolerance must be > 0 (e.g. 0.05 for 5%), got {tol}")
    cands = sorted(int(g) for g in cands)
    reps = _finite_rows(replicates)
    if reps.shape[0] < 2:
        raise ValueError("the band needs >= 2 finite bootstrap replicates; estimate the constants with n_boot >= 200")
    prob, expected = _band_stats(reps, N, cands, tol)
    positive = reps[reps[:, 0] > 0]
    if positive.shape[0] >= max(2, 0.05 * reps.shape[0]):  # condition on c1 > 0 (the truth is > 0 unless prompts
        expected = _band_stats(positive, N, cands, tol)[1]  # are identical), not clip to a point mass at c1 = 0
        rec = cands[int(np.argmin(expected))]
    elif c1_upper is not None and c1_upper > 0:             # c1* <= 0 nearly always: minimax over c1's interval
        rec = _minimax(max(point[1], 0.0), max(point[2], 0.0), c1_upper, N, cands)
    else:
        rec = cands[int(np.argmin(expected))]
    conf = sorted({g for g, p in zip(cands, prob) if p >= (1 - level) / 2} | {rec})
    return BandResult(
        candidates=tuple(cands), point_band=tuple(near_optimal_band(*point, N, cands, tol)),
        probability=tuple(float(p) for p in prob), expected_ratio=tuple(float(e) for e in expected),
        recommended=rec, confidence_band=tuple(conf), tolerance=tol, level=level, n_replicates=int(reps.shape[0]),
    )


def pilot_size_needed(point: Sequence[float], replicates, B0: int, N: int, cands: Sequence[int], *,
                      tol: float = DEFAULT_TOLERANCE, level: float = 0.95) -> int | None:
    """Prompts a pilot needs for its confidence band to be its point band (docs/math.md M42).

    A pilot of f B0 prompts is emulated by shrinking the replicates toward the estimate by
    1/sqrt(f). Returns B0 itself when the band is already pinned down, the smallest such f B0
    (f up to 64) otherwise, or None when even 64 B0 does not pin it down or c1's estimate is <= 0
    (the emulation then only reproduces "c1 = 0").
    """
    c = np.asarray(point, dtype=float)
    if not c[0] > 0:
        return None
    reps = _finite_rows(replicates)
    target = set(near_optimal_band(*c, N, cands, tol))
    for f in _FACTORS:
        prob, _ = _band_stats(c + (reps - c) / math.sqrt(f), N, cands, tol)
        if {g for g, p in zip(sorted(cands), prob) if p >= (1 - level) / 2} <= target:
            return int(math.ceil(f * B0))
    return None


def ratio_to_best_interval(replicates, N: int, cands: Sequence[int], G: int, level: float = 0.95) -> Interval:
    """How much worse G is than the best G: the bootstrap percentile interval of bound(c*, G) / min bound(c*, .)
    over the replicates (M40); its estimate is the replicates' mean ratio (M41's expected ratio).

    Examples
    --------
    >>> reps = np.array([[1.0, 5.0, 49.0], [0.5, 5.0, 49.0], [2.0, 5.0, 49.0]])
    >>> r = ratio_to_best_interval(reps, 1024, [2, 4, 8, 16], 8)
    >>> [round(x, 3) for x in (r.ci_low, r.ci_high)], r.kind
    ([1.0, 1.0], '95% bootstrap percentile')
    """
    cands = sorted(int(g) for g in cands)
    if G not in cands:
        raise ValueError(f"G = {G} is not among the candidates {cands}")
    tab = bound_table(_finite_rows(replicates), N, cands)
    best = tab.min(axis=1)
    ratio = np.where(best > 0, tab[:, cands.index(G)] / np.where(best > 0, best, 1.0), 1.0)
    lo, hi = np.quantile(ratio, [(1 - level) / 2, (1 + level) / 2])
    return Interval(float(ratio.mean()), float(lo), float(hi), kind=f"{100 * level:g}% bootstrap percentile",
                    n=int(ratio.size))
