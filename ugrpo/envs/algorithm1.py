"""Algorithm 1 of the paper (plain stochastic gradient ascent) on an exact synthetic policy, one loop for one
group size G and for per-prompt sizes G_b (docs/math.md M32-M38, M44).

Each step, for each of S seeds (one torch.Generator per seed): draw B prompts uniformly with replacement; choose
the group sizes -- G for every prompt (:func:`run_algorithm1_batch`, N = B G), or G_b by a rule of
:mod:`ugrpo.stats.allocation` (sum_b G_b = N, g_min <= G_b <= g_max) from what it knows BEFORE this step's
samples (:func:`run_algorithm1_alloc`); draw G_b actions and Bernoulli rewards for prompt b (:func:`sample_ragged`:
one ``multinomial`` of max_b G_b actions per prompt and one ``bernoulli``, of which prompt b keeps its first G_b;
with equal sizes these are the very draws of :meth:`SyntheticPolicy.sample_many`); the estimate ghat; then
theta <- theta + eta_i ghat with eta_i = lr (``constant``, Lemma 6(a)) or lr / i (``inverse``, Lemma 6(b)),
i = 1..steps. The exact gap J_star - J(theta) is recorded at the checkpoints (number of updates done; 0 = the
initial parameter).

The estimate: with one G, advantages from :func:`ugrpo.stats.advantages.compute_advantages` (baseline
``vanilla``, ``grpo`` = LOO mean eq. (4), ``grpo_mean`` or ``oracle`` with the exact V(x)) and
ghat = 1/(BG) sum W A from :func:`ugrpo.stats.estimator.prompt_gradients` (eq. (5), (8)); with per-prompt
sizes, LOO advantages with each prompt's own G_b and ghat = (1/B) sum_b ghat_b (:mod:`ugrpo.stats.ragged`, M32,
M37). A ``uniform`` allocation run equals :func:`run_algorithm1_batch` with ``baseline="grpo"`` (test).
Unbiased because G_b depends only on the drawn prompts and the past, never on this step's samples (M32).

The prompt importance-sampling rules (``uniform-is``, ``ustat-is``, docs/math.md M52-M57) draw the B prompts of
seed s iid from a law q over the P prompts (one G, or per-prompt G_x at an expected N samples) chosen before the step
from the same knowledge, and weight prompt b's estimate by 1/(P q(x_b)): ghat = (1/B) sum_b w_b ghat_b, unbiased for
the uniform-prompt gradient; a step's samples then vary around N, and the samples each seed spent are recorded.

What an allocation rule knows (``moments``): ``history`` (default), only the run's own past -- one
:class:`ugrpo.stats.history.PromptHistory` per seed (rewards and squared score norms of each prompt's earlier
visits, turned into a Beta posterior on p and shrunk score moments, M38; the history mixes visits at older
thetas); ``exact``, the exact per-prompt moments at the current theta (the ceiling; a trainer cannot have them).

Deviations from the paper: none for ``scale="none"``. ``scale="std"`` divides by the group std as in Algorithm 2
(ddof=1, eps=1e-6, all-equal groups get advantage 0) but keeps one update per batch, no importance ratio, no KL.
:func:`run_algorithm1_batch`'s row s equals :func:`run_algorithm1` with ``seed=seeds[s]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from ugrpo.errors import check_allocation

from ..stats.advantages import BASELINES, compute_advantages
from ..stats.allocation import IS_RULES, RULES, PromptStats, allocate
from ..stats.budget import check_divides
from ..stats.estimator import prompt_gradients
from ..stats.estimators import GROUP_BASELINES
from ..stats.history import PromptHistory
from ..stats.is_guard import GUARD_G_MIN, guarded_law
from ..stats.predict import Posterior, posterior_means
from ..stats.prompt_is import IS_LAMBDA, check_lambda, is_law
from ..stats.ragged import compute_ragged_advantages, ragged_prompt_gradients
from ..stats.safe import SAFE_LEVEL, SAFE_TOL, check_safety, choose_sizes
from .base import SyntheticPolicy

__all__ = ["Algorithm1Result", "Algorithm1BatchResult", "AllocRunResult", "Safety", "MOMENTS",
           "run_algorithm1", "run_algorithm1_batch", "run_algorithm1_alloc", "sample_ragged", "ragged_step_gradient"]

LRSchedule = Literal["constant", "inverse"]
MOMENTS: tuple[str, ...] = ("history", "exact")


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
    samples : (S, C) samples spent up to each checkpoint (checkpoint x N, except for ``ustat-is``, whose steps spend
        N only in expectation)
    seeds, rule, moments, N, B, g_min, g_max, steps, lr, lr_schedule : the settings
    """

    checkpoints: tuple[int, ...]
    gaps: Tensor
    J: Tensor
    theta: Tensor
    frac_zero_std: Tensor
    frac_samples_zero_std: Tensor
    mean_max_G: Tensor
    samples: Tensor
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


@dataclass(frozen=True)
class Safety:
    """``ustat``'s safe rule with history-based predictions (docs/math.md M50): tolerance and posterior quantile; the
    prompt-IS guard (M78) reads the same two as its tolerance and the level of its held-out interval."""

    tol: float = SAFE_TOL
    level: float = SAFE_LEVEL

    def __post_init__(self) -> None:
        check_safety(self.tol, self.level, "sweep")


def sample_ragged(env: SyntheticPolicy, theta: Tensor, prompts: Tensor, sizes: Tensor,
                  gens: Sequence[torch.Generator]) -> tuple[Tensor, Tensor]:
    """Rewards (S*N,) and scores (S*N, D) for G_b samples of prompt b, in ragged order (seed-major).

    ``prompts`` and ``sizes`` are (S, B) (row s sums to seed s's samples: N, or around N under a prompt law); row s
    uses generator s: one multinomial of max_b G_b actions per prompt and one bernoulli, of which prompt b keeps
    its first G_b.
    """
    S, B = prompts.shape
    n = int(sizes.sum())
    check_allocation(8.0 * n * (env.dim + 4), f"a batch of {S} x {B} prompts x {n // (S * B)} samples",
                     "use a smaller batch, group size or number of repetitions")
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


def ragged_step_gradient(rewards: Tensor, scores: Tensor, sizes: Tensor,
                         weights: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(ghat (S, D), all-equal mask (S*B,)): LOO advantages with each G_b, ghat = (1/B) sum_b w_b ghat_b (M32; the
    prompt-IS weights w_b = 1/(P q(x_b)) of M52, all 1 when ``weights`` is None)."""
    S, B = sizes.shape
    flat = sizes.reshape(-1)
    adv = compute_ragged_advantages(rewards, flat, baseline="grpo")                 # (S*N,)
    per = ragged_prompt_gradients(scores, adv.advantages, flat).reshape(S, B, -1)  # (S, B, D)
    if weights is not None:
        per = per * weights.unsqueeze(-1)
    return per.mean(1), adv.zero_std


Sizes = Callable[[Tensor, Tensor], Tensor]          # (prompts (S, B), theta (S, D)) -> G_b (S, B)
Draw = Callable[[Tensor], tuple[Tensor, Tensor, Tensor]]  # theta (S, D) -> prompts, G_b, weights (S, B)
Estimate = Callable[..., tuple[Tensor, Tensor]]  # (rewards, scores, sizes, prompts, theta, weights) -> ghat, zero


def _loop(env: SyntheticPolicy, seeds: tuple[int, ...], theta0: Tensor | None, B: int, steps: int, lr: float,
          lr_schedule: str, cps: tuple[int, ...], sizes_of: Sizes, estimate: Estimate,
          observe: Callable[..., None] | None = None, desc: str = "", progress: bool = False,
          draw: Draw | None = None) -> dict:
    """The one loop of Algorithm 1 for S seeds (module docstring); the sizes, the estimate and what the history
    sees are the caller's, and so is the prompt law when ``draw`` is given (prompt IS: prompts, sizes and weights
    from it; else B uniform draws per seed's generator). Returns theta (S, D), J (S, C), the samples spent at each
    checkpoint (S, C) and per seed the all-equal group and sample counts and the sum over steps of max_b G_b."""
    S = len(seeds)
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    theta = env._theta(theta0).clone().expand(S, env.dim).clone()                 # (S, D)
    J_rec = torch.empty(S, len(cps), dtype=torch.float64)
    spent = torch.empty(S, len(cps), dtype=torch.float64)
    n_zero, s_zero, max_g, cum = (torch.zeros(S, dtype=torch.float64) for _ in range(4))
    ci = 0
    for i in tqdm(range(steps + 1), desc=desc, disable=not progress, unit="step"):
        if ci < len(cps) and cps[ci] == i:
            J_rec[:, ci] = env.J(theta)
            spent[:, ci] = cum
            ci += 1
        if i == steps:
            break
        weights = None
        if draw is None:
            prompts = torch.cat([torch.randint(env.n_prompts, (1, B), generator=g) for g in gens])  # (S, B)
            sizes = sizes_of(prompts, theta)  # G_b from the drawn prompts and the past only (M32)
        else:  # prompt IS: the law (q, G_x) from the past only (M52)
            prompts, sizes, weights = draw(theta)
        rewards, scores = sample_ragged(env, theta, prompts, sizes, gens)
        ghat, zero = estimate(rewards, scores, sizes, prompts, theta, weights)    # (S, D), (S, B)
        if observe is not None:
            observe(prompts, sizes, rewards, scores, weights)
        n_zero += zero.sum(1)
        s_zero += (sizes * zero).sum(1)
        max_g += sizes.max(1).values
        cum += sizes.sum(1)
        eta = lr if lr_schedule == "constant" else lr / (i + 1)
        theta = theta + eta * ghat
        if not torch.isfinite(theta).all():
            raise FloatingPointError(f"theta became non-finite at step {i + 1} (lr={lr}); lower the learning rate")
    return {"theta": theta, "J": J_rec, "n_zero": n_zero, "s_zero": s_zero, "max_g": max_g, "samples": spent}


def _threads(threads: int | None, run: Callable[[], object]):
    """``run()`` with torch's intra-op threads set to ``threads`` (None: as is), restored afterwards."""
    old = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        return run()
    finally:
        torch.set_num_threads(old)


def _checkpoints(steps: int, checkpoints: Sequence[int] | None) -> tuple[int, ...]:
    cps = (0, steps) if checkpoints is None else tuple(int(c) for c in checkpoints)
    if not cps or any(c < 0 or c > steps for c in cps) or list(cps) != sorted(set(cps)):
        raise ValueError(f"checkpoints must be strictly increasing step counts in [0, steps={steps}], got {list(cps)}")
    return cps


def _seeds(seeds: Sequence[int]) -> tuple[int, ...]:
    out = tuple(int(s) for s in seeds)
    if not out:
        raise ValueError("seeds must name at least one seed")
    return out


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
    return N // G, _checkpoints(steps, checkpoints)


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
    seeds = _seeds(seeds)
    S = len(seeds)

    def estimate(rewards, scores, sizes, prompts, theta, weights=None):  # eq. (5), (8) on the (S B, G) groups
        values = None
        if baseline == "oracle":  # the exact V(x_b) at theta
            V = (env.probs(theta) * env.reward_mean).sum(-1)                      # (S, P)
            values = V[torch.arange(S).unsqueeze(1), prompts].reshape(S * B)
        adv = compute_advantages(rewards.reshape(S * B, G), baseline=baseline, values=values, scale=scale,
                                 ddof=1, eps=1e-6, zero_std="zero")
        ghat = prompt_gradients(scores.reshape(S * B, G, env.dim), adv.advantages).reshape(S, B, env.dim).mean(1)
        return ghat, adv.zero_std.reshape(S, B)

    r = _threads(threads, lambda: _loop(env, seeds, theta0, B, steps, lr, lr_schedule, cps,
                                        lambda prompts, theta: torch.full((S, B), G), estimate,
                                        desc=f"Algorithm 1 G={G} B={B} S={S}", progress=progress))
    return Algorithm1BatchResult(
        checkpoints=cps, gaps=env.J_star() - r["J"], J=r["J"], theta=r["theta"],
        frac_zero_std=r["n_zero"] / (steps * B), seeds=seeds, N=N, G=G, B=B, steps=steps, lr=float(lr),
        lr_schedule=lr_schedule, baseline=baseline, scale=scale,
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


def _validate_alloc(env, rule: str, moments: str, N: int, B: int, g_min: int, g_max: int, steps: int,
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
    if rule in ("uniform", "uniform-is") and N % B:
        raise ValueError(f"{rule}: B = {B} prompts do not divide N = {N}")
    if lr_schedule not in ("constant", "inverse") or not lr > 0:
        raise ValueError(f"need lr > 0 and lr_schedule 'constant' or 'inverse'; got {lr!r}, {lr_schedule!r}")
    return _checkpoints(steps, checkpoints)


def run_algorithm1_alloc(
    env: SyntheticPolicy, *, rule: str, N: int, B: int, steps: int, lr: float, seeds: Sequence[int],
    moments: Literal["history", "exact"] = "history", g_min: int = 2, g_max: int = 64,
    lr_schedule: Literal["constant", "inverse"] = "constant", checkpoints: Sequence[int] | None = None,
    safety: Safety = Safety(), threads: int | None = 1, is_lambda: float = IS_LAMBDA, is_guard: bool = True,
) -> AllocRunResult:
    """Algorithm 1 at N samples per step over B prompts, G_b by ``rule``, for S = len(seeds) seeds (module doc).

    Parameters
    ----------
    rule : one of :data:`ugrpo.stats.allocation.RULES`
    N, B : samples and prompts per step (g_min B <= N <= g_max B; ``uniform``: B divides N)
    moments : ``history`` (the run's own past, M38) or ``exact`` (current theta's exact moments: the ceiling)
    lr, lr_schedule, checkpoints : as in :func:`run_algorithm1_batch`
    safety : ``ustat``'s safe rule with history-based predictions (M50; with B dividing N, else plug-in sizes)
    threads : torch intra-op threads during the run (restored afterwards)
    is_lambda : the prompt-IS rules' defensive floor q >= lambda / P (M55)
    is_guard : the prompt-IS rules with history moments use the held-out guard (M78; ``safety`` gives its level and
        tolerance, and every size is at least 3); False: the posterior's law unchecked
    """
    cps = _validate_alloc(env, rule, moments, N, B, g_min, g_max, steps, lr, lr_schedule, checkpoints)
    is_lambda = check_lambda(is_lambda, "is_lambda")
    seeds = _seeds(seeds)
    S = len(seeds)
    guarded = rule in IS_RULES and is_guard and moments == "history"
    if guarded:
        if N // B < GUARD_G_MIN:
            raise ValueError(f"{rule} with the held-out guard needs N / B >= {GUARD_G_MIN} samples per prompt, got "
                             f"{N}/{B}; raise N or turn the guard off")
        g_min = max(g_min, GUARD_G_MIN)
    hist = [PromptHistory(env.n_prompts, held_out=guarded) for _ in seeds] \
        if rule != "uniform" and moments == "history" else None

    def known(s: int, idx: np.ndarray, theta: Tensor):
        if hist is not None:  # the one predictor's posterior (M46-M49)
            return hist[s].posterior(idx, scores=True)
        return PromptStats.from_moments(env.exact(theta[s], sigma=False).prompt_moments).take(idx)

    step = [0]

    def one(s: int, idx: np.ndarray, theta: Tensor) -> np.ndarray:
        k = known(s, idx, theta)
        if N % B == 0:  # the trainer's choice, guard included for ustat (M50)
            return choose_sizes(rule, k, N, N // B, g_min=g_min, g_max=g_max, tol=safety.tol, level=safety.level,
                                rng=np.random.default_rng([seeds[s], step[0]]))[0]
        return allocate(rule, posterior_means(k) if isinstance(k, Posterior) else k, N, g_min=g_min,
                        g_max=g_max).sizes

    def sizes_of(prompts: Tensor, theta: Tensor) -> Tensor:
        if rule == "uniform":
            return torch.full((S, B), N // B)
        step[0] += 1
        return torch.stack([torch.from_numpy(one(s, prompts[s].numpy(), theta)) for s in range(S)])

    def observe(prompts: Tensor, sizes: Tensor, rewards: Tensor, scores: Tensor, weights: Tensor | None) -> None:
        ends = sizes.sum(1).cumsum(0).tolist()  # seed s's samples are rows ends[s-1] .. ends[s] of the ragged batch
        for s, (a, b) in enumerate(zip([0] + ends[:-1], ends)):
            hist[s].update(prompts[s].numpy(), sizes[s].numpy(), rewards[a:b].numpy(), scores[a:b].numpy(),
                           None if weights is None else weights[s].numpy())

    def estimate(rewards: Tensor, scores: Tensor, sizes: Tensor, prompts, theta, weights=None
                 ) -> tuple[Tensor, Tensor]:
        ghat, zero = ragged_step_gradient(rewards, scores, sizes, weights)
        return ghat, zero.reshape(S, B)

    laws: dict[bytes, object] = {}  # exact moments: one law per distinct theta (every seed at theta0 on step 1)

    def law_of(s: int, theta: Tensor):
        if hist is not None:  # the one function of a law from a history (M78)
            return guarded_law(rule, hist[s], B, N, lam=is_lambda, g_min=g_min, g_max=g_max, level=safety.level,
                               tol=safety.tol, guard=is_guard).law
        key = theta[s].numpy().tobytes()
        if key not in laws:
            laws.clear()
            st = PromptStats.from_moments(env.exact(theta[s], sigma=False).prompt_moments)
            laws[key] = is_law(rule, st, B, N, lam=is_lambda, g_min=g_min, g_max=g_max)
        return laws[key]

    def draw(theta: Tensor) -> tuple[Tensor, Tensor, Tensor]:  # prompt IS: seed s's law from its own past (M52)
        step[0] += 1
        out = []
        for s in range(S):
            law = law_of(s, theta)
            idx = law.draw(np.random.default_rng([seeds[s], step[0], 0x6973]))
            out.append((idx, law.sizes[idx], law.weights(idx)))
        return tuple(torch.as_tensor(np.stack(v)) for v in zip(*out))

    r = _threads(threads, lambda: _loop(env, seeds, None, B, steps, float(lr), lr_schedule, cps, sizes_of,
                                        estimate, observe if hist is not None else None,
                                        draw=draw if rule in IS_RULES else None))
    return AllocRunResult(
        checkpoints=cps, gaps=env.J_star() - r["J"], J=r["J"], theta=r["theta"],
        frac_zero_std=r["n_zero"] / (steps * B), frac_samples_zero_std=r["s_zero"] / (steps * N),
        mean_max_G=r["max_g"] / steps, samples=r["samples"], seeds=seeds, rule=rule, moments=moments, N=N, B=B,
        g_min=g_min,
        g_max=g_max, steps=steps, lr=float(lr), lr_schedule=lr_schedule)
