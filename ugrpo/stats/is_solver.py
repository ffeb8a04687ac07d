"""The joint law of ``ustat-is``: a prompt law q and per-prompt group sizes G_x at an expected budget (M56-M57).

Minimise F(q, G) = sum_x a_x(G_x) / q_x over the pool (P prompts) subject to

    q_x >= l (the defensive floor lambda / P, M55),  sum_x q_x = 1,  sum_x q_x G_x <= gbar (= N / B),
    G_x in the candidate sizes ``cands`` (integers g_min..g_max),

where a_x(G) = ||g(x)||^2 + f_x(G) is the second moment of prompt x's estimate with G samples (M53). With the sizes
fixed the problem is convex in q and :func:`law_for_sizes` solves its KKT conditions (M57). Jointly it is a
mixed-integer problem; :func:`solve_joint` maximises the Lagrangian dual (a concave function of two multipliers whose
inner minimum separates over prompts, M56), which bounds the optimum from below, recovers integer sizes from the
dual's minimisers, and closes the remaining gap by branch and bound on the prompts' size ranges. The dual works on the
pool's distinct rows, and its inner root finder snaps to the jumps of its piecewise supergradient (M56; each shortcut
has a module switch below, for the tests and benchmarks that compare it with the search without it). Tests compare
the solver with brute force over every size vector of tiny pools (tests/stats/test_prompt_is.py).

Pure numpy; nothing here knows where the a_x come from (:mod:`ugrpo.stats.prompt_is` builds them).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

__all__ = ["JointSolution", "law_for_sizes", "dual_bound", "solve_joint", "objective"]

_ITERS = 64          # bisection steps in log scale (brackets span < 2^64 in ratio: relative precision ~1e-15)
_GOLDEN = 0.6180339887498949
_TINY = 1e-15        # the smallest a_x relative to the largest (:func:`_check_problem`)
_PATH = 12           # size vectors tried on the path between the dual's cheapest and dearest minimisers
_SNAP_MAX = 4        # the inner root finder locates the jumps of f when at most this many prompts change size
_WARM = True         # the inner root finder starts from the root of the nearest multiplier nu already solved
_SECANT = True       # where Newton's step is refused, the root finder tries false position before bisection
_DISTINCT = 0.8      # the dual works on the distinct rows when there are at most this fraction of them (0: never)


@dataclass(frozen=True)
class JointSolution:
    """A law found by :func:`solve_joint`.

    Attributes
    ----------
    q : (P,) the prompt law (q >= lower, sum 1, expected per-prompt cost sum q G <= gbar)
    sizes : (P,) the integer sizes G_x
    value : F(q, sizes) = sum_x a_x(G_x) / q_x
    bound : a lower bound on the optimum of F (the best node's dual value); value / bound - 1 is the proven gap
    nodes : branch-and-bound nodes solved
    optimal : True when value <= bound (1 + rel_tol), i.e. optimal up to the tolerance
    """

    q: np.ndarray
    sizes: np.ndarray
    value: float
    bound: float
    nodes: int
    optimal: bool


def objective(a: np.ndarray, q: np.ndarray) -> float:
    """F = sum_x a_x / q_x (q > 0)."""
    return float((np.asarray(a, dtype=np.float64) / np.asarray(q, dtype=np.float64)).sum())


def _q_of(a: np.ndarray, c: np.ndarray, lower: float) -> np.ndarray:
    """argmin over q >= lower of a/q + q c (c > 0): max(lower, sqrt(a/c))."""
    return np.maximum(lower, np.sqrt(a / c))


def _h(a: np.ndarray, c: np.ndarray, lower: float) -> np.ndarray:
    """min over q >= lower of a/q + q c: 2 sqrt(a c) when sqrt(a/c) >= lower, else a/lower + lower c (M56)."""
    free = a >= lower**2 * c
    return np.where(free, 2.0 * np.sqrt(a * c), a / lower + lower * c)


def _bisect_log(f, lo: float, hi: float) -> tuple[float, float]:
    """(lo, hi) bracketing the sign change of a non-increasing f (f(lo) >= 0 > f(hi)), bisected in log scale."""
    for _ in range(_ITERS):
        mid = math.sqrt(lo * hi)
        if mid <= lo or mid >= hi:
            break
        if f(mid) >= 0:
            lo = mid
        else:
            hi = mid
    return lo, hi


def _newton_log(f_df, lo: float, hi: float, start: float | None = None, snap=None) -> tuple[float, float]:
    """(lo, hi) bracketing the root of a non-increasing f (f(lo) >= 0 > f(hi)) found by Newton steps in t = log x,
    kept inside the bracket: a Newton step is taken when it lands inside the bracket and is under half the previous
    step, otherwise the bracket is bisected (the safeguard of Numerical Recipes' ``rtsafe``: every step at least
    halves or the bracket does, so it converges; on a flat piece df = 0 bisects). ``f_df(x)`` returns (f, df/dt); at
    a jump of f the bracket closes on the jump.

    ``start``: the first point (default hi; a point outside the bracket is ignored). ``snap(lo_t, hi_t)``: None, or a
    point t (log scale) strictly inside the present bracket to evaluate next instead of the Newton or bisection step
    (the inner dual problem proposes the two sides of the first jump of f in the bracket, so that the bracket closes
    on a jump in two evaluations rather than by some 30 halvings, ``_inner``); the bracket is kept either way, so
    convergence does not depend on what snap proposes."""
    lo_t, hi_t = math.log(lo), math.log(hi)
    t, last = hi_t, hi_t - lo_t
    if start is not None and lo < start < hi:
        t = math.log(start)
    f_lo = f_hi = math.nan  # f at the bracket's ends once evaluated (Illinois: halved while that end stays)
    widths = [hi_t - lo_t] * 2  # the bracket's width two iterations ago and one
    moved = 0  # the end the last evaluation moved: +1 lo, -1 hi
    for _ in range(4 * _ITERS):
        f, df = f_df(math.exp(t))
        if f >= 0:
            lo_t, f_lo = t, f
            if moved == 1:
                f_hi *= 0.5
            moved = 1
        else:
            hi_t, f_hi = t, f
            if moved == -1:
                f_lo *= 0.5
            moved = -1
        if abs(f) <= 1e-13:  # converged on a smooth piece
            return math.exp(t), math.exp(t)
        width = hi_t - lo_t
        if width <= 1e-13:
            break
        at = snap(lo_t, hi_t) if snap is not None else None
        if at is not None and lo_t < at < hi_t:
            last, t = 0.5 * width, at
            widths = [widths[1], width]
            continue
        step = t - f / df if df < 0 else math.nan
        if lo_t < step < hi_t and abs(step - t) < 0.5 * last:
            last, t = abs(step - t), step
        elif _SECANT and f_lo == f_lo and f_hi == f_hi and width <= 0.5 * widths[0]:
            # Newton refused (f is a staircase of many small jumps where its pieces' slope says little): false
            # position on the ends' values (Illinois), kept 1% inside the bracket, while the bracket halves every
            # two iterations (else bisection), so convergence is kept
            frac = min(max(f_lo / (f_lo - f_hi), 0.01), 0.99)
            last, t = 0.5 * width, lo_t + frac * width
        else:
            last, t = 0.5 * width, 0.5 * (lo_t + hi_t)
        widths = [widths[1], width]
    return math.exp(lo_t), math.exp(hi_t)


def _illinois_log(f, lo: float, hi: float, tol: float = 1e-13) -> float:
    """The root of a continuous non-increasing f (f(lo) >= 0 > f(hi)) by the Illinois false position in t = log x
    (superlinear): a point with |f| <= tol, or the bracket's end with f < 0 (the feasible side of a budget)."""
    a, b = math.log(lo), math.log(hi)
    fa, fb = f(lo), f(hi)
    while b - a > 2.0:  # bisect first: f is often flat over most of a wide log bracket, where false position crawls
        t = 0.5 * (a + b)
        ft = f(math.exp(t))
        if ft < 0:
            b, fb = t, ft
        else:
            a, fa = t, ft
    side = 0
    ft = fb
    for _ in range(_ITERS + 40):
        t = b - fb * (b - a) / (fb - fa) if fb != fa else 0.5 * (a + b)
        if not a < t < b:
            t = 0.5 * (a + b)
        ft = f(math.exp(t))
        if ft < 0:
            b, fb = t, ft
            if side == -1:
                fa /= 2
            side = -1
        else:
            a, fa = t, ft
            if side == 1:
                fb /= 2
            side = 1
        if abs(ft) <= tol:  # converged
            return math.exp(t)
        if b - a <= 1e-14:
            break
    return math.exp(b)  # the bracket's end on the feasible side


def _check_problem(a: np.ndarray, lower: float) -> tuple[np.ndarray, float]:
    a = np.asarray(a, dtype=np.float64)
    if not np.isfinite(a).all() or (a < 0).any():
        raise ValueError("the second moments a_x(G) must be finite and >= 0")
    P = a.shape[0]
    if not 0.0 < lower * P <= 1.0 + 1e-12:
        raise ValueError(f"the floor lower = {lower!r} must lie in (0, 1/P] = (0, {1.0 / P}]")
    # a prompt with a_x = 0 would absorb any mass at no cost (the optimum is then a limit): raise it to _TINY of the
    # largest a, which changes F by at most _TINY P / lower of the largest term
    top = float(a.max()) if a.size else 0.0
    return (np.maximum(a, _TINY * top) if top > 0 else a), min(float(lower), 1.0 / P)


def law_for_sizes(a: np.ndarray, sizes: np.ndarray, gbar: float, lower: float) -> tuple[np.ndarray, float] | None:
    """The optimal law for FIXED sizes (M57): (q (P,), F), or None when no law meets the expected budget.

    KKT: q_x = max(lower, sqrt(a_x / (mu + nu G_x))) with mu such that sum q = 1 and nu >= 0 such that
    sum q G <= gbar, with equality when nu > 0. Feasible iff lower sum G + (1 - P lower) min G <= gbar.

    Parameters
    ----------
    a : (P,) a_x(G_x), the prompts' second moments at their sizes
    sizes : (P,) G_x
    gbar : the expected samples per drawn prompt allowed (N / B)
    lower : the floor of q (lambda / P)
    """
    a, lower = _check_problem(a, lower)
    G = np.asarray(sizes, dtype=np.float64)
    P = len(a)
    if lower * G.sum() + (1 - P * lower) * G.min() > gbar * (1 + 1e-12):
        return None
    if P * lower >= 1 - 1e-12 or not (a > 0).any():
        q = np.full(P, 1.0 / P) if P * lower >= 1 - 1e-12 else _cheapest(G, gbar, lower)
        return q, objective(a, q)
    gmin = float(G.min())
    ra = np.sqrt(a)

    def q_at(nu: float) -> np.ndarray:
        # c_x = cm + nu (G_x - gmin), cm = mu + nu gmin > 0; sum q = 1 pins cm (sum q decreases in cm)
        d = nu * (G - gmin)

        def f_df(cm: float) -> tuple[float, float]:
            c = cm + d
            r = ra / np.sqrt(c)
            free = r > lower
            q = np.where(free, r, lower)
            return float(q.sum()) - 1.0, -0.5 * cm * float((ra[free] * c[free] ** -1.5).sum())

        hi = (ra.sum() / (1 - P * lower)) ** 2 * 1.01 + 1e-300
        lo, hi = _newton_log(f_df, hi * 1e-40, hi)
        return np.maximum(lower, ra / np.sqrt(hi + d))

    q = q_at(0.0)
    if (q * G).sum() > gbar * (1 + 1e-12) and G.max() > gmin:  # the budget binds: nu > 0 with sum q G = gbar
        nu_hi = 1.0
        while (q_at(nu_hi) * G).sum() > gbar and nu_hi < 1e300:
            nu_hi *= 16.0
        nu = _illinois_log(lambda v: float((q_at(v) * G).sum()) - gbar, nu_hi * 1e-40, nu_hi, tol=1e-11 * gbar)
        q = q_at(nu)
    q = q / q.sum()
    return q, objective(a, q)


def _cheapest(G: np.ndarray, gbar: float, lower: float) -> np.ndarray:
    """Every a_x = 0 (F = 0 for any law): the floor everywhere and the rest on the smallest size."""
    q = np.full(len(G), lower)
    q[int(np.argmin(G))] += 1.0 - lower * len(G)
    return q


@dataclass(frozen=True)
class _Dual:
    value: float
    sizes: list[np.ndarray]   # candidate size indices (P,) from the minimisers around the dual optimum


@dataclass(frozen=True)
class _Table:
    """What every inner problem of one :func:`dual_bound` shares: a_x(G) / lower, the prompts whose sizes the
    node restricts (the rows of ``mask`` that are not all True), and whether every row of a is non-increasing in
    the size (then each prompt's minimising size is non-decreasing in mu, see ``_inner``)."""

    a_over_lower: np.ndarray   # (P, K)
    cut: np.ndarray            # (n,) row indices
    monotone: bool


def _prepare(table: np.ndarray, mask: np.ndarray, lower: float) -> _Table:
    return _Table(a_over_lower=table / lower, cut=np.flatnonzero(~mask.all(1)),
                  monotone=bool((np.diff(table, axis=1) <= 0).all()))


def _inner(table: np.ndarray, cands: np.ndarray, mask: np.ndarray, nu: float, lower: float,
           pre: _Table | None = None, start: float | None = None, counts: np.ndarray | None = None
           ) -> tuple[float, list[np.ndarray], float]:
    """For fixed nu >= 0: (max over mu of D(mu, nu) + nu gbar, the minimisers' size indices at both ends of the
    maximiser's bracket, the bracket's lower end). c_min = mu + nu g_min > 0 is found in log scale on the
    supergradient sum q - 1 (:func:`_newton_log`, from ``start`` when given: the root at a nearby nu).
    ``pre``: :func:`_prepare` of (table, mask, lower), shared by the calls of one dual (computed here if None).
    ``counts``: each row stands for this many prompts with that row and mask (:func:`_distinct`; None: one each)."""
    U = table.shape[0]  # rows
    P = U if counts is None else float(counts.sum())  # prompts

    def total(v: np.ndarray, sel: np.ndarray | None = None) -> float:  # the sum over prompts of a per-row value
        if counts is None:
            return float(v.sum())
        return float(v @ (counts if sel is None else counts[sel]))

    rows = np.arange(U)
    gmin = float(cands.min())
    dc = nu * (cands - gmin)[None, :]                                           # (1, K)
    if P * lower >= 1 - 1e-12:  # q pinned at 1/P: h = a/l + l c and D does not depend on mu
        h = np.where(mask, table / lower + lower * (nu * cands[None, :]), np.inf)
        k = h.argmin(1)
        return total(h[rows, k]), [k], 1.0
    pre = _prepare(table, mask, lower) if pre is None else pre
    l2 = lower**2

    def argmins(cm: float, sub: np.ndarray | slice = slice(None)) -> tuple[np.ndarray, np.ndarray]:
        # _h(table, c, lower) with the masked sizes at +inf, element for element the same numbers, in fewer passes;
        # ``sub``: only these rows
        c = cm + dc                                                             # (1, K)
        t = table[sub]
        h = np.sqrt(t * c)                                                      # (P, K)
        h *= 2.0
        np.add(pre.a_over_lower[sub], lower * c, out=h, where=t < l2 * c)       # the floor's branch of _h
        cut = pre.cut if isinstance(sub, slice) else np.flatnonzero(~mask[sub].all(1))
        if cut.size:
            h[cut] = np.where(mask[sub][cut], h[cut], np.inf)
        k = h.argmin(1)
        return k, h[np.arange(len(k)), k]

    # The sizes minimising h at the bracket's two ends (the last mu evaluated with sum q >= 1 and the last with
    # sum q < 1). With every a_x(G) non-increasing in G, h(a_x(G_j), c + nu G_j) - h(a_x(G_i), c + nu G_i) is
    # non-increasing in c for G_i < G_j (its derivative is q*(G_j) - q*(G_i) <= 0), so a prompt's minimiser is
    # non-decreasing in mu: a prompt with the same minimiser at both ends has it everywhere between, and only the
    # others (near the root, a few) are searched (tests/stats/test_prompt_is.py compares with the full search).
    bracket: dict[bool, tuple[float, np.ndarray]] = {}  # f >= 0 (lo) / f < 0 (hi): (mu + nu g_min, sizes)

    def sizes_at(cm: float) -> np.ndarray:
        if pre.monotone and len(bracket) == 2 and bracket[True][0] < cm < bracket[False][0]:
            k_lo, k_hi = bracket[True][1], bracket[False][1]
            moving = np.flatnonzero(k_lo != k_hi)
            if moving.size * 2 <= U:
                k = k_lo.copy()
                k[moving] = argmins(cm, moving)[0]
                return k
        return argmins(cm)[0]

    def f_df(cm: float) -> tuple[float, float]:
        k = sizes_at(cm)
        a, c = table[rows, k], cm + dc[0, k]
        r = np.sqrt(a / c)
        free = r > lower
        q = np.where(free, r, lower)
        f = total(q) - 1.0
        bracket[f >= 0] = (cm, k)
        return f, -0.5 * cm * total(np.sqrt(a[free]) * c[free] ** -1.5, free)

    # f jumps where a prompt's minimising size changes. Once the bracket's ends differ in the sizes of a few prompts
    # only, the first such change in the bracket is located on those prompts' rows alone (scalar bisection in t with
    # argmins' arithmetic) and its two sides proposed to the root finder: a root at the jump is then bracketed to
    # the last bit in two evaluations of f, a root before or after it is left on a smooth piece for Newton.
    switches: dict[tuple[int, int], tuple[float, float] | None] = {}

    def switch(x: int, k0: int, k1: int, lo_t: float, hi_t: float) -> tuple[float, float] | None:
        cols = [k for k in range(k0, k1 + 1) if mask[x, k]]
        rows_x = [(float(table[x, k]), float(pre.a_over_lower[x, k]), float(dc[0, k])) for k in cols]

        def stays(t: float) -> bool:  # prompt x's minimising size at exp(t) is still cols[0] (argmin: first minimum)
            cm, best_h, arg = math.exp(t), math.inf, 0
            for j, (tv, al, d) in enumerate(rows_x):
                c = cm + d
                h = al + lower * c if tv < l2 * c else 2.0 * math.sqrt(tv * c)
                if h < best_h:
                    best_h, arg = h, j
            return arg == 0

        if not stays(lo_t) or stays(hi_t):
            return None
        a_t, b_t = lo_t, hi_t
        while True:
            m = 0.5 * (a_t + b_t)
            if m <= a_t or m >= b_t:
                return a_t, b_t
            if stays(m):
                a_t = m
            else:
                b_t = m

    def snap(lo_t: float, hi_t: float) -> float | None:
        if not pre.monotone or len(bracket) < 2:
            return None
        k_lo, k_hi = bracket[True][1], bracket[False][1]
        moving = np.flatnonzero(k_lo != k_hi)
        if not 0 < moving.size <= _SNAP_MAX:
            return None
        first = None
        for x in moving.tolist():
            key = (x, int(k_lo[x]))
            sw = switches.get(key)
            if sw is None or not lo_t <= sw[0] < sw[1] <= hi_t:
                sw = switches[key] = switch(x, int(k_lo[x]), int(k_hi[x]), lo_t, hi_t)
            if sw is not None and (first is None or sw[1] < first[1]):
                first = sw
        if first is None:
            return None
        return first[0] if first[0] > lo_t else (first[1] if first[1] < hi_t else None)

    big = np.where(mask, table, 0.0).max(1)
    hi = (total(np.sqrt(big)) / (1 - P * lower)) ** 2 * 1.01 + 1e-300            # sum q < 1 from here on
    ends = _newton_log(f_df, hi * 1e-40, hi, start=start, snap=snap if _SNAP_MAX > 0 else None)
    best, ks = -math.inf, []
    for cm in ends:
        k, hv = argmins(cm)
        best = max(best, total(hv) - (cm - nu * gmin))
        ks.append(k)
    return best, ks, ends[0]


def _distinct(table: np.ndarray, mask: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(rows, mask, counts, inverse): the distinct (a_x(.), allowed sizes) rows of the pool, how many prompts share
    each, and each prompt's row; (table, mask, None, None) when fewer than a fifth of the rows repeat. Prompts never
    visited share the prior's row (most of a large pool early in training): the dual separates over prompts (M56),
    so its value, sum q and the minimisers are the same over the distinct rows weighted by their counts, at a
    fraction of the work. Rows are grouped by a random projection and the grouping checked against the rows."""
    if _DISTINCT <= 0:
        return table, mask, None, None
    r = np.random.default_rng(0x15D).standard_normal((2, table.shape[1]))
    proj = table @ r[0] + mask @ r[1]
    _, first, inverse, counts = np.unique(proj, return_index=True, return_inverse=True, return_counts=True)
    if len(first) > _DISTINCT * table.shape[0]:
        return table, mask, None, None
    rows, allowed = table[first], mask[first]
    if not (np.array_equal(rows[inverse], table) and np.array_equal(allowed[inverse], mask)):  # a collision
        return table, mask, None, None
    return rows, allowed, counts.astype(np.float64), inverse


def dual_bound(table: np.ndarray, cands: np.ndarray, gbar: float, lower: float,
               mask: np.ndarray | None = None) -> tuple[float, list[np.ndarray]]:
    """(D*, candidate size-index vectors): the Lagrangian dual of the joint problem (M56) and the minimisers' sizes.

    D(mu, nu) = sum_x min_{G allowed} h(a_x(G), mu + nu G) - mu - nu gbar <= the optimum for every mu, nu >= 0
    with mu + nu g_min > 0 (weak duality); concave, so its maximum is found by bisection on mu (for fixed nu, the
    supergradient sum q - 1) inside a golden-section search on nu. ``mask`` (P, K): the sizes each prompt may take
    (branch and bound); ``table`` (P, K) holds a_x(cands[k]).
    """
    table = np.asarray(table, dtype=np.float64)
    cands = np.asarray(cands, dtype=np.float64)
    mask = np.ones(table.shape, bool) if mask is None else mask
    seen: dict[float, tuple[float, list[np.ndarray]]] = {}
    roots: dict[float, float] = {}  # nu -> the inner root c_min, the start for the next nu (nearest first)
    P = table.shape[0]
    table, mask, counts, inverse = _distinct(table, mask)
    pre = _prepare(table, mask, lower)

    def g(nu: float) -> float:
        if nu not in seen:
            start = roots[min(roots, key=lambda v: abs(v - nu))] if _WARM and roots else None
            v, ks, roots[nu] = _inner(table, cands, mask, nu, lower, pre, start, counts)
            seen[nu] = (v - nu * gbar, ks)
        return seen[nu][0]

    # bracket the maximiser of the concave g on [0, inf): grow the step until g falls
    scale = max(float(np.where(mask, table, 0.0).max()), 1e-300) / max(gbar, 1.0) * P**2
    prev, g_prev, b = 0.0, g(0.0), scale * 1e-6
    while g(b) >= g_prev and b < 1e300:
        prev, g_prev, b = b, g(b), b * 4.0
    lo, hi = (prev / 4.0 if prev > scale * 1e-6 else 0.0), b  # concave: the maximiser lies after two steps back
    x1, x2 = hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo)
    for _ in range(120):
        if g(x1) < g(x2):
            lo, x1 = x1, x2
            x2 = lo + _GOLDEN * (hi - lo)
        else:
            hi, x2 = x2, x1
            x1 = hi - _GOLDEN * (hi - lo)
        if hi - lo <= 1e-5 * hi:  # D is flat at its maximum: its value is found to about the square of this
            break
    best_nu = max(seen, key=lambda v: seen[v][0])
    sizes = [k if inverse is None else k[inverse] for nu in {lo, hi, x1, x2, best_nu}
             for k in (seen[nu][1] if nu in seen else [])]
    return seen[best_nu][0], sizes


def _recover(table: np.ndarray, cands: np.ndarray, gbar: float, lower: float, cand_idx: list[np.ndarray]
             ) -> tuple[float, np.ndarray, np.ndarray] | None:
    """The best feasible law among the candidate size vectors and on the path between the cheapest and the dearest
    (the differing prompts moved one at a time: a coarse grid of path points, then a local search around the best)."""
    P = table.shape[0]
    rows = np.arange(P)
    memo: dict[tuple, tuple[float, np.ndarray, np.ndarray] | None] = {}

    def law(k: np.ndarray):
        key = tuple(k)
        if key not in memo:
            got = law_for_sizes(table[rows, k], cands[k], gbar, lower)
            memo[key] = None if got is None else (got[1], k, got[0])
        return memo[key]

    for k in cand_idx:
        law(np.asarray(k))
    ks = sorted({tuple(k) for k in cand_idx}, key=lambda k: float(cands[list(k)].sum()))
    if len(ks) > 1:
        cheap, dear = np.array(ks[0]), np.array(ks[-1])
        diff = np.flatnonzero(cheap != dear)

        def at(n: int):
            cur = cheap.copy()
            cur[diff[:n]] = dear[diff[:n]]
            got = law(cur)
            return math.inf if got is None else got[0]

        grid = np.unique(np.linspace(0, len(diff), min(len(diff) + 1, _PATH)).round().astype(int))
        vals = [at(int(n)) for n in grid]
        n = int(grid[int(np.argmin(vals))])
        step = max(1, int(np.diff(grid).max(initial=1)) // 2)
        while step >= 1:  # local search on the path around the best grid point
            moved = False
            for m in (n - step, n + step):
                if 0 <= m <= len(diff) and at(m) < at(n):
                    n, moved = m, True
            if not moved:
                step //= 2
    found = [v for v in memo.values() if v is not None]
    return min(found, key=lambda v: v[0]) if found else None


def solve_joint(table: np.ndarray, cands: np.ndarray, gbar: float, lower: float, *, rel_tol: float = 1e-4,
                max_nodes: int = 16) -> JointSolution:
    """The joint law (q, G) minimising sum_x a_x(G_x)/q_x under the floor and the expected budget (M56).

    Best-first branch and bound: a node restricts each prompt's sizes to an interval; its bound is :func:`dual_bound`
    on those intervals, its primal the best feasible law among the dual's minimisers (:func:`law_for_sizes`). A node
    whose bound is within ``rel_tol`` of the incumbent is closed; otherwise the first prompt whose size differs between
    the minimisers is split at the smaller of its two sizes. Stops when no open node can improve by more than
    ``rel_tol`` (``optimal``) or after ``max_nodes`` nodes (then ``bound`` is the smallest open bound).

    Parameters
    ----------
    table : (P, K) a_x(cands[k]) (non-increasing in k for the sizes' usual convex f; not required)
    cands : (K,) the allowed sizes, increasing
    gbar : expected samples per drawn prompt (N / B); needs lower sum g_min-ish feasibility: a pool all at the
        smallest size must meet it
    lower : the floor of q (lambda / P)
    """
    table = np.asarray(table, dtype=np.float64)
    cands = np.asarray(cands, dtype=np.float64)
    table, lower = _check_problem(table, lower)
    P, K = table.shape
    if cands.shape != (K,) or (np.diff(cands) <= 0).any():
        raise ValueError(f"cands must be {K} increasing sizes, got {cands.tolist()}")
    if cands[0] > gbar * (1 + 1e-12):
        raise ValueError(f"the expected budget per prompt {gbar} is below the smallest size {int(cands[0])}")
    if P * lower >= 1 - 1e-12:  # lambda = 1: q = 1/P, F = P sum_x a_x(G_x) under sum_x G_x <= P gbar: exact DP
        from .allocation import dp_allocation

        budget = int(math.floor(P * gbar + 1e-9))
        sizes = dp_allocation(table, cands.astype(np.int64), np.ones(P, dtype=np.int64), budget, exact=False)
        k = np.searchsorted(cands, sizes)
        value = float(P * table[np.arange(P), k].sum())
        return JointSolution(q=np.full(P, 1.0 / P), sizes=sizes.astype(np.int64), value=value, bound=value, nodes=0,
                             optimal=True)
    full = np.ones((P, K), bool)
    root_bound, root_sizes = dual_bound(table, cands, gbar, lower, full)
    inc = _recover(table, cands, gbar, lower, root_sizes)
    k_one = int(np.searchsorted(cands, math.floor(gbar + 1e-9), side="right")) - 1  # one size for all, <= gbar
    if k_one >= 0:  # so the joint law is never worse than the best law with one size (the one-G law, M54)
        one = _recover(table, cands, gbar, lower, [np.full(P, k_one)])
        if one is not None and (inc is None or one[0] <= inc[0]):
            inc = one
    heap = [(root_bound, 0, full, root_sizes)]
    nodes, tick = 1, 1
    lows = []  # bounds of the parts of the search space left without a better incumbent than theirs
    while heap:
        bound, _, mask, ks = heapq.heappop(heap)
        if (inc is not None and bound >= inc[0] / (1 + rel_tol)) or nodes >= max_nodes:
            lows.append(bound)  # every open node's bound is at least this one's
            break
        split = _split(ks, mask)
        if split is None:  # the minimisers agree: nothing to branch on, the node's bound stays open
            lows.append(bound)
            continue
        x, k_cut = split
        for side in (np.arange(K) <= k_cut, np.arange(K) > k_cut):
            child = mask.copy()
            child[x] &= side
            b, sz = dual_bound(table, cands, gbar, lower, child)
            b = max(b, bound)  # a child's set lies inside its parent's
            nodes += 1
            got = _recover(table, cands, gbar, lower, sz)
            if got is not None and (inc is None or got[0] < inc[0]):
                inc = got
            if inc is not None and b >= inc[0] / (1 + rel_tol):
                lows.append(b)  # pruned
            else:
                heapq.heappush(heap, (b, tick, child, sz))
                tick += 1
    if inc is None:
        raise ValueError("no law meets the expected budget with these sizes and floor")
    value, k, q = inc
    bound = min(lows + [value])
    return JointSolution(q=q, sizes=cands[k].astype(np.int64), value=float(value), bound=float(bound), nodes=nodes,
                         optimal=value <= bound * (1 + rel_tol) + 1e-300)


def _split(ks: list[np.ndarray], mask: np.ndarray) -> tuple[int, int] | None:
    """(prompt, k_cut): the first prompt whose size index differs among ``ks``, cut at the smaller index."""
    arr = np.stack(ks)                                                            # (n, P)
    differ = np.flatnonzero((arr != arr[0]).any(0))
    for x in differ:
        lo = int(arr[:, x].min())
        if mask[x, : lo + 1].any() and mask[x, lo + 1:].any():
            return int(x), lo
    return None
