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
from dataclasses import dataclass

import numpy as np

from .allocation import PromptStats, allocate
from .exact_mse import prompt_error

__all__ = ["SafeChoice", "safe_sizes", "check_safety", "BLENDS"]

BLENDS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
"""the blend weights l of the candidates (0: the plug-in sizes, 1: the pooled moments)"""


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


def safe_sizes(stats: PromptStats, c2_draws: np.ndarray, c3_draws: np.ndarray, budget: int,
               group_size: int, *, g_min: int = 2, g_max: int | None = None, tol: float = 0.0, level: float = 0.9,
               blends: tuple[float, ...] = BLENDS) -> SafeChoice:
    """The guarded ``ustat`` sizes for one batch (module docstring; docs/math.md M50).

    Parameters
    ----------
    stats : the B prompts' posterior-mean moments (:func:`ugrpo.stats.predict.predict`)
    c2_draws, c3_draws : (D, B) posterior draws of c2, c3 (:func:`ugrpo.stats.predict.draw`; one row of the true
        moments gives the plain plug-in choice)
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
    c2d, c3d = np.asarray(c2_draws, dtype=np.float64), np.asarray(c3_draws, dtype=np.float64)
    if c2d.ndim != 2 or c2d.shape[1] != B or c3d.shape != c2d.shape:
        raise ValueError(f"c2_draws and c3_draws must be (D, {B}); got {c2d.shape} and {c3d.shape}")
    uni = np.full(B, group_size, dtype=np.int64)
    base = prompt_error(c2d, c3d, uni.astype(np.float64)).sum(1)                     # (D,)
    base = np.where(base > 0, base, 1.0)
    best, plugin_upper = (None, 1.0, uni), None
    best_obj = float(prompt_error(stats.c2, stats.c3, uni.astype(np.float64)).sum())
    for lam in blends:
        mix = PromptStats(value=stats.value, c2=(1 - lam) * stats.c2 + lam * stats.c2.mean(),
                          c3=(1 - lam) * stats.c3 + lam * stats.c3.mean())
        sizes = allocate("ustat", mix, budget, g_min=g_min, g_max=g_max).sizes
        r = prompt_error(c2d, c3d, sizes.astype(np.float64)).sum(1) / base
        upper = float(np.quantile(r, level))
        if lam == blends[0]:
            plugin_upper = upper
        obj = float(prompt_error(stats.c2, stats.c3, sizes.astype(np.float64)).sum())
        if upper <= 1.0 + tol and obj < best_obj:
            best, best_obj = (lam, upper, sizes), obj
    lam, upper, sizes = best
    return SafeChoice(sizes=sizes, blend=lam, upper=upper, plugin_upper=float(plugin_upper), fallback=lam is None)
