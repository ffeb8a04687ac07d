"""The online G* monitor of a TRL run: :class:`GroupSizeMonitor` (a ``TrainerCallback``), re-exported by
:mod:`ugrpo.integrations.trl`.

It estimates c1, c2, c3 of Theorem 7 from the batch TRL just generated (per-sample score sketches of TRL's
completions, :func:`ugrpo.lm.sketch.sketch_scores`), plans G at the budget N
(:func:`ugrpo.stats.planner.plan_group_size`) and logs ``ugrpo/c1``, ``ugrpo/c2``, ``ugrpo/c3``, the G to use
``ugrpo/g_recommended`` and whether the batch decides it ``ugrpo/g_decided``, the band and G*
(:func:`trl_metrics`) through TRL's ``_metrics`` (so they reach TensorBoard / W&B beside ``reward_std``); it warns
only from a batch that decides. :func:`step_budget` is TRL's effective batch size, the monitor's default N.
"""

from __future__ import annotations

import math
import time
import warnings
from contextlib import contextmanager
from dataclasses import replace

import torch
from torch import Tensor
from transformers import TrainerCallback
from trl import GRPOTrainer

from ugrpo.lm.scores import ScoreSpec
from ugrpo.stats.components import MIN_PILOT_GROUP
from ugrpo.train.monitor import MonitorRecord, advise, measure

__all__ = ["GroupSizeMonitor", "MonitorRecord", "step_budget", "trl_metrics"]


def step_budget(args, num_processes: int | None = None) -> int:
    """N = completions per optimizer step = per_device_train_batch_size * gradient_accumulation_steps * processes.

    The "effective batch size" TRL requires to be divisible by ``num_generations``.
    """
    n_proc = args.world_size if num_processes is None else num_processes
    return int(args.per_device_train_batch_size) * int(args.gradient_accumulation_steps) * int(n_proc)


def trl_metrics(rec: MonitorRecord) -> dict[str, float]:
    """The ``ugrpo/*`` metrics one measurement logs through TRL (pure).

    ``ugrpo/g_decided`` is 1.0 when the batch (or the pooled batches) decides the G to use (docs/math.md M41: one G
    within the band's tolerance of the best for every c1 in its interval) and 0.0 when it cannot tell; then
    ``ugrpo/g_recommended`` is the best guess (the console's ``G_use=8?``), not advice, and no warning comes from it.
    ``ugrpo/g_star`` is logged only while c1's interval excludes 0; otherwise ``ugrpo/g_star_low`` is G*'s lower bound.

    Examples
    --------
    >>> from ugrpo.stats.bootstrap_ci import Estimate
    >>> e = Estimate(0.1, 0.05, 0.2, 0.03)
    >>> rec = MonitorRecord(step=0, c1=e, c2=e, c3=e, budget=64, num_generations=8, g_star=None, g_star_ci=None,
    ...                     g_star_lower_bound=3.5, message="", seconds=0.25, g_recommended=8, g_band=(4, 64),
    ...                     decided=False)
    >>> m = trl_metrics(rec)
    >>> m["ugrpo/g_decided"], m["ugrpo/g_recommended"], m["ugrpo/g_star_low"], "ugrpo/g_star" in m
    (0.0, 8.0, 3.5, False)
    """
    out = {f"ugrpo/{k}": est.estimate for k, est in (("c1", rec.c1), ("c2", rec.c2), ("c3", rec.c3))}
    if rec.g_star is not None:
        out["ugrpo/g_star"] = float(rec.g_star)
    if rec.g_star_ci is not None and rec.g_star is not None:
        out["ugrpo/g_star_low"], out["ugrpo/g_star_high"] = float(rec.g_star_ci[0]), float(rec.g_star_ci[1])
    elif rec.g_star_lower_bound is not None and math.isfinite(rec.g_star_lower_bound):
        out["ugrpo/g_star_low"] = float(rec.g_star_lower_bound)
    if rec.g_recommended is not None:
        out["ugrpo/g_recommended"] = float(rec.g_recommended)
    out["ugrpo/g_decided"] = 1.0 if rec.decided else 0.0
    if rec.g_band is not None:
        out["ugrpo/g_band_low"], out["ugrpo/g_band_high"] = float(rec.g_band[0]), float(rec.g_band[1])
    out["ugrpo/monitor_batches"] = float(rec.n_batches)
    out["ugrpo/monitor_seconds"] = float(rec.seconds)
    return out


class GroupSizeMonitor(TrainerCallback):
    """Every ``every`` generation steps: c1, c2, c3 from TRL's batch, G* at budget N, logged (paper Thm 7).

    The batch TRL generated is the pilot: B prompts x G = ``num_generations`` completions, rewards as
    TRL computed them, scores ``W = grad log pi(Y|x)`` sketched to ``sketch_dim`` dimensions (unbiased
    inner products, docs/math.md M19; one projection for the run, so that batches can be pooled; with
    ``pool=1`` a new projection each time, so that sketch noise averages out over measurements).
    Logged (:func:`trl_metrics`): ``ugrpo/c1..c3``, ``ugrpo/g_star`` (+ ``_low``/``_high``), ``ugrpo/g_recommended``,
    ``ugrpo/g_decided`` (1 when the batch decides the G to use, 0 when it cannot tell: then g_recommended is a best
    guess and no warning is given) and the 95% band of near-optimal G, ``ugrpo/g_band_low`` / ``ugrpo/g_band_high``
    (M40-M41).
    :func:`~ugrpo.stats.components.estimate_components` gives unbiased c1, c2, c3 with bootstrap
    intervals over prompts, :func:`~ugrpo.stats.planner.plan_group_size` minimises
    c1 G/N + c2/N + c3/(N (G-1)) over the G that divide N (and TRL's generation batch).

    When one batch cannot decide (c1's interval contains 0, or its estimate is negative), the message
    says so and the estimate is redone on the last ``pool`` measured batches pooled, so the answer
    firms up as training goes on. The bias this brings: the pooled batches come from different
    policies, so c2, c3 are the window's averages but c1 is biased *upward* by the spread of the mean
    gradient over the window (docs/math.md M43), which biases G* *down*.

    Parameters
    ----------
    every : measure on generation steps 0, every, 2 every, ...
    budget : N, completions per optimizer step; default per_device_train_batch_size *
        gradient_accumulation_steps * processes
    sketch_dim : k of the score sketch
    n_boot : bootstrap replicates for the intervals
    params : which parameters the scores are taken over (default: the trainable ones; LoRA adapters
        for a peft model)
    seed : seed of the sketch projection and base seed of the bootstrap
    warn : warn once when a batch that decides puts ``num_generations`` outside the band of near-optimal G (a batch
        that cannot tell gives no advice)
    pool : batches pooled (the current one and the last ``pool - 1`` measured ones) when one batch cannot
        decide; 1 never pools

    Notes
    -----
    Needs ``num_generations >= 4`` (the c2, c3 estimators average over triples within a group) and
    at least 2 prompts per generation batch. Measurements are kept in :attr:`history`. The estimates
    are of the constants at the *current* policy from one batch (B prompts): c1 is noisy for small B.
    """

    def __init__(self, every: int = 10, *, budget: int | None = None, sketch_dim: int = 128, n_boot: int = 200,
                 params: ScoreSpec = ScoreSpec(), seed: int = 0, warn: bool = True, pool: int = 4):
        for name, v, lo in (("every", every, 1), ("sketch_dim", sketch_dim, 1), ("n_boot", n_boot, 2),
                            ("pool", pool, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"GroupSizeMonitor({name}={v!r}): must be an int >= {lo}")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 2):
            raise ValueError(f"GroupSizeMonitor(budget={budget!r}): must be an int >= 2 (completions per step) or None")
        if not isinstance(params, ScoreSpec):
            raise TypeError("GroupSizeMonitor(params=...) must be a ugrpo.lm.scores.ScoreSpec, got "
                            f"{type(params).__name__}")
        self.every, self.budget, self.sketch_dim, self.n_boot = every, budget, sketch_dim, n_boot
        self.params, self.seed, self.warn, self.pool = params, seed, warn, pool
        self._pool: list[tuple[Tensor, Tensor]] = []  # (rewards (B, G), scores (B, G, k)) of recent measurements
        self.history: list[MonitorRecord] = []
        self.seconds: list[float] = []
        self._calls = 0
        self._warned = False
        self._bound = False

    def bind(self, trainer: GRPOTrainer) -> None:
        """Check the run can be monitored and fix N and the candidate group sizes (called by UGRPOTrainer)."""
        args = trainer.args
        G = trainer.num_generations
        if G < MIN_PILOT_GROUP:
            raise ValueError(
                f"GroupSizeMonitor needs num_generations >= {MIN_PILOT_GROUP} (c2, c3 are U-statistics over triples "
                f"within a group); the config has num_generations = {G}"
            )
        if args.generation_batch_size // G < 2:
            raise ValueError(
                "GroupSizeMonitor needs >= 2 prompts per generation batch (c1 compares prompts); "
                "generation_batch_size "
                f"= {args.generation_batch_size} with num_generations = {G} holds 1; raise per_device_train_batch_size"
            )
        N = self.budget if self.budget is not None else step_budget(args)
        cands = [g for g in range(2, N + 1) if N % g == 0 and args.generation_batch_size % g == 0]
        if not cands:
            raise ValueError(f"no group size G >= 2 divides both the budget N = {N} and generation_batch_size = "
                             f"{args.generation_batch_size}; choose a budget with small factors")
        self.N, self.candidates, self.num_generations = N, cands, G
        self._bound = True

    def on_train_begin(self, args, state, control, **kwargs):
        if not self._bound:
            raise RuntimeError(
                "GroupSizeMonitor needs the batches TRL generates, which a plain GRPOTrainer does not expose to "
                "callbacks: use ugrpo.integrations.trl.UGRPOTrainer (advantages=None keeps TRL's own advantages)"
            )

    def observe(self, trainer: GRPOTrainer, batch: dict, rewards: Tensor) -> MonitorRecord | None:
        """Called by :class:`UGRPOTrainer` after each training generation; measures every ``every`` calls."""
        call, self._calls = self._calls, self._calls + 1
        if call % self.every:
            return None
        t0 = time.perf_counter()
        rec = self._measure(trainer, batch, rewards, step=trainer.state.global_step, seed=self.seed + call)
        seconds = time.perf_counter() - t0
        rec = replace(rec, seconds=seconds)
        self.history.append(rec)
        self.seconds.append(seconds)
        m = trainer._metrics["train"]
        for key, value in trl_metrics(rec).items():
            m[key].append(value)
        self._maybe_warn(rec)
        return rec

    def _measure(self, trainer, batch: dict, rewards: Tensor, *, step: int, seed: int) -> MonitorRecord:
        from ugrpo.lm.sketch import sketch_scores

        model = trainer.accelerator.unwrap_model(trainer.model)
        tensors = tuple(batch[k] for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask"))
        with _no_activation_checkpointing(model, trainer.args):
            local = sketch_scores(model, tensors, self.sketch_dim, seed=self.seed if self.pool > 1 else seed,
                                  params=self.params, temperature=trainer.args.temperature)  # (n_local, k)
        # (N_global, k), same S everywhere
        scores = trainer.accelerator.gather(local.float().contiguous()).double().cpu()
        B, G = rewards.shape
        return self.measure_pooled(rewards.double().cpu(), scores.view(B, G, -1), step=step, seed=seed)

    def measure_pooled(self, rewards: Tensor, scores: Tensor, *, step: int, seed: int) -> MonitorRecord:
        """This batch's measurement; when it cannot decide, the pooled one of the last ``pool`` batches (pure)."""
        self._pool = (self._pool + [(rewards, scores)])[-self.pool:]
        rec = measure(rewards, scores, budget=self.N, candidates=self.candidates, n_boot=self.n_boot,
                      seed=seed, step=step)  # shared with ugrpo train's monitor (ugrpo.train.monitor)
        if rec.decided or len(self._pool) < 2:
            return rec
        why = ("c1's estimate is negative" if rec.c1.estimate < 0 else "c1's 95% interval is too wide to pin the G "
               "to use")
        pooled = measure(torch.cat([p[0] for p in self._pool]), torch.cat([p[1] for p in self._pool]), budget=self.N,
                         candidates=self.candidates, n_boot=self.n_boot, seed=seed, step=step,
                         n_batches=len(self._pool))
        note = (f"the batch at step {step} cannot decide ({why}: {rewards.shape[0]} prompts are too few); pooled the "
                f"last {len(self._pool)} measured batches ({pooled.n_prompts} prompts), which biases c1 up and G* down "
                f"by the spread of the mean gradient over those steps: ")
        return replace(pooled, message=note + pooled.message)

    def _maybe_warn(self, rec: MonitorRecord) -> None:
        if not self.warn or self._warned:
            return
        advice = advise(rec, self.candidates)
        if advice is None:
            return
        G, N = rec.num_generations, rec.budget
        if advice.kind == "outside_band":
            msg = (f"num_generations = {G} is outside the 95% band {list(advice.interval)} of near-optimal group sizes "
                   f"at step {rec.step} (budget N = {N} completions per step): try num_generations = "
                   f"{advice.suggestion} ({N // advice.suggestion} prompts per step, per_device_train_batch_size "
                   "unchanged)")
        elif advice.kind == "outside_interval":
            msg = (f"num_generations = {G} is outside the 95% interval {list(advice.interval)} of the optimal group "
                   f"size at step {rec.step} (budget N = {N} completions per step): try num_generations = "
                   f"{advice.suggestion} "
                   f"({N // advice.suggestion} prompts per step, per_device_train_batch_size unchanged)")
        else:
            msg = (f"num_generations = {G} is below the lower bound {advice.lower_bound:.1f} of the optimal group "
                   f"size at step {rec.step} (N = {N}): try a larger num_generations"
                   + (f", e.g. {advice.suggestion}" if advice.suggestion else ""))
        warnings.warn(msg, UserWarning, stacklevel=3)
        self._warned = True


@contextmanager
def _no_activation_checkpointing(model, args):
    """Activation (gradient) checkpointing off for the monitor's backward pass, restored afterwards; the
    transformers v5 names where they exist (the ``gradient_checkpointing_*`` ones are deprecated there)."""
    new = hasattr(model, "activation_checkpointing_disable")
    was_on = bool(model.is_activation_checkpointing if new else model.is_gradient_checkpointing)
    if was_on:
        (model.activation_checkpointing_disable if new else model.gradient_checkpointing_disable)()
    try:
        yield
    finally:
        if was_on:
            kwargs = getattr(args, "activation_checkpointing_kwargs" if new else "gradient_checkpointing_kwargs", None)
            (model.activation_checkpointing_enable if new else model.gradient_checkpointing_enable)(kwargs)
