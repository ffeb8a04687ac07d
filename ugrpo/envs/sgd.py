"""Algorithm 1 of the paper (plain stochastic gradient ascent) on an exact synthetic policy.

Each step: draw B = N / G prompts uniformly with replacement, G actions each, Bernoulli rewards;
advantages from :func:`ugrpo.stats.advantages.compute_advantages` (baseline ``vanilla``, ``grpo``
= LOO mean eq. (4), ``grpo_mean`` or ``oracle`` with the exact V(x)); the estimate
ghat = 1/(BG) sum W A from :func:`ugrpo.stats.estimator.prompt_gradients` (eq. (5), (8));
then theta <- theta + eta_i ghat with eta_i = lr (``constant``, Lemma 6(a)) or lr / i
(``inverse``, Lemma 6(b)), i = 1..steps. The exact gap J_star - J(theta) is recorded at the
checkpoints (number of updates done; 0 = the initial parameter).

Deviations from the paper: none for ``scale="none"``. ``scale="std"`` divides by the group std
as in Algorithm 2 (ddof=1, eps=1e-6, all-equal groups get advantage 0) but keeps one update per
batch, no importance ratio and no KL.

:func:`run_algorithm1_batch` runs S seeds at once (one vectorised gradient for all seeds, one
torch.Generator per seed); its row s equals :func:`run_algorithm1` with ``seed=seeds[s]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor
from tqdm.auto import tqdm

from ..stats.advantages import BASELINES, compute_advantages
from ..stats.budget import check_divides
from ..stats.estimator import prompt_gradients
from ..stats.estimators import GROUP_BASELINES
from .base import SyntheticPolicy

__all__ = ["Algorithm1Result", "Algorithm1BatchResult", "run_algorithm1", "run_algorithm1_batch"]

LRSchedule = Literal["constant", "inverse"]


@dataclass(frozen=True)
class Algorithm1BatchResult:
    """S independent runs of Algorithm 1 with the same settings.

    Attributes
    ----------
    checkpoints : tuple of step counts at which the gap was recorded
    gaps : (S, C) float64, exact J_star - J(theta) at each checkpoint
    J : (S, C) float64, exact J(theta) at each checkpoint
    theta : (S, D) final parameters
    frac_zero_std : (S,) fraction of groups with all-equal rewards, over all steps
    seeds, N, G, B, steps, lr, lr_schedule, baseline, scale : the settings
    """

    checkpoints: tuple[int, ...]
    gaps: Tensor
    J: Tensor
    theta: Tensor
    frac_zero_std: Tensor
    seeds: tuple[int, ...]
    N: int
    G: int
    B: int
    steps: int
    lr: float
    lr_schedule: str
    baseline: str
    scale: str


@dataclass(frozen=True)
class Algorithm1Result:
    """One run of Algorithm 1: exact gaps at the checkpoints and the final parameter."""

    checkpoints: tuple[int, ...]
    gaps: tuple[float, ...]
    J: tuple[float, ...]
    theta: Tensor
    frac_zero_std: float
    seed: int
    N: int
    G: int
    B: int
    steps: int
    lr: float
    lr_schedule: str
    baseline: str
    scale: str


def _validate(env: SyntheticPolicy, N: int, G: int, steps: int, lr: float, baseline: str,
              lr_schedule: str, scale: str, checkpoints: Sequence[int] | None) -> tuple[int, tuple[int, ...]]:
    if not isinstance(env, SyntheticPolicy):
        raise TypeError(f"env must be a SyntheticPolicy, got {type(env).__name__}")
    for name, v in (("N", N), ("G", G), ("steps", steps)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    check_divides(N, G)
    if baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; choose one of {sorted(BASELINES)}")
    if baseline in GROUP_BASELINES and G < 2:
        raise ValueError(f"baseline {baseline!r} needs G >= 2, got G = {G}")
    if lr_schedule not in ("constant", "inverse"):
        raise ValueError(f"unknown lr_schedule {lr_schedule!r}; choose 'constant' or 'inverse'")
    if scale not in ("none", "std"):
        raise ValueError(f"unknown scale {scale!r}; choose 'none' or 'std'")
    if not (isinstance(lr, (int, float)) and lr > 0):
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    cps = (0, steps) if checkpoints is None else tuple(int(c) for c in checkpoints)
    if not cps or any(c < 0 or c > steps for c in cps) or list(cps) != sorted(set(cps)):
        raise ValueError(f"checkpoints must be strictly increasing step counts in [0, steps={steps}], got {list(cps)}")
    return N // G, cps


def run_algorithm1_batch(
    env: SyntheticPolicy, *, N: int, G: int, steps: int, lr: float, seeds: Sequence[int],
    baseline: str = "grpo", lr_schedule: LRSchedule = "constant",
    checkpoints: Sequence[int] | None = None, theta0: Tensor | None = None,
    scale: Literal["none", "std"] = "none", progress: bool = False, threads: int | None = 1,
) -> Algorithm1BatchResult:
    """Algorithm 1 (paper Sec. 2) for S = len(seeds) independent seeds at once.

    Parameters
    ----------
    env : the synthetic policy
    N : samples per step; B = N / G prompts (G must divide N)
    G : group size
    steps : number of updates n
    lr : beta of Assumption 5: eta_i = lr (constant) or lr / i (inverse)
    seeds : one torch.Generator seed per run
    baseline : ``vanilla``, ``grpo``, ``grpo_mean`` or ``oracle`` (exact V(x))
    checkpoints : step counts at which to record the exact gap (default (0, steps))
    theta0 : start (default ``env.theta0``)
    scale : ``none`` (Algorithm 1) or ``std`` (Algorithm 2's std scaling)
    progress : show a tqdm bar over steps
    threads : torch intra-op threads during the run, restored afterwards (None: leave as is).
        The tensors are small, so 1 thread is fastest: on 2 busy cores 2 threads were 15x slower.
    """
    B, cps = _validate(env, N, G, steps, lr, baseline, lr_schedule, scale, checkpoints)
    old_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        return _run(env, N, G, B, steps, lr, seeds, baseline, lr_schedule, cps, theta0, scale, progress)
    finally:
        torch.set_num_threads(old_threads)


def _run(env: SyntheticPolicy, N: int, G: int, B: int, steps: int, lr: float, seeds: Sequence[int],
         baseline: str, lr_schedule: str, cps: tuple[int, ...], theta0: Tensor | None, scale: str,
         progress: bool) -> Algorithm1BatchResult:
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    S = len(seeds)
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    theta = env._theta(theta0).clone().expand(S, env.dim).clone()  # (S, D)
    j_star = env.J_star()
    J_rec = torch.empty(S, len(cps), dtype=torch.float64)
    n_zero = torch.zeros(S, dtype=torch.float64)
    ci = 0
    bar = tqdm(range(steps + 1), desc=f"Algorithm 1 G={G} B={B} S={S}", disable=not progress, unit="step")
    for i in bar:
        if ci < len(cps) and cps[ci] == i:
            J_rec[:, ci] = env.J(theta)
            ci += 1
        if i == steps:
            break
        batch = env.sample_many(theta, B, G, gens)  # one generator per seed
        rewards = batch.rewards.reshape(S * B, G)  # (S*B, G)
        scores = batch.scores.reshape(S * B, G, env.dim)  # (S*B, G, D)
        values = batch.values.reshape(S * B)  # (S*B,)
        adv = compute_advantages(rewards, baseline=baseline, values=values if baseline == "oracle" else None,
                                 scale=scale, ddof=1, eps=1e-6, zero_std="zero")
        n_zero += adv.zero_std.reshape(S, B).sum(1).to(torch.float64)
        ghat = prompt_gradients(scores, adv.advantages).reshape(S, B, env.dim).mean(1)  # (S, D), eq. (8)
        eta = lr if lr_schedule == "constant" else lr / (i + 1)
        theta = theta + eta * ghat
        if not torch.isfinite(theta).all():
            raise FloatingPointError(f"theta became non-finite at step {i + 1} (lr={lr}); lower the learning rate")
    return Algorithm1BatchResult(
        checkpoints=cps, gaps=j_star - J_rec, J=J_rec, theta=theta, frac_zero_std=n_zero / (steps * B),
        seeds=seeds, N=N, G=G, B=B, steps=steps, lr=float(lr), lr_schedule=lr_schedule,
        baseline=baseline, scale=scale,
    )


def run_algorithm1(
    env: SyntheticPolicy, *, N: int, G: int, steps: int, lr: float, baseline: str = "grpo",
    lr_schedule: LRSchedule = "constant", seed: int = 0, checkpoints: Sequence[int] | None = None,
    theta0: Tensor | None = None, scale: Literal["none", "std"] = "none", progress: bool = False,
    threads: int | None = 1,
) -> Algorithm1Result:
    """One run of Algorithm 1; see :func:`run_algorithm1_batch` for the parameters."""
    r = run_algorithm1_batch(env, N=N, G=G, steps=steps, lr=lr, seeds=[seed], baseline=baseline,
                             lr_schedule=lr_schedule, checkpoints=checkpoints, theta0=theta0,
                             scale=scale, progress=progress, threads=threads)
    return Algorithm1Result(
        checkpoints=r.checkpoints, gaps=tuple(r.gaps[0].tolist()), J=tuple(r.J[0].tolist()),
        theta=r.theta[0], frac_zero_std=float(r.frac_zero_std[0]), seed=int(seed), N=N, G=G, B=r.B,
        steps=steps, lr=r.lr, lr_schedule=lr_schedule, baseline=baseline, scale=scale,
    )
