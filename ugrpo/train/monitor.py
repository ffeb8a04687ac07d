"""The online G* monitor: c1, c2, c3 of Theorem 7 from the training batches themselves, and G*.

Every ``monitor_every`` steps the trainer hands its batch (rollout + rewards (B, G)) to
:meth:`TrainMonitor.observe` *before* the update, so the scores W = grad log pi(Y|x) are taken at
the parameters that generated the samples (no extra samples are drawn):

    scores (B*G, k) = sketch_scores(model, rollout, k)          # unbiased inner products, docs/math.md M19
    -> pool with the last ``monitor_pool - 1`` monitored batches  (optional, see below)
    -> estimate_components(rewards, scores) -> c1, c2, c3 with bootstrap intervals  (docs/math.md M13-M20)
    -> plan_group_size(components, N) -> G*, its 95% interval (Thm 7, paper eq. (11)-(12); M21-M24),
       the G to use and the 95% band of near-optimal G (M40-M41)
    -> metrics row keys ``monitor_*`` (also in report.md, monitor_g.png, monitor_c.png and a console column),
       and a warning, once per run, when a batch that decides puts G outside the band (a batch that cannot
       decide gives no advice).

The pure part (components -> plan -> advice) is shared with the TRL callback
:class:`ugrpo.integrations.trl.GroupSizeMonitor`: :func:`measure` and :func:`advise`.

Sketch projection. One projection S for the whole run (seeded by ``cfg.seed``, :func:`sketch_seed`):
pooled batches must share S, or the cross-prompt inner products <S gbar_b, S' gbar_b'> of c1 would
have mean 0 instead of <gbar_b, gbar_b'>. The estimates are unbiased over S; with one S, the sketch
error is shared by all measurements of a run (it does not average out over steps).

Pooling (``monitor_pool = P > 1``) and its bias. One batch of B ~ 16-32 prompts rarely bounds c1
away from 0; pooling the last P monitored batches gives P*B prompts. The parameters move between
those steps, so the pool estimates constants of a *mixture* of policies: c2 and c3 become the
average of the per-step constants (no extra bias), but c1's cross-prompt term pairs prompts of
different steps, whose mean gradients g_s differ. With equal B per step and the policy treated as
fixed within each step, the pooled c1 has mean

    avg_s c1(theta_s) + PB/(PB-1) * (1/P) sum_s ||g_s - gbar||^2 ,   gbar = (1/P) sum_s g_s,

an *upward* bias equal to the spread of the mean gradient over the window, so G* is biased *down*
(it ignores that theta_s also depends on the earlier pooled samples). Keep P * monitor_every small
relative to how fast the policy moves; P = 1 (the default) is unbiased.

Multi-process runs: each process sketches its own prompts (same S on every process), the
rewards and sketches (small: B*G*k numbers) are gathered in global prompt order, and every process
computes the same estimates; only rank 0 prints and logs. Tested in a single process only.

After ``--resume`` the pool starts empty; the "warned once" state is restored from metrics.jsonl.

Deviations from the paper: the constants are at the current theta (the paper's are suprema over
theta); sampling with temperature != 1 or top_p < 1 makes the scores those of the tempered policy
(the sketch uses ``sampling.temperature``), and top_p < 1 samples are not from pi_theta.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import torch
from torch import Tensor

from ugrpo.stats.bootstrap_ci import Estimate
from ugrpo.stats.components import MIN_PILOT_GROUP, estimate_components
from ugrpo.stats.planner import candidate_groups, plan_group_size
from ugrpo.stats.seeds import stream_seed

__all__ = [
    "MonitorRecord", "Advice", "measure", "advise", "monitor_row", "console_column", "sketch_seed", "bootstrap_seed",
    "TrainMonitor", "MONITOR_KEYS",
]

MONITOR_KEYS = (
    "monitor_c1", "monitor_c1_low", "monitor_c1_high", "monitor_c2", "monitor_c2_low", "monitor_c2_high",
    "monitor_c3", "monitor_c3_low", "monitor_c3_high", "monitor_g_star", "monitor_g_star_low",
    "monitor_g_star_high", "monitor_g_recommended", "monitor_g_band_low", "monitor_g_band_high", "monitor_message",
    "monitor_seconds", "monitor_n_prompts", "monitor_n_batches", "monitor_decided",
)
"""Keys every monitored step's metrics row has (``monitor_warning`` is added once, when it fires)."""


@dataclass(frozen=True)
class MonitorRecord:
    """One monitor measurement: the constants of Theorem 7 at the current policy and the plan for N.

    Attributes
    ----------
    step : training step (TRL: global step) of the measurement
    c1, c2, c3 : estimates with bootstrap intervals (:class:`~ugrpo.stats.bootstrap_ci.Estimate`)
    budget : N, samples per step the plan is for
    num_generations : G, the group size the run uses
    g_star : argmin of the Thm 7 bound over the candidates; None when c1 is not distinguishable from 0
    g_star_ci : the 95% bootstrap interval of G* (None when g_star is None)
    g_star_lower_bound : when g_star is None: 1 + sqrt(c3_low / c1_high) (docs/math.md M24), else None
    message : the planner's sentence
    seconds : wall time of the measurement (sketch + estimate + plan)
    n_prompts : prompts the estimate used (B times the number of pooled batches)
    n_batches : batches pooled into the estimate (1 without pooling)
    g_recommended : the G to use (the band's recommendation, docs/math.md M41)
    g_band : (low, high) of the 95% confidence band of near-optimal G (M40)
    c1_decided : True when c1's interval excludes 0
    decided : True when the batch decides (the G to use is within the band's tolerance of the best for every c1 in
        its interval, docs/math.md M41); a batch that does not decide gives no advice
    """

    step: int
    c1: Estimate
    c2: Estimate
    c3: Estimate
    budget: int
    num_generations: int
    g_star: int | None
    g_star_ci: tuple[int, int] | None
    g_star_lower_bound: float | None
    message: str
    seconds: float
    n_prompts: int = 0
    n_batches: int = 1
    g_recommended: int | None = None
    g_band: tuple[int, int] | None = None
    c1_decided: bool = True
    decided: bool = True


@dataclass(frozen=True)
class Advice:
    """Why the current G looks wrong and which G to try (from :func:`advise`).

    kind : "outside_band" (G outside the 95% confidence band of near-optimal G; suggestion: the
        recommended G), "outside_interval" (G outside the 95% interval of G*) or "below_bound" (c1 not
        distinguishable from 0, and G below the lower bound of G*)
    G : the current group size
    suggestion : the G to try (G* itself, or the smallest candidate >= the lower bound; None if none)
    interval : the 95% interval of G* ("outside_interval")
    lower_bound : the lower bound of G* ("below_bound")
    """

    kind: Literal["outside_band", "outside_interval", "below_bound"]
    G: int
    suggestion: int | None
    interval: tuple[int, int] | None
    lower_bound: float | None


def sketch_seed(seed: int) -> int:
    """Seed of the run's one sketch projection S (the same at every step, so batches can be pooled)."""
    return stream_seed(seed, 0x6D6F6E)


def bootstrap_seed(seed: int, step: int) -> int:
    """Seed of the bootstrap resampling at ``step``."""
    return stream_seed(seed, step, 0x626F6F)


def measure(
    rewards: Tensor, scores: Tensor, *, budget: int, candidates: Sequence[int], n_boot: int, seed: int, step: int,
    num_generations: int | None = None, n_batches: int = 1,
) -> MonitorRecord:
    """c1, c2, c3 and the G* plan from one (pooled) batch: pure, no model (paper Thm 7).

    Parameters
    ----------
    rewards : (B, G) rewards, B >= 2 prompts, G >= 4
    scores : (B, G, k) sketched (or exact) scores of the same samples
    budget : N, samples per step to plan for
    candidates : group sizes to consider (each divides N)
    n_boot : bootstrap replicates (>= 2)
    seed : seeds the bootstrap generator
    step : recorded in the result
    num_generations : the run's G (default: ``rewards.shape[1]``)
    n_batches : how many batches ``rewards`` pools (recorded only)

    Returns
    -------
    MonitorRecord with ``seconds = 0`` (the caller times the whole measurement)
    """
    B, G = rewards.shape
    vc = estimate_components(rewards.double().cpu(), scores=scores.double().cpu().view(B, G, -1), n_boot=n_boot,
                             generator=torch.Generator().manual_seed(int(seed)))
    plan = plan_group_size(vc, budget, candidates=candidates)
    return MonitorRecord(
        step=int(step), c1=vc.c1, c2=vc.c2, c3=vc.c3, budget=int(budget),
        num_generations=int(G if num_generations is None else num_generations), g_star=plan.g_star,
        g_star_ci=plan.g_star_ci if plan.g_star is not None else None, g_star_lower_bound=plan.g_star_lower_bound,
        message=plan.message, seconds=0.0, n_prompts=B, n_batches=int(n_batches), g_recommended=plan.g_recommended,
        g_band=plan.g_band, c1_decided=plan.c1_distinguishable_from_zero,
        decided=plan.decided and plan.g_recommended is not None,
    )


def advise(rec: MonitorRecord, candidates: Sequence[int]) -> Advice | None:
    """Advice when the batch decides (``rec.decided``) and the run's G is outside the confidence band of near-optimal
    G (records without a band: the interval of G*, or below the lower bound of G*); else None. A batch that cannot
    decide gives no advice: its G to use is a guess."""
    G = rec.num_generations
    if not rec.decided:
        return None
    if rec.g_band is not None and rec.g_recommended is not None:
        if rec.g_band[0] <= G <= rec.g_band[1]:
            return None
        return Advice("outside_band", G, rec.g_recommended, tuple(rec.g_band), None)
    if rec.g_star is not None and rec.g_star_ci is not None and not rec.g_star_ci[0] <= G <= rec.g_star_ci[1]:
        return Advice("outside_interval", G, rec.g_star, tuple(rec.g_star_ci), None)
    lb = rec.g_star_lower_bound
    if rec.g_star is None and lb is not None and math.isfinite(lb) and G < lb:  # inf: the data bound nothing
        larger = [g for g in sorted(candidates) if g >= lb]
        return Advice("below_bound", G, larger[0] if larger else None, None, lb)
    return None


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def monitor_row(rec: MonitorRecord) -> dict:
    """The ``monitor_*`` metrics of a record (non-finite numbers -> None).

    When G* is not identified (c1's interval reaches 0), ``monitor_g_star`` is None,
    ``monitor_g_star_low`` is the lower bound of G* (None if unbounded) and ``monitor_g_star_high`` None.
    """
    row: dict = {}
    for name in ("c1", "c2", "c3"):
        est: Estimate = getattr(rec, name)
        row[f"monitor_{name}"] = _num(est.estimate)
        row[f"monitor_{name}_low"] = _num(est.ci_low)
        row[f"monitor_{name}_high"] = _num(est.ci_high)
    row["monitor_g_star"] = rec.g_star
    if rec.g_star is not None and rec.g_star_ci is not None:
        row["monitor_g_star_low"], row["monitor_g_star_high"] = int(rec.g_star_ci[0]), int(rec.g_star_ci[1])
    else:
        row["monitor_g_star_low"], row["monitor_g_star_high"] = _num(rec.g_star_lower_bound), None
    row["monitor_g_recommended"] = rec.g_recommended
    row["monitor_g_band_low"], row["monitor_g_band_high"] = rec.g_band if rec.g_band is not None else (None, None)
    row["monitor_message"] = rec.message
    row["monitor_seconds"] = float(rec.seconds)
    row["monitor_n_prompts"] = rec.n_prompts
    row["monitor_n_batches"] = rec.n_batches
    row["monitor_decided"] = rec.decided
    return row


def console_column(row: dict) -> str | None:
    """The console line's monitor column of a metrics row (None on steps without a measurement); ``G_use=8?`` marks
    the G of a batch that cannot decide (a guess, docs/math.md M41).

    Examples
    --------
    >>> console_column({"monitor_c1": 0.01, "monitor_c3": 1.2, "monitor_g_recommended": 8,
    ...                 "monitor_g_band_low": 4, "monitor_g_band_high": 16})
    'c1=0.01 c3=1.2 G_use=8 band=[4,16]'
    >>> console_column({"monitor_c1": -0.01, "monitor_c3": 1.2, "monitor_g_recommended": 8, "monitor_decided": False,
    ...                 "monitor_g_band_low": 4, "monitor_g_band_high": 1024})
    'c1=-0.01 c3=1.2 G_use=8? band=[4,1024]'
    """
    if "monitor_c1" not in row:
        return None
    def num(v):
        return "-" if v is None else f"{v:.3g}"
    lo, hi = row.get("monitor_g_band_low"), row.get("monitor_g_band_high")
    band = f" band=[{lo},{hi}]" if lo is not None else ""
    c1, c3, rec = num(row.get("monitor_c1")), num(row.get("monitor_c3")), row.get("monitor_g_recommended")
    guess = "?" if row.get("monitor_decided") is False and rec is not None else ""  # a guess: the batch cannot decide
    return f"c1={c1} c3={c3} G_use={rec}{guess}{band}"


def warning_text(advice: Advice, step: int, N: int) -> str:
    """The trainer's one-time warning, naming the flag and the G to try."""
    if advice.kind == "outside_interval":
        lo, hi = advice.interval
        return (f"group_size G={advice.G} is outside the monitor's 95% interval [{lo}, {hi}] for G* "
                f"(step {step}, N={N}); try --budget.group-size {advice.suggestion}")
    if advice.kind == "outside_band":
        lo, hi = advice.interval
        return (f"group_size G={advice.G} is outside the monitor's 95% band [{lo}, {hi}] of near-optimal G "
                f"(step {step}, N={N}); try --budget.group-size {advice.suggestion}")
    tail = (f"; try --budget.group-size {advice.suggestion}" if advice.suggestion
            else "; try a larger --budget.group-size")
    return (f"group_size G={advice.G} is below the monitor's lower bound {advice.lower_bound:.1f} for G* "
            f"(step {step}, N={N}; c1 not distinguishable from 0){tail}")


class TrainMonitor:
    """The monitor inside :func:`ugrpo.train.loop.train`: one :meth:`observe` call per monitored step.

    Parameters
    ----------
    every : measure on steps every, 2 every, ... (the config's ``monitor_every``)
    budget : N = samples per step; group_size : G (>= 4)
    sketch_dim, n_boot, pool : the config's ``monitor_sketch_dim``, ``monitor_n_boot``, ``monitor_pool``
    seed : the run's seed (sketch projection and bootstrap seeds derive from it)
    temperature : sampling temperature (the scores are of the tempered policy, as the loss)
    micro_batch : rows per batched backward of the sketch (0 = all at once)
    params : which parameters the scores are over (default: the trainable ones; LoRA adapters under LoRA)
    warned : True when a previous part of the run (before ``--resume``) already warned
    """

    def __init__(self, *, every: int, budget: int, group_size: int, sketch_dim: int = 128, n_boot: int = 200,
                 pool: int = 1, seed: int = 0, temperature: float = 1.0, micro_batch: int = 0, params=None,
                 warned: bool = False, pilot_group: int | None = None):
        from ugrpo.lm.scores import ScoreSpec

        pilot_group = group_size if pilot_group is None else pilot_group
        if pilot_group < MIN_PILOT_GROUP:
            raise ValueError(f"monitor needs groups of >= {MIN_PILOT_GROUP} samples (the c2/c3 estimators need G >= "
                             f"4); got {pilot_group}")
        self.every, self.N, self.G, self.g0 = every, budget, group_size, pilot_group
        self.sketch_dim, self.n_boot, self.pool = sketch_dim, n_boot, pool
        self.seed, self.temperature, self.micro_batch = seed, temperature, micro_batch
        self.params = ScoreSpec() if params is None else params
        self.candidates = candidate_groups(budget)
        self.warned = warned
        self._pool: list[tuple[Tensor, Tensor]] = []  # (rewards (B, G), scores (B, G, k)) of recent monitored steps
        self.history: list[MonitorRecord] = []

    @classmethod
    def from_config(cls, cfg, *, warned: bool = False) -> TrainMonitor:
        """The monitor a :class:`~ugrpo.train.config.TrainConfig` asks for (``cfg.monitor_every > 0``)."""
        N, G = cfg.budget.samples_per_step, cfg.budget.group_size
        ragged = cfg.allocation.rule != "uniform"  # per-prompt G_b >= g_min: the first g_min samples of each prompt
        return cls(every=cfg.monitor_every, budget=N, group_size=G, sketch_dim=cfg.monitor_sketch_dim,
                   n_boot=cfg.monitor_n_boot, pool=cfg.monitor_pool, seed=cfg.seed,
                   temperature=cfg.sampling.temperature, micro_batch=cfg.budget.micro_batch, warned=warned,
                   pilot_group=cfg.allocation.bounds(N, G)[0] if ragged else None)

    def due(self, step: int) -> bool:
        """True on the steps the monitor measures (multiples of ``every``)."""
        return self.every > 0 and step % self.every == 0

    def observe(self, step: int, model, rollout, rewards: Tensor, ctx=None) -> dict:
        """Sketch this batch's scores, pool, estimate, plan: the ``monitor_*`` keys of the step's row.

        Adds ``monitor_warning`` (and prints it on rank 0) the first time G is outside the interval.
        With per-prompt group sizes (``allocation.rule`` other than uniform) it reads the first g_min samples of
        every prompt: g_min iid draws per prompt, fixed before sampling, so an unbiased (B, g_min) pilot.
        ``rewards`` : (B_local, G) or, for ragged groups, the flat (N_local,) rewards in row order.
        """
        from tqdm.auto import tqdm

        from ugrpo.lm.sketch import sketch_scores
        from ugrpo.train.distributed import gather_objects

        t0 = time.perf_counter()
        if self.g0 != self.G:  # per-prompt G_b (g0 = g_min < the mean G whenever the groups can differ)
            rewards = rewards.reshape(-1)[rollout.first_rows(self.g0)].view(-1, self.g0)
            rollout = rollout.first_samples(self.g0)
        else:
            rewards = rewards.reshape(-1, self.G)
        local = sketch_scores(model, rollout, self.sketch_dim, seed=sketch_seed(self.seed), params=self.params,
                              temperature=self.temperature, chunk_size=self.micro_batch or None)  # (B_local*G, k)
        parts = gather_objects((rewards.double().cpu(), local.double().cpu()), ctx) if ctx is not None else [(rewards,
                                                                                                              local)]
        z = torch.cat([p[0].double().cpu() for p in parts])  # (B, G) in global prompt order (contiguous shards)
        w = torch.cat([p[1].double().cpu() for p in parts]).view(z.shape[0], self.g0, -1)  # (B, g0, k)
        self._pool = (self._pool + [(z, w)])[-self.pool:]
        rec = measure(torch.cat([p[0] for p in self._pool]), torch.cat([p[1] for p in self._pool]), budget=self.N,
                      candidates=self.candidates, n_boot=self.n_boot, seed=bootstrap_seed(self.seed, step), step=step,
                      num_generations=self.G, n_batches=len(self._pool))
        rec = replace(rec, seconds=time.perf_counter() - t0)
        self.history.append(rec)
        row = monitor_row(rec)
        if not rec.decided and self.pool == 1:
            row["monitor_message"] += " (or pool monitored batches: --monitor-pool 4)"
        advice = None if self.warned else advise(rec, self.candidates)
        if advice is not None:
            self.warned = True
            row["monitor_warning"] = warning_text(advice, step, self.N)
            if ctx is None or ctx.is_main:
                tqdm.write(f"WARNING: {row['monitor_warning']}")
        return row
