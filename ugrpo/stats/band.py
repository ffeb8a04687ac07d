"""The near-optimal band of group sizes, the G to use and how sure the pilot is (docs/math.md M40-M42).

The bound of Theorem 7 is flat near its minimum, so the useful answer is not one G* but the
*band*: the candidates whose predicted MSE at budget N is within a tolerance (default 5%) of the
smallest,

    band(c) = {G : bound(c, G) <= (1 + tol) min_G' bound(c, G')}          (M40)

With c2, c3 at their estimates, bound(c, G) / min bound is quasi-convex in c1 (a linear function over a
concave one), so over c1's 95% interval [lo, hi] a candidate's ratio to the best is largest at an end
(:func:`worst_ratio`). Hence (M40-M41):

* the confidence band: the union of band(c1) over c1 in [lo, hi], the range [min band(hi), max band(lo)]
  (when lo = 0 it reaches the largest candidate: "at least a");
* the pilot *decides* when one G is within the tolerance for every c1 in [lo, hi]; hi is raised to at
  least 2 bootstrap SEs of c1 first (the upper limit an estimate at 0 would give: an interval cut to
  [0, ~0] from an estimate below 0 is not evidence that c1 = 0);
* the G to use: among the G that decide, else among all, the one with the smallest expected ratio
  bound(c, G) / min bound(c, .) over draws of c1's confidence distribution
  (:func:`ugrpo.stats.bootstrap_ci.confidence_draws`, clipped at 0, all of them: no conditioning on c1 > 0), c2 and
  c3 at their estimates like the band (M80: draws of c2 or c3 at 0, outside their range, put a pole in the ratio);
* ``probability[G]``: the share of those draws whose band holds G.

How many prompts would decide (M42, M68): the interval's half-widths shrink like 1/sqrt(B0), so a pilot of f B0
prompts whose estimate lands on c is emulated by the interval [c - (est - lo)/sqrt(f), c + (hi - est)/sqrt(f)]
(cut at 0); the smallest f (up to 64) at which it decides depends on c by orders of magnitude, so the reported
size is the largest over c in [lo, hi]: a pilot of that size decides wherever c1 lies in its interval (None when
for some c1 in it even 64 B0 would not). Measured on the planner benchmark's undecided pilots that get a size: a fresh
pilot of that size decides in 54% (16 x 8) and 66% (64 x 8) of them; the size at the estimate alone (M42) in 21% and
25% (benchmarks/bench_planner_projection.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .exact_mse import uniform_mse
from .intervals import Interval

__all__ = ["DEFAULT_TOLERANCE", "MIN_N_BOOT", "check_n_boot", "BandResult", "bound_table", "ratio_table", "worst_ratio",
           "near_optimal_band", "bootstrap_band", "pilot_size_needed", "ratio_range"]

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


def ratio_table(consts, N: int, cands: Sequence[int]) -> np.ndarray:
    """bound(c, G) / min_G' bound(c, G') per row of constants (clipped at 0): (R, n_candidates); 1 where all are 0."""
    tab = bound_table(consts, N, cands)
    best = tab.min(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(best > 0, tab / np.where(best > 0, best, 1.0), 1.0)


def worst_ratio(c1_range: tuple[float, float], c2: float, c3: float, N: int, cands: Sequence[int]) -> np.ndarray:
    """Per candidate, the largest ratio to the best over c1 in ``c1_range`` (c2, c3 fixed): its value at an end.

    The ratio is a linear function of c1 over a concave one (a minimum of linear functions), hence quasi-convex,
    so its maximum over an interval is at an end (docs/math.md M41; tested against a grid).

    Examples
    --------
    >>> worst_ratio((0.0, 1.0), 5.0, 49.0, 1024, [2, 8, 1024]).round(2).tolist()
    [10.7, 2.38, 51.45]
    """
    lo, hi = c1_range
    return ratio_table([[lo, c2, c3], [hi, c2, c3]], N, cands).max(axis=0)


@dataclass(frozen=True)
class BandResult:
    """The band and the G to use from a pilot (docs/math.md M40-M41).

    Attributes
    ----------
    candidates : the group sizes, ascending
    point_band : the band of the point estimates (clipped at 0)
    probability : per candidate, the share of the draws of c1's confidence distribution (c2, c3 at the estimates)
        whose band holds it
    expected_ratio : per candidate, the mean of bound(c, G) / min bound(c, .) over those draws (M41, M80)
    worst_case : per candidate, the largest ratio to the best over c1 in ``c1_range`` (c2, c3 at the estimates)
    recommended : the G to use (M41)
    decided : True when ``worst_case`` of the recommendation is within the tolerance: the pilot pins it down
    confidence_band : the union of band(c1) over c1 in ``c1_range``, and the recommendation
    g_range : (argmin at c1 = hi, argmin at c1 = lo): where the best G lies for c1 in its interval
    c1_range : (lo, hi) used: c1's interval, hi raised to the floor given by the caller
    tolerance, level : as given
    n_draws : draws of the confidence distribution used
    """

    candidates: tuple[int, ...]
    point_band: tuple[int, ...]
    probability: tuple[float, ...]
    expected_ratio: tuple[float, ...]
    worst_case: tuple[float, ...]
    recommended: int
    decided: bool
    confidence_band: tuple[int, ...]
    g_range: tuple[int, int]
    c1_range: tuple[float, float]
    tolerance: float
    level: float
    n_draws: int

    @property
    def low(self) -> int:
        return min(self.confidence_band)

    @property
    def high(self) -> int:
        return max(self.confidence_band)

    @property
    def open_ended(self) -> bool:
        """True when the band reaches the largest candidate (say "at least low", not "[low, largest]")."""
        return self.high == self.candidates[-1]

    @property
    def recommended_worst_case(self) -> float:
        return self.worst_case[self.candidates.index(self.recommended)]


def _c1_rows(c1_draws, c2: float, c3: float) -> np.ndarray:
    """Rows (R, 3) of (c1 draw, c2, c3): the draws clipped to [0, inf) (c1's range; +inf, an extreme, stays finite
    and large, NaN dropped), c2 and c3 fixed (docs/math.md M80)."""
    d = np.asarray(c1_draws, dtype=float)
    if d.ndim != 1:
        raise ValueError(f"c1_draws must be a 1-D array of draws of c1 (c2 and c3 enter at their estimates, "
                         f"docs/math.md M80), got shape {d.shape}")
    d = d[~np.isnan(d)]
    big = np.where(np.isfinite(d), np.abs(d), 0.0).max(initial=1.0) * 1e6
    d = np.clip(d, 0.0, big)
    return np.column_stack([d, np.full(d.size, c2), np.full(d.size, c3)])


def bootstrap_band(point: Sequence[float], c1_draws, N: int, cands: Sequence[int], *,
                   c1_range: tuple[float, float], tol: float = DEFAULT_TOLERANCE, level: float = 0.95) -> BandResult:
    """Band, the G to use and whether the pilot decides, from c1's interval and draws (R,) of c1's confidence
    distribution, c2 and c3 at their estimates ``point[1:]`` (docs/math.md M40, M41, M80).

    Examples
    --------
    >>> c1_draws = np.array([1.0, 0.5, 2.0])
    >>> r = bootstrap_band((1.0, 5.0, 49.0), c1_draws, 1024, [2, 4, 8, 16, 32], c1_range=(0.8, 1.25))
    >>> r.point_band, r.recommended, r.decided, r.confidence_band
    ((8,), 8, True, (8,))
    >>> r = bootstrap_band((1.0, 5.0, 49.0), c1_draws, 1024, [2, 4, 8, 16, 32], c1_range=(0.0, 4.0))
    >>> r.recommended, r.decided, r.confidence_band, r.g_range, r.open_ended
    (8, False, (4, 8, 16, 32), (4, 32), True)
    """
    if not tol > 0:
        raise ValueError(f"band tolerance must be > 0 (e.g. 0.05 for 5%), got {tol}")
    cands = sorted(int(g) for g in cands)
    lo, hi = (max(float(v), 0.0) for v in c1_range)
    c2, c3 = max(float(point[1]), 0.0), max(float(point[2]), 0.0)
    rows = _c1_rows(c1_draws, c2, c3)
    if rows.shape[0] < 2:
        raise ValueError("the band needs >= 2 finite bootstrap replicates; estimate the constants with n_boot >= 200")
    ratio = ratio_table(rows, N, cands)
    prob, expected = (ratio <= 1 + tol).mean(axis=0), ratio.mean(axis=0)
    worst = worst_ratio((lo, hi), c2, c3, N, cands)
    pool = np.flatnonzero(worst <= 1 + tol)
    pool = pool if pool.size else np.arange(len(cands))
    rec = cands[int(pool[np.argmin(expected[pool])])]
    ends = [set(near_optimal_band(c, c2, c3, N, cands, tol)) for c in (hi, lo)]
    conf = set(g for g in cands if min(ends[0]) <= g <= max(ends[1])) | {rec}
    at = ratio_table([[hi, c2, c3], [lo, c2, c3]], N, cands).argmin(axis=1)
    return BandResult(
        candidates=tuple(cands), point_band=tuple(near_optimal_band(*(max(c, 0.0) for c in point), N, cands, tol)),
        probability=tuple(float(p) for p in prob), expected_ratio=tuple(float(e) for e in expected),
        worst_case=tuple(float(w) for w in worst), recommended=rec, decided=bool(worst[cands.index(rec)] <= 1 + tol),
        confidence_band=tuple(sorted(conf)), g_range=(cands[int(at[0])], cands[int(at[1])]), c1_range=(lo, hi),
        tolerance=tol, level=level, n_draws=int(rows.shape[0]),
    )


def pilot_size_needed(c1: float, c1_range: tuple[float, float], c2: float, c3: float, B0: int, N: int,
                      cands: Sequence[int], *, tol: float = DEFAULT_TOLERANCE, grid: int = 41) -> int | None:
    """Prompts a pilot needs to decide wherever c1 lies in its interval (docs/math.md M42, M68): the largest over c in
    ``c1_range`` (``grid`` points) of the smallest f B0 (f up to 64) at which some G is within ``tol`` of the best for
    every c1 in [c - (est - lo)/sqrt(f), c + (hi - est)/sqrt(f)] (est = c1 taken as 0 when negative, the interval cut
    at 0): a pilot of f B0 prompts whose estimate lands on c. An interval cut at 0 has lost its lower half-width, and
    the upper one stands in for it (before, an estimate below 0 projected intervals with no lower half at all, so the
    more negative the estimate, the smaller the pilot promised). B0 when this pilot decides; None when for some c in
    the interval even 64 B0 would not decide.

    Examples
    --------
    >>> pilot_size_needed(0.01, (0.008, 0.012), 1.0, 1.0, 64, 1024, [4, 8, 16, 32, 64])
    64
    >>> pilot_size_needed(0.01, (0.002, 0.04), 1.0, 1.0, 64, 1024, [4, 8, 16, 32, 64])
    512
    >>> pilot_size_needed(0.001, (0.0, 0.01), 0.1, 1.0, 64, 1024, [4, 8, 16, 32, 64, 128, 256, 512, 1024]) is None
    True
    >>> [pilot_size_needed(e, (0.0, 0.008), 1.0, 1.0, 64, 1024, [4, 8, 16, 32, 64, 128, 256, 512, 1024])
    ...  for e in (-0.004, 0.0, 0.004)]  # cut at 0: never smaller for a lower estimate (it was 128, 128, 128)
    [512, 512, 128]
    """
    c = max(float(c1), 0.0)
    lo, hi = min(max(c1_range[0], 0.0), c), max(c1_range[1], c)
    c2, c3 = max(c2, 0.0), max(c3, 0.0)
    if worst_ratio((lo, hi), c2, c3, N, cands).min() <= 1 + tol:
        return int(B0)
    centres = np.linspace(lo, hi, grid)
    f = np.asarray(_FACTORS)[:, None]  # (F, 1)
    below = max(hi - c, c - lo) if lo <= 0 else c - lo  # an interval cut at 0: its upper half-width stands in
    low = np.maximum(centres[None, :] - below / np.sqrt(f), 0.0).ravel()
    high = (centres[None, :] + (hi - c) / np.sqrt(f)).ravel()
    n = low.size
    rows = np.column_stack([np.concatenate([low, high]), np.full(2 * n, c2), np.full(2 * n, c3)])
    tab = ratio_table(rows, N, cands)
    decides = (np.maximum(tab[:n], tab[n:]).min(axis=1) <= 1 + tol).reshape(f.shape[0], grid)  # (F, grid)
    if not decides[-1].all():
        return None
    first = decides.argmax(axis=0)  # the smallest factor that decides, per centre
    return int(math.ceil(_FACTORS[int(first.max())] * B0))


def ratio_range(point: Sequence[float], c1_range: tuple[float, float], N: int, cands: Sequence[int],
                G: int) -> Interval:
    """How much worse G is than the best G: its ratio bound(c, G) / min bound(c, .) at the estimates (clipped at 0),
    with the smallest and largest ratio over c1 in ``c1_range`` (c2, c3 at the estimates; docs/math.md M41). The
    largest is at an end of the range (:func:`worst_ratio`); the smallest is found on a grid of 201 values
    (it is 1 where G is the best G for some c1 in the range).

    Examples
    --------
    >>> r = ratio_range((1.0, 5.0, 49.0), (0.1, 4.0), 1024, [2, 4, 8, 16], 8)
    >>> round(r.estimate, 3), round(r.ci_low, 3), round(r.ci_high, 3), r.kind
    (1.0, 1.0, 1.297, "range over c1's interval")
    """
    cands = sorted(int(g) for g in cands)
    if G not in cands:
        raise ValueError(f"G = {G} is not among the candidates {cands}")
    lo, hi = (max(float(v), 0.0) for v in c1_range)
    c2, c3 = max(float(point[1]), 0.0), max(float(point[2]), 0.0)
    grid = np.column_stack([np.linspace(lo, hi, 201), np.full(201, c2), np.full(201, c3)])
    k = cands.index(G)
    at = float(ratio_table([[max(float(point[0]), 0.0), c2, c3]], N, cands)[0, k])
    return Interval(at, float(ratio_table(grid, N, cands)[:, k].min()),
                    float(worst_ratio((lo, hi), c2, c3, N, cands)[k]), kind="range over c1's interval")
