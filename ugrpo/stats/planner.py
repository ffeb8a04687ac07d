"""Choose the group size G for a sampling budget N = B G: the scaling law of Theorem 7.

The bound (docs/math.md M21) is the exact-residual version of paper eq. (11) with B = N/G,

    bound(G) = c1 G / N + c2 / N + c3 / (N (G - 1)),

minimised over the integers G >= 2 that divide N (a G that does not divide N is an error,
never a silent rounding). Its continuous minimiser is G* = 1 + sqrt(c3/c1) (M22); the paper's
eq. (12), G* = sqrt(c3/c1), comes from writing the residual as c3/(B G^2) (M23). Neither
depends on N: the argmin over a fixed candidate set is the same for every N (the "universal"
claim of Thm 7).

With constants estimated from a pilot (:class:`~ugrpo.stats.components.VarianceComponents`),
the answer is a band (:mod:`ugrpo.stats.band`, M40-M42): the candidates within a tolerance (5%)
of the smallest predicted MSE for some c1 in its interval, the G to use (one within the tolerance for every
such c1 when there is one: the pilot *decides*; else the smallest expected excess under c1's confidence
distribution with c2, c3 at their estimates (M80), with "the pilot cannot tell" said), how much it can cost, and
the pilot size that would decide. A pilot that says nothing (every reward equal, a degenerate bootstrap) gets no G.
``g_star`` is the argmin at the point estimates, kept for compatibility, and None when c1's interval reaches 0;
then the data bound G* from below (M24), at the stated level when the intervals are calibrated.

Deviations from the paper: the paper's constants are suprema over theta; here they are the
constants at one theta. Constants below 0 (possible for unbiased estimates) are clipped to 0
before G* and the predicted bound are computed.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from .band import DEFAULT_TOLERANCE, bootstrap_band, near_optimal_band, pilot_size_needed
from .components import VarianceComponents
from .exact_mse import PolicyMoments, uniform_mse

__all__ = ["GroupSizePlan", "bound", "candidate_groups", "plan_group_size", "group_cost"]


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
    return uniform_mse(c1, c2, c3, N, G)


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
        continuous G* consistent with both intervals (valid at ``level`` by Bonferroni when each interval
        covers at ``level``; M24); None otherwise, or when c1_hi = 0 (no bound)
    c1_distinguishable_from_zero : True for exact constants with c1 > 0, or when c1's ci_low > 0
    level : confidence level of the intervals (None for exact constants)
    message : plain sentences for the user (the G to use first)
    g_recommended : the G to use (M41, M80): a G within ``tolerance`` of the best for every c1 in its interval when
        there is one, else the smallest expected ratio to the best under c1's confidence distribution (c2, c3 at
        the estimates); G* for exact constants; None when the pilot cannot tell anything (``cannot_tell``)
    band : the candidates within ``tolerance`` of the smallest predicted MSE at the point estimates (M40)
    band_probability : per candidate (as ``candidates``), the share of the draws of c1's confidence distribution
        (c2, c3 at the estimates) whose band holds it (1.0 / 0.0 for exact constants)
    g_band : (low, high) of the confidence band: the G within ``tolerance`` of the best for some c1 in its
        interval (M40; the exact band's range for exact constants)
    worst : (G, ratio): the candidate with the largest ratio to the best (estimated constants: the largest over
        c1's interval)
    expected_ratio : per candidate, the expected ratio of its MSE to the best's under c1's confidence
        distribution, c2 and c3 at the estimates (M41, M80); the exact ratio for exact constants
    pilot_prompts_needed : prompts a pilot needs to decide wherever c1 lies in its interval (M42, M68); None when for
        some c1 in it even 64 B0 would not
    tolerance : the band's tolerance
    decided : True when g_recommended is within ``tolerance`` of the best for every c1 in its interval (always
        for exact constants; False when the pilot cannot tell)
    cannot_tell : the reason when the pilot says nothing about G (every reward equal, no noise measured, a
        degenerate bootstrap); then g_recommended, g_band, g_star and g_star_ci are None
    worst_case : per candidate, the largest ratio to the best over c1's interval (c2, c3 at the estimates)
    g_range : (G at c1 = its upper end, G at c1 = its lower end): where the best G can lie
    c1_range : the c1 interval the plan used (upper end raised to >= 2 bootstrap SEs)
    band_open_ended : the confidence band reaches the largest candidate ("G of at least low")
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
    g_recommended: int | None = None
    band: tuple[int, ...] = ()
    band_probability: tuple[float, ...] = ()
    g_band: tuple[int, int] | None = None
    worst: tuple[int, float] | None = None
    pilot_prompts_needed: int | None = None
    tolerance: float = DEFAULT_TOLERANCE
    expected_ratio: tuple[float, ...] = ()
    decided: bool = True
    cannot_tell: str | None = None
    worst_case: tuple[float, ...] = ()
    g_range: tuple[int, int] | None = None
    c1_range: tuple[float, float] | None = None
    band_open_ended: bool = False


def group_cost(plan: GroupSizePlan, G: int) -> float:
    """Predicted MSE at G over the smallest predicted MSE among the candidates (1.0 = the best G).

    Examples
    --------
    >>> round(group_cost(plan_group_size((1.0, 5.0, 49.0), N=64), 16), 4)
    1.2133
    """
    table = {g: v for g, _, v in plan.candidates}
    if G not in table:
        raise ValueError(f"G = {G} is not a candidate group size for N = {plan.N} (candidates: {sorted(table)}); "
                         f"G must divide N")
    best = min(table.values())
    return table[G] / best if best > 0 else 1.0


def _continuous(c1: float, c3: float) -> float:
    return 1.0 + math.sqrt(max(c3, 0.0) / c1) if c1 > 0 else math.inf


def _argmins(c1: np.ndarray, c3: np.ndarray, cands: np.ndarray) -> np.ndarray:
    """Argmin over candidates of the bound at c2 = 0 (c2 does not move it), one per row."""
    obj = uniform_mse(c1[:, None], 0.0, np.maximum(c3, 0.0)[:, None], 1.0, cands[None, :])
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
    components: VarianceComponents | PolicyMoments | Sequence[float], N: int, candidates: Sequence[int] | None = None,
    *, tolerance: float = DEFAULT_TOLERANCE,
) -> GroupSizePlan:
    """Group size minimising the Theorem 7 bound at budget N, with its uncertainty (docs/math.md M21-M24).

    Parameters
    ----------
    components : estimated constants (with bootstrap replicates) or exact ones
        (:class:`PolicyMoments` or a ``(c1, c2, c3)`` sequence)
    N : samples per step, N = B G
    candidates : group sizes to consider; each must be >= 2 and divide N (default: all such G)
    tolerance : the band: candidates within this relative excess of the smallest predicted MSE (M40)

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
    if not tolerance > 0:
        raise ValueError(f"tolerance must be > 0 (e.g. 0.05 for 5%), got {tolerance}")
    if isinstance(components, VarianceComponents):
        return _plan_estimated(components, c1, c2, c3, N, cands, tolerance)
    if c1 < 0 or c2 < 0 or c3 < 0:
        raise ValueError(f"exact constants must be >= 0, got c1={c1}, c2={c2}, c3={c3}")
    return _plan_exact(c1, c2, c3, N, cands, tolerance)


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


def _worst(table) -> tuple[int, float]:
    best = min(v for _, _, v in table)
    g, _, v = max(table, key=lambda row: row[2])
    return g, (v / best if best > 0 else 1.0)


def _band_text(band, tol: float) -> str:
    return f"G in {{{', '.join(str(g) for g in band)}}} within {100 * tol:g}% of the best predicted MSE"


def _plan_exact(c1, c2, c3, N, cands, tol) -> GroupSizePlan:
    table = _table(c1, c2, c3, N, cands)
    g_star = min(table, key=lambda row: row[2])[0]
    cont = _continuous(c1, c3)
    band = tuple(near_optimal_band(c1, c2, c3, N, cands, tol))
    worst = _worst(table)
    msg = f"G* = {g_star} among the divisors of N = {N} (continuous optimum 1 + sqrt(c3/c1) = {cont:.2f})"
    if c1 == 0:
        msg = f"c1 = 0: the bound decreases in G, so the largest candidate G = {g_star} minimises it (N = {N})"
    msg += f"; band: {_band_text(band, tol)}; the worst candidate G = {worst[0]} gives {worst[1]:.2f}x the best"
    return GroupSizePlan(
        N=N, c1=c1, c2=c2, c3=c3, g_star=g_star, g_star_continuous=cont,
        g_star_paper=math.sqrt(c3 / c1) if c1 > 0 else math.inf, candidates=table, g_star_ci=None,
        g_star_continuous_ci=None, g_star_lower_bound=None, c1_distinguishable_from_zero=c1 > 0,
        level=None, message=msg, g_recommended=g_star, band=band,
        band_probability=tuple(1.0 if g in band else 0.0 for g in cands), g_band=(min(band), max(band)),
        worst=worst, pilot_prompts_needed=None, tolerance=tol,
        expected_ratio=tuple(v / min(r[2] for r in table) if min(r[2] for r in table) > 0 else 1.0
                             for _, _, v in table),
    )


def degenerate_reason(vc: VarianceComponents) -> str | None:
    """Why a pilot cannot tell anything about G, or None (docs/math.md M41): every prompt's rewards all equal, or
    all but one (c1 compares prompts); no gradient noise measured (c2, c3 <= 0); or c1's bootstrap over prompts
    degenerate (more than 1 - level of the resamples hold one distinct prompt, e.g. B0 = 2)."""
    if vc.frac_zero_std >= 1.0:
        return (f"every one of the B0 = {vc.n_prompts} pilot prompts has all-equal rewards, so the pilot measures no "
                f"gradient noise at all; sample a pilot whose rewards vary within prompts (more samples per prompt, "
                f"or prompts of middling difficulty)")
    varied = round((1.0 - vc.frac_zero_std) * vc.n_prompts)
    if varied < 2:
        return (f"only {varied} of the B0 = {vc.n_prompts} pilot prompts has rewards that vary, and c1 compares "
                f"prompts' gradients; sample a pilot with more prompts whose rewards vary (more samples per prompt, or "
                f"prompts of middling difficulty)")
    if not (vc.c2.estimate > 0 or vc.c3.estimate > 0):
        return (f"the pilot measured no gradient noise (c2 = {vc.c2.estimate:.3g}, c3 = {vc.c3.estimate:.3g}); "
                f"sample a pilot whose rewards vary within prompts")
    n = vc.replicates.shape[0]
    if n and vc.n_boot_degenerate > (1 - vc.level) * n:
        return (f"with B0 = {vc.n_prompts} pilot prompts, {100 * vc.n_boot_degenerate / n:.0f}% of the bootstrap "
                f"resamples hold a single distinct prompt, so c1's uncertainty cannot be estimated; use 16 or more "
                f"pilot prompts")
    return None


def _c1_range(vc: VarianceComponents) -> tuple[float, float]:
    """c1's interval with its upper end raised to >= 2 bootstrap SEs (an estimate below 0 is noise, M41)."""
    hi = vc.c1.ci_high
    if math.isfinite(vc.c1.se):
        hi = max(hi, 2 * vc.c1.se)
    return max(vc.c1.ci_low, 0.0), hi


def _plan_estimated(vc: VarianceComponents, c1, c2, c3, N, cands, tol) -> GroupSizePlan:
    if vc.replicates.shape[0] < 2:
        raise ValueError(
            "components has no bootstrap replicates (estimated with n_boot=0), so G* gets no interval; "
            "re-run estimate_components with n_boot >= 200, or pass (c1, c2, c3) to plan from point values"
        )
    table = _table(c1, c2, c3, N, cands)
    reps = vc.replicates.numpy()
    reps = reps[np.isfinite(reps).all(axis=1)]
    if reps.shape[0] < 2:
        raise ValueError("fewer than 2 bootstrap replicates are finite; re-run estimate_components with more prompts")
    q = [(1 - vc.level) / 2, (1 + vc.level) / 2]
    arg = _argmins(reps[:, 0], reps[:, 2], np.array(cands, dtype=float))
    lo, hi = np.quantile(arg, q, method="inverted_cdf")
    cont = np.array([_continuous(a, b) for a, b in zip(reps[:, 0], reps[:, 2])])
    clo, chi = np.quantile(cont, q, method="inverted_cdf")
    distinct = vc.c1_distinguishable_from_zero and c1 > 0
    c1_hi, c3_lo = vc.c1.ci_high, vc.c3.ci_low
    lb = _continuous(c1_hi, c3_lo) if math.isfinite(c1_hi) and c1_hi > 0 else None
    common = dict(
        N=N, c1=c1, c2=c2, c3=c3, g_star_continuous=_continuous(c1, c3),
        g_star_paper=math.sqrt(max(c3, 0.0) / c1) if c1 > 0 else math.inf, candidates=table,
        g_star_ci=(int(lo), int(hi)), g_star_continuous_ci=(float(clo), float(chi)),
        c1_distinguishable_from_zero=distinct, level=vc.level, tolerance=tol,
        g_star=min(table, key=lambda row: row[2])[0] if distinct else None, g_star_lower_bound=None if distinct else lb,
    )
    why = degenerate_reason(vc)
    draws = vc.confidence_draws()
    if why is None and draws.shape[0] < 2:
        why = (f"the bootstrap over the B0 = {vc.n_prompts} pilot prompts has no spread (every resample's standard "
               f"error is 0: at most one prompt's rewards vary), so the pilot cannot say how sure it is; use more "
               f"pilot prompts, or prompts whose rewards vary")
    if why is not None:  # no G, no G* and no interval of G* from a pilot that says nothing (and not "decided")
        common.update(g_star=None, g_star_ci=None, g_star_continuous_ci=None, g_star_lower_bound=None,
                      c1_distinguishable_from_zero=False)
        return GroupSizePlan(message=f"the pilot cannot tell which G to use: {why}", cannot_tell=why, decided=False,
                             **common)
    c1_range = _c1_range(vc)
    br = bootstrap_band((c1, c2, c3), draws[:, 0], N, cands, c1_range=c1_range, tol=tol, level=vc.level)
    need = pilot_size_needed(c1, c1_range, c2, c3, vc.n_prompts, N, cands, tol=tol)
    k = int(np.argmax(br.worst_case))
    plan = GroupSizePlan(
        message="", g_recommended=br.recommended, band=br.point_band, band_probability=br.probability,
        g_band=(br.low, br.high), pilot_prompts_needed=need, expected_ratio=br.expected_ratio,
        worst=(br.candidates[k], float(br.worst_case[k])), decided=br.decided, worst_case=br.worst_case,
        g_range=br.g_range, c1_range=br.c1_range, band_open_ended=br.open_ended, **common,
    )
    return replace(plan, message=estimated_message(plan, vc))


def band_words(low: int, high: int, *, open_ended: bool, smallest: int | None, name: str = "G") -> str:
    """A confidence band of near-optimal group sizes in words: "G = 8", "G from 4 to 32", "G of at least 16" (it
    reaches the largest candidate: every larger G is near-optimal when c1 is near 0, so never "[16, largest
    candidate]"), or "any G" (it starts at ``smallest``, the smallest candidate, and is open-ended).

    >>> band_words(4, 1024, open_ended=True, smallest=2), band_words(2, 1024, open_ended=True, smallest=2)
    ('G of at least 4', 'any G')
    >>> band_words(4, 32, open_ended=False, smallest=2, name="num_generations")
    'num_generations from 4 to 32'
    """
    if low == high:
        return f"{name} = {low}"
    if open_ended:
        return f"any {name}" if smallest is not None and low <= smallest else f"{name} of at least {low}"
    return f"{name} from {low} to {high}"


def band_text(plan: GroupSizePlan) -> str:
    """The plan's confidence band in words (:func:`band_words`)."""
    return band_words(*plan.g_band, open_ended=plan.band_open_ended, smallest=min(c[0] for c in plan.candidates))


def estimated_message(plan: GroupSizePlan, vc: VarianceComponents) -> str:
    """The planner's sentences, in one voice: the G to use and how sure, the band, c1's status, the pilot size."""
    level, N, tol = f"{100 * vc.level:g}%", plan.N, 100 * plan.tolerance
    rec, (a, b), (lo, hi) = plan.g_recommended, plan.g_range, plan.c1_range
    worst = plan.worst_case[[g for g, _, _ in plan.candidates].index(rec)]
    raised = hi > vc.c1.ci_high
    rng = f"c1 in [{lo:.3g}, {hi:.3g}]" + (f" (its {level} interval [{vc.c1.ci_low:.3g}, {vc.c1.ci_high:.3g}], the "
                                            f"upper end raised to 2 bootstrap SEs)" if raised else
                                            f" (its {level} interval)")
    if len(plan.candidates) == 1:
        return (f"use G = {rec} (B = {N // rec}) at N = {N}: it is the only candidate (the only G >= 2 dividing N), so "
                f"there is nothing to decide; with another budget N group sizes could be compared")
    if plan.decided:
        out = [f"use G = {rec} (B = {N // rec}) at N = {N}: it is within {tol:g}% of the best predicted MSE for every "
               f"{rng}, c2 and c3 at their estimates: the pilot decides"]
    else:
        out = [f"use G = {rec} (B = {N // rec}) at N = {N} as the best guess, but the pilot cannot tell which G is "
               f"best: the best G is {a} at one end of {rng} and {b} at the other; G = {rec} costs at most "
               f"{100 * (worst - 1):.0f}% more than the best G over that range (the G with the smallest expected "
               f"excess under c1's confidence distribution)"]
    out.append(f"near-optimal (within {tol:g}% of the best for some c1 in that range): {band_text(plan)}")
    if vc.c1.estimate < 0:
        out.append(f"c1's estimate {vc.c1.estimate:.3g} is below 0 (the true c1 is >= 0; taken as 0 in the plan): "
                   f"with B0 = {vc.n_prompts} pilot prompts the differences between prompts' gradients are below the "
                   f"noise")
    need = plan.pilot_prompts_needed
    if not plan.decided:
        out.append(f"a pilot of about {need} prompts (this one: {vc.n_prompts}) would probably decide, wherever c1 "
                   f"lies in that range" if need is not None else
                   f"if c1 is near the bottom of that range even a pilot of {64 * vc.n_prompts} prompts (64x this one) "
                   f"would not decide")
    return "; ".join(out)
