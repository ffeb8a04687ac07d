"""Algorithm 1 with per-prompt group sizes G_b on an exact synthetic policy (docs/math.md M32-M38, M44).

Each step, for each of S seeds: draw B prompts uniformly with replacement; a rule of
:mod:`ugrpo.stats.allocation` chooses G_b (sum_b G_b = N, g_min <= G_b <= g_max) from what it knows BEFORE this
step's samples are drawn; draw G_b actions and Bernoulli rewards for prompt b; LOO advantages with each prompt's
own G_b and the estimate ghat = (1/B) sum_b ghat_b (:mod:`ugrpo.stats.ragged`, M32, M37); then
theta <- theta + eta_i ghat, with eta_i as in :mod:`ugrpo.envs.sgd`. The exact gap J* - J(theta) is recorded at
the checkpoints.

What a rule knows (``moments``):

* ``history`` (default): only the run's own past -- per prompt, the rewards and squared score norms of its
  earlier visits, turned into a Beta posterior on p and shrunk score moments by
  :func:`ugrpo.stats.allocation.history_stats` (M38). The history mixes visits at older thetas.
* ``exact``: the exact per-prompt moments at the current theta (the ceiling; a real trainer cannot have them).

``uniform`` gives every prompt the same G = N/B and needs no knowledge. Draws: prompts, then actions
(one ``multinomial`` of max_b G_b per prompt) and rewards (one ``bernoulli``), of which prompt b keeps its first
G_b; with equal G_b these are the very draws of :meth:`SyntheticPolicy.sample_many`, so a ``uniform`` run equals
:func:`ugrpo.envs.sgd.run_algorithm1_batch` with ``baseline="grpo"`` (test). Unbiased because G_b depends only
on the drawn prompts and the past, never on this step's samples (M32).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from ..stats.allocation import RULES, PromptStats, allocate, history_stats
from ..stats.ragged import ragged_advantages, ragged_prompt_gradients, segment_sum
from .base import SyntheticPolicy

__all__ = ["MOMENTS", "HistoryPrior", "AllocRunResult", "PromptHistory", "sample_ragged", "ragged_step_gradient",
           "run_algorithm1_alloc"]

MOMENTS: tuple[str, ...] = ("history", "exact")


@dataclass(frozen=True)
class HistoryPrior:
    """The prior of the history-based predictions (M38): Beta(prior_a, prior_b) on p, shrinkage pseudo-count."""

    prior_a: float = 1.0
    prior_b: float = 1.0
    shrink: float = 4.0


@dataclass(frozen=True)
class AllocRunResult:
    """S runs of Algorithm 1 with one allocation rule.

    Attributes
    ----------
    checkpoints : step counts at which the gap was recorded (samples spent = checkpoint * N)
    gaps, J : (S, C) float64, exact J* - J(theta) and J(theta) at each checkpoint
    theta : (S, D) final parameters
    frac_zero_std : (S,) fraction of groups whose rewards were all equal, over all steps
    frac_samples_zero_std : (S,) fraction of samples spent on those groups
    mean_max_G : (S,) mean over steps of max_b G_b
    seeds, rule, moments, N, B, g_min, g_max, steps, lr, lr_schedule : the settings
    """

    checkpoints: tuple[int, ...]
    gaps: Tensor
    J: Tensor
    theta: Tensor
    frac_zero_std: Tensor
    frac_samples_zero_std: Tensor
    mean_max_G: Tensor
    seeds: tuple[int, ...]
    rule: str
    moments: str
    N: int
    B: int
    g_min: int
    g_max: int
    steps: int
    lr: float
    lr_schedule: str


class PromptHistory:
    """Per-seed, per-prompt sums over earlier visits (the inputs of :func:`history_stats`), all (S, P)."""

    FIELDS = ("visits", "samples", "successes", "w2_success", "w2_failure", "t0_sum")

    def __init__(self, S: int, P: int) -> None:
        self.S, self.P = S, P
        self.sums = {k: torch.zeros(S * P, dtype=torch.float64) for k in self.FIELDS}

    def update(self, prompts: Tensor, sizes: Tensor, rewards: Tensor, scores: Tensor) -> None:
        """Add one step: prompts, sizes (S, B); rewards (S*N,) and scores (S*N, D) flat in ragged order."""
        flat_sizes = sizes.reshape(-1)
        w2 = (scores * scores).sum(-1)                                              # (S*N,)
        g = flat_sizes.to(torch.float64)
        zw = segment_sum(scores * rewards.unsqueeze(1), flat_sizes)                 # (S*B, D)
        t0 = ((zw * zw).sum(-1) - segment_sum(rewards**2 * w2, flat_sizes)) / (g * (g - 1))  # M14, per visit
        per_visit = {"visits": torch.ones_like(g), "samples": g, "successes": segment_sum(rewards, flat_sizes),
                     "w2_success": segment_sum(rewards * w2, flat_sizes),
                     "w2_failure": segment_sum((1 - rewards) * w2, flat_sizes), "t0_sum": t0}
        where = (torch.arange(self.S).unsqueeze(1) * self.P + prompts).reshape(-1)  # (S*B,)
        for k, v in per_visit.items():
            self.sums[k].index_add_(0, where, v)

    def stats(self, s: int, prior: HistoryPrior) -> PromptStats:
        """Seed s's predicted moments of all P prompts (M38)."""
        sl = slice(s * self.P, (s + 1) * self.P)
        return history_stats(*(self.sums[k][sl].numpy() for k in self.FIELDS), prior_a=prior.prior_a,
                             prior_b=prior.prior_b, shrink=prior.shrink)


def sample_ragged(env: SyntheticPolicy, theta: Tensor, prompts: Tensor, sizes: Tensor,
                  gens: Sequence[torch.Generator]) -> tuple[Tensor, Tensor]:
    """Rewards (S*N,) and scores (S*N, D) for G_b samples of prompt b, in ragged order (seed-major).

    ``prompts`` and ``sizes`` are (S, B), every row of ``sizes`` summing to the same N; row s uses generator s:
    one multinomial of max_b G_b actions per prompt and one bernoulli, of which prompt b keeps its first G_b.
    """
    S, B = prompts.shape
    p = env.probs(theta)                                                            # (S, P, K)
    W = env.score_table(probs=p)                                                    # (S, P, K, D)
    rewards, scores = [], []
    for s, gen in enumerate(gens):
        gm = int(sizes[s].max())
        act = torch.multinomial(p[s, prompts[s]], gm, replacement=True, generator=gen)  # (B, gm)
        z = torch.bernoulli(env.reward_mean[prompts[s].unsqueeze(-1), act].unsqueeze(0), generator=gen)[0]
        keep = torch.arange(gm).unsqueeze(0) < sizes[s].unsqueeze(1)                # (B, gm), row-major = ragged
        rewards.append(z[keep])
        scores.append(W[s, prompts[s].unsqueeze(-1), act][keep])
    return torch.cat(rewards), torch.cat(scores)


def ragged_step_gradient(rewards: Tensor, scores: Tensor, sizes: Tensor) -> tuple[Tensor, Tensor]:
    """(ghat (S, D), all-equal mask (S*B,)): LOO advantages with each G_b, ghat = (1/B) sum_b ghat_b (M32)."""
    S, B = sizes.shape
    flat = sizes.reshape(-1)
    adv = ragged_advantages(rewards, flat, baseline="grpo")                         # (S*N,)
    zero = segment_sum(adv.abs(), flat) == 0
    return ragged_prompt_gradients(scores, adv, flat).reshape(S, B, -1).mean(1), zero


def _exact_stats(env: SyntheticPolicy, theta: Tensor) -> PromptStats:
    return PromptStats.from_moments(env.exact(theta, sigma=False).prompt_moments)


def _choose_sizes(rule: str, known: PromptStats | None, idx: np.ndarray, N: int, B: int, g_min: int,
                  g_max: int) -> np.ndarray:
    if rule == "uniform":
        return np.full(B, N // B, dtype=np.int64)
    return allocate(rule, known.take(idx), N, g_min=g_min, g_max=g_max).sizes


def _validate(env, rule: str, moments: str, N: int, B: int, g_min: int, g_max: int, steps: int,
              lr: float, lr_schedule: str, checkpoints: Sequence[int] | None) -> tuple[int, ...]:
    if not isinstance(env, SyntheticPolicy):
        raise TypeError(f"env must be a SyntheticPolicy, got {type(env).__name__}")
    if rule not in RULES:
        raise ValueError(f"unknown allocation rule {rule!r}; choose one of {list(RULES)}")
    if moments not in MOMENTS:
        raise ValueError(f"unknown moments {moments!r}; choose one of {list(MOMENTS)}")
    for name, v in (("N", N), ("B", B), ("steps", steps), ("g_min", g_min), ("g_max", g_max)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if g_min < 2 or g_max < g_min:
        raise ValueError(f"need 2 <= g_min <= g_max (the LOO estimate needs 2 samples); got g_min = {g_min}, "
                         f"g_max = {g_max}")
    if N < B * g_min:
        raise ValueError(f"budget N = {N} is below B * g_min = {B} * {g_min}; raise N or lower g_min")
    if N > B * g_max:
        raise ValueError(f"budget N = {N} exceeds B * g_max = {B} * {g_max}; raise g_max")
    if rule == "uniform" and N % B:
        raise ValueError(f"uniform: B = {B} prompts do not divide N = {N}")
    if lr_schedule not in ("constant", "inverse") or not lr > 0:
        raise ValueError(f"need lr > 0 and lr_schedule 'constant' or 'inverse'; got {lr!r}, {lr_schedule!r}")
    cps = (0, steps) if checkpoints is None else tuple(int(c) for c in checkpoints)
    if not cps or any(c < 0 or c > steps for c in cps) or list(cps) != sorted(set(cps)):
        raise ValueError(f"checkpoints must be strictly increasing step counts in [0, steps={steps}], got {list(cps)}")
    return cps


def run_algorithm1_alloc(
    env: SyntheticPolicy, *, rule: str, N: int, B: int, steps: int, lr: float, seeds: Sequence[int],
    moments: Literal["history", "exact"] = "history", g_min: int = 2, g_max: int = 64,
    lr_schedule: Literal["constant", "inverse"] = "constant", checkpoints: Sequence[int] | None = None,
    prior: HistoryPrior = HistoryPrior(), threads: int | None = 1,
) -> AllocRunResult:
    """Algorithm 1 at N samples per step over B prompts, G_b by ``rule``, for S = len(seeds) seeds (module doc).

    Parameters
    ----------
    rule : one of :data:`ugrpo.stats.allocation.RULES`
    N, B : samples and prompts per step (g_min B <= N <= g_max B; ``uniform``: B divides N)
    moments : ``history`` (the run's own past, M38) or ``exact`` (current theta's exact moments: the ceiling)
    lr, lr_schedule, checkpoints : as in :func:`ugrpo.envs.sgd.run_algorithm1_batch`
    prior : the Beta prior and shrinkage of the history-based predictions
    threads : torch intra-op threads during the run (restored afterwards)
    """
    cps = _validate(env, rule, moments, N, B, g_min, g_max, steps, lr, lr_schedule, checkpoints)
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    old = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        return _run(env, rule, moments, N, B, g_min, g_max, steps, float(lr), lr_schedule, cps, seeds, prior)
    finally:
        torch.set_num_threads(old)


def _run(env, rule, moments, N, B, g_min, g_max, steps, lr, lr_schedule, cps, seeds, prior) -> AllocRunResult:
    S = len(seeds)
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    theta = env.theta0.clone().expand(S, env.dim).clone()                         # (S, D)
    hist = PromptHistory(S, env.n_prompts)
    J_rec = torch.empty(S, len(cps), dtype=torch.float64)
    n_zero, s_zero, max_g = (torch.zeros(S, dtype=torch.float64) for _ in range(3))
    ci = 0
    for i in range(steps + 1):
        if ci < len(cps) and cps[ci] == i:
            J_rec[:, ci] = env.J(theta)
            ci += 1
        if i == steps:
            break
        prompts = torch.cat([torch.randint(env.n_prompts, (1, B), generator=g) for g in gens])  # (S, B)
        sizes = torch.empty(S, B, dtype=torch.int64)
        for s in range(S):  # G_b from the drawn prompts and the past only (M32)
            known = None if rule == "uniform" else (
                hist.stats(s, prior) if moments == "history" else _exact_stats(env, theta[s]))
            sizes[s] = torch.from_numpy(_choose_sizes(rule, known, prompts[s].numpy(), N, B, g_min, g_max))
        rewards, scores = sample_ragged(env, theta, prompts, sizes, gens)
        ghat, zero = ragged_step_gradient(rewards, scores, sizes)
        hist.update(prompts, sizes, rewards, scores)
        zero = zero.reshape(S, B)
        n_zero += zero.sum(1)
        s_zero += (sizes * zero).sum(1)
        max_g += sizes.max(1).values
        eta = lr if lr_schedule == "constant" else lr / (i + 1)
        theta = theta + eta * ghat
        if not torch.isfinite(theta).all():
            raise FloatingPointError(f"theta became non-finite at step {i + 1} (lr={lr}); lower the learning rate")
    j_star = env.J_star()
    return AllocRunResult(
        checkpoints=cps, gaps=j_star - J_rec, J=J_rec, theta=theta, frac_zero_std=n_zero / (steps * B),
        frac_samples_zero_std=s_zero / (steps * N), mean_max_G=max_g / steps, seeds=seeds, rule=rule,
        moments=moments, N=N, B=B, g_min=g_min, g_max=g_max, steps=steps, lr=lr, lr_schedule=lr_schedule)
