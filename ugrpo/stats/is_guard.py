"""The guard of the prompt-IS rules: a law is used only if held-out history does not refute it (docs/math.md M75-M78).

The law of ``uniform-is`` / ``ustat-is`` (:func:`ugrpo.stats.prompt_is.is_law`) is optimal for the moments it is given;
with moments predicted from a thin history it can lose badly to uniform prompts while the posterior promises a gain (on
the tiny language model 1.2-1.3x and 3.7-4x uniform's MSE against a promised 0.27-0.28: docs/lm-mse.md R11), so a
check under that same posterior cannot catch it. This module checks a law against data the law was not fitted on:

* the history keeps its visits in two folds by step parity (:class:`ugrpo.stats.history.PromptHistory` with
  ``held_out=True``), with per visit the unbiased U-statistics T0, T1, T2 (M14-M16) and the visit's importance weight
  w = 1/(P q(x)) of the law that drew it;
* a candidate law is fitted on one fold (the same rule on that fold's posterior) and judged on the other: per visit,
  T0 + (T1 - T0)/G + (T2 + T0)/(G(G-1)) is unbiased for the prompt's second moment a_x(G) (M75), and the
  importance-weighted sums over a fold estimate S(q, G) and uniform's S_u without bias (M76), so their cross-fitted
  ratio R estimates the candidate's second-moment ratio to uniform with a delta-method standard error;
* the candidates, in order (M78): the rule's law from the posterior; for ``ustat-is`` also ``uniform-is``'s; the
  ``uniform-is`` law from the history's own per-prompt estimates shrunk halfway to the pool mean (M77: no population
  model); uniform prompts. The first whose held-out interval R -+ z se (z the ``level`` normal quantile) neither shows a
  loss (lower end above 1 + ``tol``) nor leaves one above :data:`GUARD_CAP` possible (upper end above it) is fitted on
  the whole history and used.

:func:`guarded_law` is the one function the trainer, ``ugrpo allocate``, ``ugrpo sweep --env`` and ``ugrpo mse --model``
call for a law from a history. What it does not do: see M78 (a loss that the held-out visits cannot see, e.g. on
prompts whose risk lies in events rarer than their samples, passes; the check judges laws fitted on half the history).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from .allocation import PromptStats
from .exact_mse import prompt_error
from .predict import Posterior, posterior, posterior_means
from .prompt_is import PromptLaw, is_law

__all__ = ["GUARD_CAP", "OWN_SHRINK", "GUARD_G_MIN", "GuardCheck", "GuardedLaw", "coefficients", "held_out_sums",
           "held_out_ratio", "own_estimates", "guarded_law", "uniform_law"]

GUARD_CAP = 2.0
"""a candidate whose held-out upper bound on R exceeds this is not used: the history cannot rule out that it doubles the
MSE (chosen on instances other than the benchmarks' own: docs/allocation.md A8)"""
OWN_SHRINK = 0.5
"""the own-estimate candidate moves each prompt's T0, T1, T2 halfway to the pool mean (M77)"""
GUARD_G_MIN = 3
"""the held-out U-statistics T1, T2 need three samples per visit, so a guarded rule gives every prompt at least 3"""


def coefficients(G) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(c0, c1, c2) with a_x(G) = c0 E T0 + c1 E T1 + c2 E T2 (M75): ||g||^2 + f(G) with c2(x) = E T1 - E T0 and
    c3(x) = E T2 + E T0 (M16) in :func:`ugrpo.stats.exact_mse.prompt_error`, i.e. 1 - 1/G + 1/(G(G-1)), 1/G, 1/(G(G-1)).

    >>> [float(c) for c in coefficients(2)]  # a(2) = T0 (1 - 1/2 + 1/2) + T1/2 + T2/2
    [1.0, 0.5, 0.5]
    """
    G = np.asarray(G, dtype=np.float64)
    c1, c2 = prompt_error(1.0, 0.0, G), prompt_error(0.0, 1.0, G)
    return 1.0 - c1 + c2, c1, c2


@dataclass(frozen=True)
class GuardCheck:
    """The held-out check of one candidate (M76, M78).

    Attributes
    ----------
    name : the candidate (the rule's name, ``uniform-is``, ``own`` or ``uniform``)
    ratio, se : cross-fitted estimate of S(q, G) / S_u and its delta-method standard error (nan: no held-out data)
    low, high : ratio -+ z se
    kept : the candidate passed (low <= 1 + tol and high <= GUARD_CAP)
    """

    name: str
    ratio: float
    se: float
    low: float
    high: float
    kept: bool


@dataclass(frozen=True)
class GuardedLaw:
    """What :func:`guarded_law` chose.

    Attributes
    ----------
    law : the law to draw from (fitted on the whole history)
    choice : the candidate it came from (``rule``, ``uniform-is``, ``own``, ``uniform``; the rule itself when unguarded)
    checks : the held-out checks made, in order (the last one passed unless ``choice`` is ``uniform``)
    posterior : the predictor's posterior of every prompt from the whole history (for the certificate, M59)
    moments : the moments the law was fitted with (the posterior means, or the own estimates for ``own``)
    """

    law: PromptLaw
    choice: str
    checks: tuple[GuardCheck, ...]
    posterior: Posterior
    moments: PromptStats

    @property
    def fallback(self) -> int:
        """How far down the candidate list the choice is (0: the rule's own law)."""
        return max(0, len(self.checks) - (self.choice != "uniform"))


def uniform_law(P: int, B: int, G: int) -> PromptLaw:
    """Uniform prompts, G samples each: the guard's last candidate (its held-out ratio is 1 exactly)."""
    q = np.full(P, 1.0 / P)
    return PromptLaw("uniform", q, np.full(P, int(G), dtype=np.int64), int(B), 1.0, math.nan, math.nan)


def held_out_sums(law: PromptLaw, fold: dict, G: int) -> tuple[float, float, np.ndarray]:
    """(num, den, (sum u^2, sum u v, sum v^2)) of ``law`` judged on the visits of ``fold`` (M76).

    A visit of prompt x with importance weight w and U-statistics T = (T0, T1, T2) has u = w c(G'_x) . T / (P q'(x))
    and v = w c(G) . T, (q', G') the law and c the :func:`coefficients`; num and den are their sums over the fold's
    visits (E num = n S(q', G') and E den = n S_u for n visits drawn iid from laws that give every prompt q > 0), and
    the squares come from the fold's sums of w^2 T T^T.
    """
    H = np.stack([fold["ht_t0"], fold["ht_t1"], fold["ht_t2"]], 1)                      # (P, 3) sum of w T
    M = np.empty((len(H), 3, 3))                                                       # (P, 3, 3) sum of w^2 T T^T
    for i in range(3):
        for j in range(i, 3):
            M[:, i, j] = M[:, j, i] = fold[f"ht_{i}{j}"]
    cl = np.stack(coefficients(law.sizes), 1) / (law.P * law.q)[:, None]                # (P, 3)
    cu = np.stack(coefficients(G))                                                     # (3,)
    quad = np.array([np.einsum("pi,pij,pj->", cl, M, cl), np.einsum("pi,pij,j->", cl, M, cu),
                     np.einsum("i,pij,j->", cu, M, cu)])
    return float((cl * H).sum()), float((H @ cu).sum()), quad


def held_out_ratio(laws: tuple[PromptLaw, PromptLaw], folds: tuple[dict, dict], G: int) -> tuple[float, float]:
    """Cross-fitted (R, se) of the law fitted on fold k judged on fold 1 - k, k = 0, 1, against uniform's G (M76):
    R = (num_0 + num_1) / (den_0 + den_1) of :func:`held_out_sums`, se^2 = sum over visits of (u - R v)^2 / den^2
    (the delta method for a ratio of sums of independent visits). (nan, nan) when a fold has no visit or den <= 0."""
    if not all(f["visits"].sum() > 0 for f in folds):
        return math.nan, math.nan
    parts = [held_out_sums(laws[k], folds[1 - k], G) for k in (0, 1)]
    num, den = sum(p[0] for p in parts), sum(p[1] for p in parts)
    if not den > 0:
        return math.nan, math.nan
    uu, uv, vv = sum(p[2] for p in parts)
    R = num / den
    return R, math.sqrt(max(uu - 2 * R * uv + R * R * vv, 0.0)) / den


def own_estimates(sums: dict, shrink: float = OWN_SHRINK) -> PromptStats:
    """Each prompt's (||g||^2, c2, c3) from its own visits, no population model (M77): the per-prompt means of the
    unbiased T0, T1, T2 moved a share ``shrink`` toward the pool means sum_x w T / (visits) (importance-weighted, so
    unbiased for the mean over the pool whatever laws drew the visits); a prompt never visited gets the pool means;
    ||g||^2 = T0, c2 = T1 - T0, c3 = T2 + T0, each cut at 0."""
    v = sums["visits"]
    seen = v > 0
    n = float(v.sum())
    T = np.stack([sums["t0_sum"], sums["t1_sum"], sums["t2_sum"]])                 # (3, P)
    pool = np.stack([sums["ht_t0"], sums["ht_t1"], sums["ht_t2"]]).sum(1, keepdims=True) / max(n, 1.0)
    own = np.where(seen, T / np.where(seen, v, 1.0), pool)
    t0, t1, t2 = np.where(seen, (1 - shrink) * own + shrink * pool, pool)
    p = np.where(seen, sums["successes"] / np.maximum(sums["samples"], 1.0),
                 sums["successes"].sum() / max(float(sums["samples"].sum()), 1.0))
    return PromptStats(value=p, c2=np.maximum(t1 - t0, 0.0), c3=np.maximum(t2 + t0, 0.0), g_norm2=np.maximum(t0, 0.0))


def guarded_law(rule: str, history, B: int, N: int, *, lam: float, g_min: int = GUARD_G_MIN,
                g_max: int | None = None, level: float = 0.9, tol: float = 0.0, guard: bool = True) -> GuardedLaw:
    """The law of ``rule`` from a history, guarded by held-out visits (module docstring; docs/math.md M78).

    Parameters
    ----------
    rule : ``uniform-is`` or ``ustat-is``
    history : a :class:`ugrpo.stats.history.PromptHistory` (``held_out=True`` when ``guard``)
    B, N : prompts and (expected) samples per step; the uniform comparison is G = N / B (B must divide N)
    lam, g_min, g_max : the law's floor and size bounds (:func:`ugrpo.stats.prompt_is.is_law`); guarded, g_min >= 3
    level, tol : a candidate is refuted when its held-out lower bound (normal quantile ``level``) exceeds 1 + tol
    guard : False: the posterior's law, unchecked (the rule as in M54-M56)
    """
    post = posterior(history.sums_for_prediction(), scores=True)
    means = posterior_means(post)
    fit = dict(lam=lam, g_min=g_min, g_max=g_max)
    if not guard:
        return GuardedLaw(is_law(rule, means, B, N, **fit), rule, (), post, means)
    if history.folds is None:
        raise ValueError("the prompt-IS guard needs a history with held-out folds (PromptHistory(P, held_out=True))")
    if N % B:
        raise ValueError(f"the prompt-IS guard compares with uniform G = N / B: B = {B} does not divide N = {N}")
    if g_min < GUARD_G_MIN:
        raise ValueError(f"the prompt-IS guard needs g_min >= {GUARD_G_MIN} (its held-out U-statistics), got {g_min}")
    G = N // B
    folds = tuple(history.folds)
    fold_means = None
    z = float(ndtri(level))
    cands = [(rule, "post")] + ([("uniform-is", "post")] if rule == "ustat-is" else []) + [("uniform-is", "own")]
    checks = []
    for r, source in cands:
        if source == "post":
            fold_means = fold_means or [posterior_means(posterior(f, scores=True)) for f in folds]
            fitted = fold_means
        else:
            fitted = [own_estimates(f) for f in folds]
        R, se = held_out_ratio(tuple(is_law(r, m, B, N, **fit) for m in fitted), folds, G)
        lo, hi = R - z * se, R + z * se
        kept = bool(math.isfinite(R) and lo <= 1.0 + tol and hi <= GUARD_CAP)
        name = "own" if source == "own" else r
        checks.append(GuardCheck(name, R, se, lo, hi, kept))
        if kept:
            whole = means if source == "post" else own_estimates(_merged(folds))
            return GuardedLaw(is_law(r, whole, B, N, **fit), name, tuple(checks), post, whole)
    return GuardedLaw(uniform_law(len(means), B, G), "uniform", tuple(checks), post, means)


def _merged(folds: tuple[dict, dict]) -> dict:
    """The two folds' sums added: the whole history's."""
    return {k: folds[0][k] + folds[1][k] for k in folds[0]}
