"""Choose the group size G for a sampling budget N = B G: the scaling law of Theorem 7.

The bound (docs/math.md M21) is the exact-residual version of paper eq. (11) with B = N/G,

    bound(G) = c1 G / N + c2 / N + c3 / (N (G - 1)),

minimised over the integers G >= 2 that divide N (a G that does not divide N is an error,
never a silent rounding). Its continuous minimiser is G* = 1 + sqrt(c3/c1) (M22); the paper's
eq. (12), G* = sqrt(c3/c1), comes from writing the residual as c3/(B G^2) (M23). Neither
depends on N: the argmin over a fixed candidate set is the same for every N (the "universal"
claim of Thm 7).

With constants estimated from a pilot (:class:`~ugrpo.stats.components.VarianceComponents`),
the interval of G* comes from the bootstrap replicates of (c1, c3). When c1's interval
reaches 0, the data bound G* only from below (M24) and no point value is given.

Deviations from the paper: the paper's constants are suprema over theta; here they are the
constants at one theta. Constants below 0 (possible for unbiased estimates) are clipped to 0
before G* and the predicted bound are computed.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .components import VarianceComponents
from .exact_mse import PolicyMoments

__all__ = ["GroupSizePlan", "bound", "candidate_groups", "plan_group_size"]


def bound(c1: float, c2: float, c3: float, N: int, G: float) -> float:
    """c1 G/N + c2/N + c3/(N (G-1)): Thm 7, eq. (11) with B = N/G and the exact residual (docs/math.md M21).

    Examples
    --------
    >>> round(bound(1.0, 2.0, 4.0, N=10, G=5), 12)
    0.8
    """
    if N <= 0:
        raise ValueError(f"budget N must be > 0, got N = {N}")
    if G <= 1:
        raise ValueError(f"group size G must be > 1 (the residual term has G - 1 in the denominator), got G = {G}")
    return c1 * G / N + c2 / N + c3 / (N * (G - 1))


def candidate_groups(N: int, *, min_g: int = 2, max_g: int | None = None) -> list[int]:
    """Every G with max(2, min_g) <= G <= max_g (default N) that divides N.

    Examples
    --------
    >>> candidate_groups(24, max_g=12)
    [2, 3, 4, 6, 8, 12]
    """
    if isinstance(N, bool) or not isinstance(N, numbers.Integral) or N < 2:
        raise ValueError(f"budget N must be an int >= 2 (N = B * G samples per step), got N = {N!r}")
    N = int(N)
    lo, hi = max(2, min_g), N if max_g is None else min(N, max_g)
    out = [g for g in range(lo, hi + 1) if N % g == 0]
    if not out:
        raise ValueError(
            f"N = {N} has no divisor G with {lo} <= G <= {hi}, so no group size gives an integer number of "
            f"prompts B = N / G; choose N with small factors (e.g. a power of 2) or widen min_g/max_g"
        )
    return out


@dataclass(frozen=True)
class GroupSizePlan:
    """The recommended group size for a budget N (Thm 7; docs/math.md M21-M24).

    Attributes
    ----------
    N : samples per step
    c1, c2, c3 : the constants used (point estimates or exact values)
    g_star : argmin of the bound over the candidates; None when c1 is not distinguishable from 0
    g_star_continuous : 1 + sqrt(c3/c1), the continuous minimiser (inf when c1 <= 0)
    g_star_paper : sqrt(c3/c1), paper eq. (12)
    candidates : (G, B, predicted bound) for every candidate G, ascending in G
    g_star_ci : percentile interval of the bootstrap argmins over the candidates (None for exact constants)
    g_star_continuous_ci : same for 1 + sqrt(c3/c1) (may reach inf)
    g_star_lower_bound : when c1 is not distinguishable from 0: 1 + sqrt(c3_lo / c1_hi), the smallest
        continuous G* consistent with the intervals (inf if c1_hi <= 0); None otherwise
    c1_distinguishable_from_zero : True for exact constants with c1 > 0, or when c1's ci_low > 0
    level : confidence level of the intervals (None for exact constants)
    message : one plain sentence for the user
    """

    N: int
    c1: float
    c2: float
    c3: float
    g_star: int | None
    g_star_continuous: float
    g_star_paper: float
    candidates: tuple[tuple[int, int, float], ...]
    g_star_ci: tuple[int, int] | None
    g_star_continuous_ci: tuple[float, float] | None
    g_star_lower_bound: float | None
    c1_distinguishable_from_zero: bool
    level: float | None
    message: str


def _continuous(c1: float, c3: float) -> float:
    return 1.0 + math.sqrt(max(c3, 0.0) / c1) if c1 > 0 else math.inf


def _argmins(c1: np.ndarray, c3: np.ndarray, cands: np.ndarray) -> np.ndarray:
    """Argmin over candidates of c1 G + c3/(G-1) (c2 and 1/N do not move it), one per row."""
    obj = c1[:, None] * cands[None, :] + np.maximum(c3, 0.0)[:, None] / (cands[None, :] - 1)
    return cands[np.argmin(obj, axis=1)]


def _constants(components) -> tuple[float, float, float]:
    if isinstance(components, VarianceComponents):
        return components.c1.estimate, components.c2.estimate, components.c3.estimate
    if isinstance(components, PolicyMoments):
        return components.c1, components.c2, components.c3
    try:
        c1, c2, c3 = (float(c) for c in components)
    except (TypeError, ValueError):
        raise TypeError(
            "components must be VarianceComponents, PolicyMoments or a (c1, c2, c3) sequence of floats; "
            f"got {type(components).__name__}"
        ) from None
    return c1, c2, c3


def plan_group_size(
    components: VarianceComponents | PolicyMoments | Sequence[float], N: int, candidates: Sequence[int] | None = None
) -> GroupSizePlan:
    """Group size minimising the Theorem 7 bound at budget N, with its uncertainty (docs/math.md M21-M24).

    Parameters
    ----------
    components : estimated constants (with bootstrap replicates) or exact ones
        (:class:`PolicyMoments` or a ``(c1, c2, c3)`` sequence)
    N : samples per step, N = B G
    candidates : group sizes to consider; each must be >= 2 and divide N (default: all such G)

    Returns
    -------
    GroupSizePlan

    Examples
    --------
    >>> plan = plan_group_size((1.0, 5.0, 49.0), N=64)
    >>> plan.g_star, plan.g_star_continuous, plan.g_star_paper
    (8, 8.0, 7.0)
    """
    c1, c2, c3 = _constants(components)
    if not all(math.isfinite(c) for c in (c1, c2, c3)):
        raise ValueError(f"constants must be finite, got c1={c1}, c2={c2}, c3={c3}")
    cands = candidate_groups(N) if candidates is None else _check_candidates(candidates, N)
    N = int(N)
    if isinstance(components, VarianceComponents):
        return _plan_estimated(components, c1, c2, c3, N, cands)
    if c1 < 0 or c2 < 0 or c3 < 0:
        raise ValueError(f"exact constants must be >= 0, got c1={c1}, c2={c2}, c3={c3}")
    return _plan_exact(c1, c2, c3, N, cands)


def _check_candidates(candidates: Sequence[int], N: int) -> list[int]:
    if isinstance(N, bool) or not isinstance(N, numbers.Integral) or N < 2:
        raise ValueError(f"budget N must be an int >= 2, got N = {N!r}")
    out = sorted(set(int(g) for g in candidates))
    if not out:
        raise ValueError(f"candidates is empty; pass group sizes G >= 2 that divide N = {N}")
    for g in out:
        if g < 2:
            raise ValueError(f"candidate G = {g} is < 2; GRPO needs at least 2 samples per prompt")
        if N % g:
            raise ValueError(f"candidate G = {g} does not divide N = {N} (B = N/G = {N / g:g} is not an integer)")
    return out


def _table(c1: float, c2: float, c3: float, N: int, cands: list[int]) -> tuple[tuple[int, int, float], ...]:
    k1, k2, k3 = (max(c, 0.0) for c in (c1, c2, c3))
    return tuple((g, N // g, bound(k1, k2, k3, N, g)) for g in cands)


def _plan_exact(c1, c2, c3, N, cands) -> GroupSizePlan:
    table = _table(c1, c2, c3, N, cands)
    g_star = min(table, key=lambda row: row[2])[0]
    cont = _continuous(c1, c3)
    msg = f"G* = {g_star} among the divisors of N = {N} (continuous optimum 1 + sqrt(c3/c1) = {cont:.2f})"
    if c1 == 0:
        msg = f"c1 = 0: the bound decreases in G, so the largest candidate G = {g_star} minimises it (N = {N})"
    return GroupSizePlan(
        N=N, c1=c1, c2=c2, c3=c3, g_star=g_star, g_star_continuous=cont,
        g_star_paper=math.sqrt(c3 / c1) if c1 > 0 else math.inf, candidates=table, g_star_ci=None,
        g_star_continuous_ci=None, g_star_lower_bound=None, c1_distinguishable_from_zero=c1 > 0,
        level=None, message=msg,
    )


def _plan_estimated(vc: VarianceComponents, c1, c2, c3, N, cands) -> GroupSizePlan:
    if vc.replicates.shape[0] < 2:
        raise ValueError(
            "components has no bootstrap replicates (estimated with n_boot=0), so G* gets no interval; "
            "re-run estimate_components with n_boot >= 200, or pass (c1, c2, c3) to plan from point values"
        )
    table = _table(c1, c2, c3, N, cands)
    reps = vc.replicates.numpy()
    reps = reps[np.isfinite(reps).all(axis=1)]
    q = [(1 - vc.level) / 2, (1 + vc.level) / 2]
    g_ci = cont_ci = None
    if reps.shape[0] >= 2:
        arg = _argmins(reps[:, 0], reps[:, 2], np.array(cands, dtype=float))
        lo, hi = np.quantile(arg, q, method="inverted_cdf")
        g_ci = (int(lo), int(hi))
        cont = np.array([_continuous(a, b) for a, b in zip(reps[:, 0], reps[:, 2])])
        clo, chi = np.quantile(cont, q, method="inverted_cdf")
        cont_ci = (float(clo), float(chi))
    distinct = vc.c1_distinguishable_from_zero and c1 > 0
    level = f"{100 * vc.level:g}%"
    common = dict(
        N=N, c1=c1, c2=c2, c3=c3, g_star_continuous=_continuous(c1, c3),
        g_star_paper=math.sqrt(max(c3, 0.0) / c1) if c1 > 0 else math.inf, candidates=table,
        g_star_ci=g_ci, g_star_continuous_ci=cont_ci, c1_distinguishable_from_zero=distinct, level=vc.level,
    )
    if distinct:
        g_star = min(table, key=lambda row: row[2])[0]
        msg = (f"G* = {g_star} among the divisors of N = {N} (continuous optimum 1 + sqrt(c3/c1) = "
               f"{common['g_star_continuous']:.2f}; {level} interval of G*: {g_ci})")
        if common["g_star_continuous"] > cands[-1]:
            msg += f"; the continuous optimum exceeds the largest candidate {cands[-1]}"
        return GroupSizePlan(g_star=g_star, g_star_lower_bound=None, message=msg, **common)
    c1_hi, c3_lo = vc.c1.ci_high, vc.c3.ci_low
    lb = _continuous(c1_hi, c3_lo) if math.isfinite(c1_hi) else math.inf
    why = (f"c1 is not distinguishable from 0 with B0 = {vc.n_prompts} pilot prompts "
           f"(c1 = {c1:.3g}, {level} interval [{vc.c1.ci_low:.3g}, {c1_hi:.3g}]): use more pilot prompts")
    if math.isfinite(lb):
        msg = f"G* is larger than {lb:.1f}; {why}"
    else:
        msg = f"G* cannot be bounded from these data; {why}"
    return GroupSizePlan(g_star=None, g_star_lower_bound=lb, message=msg, **common)
