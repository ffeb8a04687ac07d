"""The inner dual problem of ``ustat-is``'s joint solver (``ugrpo.stats.is_solver._inner``, M56) as first written:
every prompt's h over every size at each mu. Kept as the reference of the fused, bracket-narrowed search that
replaced it (``tests/stats/test_prompt_is.py`` compares them bit for bit; ``benchmarks/bench_is_solver_cost.py``
times both in one run)."""

from __future__ import annotations

import math

import numpy as np

from ugrpo.stats.is_solver import _h, _newton_log


def inner_reference(table, cands, mask, nu, lower, pre=None, start=None, counts=None):
    """The inner dual problem as first written (every prompt's h over every size at each mu, through ``_h``), on
    every row of the pool (``counts`` None)."""
    assert counts is None, "the reference reads every prompt's row (set is_solver._DISTINCT = 0)"
    P = table.shape[0]
    rows = np.arange(P)
    gmin = float(cands.min())
    dc = nu * (cands - gmin)[None, :]
    if P * lower >= 1 - 1e-12:
        h = np.where(mask, table / lower + lower * (nu * cands[None, :]), np.inf)
        k = h.argmin(1)
        return float(h[rows, k].sum()), [k], 1.0

    def argmins(cm):
        h = np.where(mask, _h(table, cm + dc, lower), np.inf)
        k = h.argmin(1)
        return k, h[rows, k]

    def f_df(cm):
        k, _ = argmins(cm)
        a, c = table[rows, k], cm + dc[0, k]
        free = np.sqrt(a / c) > lower
        q = np.where(free, np.sqrt(a / c), lower)
        return float(q.sum()) - 1.0, -0.5 * cm * float((np.sqrt(a[free]) * c[free] ** -1.5).sum())

    big = np.where(mask, table, 0.0).max(1)
    hi = (np.sqrt(big).sum() / (1 - P * lower)) ** 2 * 1.01 + 1e-300
    best, ks = -math.inf, []
    ends = _newton_log(f_df, hi * 1e-40, hi, start=start)
    for cm in ends:
        k, hv = argmins(cm)
        best = max(best, float(hv.sum()) - (cm - nu * gmin))
        ks.append(k)
    return best, ks, ends[0]


def newton_reference(f_df, lo: float, hi: float) -> tuple[float, float]:
    """``is_solver._newton_log`` as first written: a Newton step only when the bracket has shrunk below half its
    width of the step before, which bisection alone never does, so it mostly bisected (about 35-40 evaluations per
    root where the safeguarded Newton of ``_newton_log`` takes 9-22)."""
    lo_t, hi_t = math.log(lo), math.log(hi)
    t, width = hi_t, hi_t - lo_t
    for _ in range(256):
        f, df = f_df(math.exp(t))
        if f >= 0:
            lo_t = t
        else:
            hi_t = t
        if abs(f) <= 1e-13:
            return math.exp(t), math.exp(t)
        if hi_t - lo_t <= 1e-13:
            break
        step = t - f / df if df < 0 else math.nan
        newton = lo_t < step < hi_t and hi_t - lo_t < 0.5 * width
        width = hi_t - lo_t
        t = step if newton else 0.5 * (lo_t + hi_t)
    return math.exp(lo_t), math.exp(hi_t)
