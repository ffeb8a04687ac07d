"""Per-prompt group sizes G_b under a sample (or token) budget (docs/math.md M32-M37).

A minibatch of B prompts gets G_b >= 2 samples for prompt b, fixed before that prompt's samples are
drawn. The leave-one-out estimate stays unbiased (M32) and its exact MSE is (M33)

    c1/B + (1/B^2) sum_b f_b(G_b),     f_b(G) = c2(x_b)/G + c3(x_b)/(G(G-1)).

Rules (each a per-prompt objective minimised under the budget):

* ``uniform``  one G = N/B for every prompt
* ``vip``      Neyman-type allocation on the reward variance only: min sum_b p_b(1-p_b)/(G_b - 1)
               (VIP, arXiv 2602.01601, re-implemented from its formula)
* ``knapsack`` max sum_b (1 - p^G - (1-p)^G) p (1-p)^2 (Knapsack RL, arXiv 2509.25849, from its formula)
* ``ustat``    min sum_b f_b(G_b) with the full per-prompt c2/c3 (ours, M33)
* ``uniform-is``, ``ustat-is`` (:data:`IS_RULES`) do not split a drawn batch: they choose a prompt LAW q over the
  pool (one G, or per-prompt G_x) and weight the estimate by 1/(P q(x)) (M52-M57, :mod:`ugrpo.stats.prompt_is`);
  :func:`allocate` refuses them

Samples as the unit (sum_b G_b = N): every objective above is separable and convex in G_b, so the greedy
on marginal gains is exact (M34). Tokens as the unit (sum_b L_b G_b <= T with integer costs L_b): greedy
on gain/cost is not exact (M35); an exact dynamic programme over the budget is used instead.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .exact_mse import PromptMoments, prompt_error, uniform_mse

__all__ = [
    "RULES",
    "BATCH_RULES",
    "IS_RULES",
    "Allocation",
    "PromptStats",
    "prompt_error",
    "predicted_mse",
    "rule_table",
    "greedy_allocation",
    "dp_allocation",
    "allocate",
    "check_batch_rule",
    "best_uniform",
    "prediction_quality",
]

BATCH_RULES: tuple[str, ...] = ("uniform", "vip", "knapsack", "ustat")
"""rules that split N samples over B uniformly drawn prompts (:func:`allocate`, M33-M36)"""
IS_RULES: tuple[str, ...] = ("uniform-is", "ustat-is")
"""prompt importance sampling: a law q over the pool, one G (``uniform-is``) or per-prompt G_x (``ustat-is``), the
estimate weighted by 1/(P q(x)) (M52-M57, :mod:`ugrpo.stats.prompt_is`)"""
RULES: tuple[str, ...] = BATCH_RULES + IS_RULES
"""every allocation rule: the one list the commands, the trainer (which adds ``dynamic``) and the lab read"""
_DP_MAX_CELLS = 30_000_000  # B * (budget + 1) backtracking entries of the token DP


@dataclass(frozen=True)
class PromptStats:
    """What an allocation rule may know about each of B prompts (numpy arrays of shape (B,)).

    Attributes
    ----------
    value : p_b = E[Z | x_b], the success rate (all rules but ``uniform`` need it)
    c2 : tr Sigma_oracle(x_b) (``ustat``)
    c3 : E||W||^2 Var(Z|x_b) + ||g(x_b)||^2 (``ustat``)
    g_norm2 : optional ||g(x_b)||^2, needed only for screening (``allocate(..., screen=True)``, M32)
    """

    value: np.ndarray
    c2: np.ndarray
    c3: np.ndarray
    g_norm2: np.ndarray | None = None

    def __post_init__(self) -> None:
        arrs = [np.asarray(getattr(self, k), dtype=np.float64) for k in ("value", "c2", "c3")]
        for name, a in zip(("value", "c2", "c3"), arrs):
            if a.ndim != 1 or a.shape != arrs[0].shape:
                raise ValueError(f"PromptStats.{name} must have shape (B,) like value; got {a.shape}")
            if not np.isfinite(a).all():
                raise ValueError(f"PromptStats.{name} has non-finite entries")
        if (arrs[1] < 0).any() or (arrs[2] < 0).any():
            raise ValueError("PromptStats.c2 and c3 are second moments and must be >= 0 (clip noisy estimates)")
        if ((arrs[0] < 0) | (arrs[0] > 1)).any():
            raise ValueError("PromptStats.value holds success rates and must lie in [0, 1]")
        for name, a in zip(("value", "c2", "c3"), arrs):
            object.__setattr__(self, name, a)
        if self.g_norm2 is not None:
            g2 = np.asarray(self.g_norm2, dtype=np.float64)
            if g2.shape != arrs[0].shape or not np.isfinite(g2).all() or (g2 < 0).any():
                raise ValueError(f"PromptStats.g_norm2 must be (B,) finite and >= 0; got {g2}")
            object.__setattr__(self, "g_norm2", g2)

    @classmethod
    def from_moments(cls, moments: Sequence[PromptMoments]) -> PromptStats:
        """From exact or estimated :class:`PromptMoments` (c2 = tr_sigma_oracle, c3 = ``m.c3``)."""
        return cls(value=np.array([m.value for m in moments]), c2=np.array([m.tr_sigma_oracle for m in moments]),
                   c3=np.array([m.c3 for m in moments]), g_norm2=np.array([m.g_norm2 for m in moments]))

    def take(self, idx: np.ndarray) -> PromptStats:
        """The stats of the prompts ``idx`` (e.g. a drawn batch of a larger prompt set)."""
        return PromptStats(self.value[idx], self.c2[idx], self.c3[idx],
                           None if self.g_norm2 is None else self.g_norm2[idx])

    def __len__(self) -> int:
        return int(self.value.shape[0])


@dataclass(frozen=True)
class Allocation:
    """The group sizes a rule chose.

    Attributes
    ----------
    rule : the rule's name
    sizes : (B,) int array, G_b
    unit : ``samples`` or ``tokens``
    cost : samples (sum G_b) or tokens (sum L_b G_b) spent
    budget : the budget the rule was given
    """

    rule: str
    sizes: np.ndarray
    unit: str
    cost: int
    budget: int


def _as_stats(moments: PromptStats | Sequence[PromptMoments]) -> PromptStats:
    if isinstance(moments, PromptStats):
        return moments
    return PromptStats.from_moments(list(moments))


def predicted_mse(sizes: Sequence[int] | np.ndarray | Allocation, moments: PromptStats | Sequence[PromptMoments],
                  *, c1: float = 0.0) -> float:
    """c1/B + (1/B^2) sum_b f_b(G_b): the exact MSE of the minibatch LOO estimate given the batch (M33).

    Parameters
    ----------
    sizes : (B,) group sizes, or an :class:`Allocation`
    moments : the B prompts' :class:`PromptStats` or :class:`PromptMoments`
    c1 : the between-prompt variance E||g(X) - g||^2 (M13); 0 gives the within-batch part only

    Examples
    --------
    >>> st = PromptStats(value=np.array([0.5, 0.5]), c2=np.array([1.0, 1.0]), c3=np.array([2.0, 2.0]))
    >>> predicted_mse([2, 2], st, c1=1.0)
    1.25
    """
    G = np.asarray(sizes.sizes if isinstance(sizes, Allocation) else sizes, dtype=np.float64)
    st = _as_stats(moments)
    if G.shape != (len(st),):
        raise ValueError(f"sizes has shape {G.shape} but there are {len(st)} prompts; give one G_b per prompt")
    if (G < 2).any():
        raise ValueError(f"the leave-one-out estimate needs G_b >= 2 for every prompt; got sizes "
                         f"{G.astype(int).tolist()}")
    B = len(st)
    return float(c1 / B + prompt_error(st.c2, st.c3, G).sum() / B**2)


def rule_table(rule: str, stats: PromptStats, g_min: int, g_max: int) -> np.ndarray:
    """(B, g_max - g_min + 1) table F[b, k] of the rule's per-prompt objective at G = g_min + k (minimised).

    ``vip``: p(1-p)/(G-1) (M36); ``knapsack``: -(1 - p^G - (1-p)^G) p (1-p)^2 (M36); ``ustat``: f_b(G) (M33).
    """
    G = np.arange(g_min, g_max + 1, dtype=np.float64)[None, :]
    p = stats.value[:, None]
    if rule == "ustat":
        return prompt_error(stats.c2[:, None], stats.c3[:, None], G)
    if rule == "vip":
        return p * (1 - p) / (G - 1)
    if rule == "knapsack":
        return -(1 - p**G - (1 - p) ** G) * p * (1 - p) ** 2
    check_batch_rule(rule)
    raise ValueError(f"rule {rule!r} has no per-prompt table")


def greedy_allocation(table: np.ndarray, g_min: int, budget: int) -> np.ndarray:
    """Exact minimiser of sum_b F[b, G_b - g_min] subject to sum_b G_b = budget, for F convex in G (M34).

    Starts every prompt at g_min and hands out the remaining budget - B g_min samples by decreasing marginal
    gain F[b, k] - F[b, k+1]; vectorised as one stable sort of all B (K-1) gains.
    """
    B, K = table.shape
    extra = budget - B * g_min
    if extra < 0 or extra > B * (K - 1):
        raise ValueError(f"budget {budget} cannot be split over {B} prompts with {g_min} <= G_b <= {g_min + K - 1}")
    gains = table[:, :-1] - table[:, 1:]                                  # (B, K-1)
    if extra == 0:
        return np.full(B, g_min, dtype=np.int64)
    order = np.argsort(-gains.ravel(), kind="stable")[:extra]
    counts = np.bincount(order // (K - 1), minlength=B)
    return g_min + counts


def dp_allocation(table: np.ndarray, g_min: int | np.ndarray, costs: np.ndarray, budget: int, *,
                  exact: bool) -> np.ndarray:
    """Exact minimiser of sum_b F[b, k_b] subject to sum_b costs_b G_b = budget (``exact``) or <= budget.

    Column k of ``table`` is the group size g_min + k, or ``g_min[k]`` when ``g_min`` is an array of allowed
    sizes (screening adds the size 0, M32). Dynamic programme over (prompt, budget used), O(B K budget) time and
    O(B budget) memory; any F (M35). Integer costs; their greatest common divisor is factored out first.
    """
    B, K = table.shape
    choices = np.asarray(g_min, dtype=np.int64) if np.ndim(g_min) else int(g_min) + np.arange(K)
    costs = np.asarray(costs, dtype=np.int64)
    unit = int(np.gcd.reduce(costs))
    costs, budget = costs // unit, budget // unit
    if B * (budget + 1) > _DP_MAX_CELLS:
        raise ValueError(f"the token budget is too fine for the exact programme ({B} prompts x {budget + 1} budget "
                         f"steps > {_DP_MAX_CELLS}); measure lengths in coarser units (e.g. blocks of 16 tokens)")
    best = np.full(budget + 1, np.inf)
    best[0] = 0.0
    choice = np.full((B, budget + 1), -1, dtype=np.int32)
    for b in range(B):
        new = np.full(budget + 1, np.inf)
        for k in range(K):
            c = int(costs[b]) * int(choices[k])
            if c > budget:
                continue
            cand = best[: budget + 1 - c] + table[b, k]
            better = cand < new[c:]
            new[c:][better] = cand[better]
            choice[b, c:][better] = k
        best = new
    t = budget if exact else int(np.argmin(best))
    if not np.isfinite(best[t]):
        raise ValueError(f"no allocation with sizes in {choices.tolist()} spends exactly the budget "
                         f"{budget * unit}; change the budget or the bounds")
    sizes = np.zeros(B, dtype=np.int64)
    for b in range(B - 1, -1, -1):
        k = int(choice[b, t])
        sizes[b] = choices[k]
        t -= int(costs[b]) * int(choices[k])
    return sizes


def _check_int(v: object, name: str, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    return int(v)


def check_batch_rule(rule: str) -> None:
    """A ValueError unless ``rule`` splits a drawn batch (:data:`BATCH_RULES`); the prompt-IS rules are named."""
    if rule in IS_RULES:
        raise ValueError(f"rule {rule!r} does not split a drawn batch: it chooses the law the prompts are drawn from "
                         "(ugrpo.stats.prompt_is.is_law, docs/math.md M52-M57)")
    if rule not in BATCH_RULES:
        raise ValueError(f"unknown allocation rule {rule!r}; choose one of {list(RULES)}")


def allocate(rule: str, moments: PromptStats | Sequence[PromptMoments], budget: int, *, g_min: int = 2,
             g_max: int | None = None, unit: str = "samples", lengths: Sequence[int] | None = None,
             screen: bool = False) -> Allocation:
    """Group sizes G_b for B prompts under a budget, by one of :data:`RULES` (docs/math.md M33-M36).

    Parameters
    ----------
    rule : ``uniform``, ``vip``, ``knapsack`` or ``ustat``
    moments : the B prompts' :class:`PromptStats` (or :class:`PromptMoments`)
    budget : N samples (``unit="samples"``: sum_b G_b = N exactly) or T tokens (``unit="tokens"``:
        sum_b L_b G_b <= T)
    g_min, g_max : bounds on every G_b (g_min >= 2: the LOO estimate needs two samples); g_max default: budget
    unit : ``samples`` or ``tokens``
    lengths : (B,) positive integer costs L_b (tokens per sample of prompt b); required for ``tokens``
    screen : ``ustat`` only, never the default: also allow G_b = 0 (drop the prompt), priced at its squared bias
        ||g(x_b)||^2 against the batch target (needs ``moments.g_norm2``). Dropping is **biased** unless
        g(x_b) = 0 (M32); the price is exact only when the dropped prompts' gradients are mutually orthogonal.

    Returns
    -------
    Allocation

    Examples
    --------
    >>> st = PromptStats(value=np.array([0.5, 0.01]), c2=np.array([4.0, 0.1]), c3=np.array([4.0, 0.1]))
    >>> allocate("ustat", st, 12).sizes.tolist()
    [10, 2]
    """
    check_batch_rule(rule)
    if unit not in ("samples", "tokens"):
        raise ValueError(f"unknown budget unit {unit!r}; choose 'samples' or 'tokens'")
    st = _as_stats(moments)
    B = len(st)
    if B < 1:
        raise ValueError("no prompts to allocate to")
    budget = _check_int(budget, "budget", 1)
    g_min = _check_int(g_min, "g_min", 2)
    g_max = budget if g_max is None else _check_int(g_max, "g_max", 2)
    if g_max < g_min:
        raise ValueError(f"g_max = {g_max} is below g_min = {g_min}; raise g_max or lower g_min")
    if unit == "samples":
        if lengths is not None:
            raise ValueError("lengths are only used with unit='tokens'")
        costs = np.ones(B, dtype=np.int64)
    else:
        if lengths is None:
            raise ValueError("a token budget needs lengths: the expected tokens per sample of each prompt (L_b)")
        costs = np.asarray(lengths)
        if costs.shape != (B,) or not np.issubdtype(costs.dtype, np.integer) or (costs < 1).any():
            raise ValueError(f"lengths must be {B} positive integers (tokens per sample), got {list(lengths)}")
    g_max = min(g_max, budget // int(costs.min()))
    need = int(costs.sum()) * g_min
    if need > budget:
        raise ValueError(f"budget {budget} {unit} is below the minimum {need} = g_min {g_min} for each of {B} "
                         f"prompts; raise the budget, lower g_min or use fewer prompts")
    if unit == "samples" and budget > B * g_max:
        raise ValueError(f"budget {budget} exceeds B * g_max = {B} * {g_max}; raise g_max or use more prompts")
    if rule == "uniform":
        return _uniform(st, budget, g_min, g_max, unit, costs)
    table = rule_table(rule, st, g_min, g_max)
    if screen:
        if rule != "ustat" or st.g_norm2 is None:
            raise ValueError("screen=True (dropping prompts, G_b = 0) is defined for rule 'ustat' with "
                             "PromptStats.g_norm2 (the squared bias of a dropped prompt); got rule "
                             f"{rule!r}{' without g_norm2' if st.g_norm2 is None else ''}")
        choices = np.concatenate([[0], np.arange(g_min, g_max + 1)])
        sizes = dp_allocation(np.concatenate([st.g_norm2[:, None], table], axis=1), choices, costs, budget,
                              exact=unit == "samples")
    elif unit == "samples":
        sizes = greedy_allocation(table, g_min, budget)
    else:
        sizes = dp_allocation(table, g_min, costs, budget, exact=False)
    return Allocation(rule=rule + ("+screen" if screen else ""), sizes=sizes, unit=unit,
                      cost=int((costs * sizes).sum()), budget=budget)


def _uniform(st: PromptStats, budget: int, g_min: int, g_max: int, unit: str, costs: np.ndarray) -> Allocation:
    B = len(st)
    G = budget // int(costs.sum())
    if unit == "samples" and budget % B:
        raise ValueError(f"uniform: B = {B} prompts do not divide the budget N = {budget}; choose N = B * G")
    if not g_min <= G <= g_max:
        raise ValueError(f"uniform: G = {G} is outside [{g_min}, {g_max}]")
    sizes = np.full(B, G, dtype=np.int64)
    return Allocation(rule="uniform", sizes=sizes, unit=unit, cost=int((costs * sizes).sum()), budget=budget)


def best_uniform(c1: float, c2: float, c3: float, budget: int, *, g_min: int = 2,
                 g_max: int | None = None) -> tuple[int, float]:
    """(G, MSE) of the best single G dividing N = budget: argmin of c1/B + c2/(BG) + c3/(BG(G-1)), B = N/G (M11)."""
    g_max = budget if g_max is None else g_max
    cands = [G for G in range(max(2, g_min), min(budget, g_max) + 1) if budget % G == 0]
    if not cands:
        raise ValueError(f"no group size in [{g_min}, {g_max}] divides the budget {budget}")
    mses = [uniform_mse(c1, c2, c3, budget, G) for G in cands]
    i = int(np.argmin(mses))
    return cands[i], float(mses[i])



def prediction_quality(pred: PromptStats, true: PromptStats) -> dict:
    """How well the predicted per-prompt error f_b(4) tracks the true one (rank and log-scale agreement)."""
    fp = prompt_error(pred.c2, pred.c3, np.full(len(true), 4))
    ft = prompt_error(true.c2, true.c3, np.full(len(true), 4))
    rank = lambda v: np.argsort(np.argsort(v)).astype(float)  # noqa: E731
    spearman = float(np.corrcoef(rank(fp), rank(ft))[0, 1]) if len(ft) > 2 else None
    ok = (fp > 0) & (ft > 0)  # a prompt whose rewards never vary has f = 0: no log ratio (None when none is left)
    return {"spearman_f4": spearman,
            "median_abs_log_ratio_f4": float(np.median(np.abs(np.log(fp[ok] / ft[ok])))) if ok.any() else None,
            "mean_pred_over_true_f4": float(fp.mean() / ft.mean()) if ft.mean() > 0 else None}
