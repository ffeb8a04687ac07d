"""Prompt importance sampling with per-prompt group sizes (docs/math.md M52-M58).

Every batch rule (:data:`ugrpo.stats.allocation.BATCH_RULES`) draws the step's B prompts uniformly, so the c1/B part
of the MSE and the samples spent on prompts whose groups are all right or all wrong are the same for all of them.
The prompt-IS rules draw the B prompts iid (with replacement) from a law q over the pool of P prompts, fixed before
the step from the history only, give prompt x its G_x samples and weight its leave-one-out estimate by
w(x) = 1/(P q(x)):

    ghat = (1/B) sum_b w(X_b) ghat(X_b),       E ghat = (1/P) sum_x g(x) for ANY q > 0           (M52)
    MSE  = (1/B) [ sum_x a_x(G_x) / (P^2 q(x)) - ||g||^2 ],   a_x(G) = ||g(x)||^2 + f_x(G)           (M53)

at an expected cost of B sum_x q(x) G_x samples (f_x from :func:`ugrpo.stats.exact_mse.prompt_error`).

* ``uniform-is``: one G (cost exactly N = B G), q(x) proportional to sqrt(a_x(G)) (M54) under the defensive floor
  q(x) >= lambda / P (M55): :func:`floor_law`;
* ``ustat-is``: q and G_x jointly at expected cost N (M56): :func:`ugrpo.stats.is_solver.solve_joint`; or, at EXACT
  cost N (``is_spend="exact"``, M88), the same q and, for each drawn batch, the sizes of :func:`exact_spend_sizes`.

Both are **unbiased for the uniform-prompt objective** (1/P) sum_x J(x), whatever q is, as long as q > 0 everywhere
(a prompt with q(x) = 0 would lose its gradient: :func:`check_law` refuses it). The weights raise the variance where q
is small; the floor bounds them by 1/lambda and the MSE by M55's bound whatever the predictions were. A prompt never
visited gets the population's prediction (the predictor's unseen-prompt rule, M49), hence the same q as any other
unseen prompt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .allocation import IS_RULES, PromptStats, greedy_allocation, rule_table
from .exact_mse import prompt_error
from .is_solver import solve_joint

__all__ = ["IS_LAMBDA", "IS_SPEND", "PromptLaw", "exact_spend_sizes", "batch_sizes", "between_mse", "within_mse",
           "check_lambda", "check_law", "second_moments", "second_moment", "is_mse", "floor_law", "is_law", "ess",
           "entropy", "step_metrics", "mixture_bound"]

IS_LAMBDA = 0.1
"""default defensive floor: q(x) >= lambda / P, so every weight 1/(P q(x)) is at most 1/lambda (M55)"""


IS_SPEND: tuple[str, ...] = ("expected", "exact")
"""how ``ustat-is`` spends the N samples of a step: ``expected`` (M56's joint law: G_x per prompt, B sum_x q(x) G_x = N
on average) or ``exact`` (M88: q of the joint law, then the drawn batch's sizes split exactly N)"""


def check_lambda(lam: float, where: str = "allocation.is_lambda") -> float:
    """``lam`` as a float; a ValueError naming ``where`` unless 0 < lam <= 1."""
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not math.isfinite(lam) or not 0.0 < lam <= 1.0:
        raise ValueError(f"{where}={lam!r} must be a number in (0, 1]: the defensive share of the uniform law in q "
                         "(q(x) >= lambda/P, weights <= 1/lambda; 1 = uniform prompts)")
    return float(lam)


def check_law(q, where: str = "q") -> np.ndarray:
    """``q`` as a (P,) float64 law; a ValueError naming ``where`` and the first bad prompt unless every q(x) is finite
    and > 0 and they sum to 1 (M52: a prompt with q(x) = 0 is never drawn and its gradient is lost, a bias)."""
    q = np.asarray(q, dtype=np.float64)
    if q.ndim != 1 or q.size == 0:
        raise ValueError(f"{where} must be a (P,) array of prompt probabilities, got shape {q.shape}")
    bad = np.flatnonzero(~np.isfinite(q) | (q <= 0))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{where}[{i}] = {float(q[i])!r}: every prompt needs q(x) > 0, else its gradient is never "
                         "drawn and the weighted estimate is biased (M52); mix in the uniform law (lambda > 0)")
    if abs(float(q.sum()) - 1.0) > 1e-9:
        raise ValueError(f"{where} sums to {float(q.sum())!r}, not 1")
    return q


def _g2(stats: PromptStats) -> np.ndarray:
    if stats.g_norm2 is None:
        raise ValueError("the prompt-IS rules need each prompt's ||g(x)||^2 (PromptStats.g_norm2): the second moment "
                         "of its estimate is ||g(x)||^2 + f_x(G) (M53)")
    return stats.g_norm2


def second_moments(stats: PromptStats, sizes) -> np.ndarray:
    """(..., P) a_x(G_x) = ||g(x)||^2 + f_x(G_x): E||ghat(x)||^2 with G_x samples (M9, M53); broadcasts over
    leading axes of ``sizes``."""
    return _g2(stats) + prompt_error(stats.c2, stats.c3, np.asarray(sizes, dtype=np.float64))


def second_moment(q, sizes, stats: PromptStats) -> float:
    """S(q, G) = sum_x a_x(G_x) / (P^2 q(x)) = E||w(X) ghat(X)||^2 for one draw X ~ q (M53)."""
    q = check_law(q)
    return float((second_moments(stats, sizes) / q).sum() / len(q) ** 2)


def is_mse(q, sizes, B: int, stats: PromptStats, g_norm2: float) -> float:
    """Exact MSE of the weighted estimate with B prompts drawn iid from q (M53): (1/B) (S(q, G) - ||g||^2).

    ``g_norm2`` is ||g||^2 for g = (1/P) sum_x g(x). With q = 1/P and one G this is M11's c1/B + c2/(BG) +
    c3/(BG(G-1)).
    """
    return (second_moment(q, sizes, stats) - float(g_norm2)) / int(B)


def floor_law(a: np.ndarray, lam: float) -> np.ndarray:
    """argmin of sum_x a_x / q_x over laws with q >= lam / P (M54-M55): q_x = max(lam/P, sqrt(a_x)/c), c such that
    the law sums to 1 (water-filling); lam = 1 or all a_x = 0: uniform.

    >>> floor_law(np.array([4.0, 1.0, 0.0, 0.0]), 0.2).round(4).tolist()  # sqrt(a) = 2, 1 share the 0.9 left
    [0.6, 0.3, 0.05, 0.05]
    """
    a = np.asarray(a, dtype=np.float64)
    P = len(a)
    lower = check_lambda(lam, "lambda") / P
    s = np.sqrt(np.maximum(a, 0.0))
    if lam >= 1.0 or s.sum() == 0:
        return np.full(P, 1.0 / P)
    free = s > 0
    for _ in range(P):
        c = s[free].sum() / (1.0 - lower * (P - free.sum()))
        drop = free & (s / c < lower)
        if not drop.any():
            break
        free &= ~drop
    q = np.where(free, s / c, lower)
    return q / q.sum()


@dataclass(frozen=True)
class PromptLaw:
    """A prompt-IS law over the pool: q, per-prompt sizes, the batch size (M52-M56).

    Attributes
    ----------
    rule : ``uniform-is`` or ``ustat-is``
    q : (P,) the law the B prompts are drawn from (q >= lam / P)
    sizes : (P,) G_x, the samples a drawn prompt gets
    B : prompts per step
    lam : the defensive floor's lambda (M55)
    second_moment : S(q, G) at the moments the law was chosen with (the rule's objective, M53)
    bound : a lower bound on S over every law the rule may choose (the joint solver's dual bound, M56; for
        ``uniform-is`` the exact optimum, so equal to ``second_moment``)
    optimal : the law is optimal up to the solver's tolerance
    """

    rule: str
    q: np.ndarray
    sizes: np.ndarray
    B: int
    lam: float
    second_moment: float
    bound: float
    optimal: bool = True

    @property
    def P(self) -> int:
        return int(len(self.q))

    @property
    def expected_samples(self) -> float:
        """B sum_x q(x) G_x: the expected samples per step (M53)."""
        return float(self.B * (self.q * self.sizes).sum())

    def weights(self, prompts: np.ndarray) -> np.ndarray:
        """(B,) w = 1/(P q(x_b)) of the drawn prompts (M52)."""
        return 1.0 / (self.P * self.q[np.asarray(prompts, dtype=np.int64)])

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """(B,) prompt indices iid from q (with replacement, M52)."""
        return rng.choice(self.P, size=self.B, replace=True, p=self.q)


def is_law(rule: str, stats: PromptStats, B: int, N: int, *, lam: float = IS_LAMBDA, g_min: int = 2,
           g_max: int | None = None, rel_tol: float = 1e-3, max_nodes: int = 8) -> PromptLaw:
    """The law of ``rule`` for the pool whose per-prompt moments are ``stats`` (posterior means or exact; M54-M56).

    Parameters
    ----------
    rule : ``uniform-is`` (one G = N / B; B must divide N) or ``ustat-is`` (per-prompt G_x at expected cost N)
    stats : (P,) the pool's p, c2, c3 and ||g(x)||^2 (``g_norm2`` required)
    B, N : prompts per step and (expected) samples per step
    lam : the defensive floor (0, 1] (M55)
    g_min, g_max : the sizes ``ustat-is`` may give (default g_max: 4 N / B)
    rel_tol, max_nodes : the joint solver's tolerance and node limit (:func:`ugrpo.stats.is_solver.solve_joint`)
    """
    if rule not in IS_RULES:
        raise ValueError(f"unknown prompt-IS rule {rule!r}; choose one of {list(IS_RULES)}")
    lam = check_lambda(lam, "lambda")
    P = len(stats)
    if P < 1:
        raise ValueError("the prompt pool is empty")
    if isinstance(B, bool) or not isinstance(B, (int, np.integer)) or B < 1 or N < 2 * B:
        raise ValueError(f"need B >= 1 prompts and N >= 2 B samples per step, got B = {B}, N = {N}")
    if rule == "uniform-is":
        if N % B:
            raise ValueError(f"uniform-is: B = {B} prompts do not divide N = {N}; choose N = B G")
        G = N // B
        sizes = np.full(P, G, dtype=np.int64)
        q = floor_law(second_moments(stats, G), lam)
        S = second_moment(q, sizes, stats)
        return PromptLaw(rule, q, sizes, int(B), lam, S, S)
    gbar = N / B
    g_max = int(g_max if g_max is not None else 4 * math.ceil(gbar))
    if not 2 <= g_min <= gbar <= g_max:
        raise ValueError(f"ustat-is: need 2 <= g_min = {g_min} <= N/B = {gbar:g} <= g_max = {g_max}")
    cands = np.arange(g_min, g_max + 1)
    table = second_moments(stats, cands[:, None].astype(np.float64)).T                     # (P, K)
    sol = solve_joint(table, cands, gbar, lam / P, rel_tol=rel_tol, max_nodes=max_nodes)
    S = second_moment(sol.q, sol.sizes, stats)
    return PromptLaw(rule, sol.q, sol.sizes, int(B), lam, S, sol.bound / P**2, sol.optimal)


def ess(weights: np.ndarray) -> float:
    """Kish's effective sample size (sum w)^2 / sum w^2 of the step's weights, in [1, B] (B: equal weights; M58)."""
    w = np.asarray(weights, dtype=np.float64)
    return float(w.sum() ** 2 / (w**2).sum())


def entropy(q: np.ndarray) -> float:
    """-sum q log q (nats); log P for the uniform law (M58)."""
    q = np.asarray(q, dtype=np.float64)
    return float(-(q[q > 0] * np.log(q[q > 0])).sum())


def step_metrics(law: PromptLaw, prompts: np.ndarray) -> dict:
    """The per-step metrics of docs/allocation.md A8 (M58): the drawn prompts' weights, the law's entropy and
    expected samples."""
    w = law.weights(prompts)
    return {"is_weight_max": float(w.max()), "is_weight_min": float(w.min()), "is_ess": ess(w),
            "is_q_entropy": entropy(law.q), "is_q_entropy_max": math.log(law.P),
            "is_expected_samples": law.expected_samples}


def mixture_bound(lam: float, s_uniform: float, g_norm2: float) -> float:
    """M55 (i): the largest MSE ratio to uniform prompts with the same sizes that a law with q >= lam/P can have,
    whatever the true moments: (S_u / lam - ||g||^2) / (S_u - ||g||^2), S_u = (1/P) sum_x a_x(G_x) (1/lam when
    ||g||^2 = 0).

    >>> mixture_bound(0.1, 1.0, 0.0)
    10.0
    """
    lam = check_lambda(lam, "lambda")
    if s_uniform <= g_norm2:
        raise ValueError("S_u must exceed ||g||^2 (their difference is B times uniform's MSE)")
    return (s_uniform / lam - g_norm2) / (s_uniform - g_norm2)


def exact_spend_sizes(stats: PromptStats, weights: np.ndarray, N: int, *, g_min: int, g_max: int) -> np.ndarray:
    """(B,) sizes of a drawn batch at exact cost N (``ustat-is`` with ``is_spend="exact"``, M88).

    The minimiser of the batch's conditional variance sum_b w_b^2 f_b(G_b) (M88) subject to sum_b G_b = N and
    g_min <= G_b <= g_max: ``ustat``'s within-batch problem (M33-M34, :func:`ugrpo.stats.allocation.greedy_allocation`
    on :func:`~ugrpo.stats.allocation.rule_table`) with c2, c3 of prompt b scaled by w_b^2 = 1/(P q(x_b))^2.
    ``stats``: the (B,) drawn prompts' moments (a prompt drawn twice appears twice); they must not depend on this
    batch's samples (M32).

    >>> st = PromptStats(value=np.full(2, 0.5), c2=np.ones(2), c3=np.ones(2))
    >>> exact_spend_sizes(st, np.array([2.0, 0.5]), 12, g_min=2, g_max=12).tolist()  # the heavier weight gets more
    [9, 3]
    """
    w2 = np.asarray(weights, dtype=np.float64) ** 2
    scaled = PromptStats(value=stats.value, c2=stats.c2 * w2, c3=stats.c3 * w2)
    return greedy_allocation(rule_table("ustat", scaled, g_min, g_max), g_min, int(N))


def batch_sizes(law: PromptLaw, moments: PromptStats, prompts: np.ndarray, N: int, *, spend: str, g_min: int,
                g_max: int) -> np.ndarray:
    """(B,) sizes of the drawn ``prompts`` under ``law``: each prompt's G_x (M52-M56), or for a ``ustat-is`` law with
    ``spend="exact"`` the batch's :func:`exact_spend_sizes` (M88) at the law's weights and the (P,) ``moments`` the law
    was fitted with. The one rule the trainer (:class:`ugrpo.train.alloc.Allocator`) and the lab share."""
    if spend not in IS_SPEND:
        raise ValueError(f"is_spend={spend!r} is not valid; choose one of {list(IS_SPEND)}")
    prompts = np.asarray(prompts, dtype=np.int64)
    if spend == "exact" and law.rule == "ustat-is":
        return exact_spend_sizes(moments.take(prompts), law.weights(prompts), N, g_min=g_min, g_max=g_max)
    return law.sizes[prompts].astype(np.int64)


def between_mse(q, B: int, stats: PromptStats, g_norm2: float) -> float:
    """E ||(1/B) sum_b w(X_b) g(X_b) - g||^2 = (1/B) (sum_x ||g(x)||^2 / (P^2 q(x)) - ||g||^2) over B iid draws from q
    (M88): the part of the MSE that the sizes do not change; M53 with f_x = 0."""
    q = check_law(q)
    return float((_g2(stats) / q).sum() / len(q) ** 2 - float(g_norm2)) / int(B)


def within_mse(weights: np.ndarray, drawn: PromptStats, sizes: np.ndarray) -> float:
    """The conditional within-prompt variance of one drawn batch, (1/B^2) sum_b w_b^2 f_{x_b}(G_b) (M88), with
    ``weights`` w_b = 1/(P q(x_b)), ``drawn`` the (B,) drawn prompts' moments and ``sizes`` their G_b; its mean over
    draws plus :func:`between_mse` is the MSE at exact spend.

    >>> st = PromptStats(value=np.zeros(2), c2=np.ones(2), c3=np.zeros(2))
    >>> within_mse(np.ones(2), st, np.array([2, 2]))  # (1/4) (1/2 + 1/2)
    0.25
    """
    w = np.asarray(weights, dtype=np.float64)
    return float((w**2 * prompt_error(drawn.c2, drawn.c3, np.asarray(sizes, dtype=np.float64))).sum()) / len(w) ** 2
