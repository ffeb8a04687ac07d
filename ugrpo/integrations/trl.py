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
import os
import warnings
from collections.abc import Callable, Sequence

import torch
from torch import Tensor
from trl import GRPOTrainer

from ugrpo.stats.advantages import compute_advantages

from .trl_alloc import INDEX_COLUMN, TrlAllocation, prepare_allocation
from .trl_config import FROM_ARGS as _FROM_ARGS
from .trl_config import UGRPOConfig, from_config
from .trl_monitor import GroupSizeMonitor, MonitorRecord, _no_activation_checkpointing, step_budget
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
            raise ValueError("AdvantageSpec(baseline='oracle') needs the trainer's value_fn: UGRPOTrainer(..., "
                             "value_fn=lambda prompts: [V(x) for x in prompts])")
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
