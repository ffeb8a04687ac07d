"""ugrpo inside TRL's ``GRPOTrainer``: any ugrpo baseline as the advantage, and the online G* monitor.

Two additions to a TRL run, a few lines each (docs/trl.md)::

    from ugrpo.integrations.trl import AdvantageSpec, GroupSizeMonitor, UGRPOTrainer
    trainer = UGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...), train_dataset=...,
                           advantages=AdvantageSpec(baseline="grpo"),          # paper eq. (4), Lemma 1
                           callbacks=[GroupSizeMonitor(every=10)])              # c1, c2, c3, G* (Thm 7)

How the hook works (no TRL code is copied). TRL 1.16 has no advantage hook (TRL #4525, #7291), so
:class:`UGRPOTrainer` overrides two methods and calls TRL's own version first:

* ``_calculate_rewards`` returns the per-function rewards *gathered over all processes*, (N_global, F);
  the subclass keeps that tensor;
* ``_generate_and_score_completions`` returns TRL's batch; the subclass recomputes the weighted
  reward ``sum_f w_f r_f`` (TRL's ``reward_weights``), lays it out as ``(B, G)`` (TRL's
  ``rewards.view(-1, G)``: rows are prompt-major over the *global* batch), calls
  :func:`ugrpo.stats.advantages.compute_advantages`, and puts this process's slice
  ``[rank * n_local, (rank + 1) * n_local)`` into ``advantages`` (TRL's own slicing rule). The groups
  are therefore the same global groups TRL normalises, whatever the number of processes (tested on
  one process only).

What the subclass overrides (a ``UserWarning`` says so once, at construction): TRL's
``scale_rewards`` (replaced by ``AdvantageSpec.scale``), its hard-coded std epsilon 1e-4 (``eps``),
its zero-std handling (``zero_std``) and ``multi_objective_aggregation`` (ugrpo always uses the
weighted *sum* of the reward functions, i.e. ``"sum_then_normalize"``). Everything else (generation,
``loss_type``, ``epsilon``/clipping, ``beta``/KL, ``num_iterations``) stays TRL's. Deviation from TRL:
a completion for which every reward function returned None gets reward 0 (ugrpo's convention,
docs/trl-equivalence.md) and is counted in ``ugrpo/frac_unscorable``, instead of being left out of
its group mean. In eval mode with ``num_generations_eval < 2`` a baseline that needs G >= 2 keeps
TRL's advantages.

The monitor (:class:`GroupSizeMonitor`) estimates c1, c2, c3 of Theorem 7 from the batch TRL just
generated (per-sample score sketches of TRL's completions, :func:`ugrpo.lm.sketch.sketch_scores`),
plans G at the budget N (:func:`ugrpo.stats.planner.plan_group_size`) and logs ``ugrpo/c1``,
``ugrpo/c2``, ``ugrpo/c3``, ``ugrpo/g_star``, ``ugrpo/g_star_low``, ``ugrpo/g_star_high`` through
TRL's ``_metrics`` (so they reach TensorBoard / W&B beside ``reward_std``).
"""

from __future__ import annotations

import inspect
import math
import os
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import replace

import torch
from torch import Tensor
from transformers import TrainerCallback
from trl import GRPOTrainer

from ugrpo.lm.scores import ScoreSpec
from ugrpo.stats.advantages import compute_advantages
from ugrpo.stats.components import MIN_PILOT_GROUP
from ugrpo.train.monitor import MonitorRecord, advise, measure

from .trl_alloc import INDEX_COLUMN, TrlAllocation, prepare_allocation
from .trl_config import FROM_ARGS as _FROM_ARGS
from .trl_config import UGRPOConfig, from_config
from .trl_specs import AdvantageSpec, AllocationSpec

__all__ = ["AdvantageSpec", "AllocationSpec", "UGRPOConfig", "UGRPOTrainer", "GroupSizeMonitor", "MonitorRecord",
           "grouped_rewards", "step_budget"]

ValueFn = Callable[[list], Sequence[float]]


def grouped_rewards(rewards_per_func: Tensor, weights: Tensor, group_size: int) -> tuple[Tensor, Tensor]:
    """TRL's per-function rewards (N, F) -> weighted rewards (B, G) and the unscorable mask (B, G).

    ``r_n = sum_f w_f r_nf`` over the functions that scored row n (NaN = None is skipped, as TRL's
    ``nansum``); a row no function scored gets 0 and is flagged. Rows are prompt-major (TRL's
    ``view(-1, G)``).
    """
    if rewards_per_func.ndim != 2 or rewards_per_func.shape[1] != weights.numel():
        raise ValueError(
            f"rewards_per_func must be (N, F) with F = {weights.numel()} reward functions; got "
            f"{tuple(rewards_per_func.shape)}"
        )
    N = rewards_per_func.shape[0]
    if N % group_size:
        raise ValueError(f"{N} completions are not whole groups of num_generations = {group_size}")
    r = rewards_per_func.detach().double().cpu()  # small; CPU keeps every later tensor on one device
    unscorable = torch.isnan(r).all(dim=1)  # (N,)
    total = (r * weights.detach().to(r).unsqueeze(0)).nansum(dim=1)  # (N,)
    return total.view(-1, group_size), unscorable.view(-1, group_size)


def step_budget(args, num_processes: int | None = None) -> int:
    """N = completions per optimizer step = per_device_train_batch_size * gradient_accumulation_steps * processes.

    The "effective batch size" TRL requires to be divisible by ``num_generations``.
    """
    n_proc = args.world_size if num_processes is None else num_processes
    return int(args.per_device_train_batch_size) * int(args.gradient_accumulation_steps) * int(n_proc)


_GRPO_SIGNATURE = inspect.signature(GRPOTrainer.__init__)


class UGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` with ugrpo's advantages, per-prompt group sizes and, optionally, the G* monitor.

    Parameters
    ----------
    *args, **kwargs : everything ``GRPOTrainer`` takes
    advantages : AdvantageSpec, or None to keep TRL's own advantages (monitor only); default: the
        ``advantage_*`` fields of a :class:`UGRPOConfig` ``args``, else ``AdvantageSpec()``
    allocation : AllocationSpec (per-prompt G_b, docs/trl.md) or None (every prompt ``num_generations``);
        default: the ``allocation_*`` fields of a :class:`UGRPOConfig` ``args``, else None
    value_fn : for ``baseline="oracle"``: ``value_fn(prompts) -> list[float]``, V(x) of each prompt given
        (called with TRL's per-row prompts of this process; rows of a group must get the same value)
    monitor : a :class:`GroupSizeMonitor`; one passed in ``callbacks=[...]`` is found there too; default: the
        ``monitor_*`` fields of a :class:`UGRPOConfig` ``args`` (``monitor_every`` > 0), else none

    Notes
    -----
    The gradient TRL then computes is paper eq. (5) with the chosen baseline C (Table 1), aggregated
    by TRL's ``loss_type``: ``grpo`` + ``scale="none"`` + ``loss_type="dr_grpo"`` is the paper's
    U-statistic estimator (Lemma 1, eq. (6)) up to the constant 1/max_completion_length. With an allocation
    the rows of prompt b carry the weight Gbar/G_b, so the estimate is (1/B) sum_b (1/G_b) sum_g A_bg W_bg
    (M32) with TRL's normalisation of each row's W (:mod:`ugrpo.integrations.trl_alloc`).
    """

    def __init__(self, *args, advantages: AdvantageSpec | None = _FROM_ARGS, value_fn: ValueFn | None = None,
                 monitor: GroupSizeMonitor | None = _FROM_ARGS, allocation: AllocationSpec | None = _FROM_ARGS,
                 **kwargs):
        bound = _GRPO_SIGNATURE.bind(None, *args, **kwargs).arguments
        advantages, allocation, monitor = from_config(bound.get("args"), advantages, allocation, monitor)
        monitor = GroupSizeMonitor(**monitor) if isinstance(monitor, dict) else monitor
        if advantages is not None and not isinstance(advantages, AdvantageSpec):
            raise TypeError(f"advantages must be an AdvantageSpec or None, got {type(advantages).__name__}")
        if advantages is not None and advantages.baseline == "oracle" and value_fn is None:
            raise ValueError("AdvantageSpec(baseline='oracle') needs value_fn=lambda prompts: [V(x) for x in prompts]")
        if value_fn is not None and (advantages is None or advantages.baseline != "oracle"):
            raise ValueError("value_fn is only used with AdvantageSpec(baseline='oracle'); remove it or set the "
                             "baseline")
        if allocation is not None and not isinstance(allocation, AllocationSpec):
            raise TypeError(f"allocation must be an AllocationSpec or None, got {type(allocation).__name__}")
        allocation = None if allocation is None or allocation.rule == "uniform" else allocation
        if allocation is not None:
            if monitor is not None or any(isinstance(cb, GroupSizeMonitor) for cb in bound.get("callbacks") or ()):
                raise ValueError("GroupSizeMonitor with a non-uniform allocation is not supported in the TRL adapter "
                                 "yet (ugrpo train has it: monitor_every with allocation.g_min >= 4); remove the "
                                 "monitor or use allocation rule 'uniform'")
            bound["train_dataset"] = prepare_allocation(bound, advantages, allocation)
        bound.pop("self")
        super().__init__(**bound)
        self.ugrpo_advantages = advantages
        self.ugrpo_value_fn = value_fn
        self._ugrpo_rewards_per_func: Tensor | None = None
        self.ugrpo_allocation = (None if allocation is None else
                                 TrlAllocation(self.args, allocation, advantages, len(self.train_dataset)))
        """the run's :class:`~ugrpo.integrations.trl_alloc.TrlAllocation` (history, ``log`` of sizes), or None"""
        found = [cb for cb in self.callback_handler.callbacks if isinstance(cb, GroupSizeMonitor)]
        if monitor is not None and monitor not in found:
            self.add_callback(monitor)
            found.append(monitor)
        if len(found) > 1:
            raise ValueError(f"{len(found)} GroupSizeMonitor callbacks given; pass one")
        self.ugrpo_monitor = found[0] if found else None
        if self.ugrpo_monitor is not None:
            self.ugrpo_monitor.bind(self)
        if advantages is not None:
            warnings.warn(
                f"UGRPOTrainer replaces TRL's advantages with ugrpo's ({advantages}); TRL's "
                f"scale_rewards={self.args.scale_rewards!r}, its std epsilon 1e-4 and multi_objective_aggregation="
                f"{self.args.multi_objective_aggregation!r} are ignored (rewards are the weighted sum of the reward "
                f"functions). Generation and the loss (loss_type={self.args.loss_type!r}, epsilon, beta) stay TRL's.",
                UserWarning, stacklevel=2,
            )

    # -- hooks -----------------------------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        out = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)  # (N_global, F), gathered
        self._ugrpo_rewards_per_func = out.detach()
        return out

    def _generate_and_score_completions(self, inputs):
        self._ugrpo_rewards_per_func = None
        mode = "train" if self.model.training else "eval"
        alloc = self.ugrpo_allocation if mode == "train" else None
        if alloc is not None:
            inputs = alloc.layout(self, inputs)  # G_b rows of prompt b, chosen before generation (trl_alloc)
        out = super()._generate_and_score_completions(inputs)
        if self._ugrpo_rewards_per_func is None:
            raise RuntimeError("UGRPOTrainer: TRL did not call _calculate_rewards (a TRL version this code does not "
                               "know)")
        if alloc is not None:
            alloc.finish(self, out, inputs, self._ugrpo_rewards_per_func, self.ugrpo_value_fn,
                         _no_activation_checkpointing)
            return out
        G = self.num_generations if mode == "train" else self.num_generations_eval
        rewards, unscorable = grouped_rewards(self._ugrpo_rewards_per_func, self.reward_weights, G)  # (B, G) global
        self._metrics[mode]["ugrpo/frac_unscorable"].append(float(unscorable.double().mean()))
        spec = self.ugrpo_advantages
        if spec is not None and (G >= 2 or spec.baseline in ("vanilla", "oracle")):
            self._replace_advantages(out, inputs, rewards, mode)
        if self.ugrpo_monitor is not None and mode == "train":
            self.ugrpo_monitor.observe(self, out, rewards)
        return out

    def _set_signature_columns_if_needed(self):  # remove_unused_columns=True keeps the dataset index
        super()._set_signature_columns_if_needed()
        if INDEX_COLUMN not in self._signature_columns:
            self._signature_columns = [*self._signature_columns, INDEX_COLUMN]

    def _save_checkpoint(self, model, trial):  # the per-prompt history goes into TRL's checkpoint folder
        super()._save_checkpoint(model, trial)
        if self.ugrpo_allocation is not None and self.args.should_save:
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            self.ugrpo_allocation.save(os.path.join(self._get_output_dir(trial=trial), folder))

    def _load_optimizer_and_scheduler(self, checkpoint):  # called with the folder of resume_from_checkpoint
        super()._load_optimizer_and_scheduler(checkpoint)
        if self.ugrpo_allocation is not None and checkpoint is not None:
            self.ugrpo_allocation.restore(checkpoint)

    # -- advantages ------------------------------------------------------------------------------

    def _oracle_values(self, inputs, G: int) -> Tensor:
        prompts = [x["prompt"] for x in inputs]
        vals = list(self.ugrpo_value_fn(prompts))
        if len(vals) != len(prompts):
            raise ValueError(f"value_fn returned {len(vals)} values for {len(prompts)} prompts; return one per prompt")
        local = torch.tensor([float(v) for v in vals], dtype=torch.float64, device=self.accelerator.device)
        values = self.accelerator.gather(local).view(-1, G).cpu()  # (B, G) global, prompt-major
        if not torch.isfinite(values).all():
            raise ValueError("value_fn returned a non-finite value; V(x) must be a finite number for every prompt")
        if (values - values[:, :1]).abs().max() > 1e-9 * (1 + values.abs().max()):
            raise ValueError("value_fn gave different values to rows of the same group; V(x) must depend on the "
                             "prompt only")
        return values[:, 0]  # (B,)

    def _replace_advantages(self, out: dict, inputs, rewards: Tensor, mode: str) -> None:
        spec = self.ugrpo_advantages
        values = self._oracle_values(inputs, rewards.shape[1]) if spec.baseline == "oracle" else None
        res = compute_advantages(rewards, baseline=spec.baseline, values=values, scale=spec.scale, ddof=spec.ddof,
                                 eps=spec.eps, zero_std=spec.zero_std)
        flat = res.advantages.reshape(-1)  # (N_global,)
        n_local = len(inputs)
        rank = self.accelerator.process_index
        local = flat[rank * n_local:(rank + 1) * n_local]  # TRL's process slice
        old = out["advantages"]
        out["advantages"] = local.to(device=old.device, dtype=old.dtype)
        dq = self._logs["advantages"]  # completions table: TRL appended its own global advantages
        for _ in range(min(flat.numel(), len(dq))):
            dq.pop()
        dq.extend(flat.tolist())
        self._metrics[mode]["ugrpo/frac_zero_std"].append(res.frac_zero_std)
        self._metrics[mode]["ugrpo/samples_zero_std"].append(res.frac_zero_std * flat.numel())


# ------------------------------------------------------------------------------------------------
# the online G* monitor


class GroupSizeMonitor(TrainerCallback):
    """Every ``every`` generation steps: c1, c2, c3 from TRL's batch, G* at budget N, logged (paper Thm 7).

    The batch TRL generated is the pilot: B prompts x G = ``num_generations`` completions, rewards as
    TRL computed them, scores ``W = grad log pi(Y|x)`` sketched to ``sketch_dim`` dimensions (unbiased
    inner products, docs/math.md M19; one projection for the run, so that batches can be pooled; with
    ``pool=1`` a new projection each time, so that sketch noise averages out over measurements).
    Logged: ``ugrpo/c1..c3``, ``ugrpo/g_star`` (+ ``_low``/``_high``), ``ugrpo/g_recommended`` and the
    95% band of near-optimal G, ``ugrpo/g_band_low`` / ``ugrpo/g_band_high`` (M40-M41).
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
    warn : warn once when ``num_generations`` is outside the band of near-optimal G
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
        for key, est in (("c1", rec.c1), ("c2", rec.c2), ("c3", rec.c3)):
            m[f"ugrpo/{key}"].append(est.estimate)
        if rec.g_star is not None:
            m["ugrpo/g_star"].append(float(rec.g_star))
        if rec.g_star_ci is not None and rec.g_star is not None:
            m["ugrpo/g_star_low"].append(float(rec.g_star_ci[0]))
            m["ugrpo/g_star_high"].append(float(rec.g_star_ci[1]))
        elif rec.g_star_lower_bound is not None and math.isfinite(rec.g_star_lower_bound):
            m["ugrpo/g_star_low"].append(float(rec.g_star_lower_bound))
        if rec.g_recommended is not None:
            m["ugrpo/g_recommended"].append(float(rec.g_recommended))
        if rec.g_band is not None:
            m["ugrpo/g_band_low"].append(float(rec.g_band[0]))
            m["ugrpo/g_band_high"].append(float(rec.g_band[1]))
        m["ugrpo/monitor_batches"].append(float(rec.n_batches))
        m["ugrpo/monitor_seconds"].append(seconds)
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
