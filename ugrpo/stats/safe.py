"""The safe allocation: sizes that cannot be worse than uniform G under the posterior (docs/math.md M50).

The plug-in greedy of a rule minimises M33's within-batch error at the posterior-mean moments; because the error is
linear in (c2, c3) that is the Bayes choice for the posterior MEAN of the MSE, and its losses come from a wrong
posterior. The guard (:func:`safe_sizes`) therefore compares a few candidates against uniform G under posterior
draws: the plug-in sizes, the plug-in sizes for the blended moments (1 - l) c_b + l cbar (l on a grid; cbar the
batch mean, so l = 1 gives uniform G), and uniform G itself. It keeps the candidates whose posterior ``level``
quantile of R = sum_b f_b(G_b) / sum_b f_b(G) is at most 1 + ``tol`` and returns the one with the smallest posterior
mean error; uniform G always qualifies (R = 1 in every draw), so

* the posterior mean of the chosen sizes' error is at most uniform's, and
* the posterior probability that they are worse than uniform by more than a factor 1 + tol is at most 1 - level.

Both statements are about the posterior; how often they hold for the true moments is measured
(benchmarks/bench_allocation.py, bench_certificate_calibration.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .allocation import PromptStats, allocate, check_batch_rule
from .exact_mse import prompt_error
from .predict import Posterior, draw_mixture, posterior_means

__all__ = ["SafeChoice", "safe_sizes", "choose_sizes", "check_safety", "BLENDS", "SAFE_TOL", "SAFE_LEVEL",
           "GUARD_DRAWS"]

BLENDS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
"""the blend weights l of the candidates (0: the plug-in sizes, 1: the pooled moments)"""
SAFE_TOL = 0.0
"""default tolerance: the chosen sizes' posterior quantile of R may not exceed 1"""
SAFE_LEVEL = 0.9
"""default posterior quantile the guard bounds"""
GUARD_DRAWS = 400
"""posterior draws per batch for the guard"""


@dataclass(frozen=True)
class SafeChoice:
    """What the guard chose.

    Attributes
    ----------
    sizes : (B,) the chosen G_b
    blend : the blend weight l of the chosen candidate (None: uniform G, no candidate passed and improved on it)
    upper : the posterior ``level`` quantile of R for the chosen sizes (1.0 for uniform)
    plugin_upper : the same quantile for the unblended plug-in sizes (l = 0)
    fallback : True when the sizes are uniform G
    """

    sizes: np.ndarray
    blend: float | None
    upper: float
    plugin_upper: float
    fallback: bool


def check_safety(tol: float, level: float, where: str = "allocation") -> None:
    """A ValueError naming the field unless 0 <= tol < 1 and 0.5 <= level < 1."""
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not (0.0 <= tol < 1.0) or not math.isfinite(tol):
        raise ValueError(f"{where}.safe_tol={tol!r} must be a number in [0, 1): the allowed posterior excess of the "
                         "chosen sizes' MSE over uniform G (0.02 = 2%)")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not (0.5 <= level < 1.0):
        raise ValueError(f"{where}.safe_level={level!r} must be a number in [0.5, 1): the posterior quantile the "
                         "guard bounds (0.9 = the 90% quantile)")


def safe_sizes(stats: PromptStats, c2_draws, c3_draws, budget: int, group_size: int, *, g_min: int = 2,
               g_max: int | None = None, tol: float = 0.0, level: float = 0.9,
               blends: tuple[float, ...] = BLENDS) -> SafeChoice:
    """The guarded ``ustat`` sizes for one batch (module docstring; docs/math.md M50).

    Parameters
    ----------
    stats : the B prompts' posterior-mean moments (:func:`ugrpo.stats.predict.predict`)
    c2_draws, c3_draws : (D, B) posterior draws of c2, c3 (:func:`ugrpo.stats.predict.draw`; one row of the true
        moments gives the plain plug-in choice), or lists of such arrays, one per posterior: a candidate must then
        pass under every one of them (a robust guard over a set of priors)
    budget, group_size : N = B G samples and the uniform G
    g_min, g_max : bounds on every G_b
    tol, level : the guard (:func:`check_safety`)
    blends : the blend weights of the candidates

    Examples
    --------
    >>> st = PromptStats(value=np.array([0.5, 0.01]), c2=np.array([4.0, 0.1]), c3=np.array([4.0, 0.1]))
    >>> safe_sizes(st, st.c2[None], st.c3[None], 12, 6).sizes.tolist()  # certain moments: the plug-in
    [10, 2]
    """
    check_safety(tol, level)
    B = len(stats)
    if budget != B * group_size:
        raise ValueError(f"the guard compares against uniform G = {group_size}: the budget must be B G = "
                         f"{B * group_size}, got {budget}")
    sets = list(zip(c2_draws, c3_draws)) if isinstance(c2_draws, list) else [(c2_draws, c3_draws)]
    sets = [(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)) for a, b in sets]
    for c2d, c3d in sets:
        if c2d.ndim != 2 or c2d.shape[1] != B or c3d.shape != c2d.shape:
            raise ValueError(f"c2_draws and c3_draws must be (D, {B}); got {c2d.shape} and {c3d.shape}")
    uni = np.full(B, group_size, dtype=np.float64)
    bases = [np.maximum(prompt_error(c2d, c3d, uni).sum(1), 1e-300) for c2d, c3d in sets]       # (D,) each
    best, plugin_upper = (None, 1.0, uni.astype(np.int64)), None
    best_obj = float(prompt_error(stats.c2, stats.c3, uni).sum())
    for lam in blends:
        mix = PromptStats(value=stats.value, c2=(1 - lam) * stats.c2 + lam * stats.c2.mean(),
                          c3=(1 - lam) * stats.c3 + lam * stats.c3.mean())
        sizes = allocate("ustat", mix, budget, g_min=g_min, g_max=g_max).sizes
        upper = max(float(np.quantile(prompt_error(c2d, c3d, sizes.astype(np.float64)).sum(1) / base, level))
                    for (c2d, c3d), base in zip(sets, bases))
        if lam == blends[0]:
            plugin_upper = upper
        obj = float(prompt_error(stats.c2, stats.c3, sizes.astype(np.float64)).sum())
        if upper <= 1.0 + tol and obj < best_obj:
            best, best_obj = (lam, upper, sizes), obj
    lam, upper, sizes = best
    return SafeChoice(sizes=sizes, blend=lam, upper=upper, plugin_upper=float(plugin_upper), fallback=lam is None)


def choose_sizes(rule: str, known: Posterior | PromptStats, budget: int, group_size: int, *, g_min: int = 2,
                 g_max: int | None = None, tol: float = SAFE_TOL, level: float = SAFE_LEVEL,
                 draws: int = GUARD_DRAWS, rng: np.random.Generator | None = None,
                 draws_from: Sequence[Posterior] | None = None, reference: Posterior | None = None
                 ) -> tuple[np.ndarray, SafeChoice | None]:
    """The sizes a rule uses for one batch of B prompts, as in the trainer (docs/allocation.md A1; M50).

    ``uniform``: G for every prompt. ``vip``, ``knapsack``: their plug-in sizes at the posterior means of p.
    ``ustat``: :func:`safe_sizes` with ``draws`` posterior draws when ``known`` is the predictor's
    :class:`~ugrpo.stats.predict.Posterior`; with known moments (:class:`PromptStats`, e.g. the exact ones) the
    posterior is a point mass and the guard returns the plug-in sizes. ``draws_from``: draw from these posteriors
    of the same prompts instead (bootstrap replicates of the population model, M51); ``reference``: a second
    posterior of the same prompts (e.g. under a vague p prior) under which every candidate must pass as well.
    Returns (sizes (B,), the guard's choice or None).
    """
    check_batch_rule(rule)
    B = len(known)
    if rule == "uniform":
        return np.full(B, group_size, dtype=np.int64), None
    stats = posterior_means(known) if isinstance(known, Posterior) else known
    if rule != "ustat":
        return allocate(rule, stats, budget, g_min=g_min, g_max=g_max).sizes, None
    if isinstance(known, Posterior):
        rng = rng if rng is not None else np.random.default_rng(0)
        c2d, c3d = draw_mixture(draws_from if draws_from else known, rng, draws)
        if reference is not None:
            r2, r3 = draw_mixture(reference, rng, draws)
            c2d, c3d = [c2d, r2], [c3d, r3]
    else:
        c2d, c3d = stats.c2[None], stats.c3[None]
    choice = safe_sizes(stats, c2d, c3d, budget, group_size, g_min=g_min, g_max=g_max, tol=tol, level=level)
    return choice.sizes, choice
