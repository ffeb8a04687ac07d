"""Per-prompt group sizes G_b inside TRL's ``GRPOTrainer``: the step of :class:`TrlAllocation` (docs/trl.md).

Design: ragged rows through TRL's generation batch (not padding to G_max). TRL's ``RepeatSampler`` still yields
B prompts x G = ``num_generations`` rows per generation batch (its seed, its skipping on resume and its split over
processes are unchanged). Before TRL generates, :meth:`TrlAllocation.layout`

1. gathers the batch's rows over processes (each row carries its dataset index in the column :data:`INDEX_COLUMN`,
   added to the train dataset at construction) and reads the B prompts (blocks of G equal rows);
2. asks :class:`ugrpo.train.alloc.Allocator` (the rules and the predictor of ``ugrpo train``, one implementation) for
   G_b from the prompts' earlier visits only, never from this batch, so each prompt's leave-one-out estimate stays
   unbiased (docs/math.md M32, M44); the Allocator's step is the number of the generation batch (0, 1, ...: with
   TRL's defaults, one batch per optimizer step, TRL's ``global_step``; with ``gradient_accumulation_steps`` above
   ``steps_per_generation`` several batches share a ``global_step`` and must not share their draws, and with
   ``num_iterations`` > 1 a batch serves several steps), so its seeds and its cadences (``is_law_every``,
   ``is_certificate_every``) count generation batches;
3. lays out sum_b G_b = B G = N rows prompt-major (prompt b's G_b rows together) and gives process r the rows
   [r n, (r + 1) n), n = N / processes: as many rows as before, so what TRL does next (tokenising, generating one
   completion per row with HF ``generate`` or vLLM colocate, rewards, shuffling, accumulation, the loss and its
   normaliser, DDP) is unchanged, and only the rows that are used are generated.

Prompt importance sampling (``uniform-is``, docs/allocation.md A8): step 1 takes the batch's B prompts not from the
sampler but from the Allocator's law q of that step (:meth:`ugrpo.train.alloc.Allocator.prompts`: drawn with the
generator seeded by (seed, the batch's number), from the history only, guarded, M78), reading their rows from the train
dataset; TRL's sampler still sets how many rows each process holds (its own prompts are not used), so the
generation batch keeps its ``generation_batch_size`` rows, and a resumed run draws what an uninterrupted one would
(the batch counter is saved with the history).
The loss carries each prompt's weight 1/(P q(x_b)) (M52).

After TRL has scored the rows, :meth:`TrlAllocation.finish` replaces TRL's advantages (computed on the wrong
(B, G) view) by ``ugrpo.train.alloc.step_advantages``: each prompt's own G_b in its leave-one-out mean (and std),
times the row weight Gbar/G_b, so that TRL's per-row average over the N rows is
(1/B) sum_b (1/G_b) sum_g A_bg W_bg with TRL's own per-row normalisation of W (docs/trl.md); then the history
learns the batch's global rewards (and, for ``ustat``, the score norms, docs/allocation.md A3c) and the metrics go
to TRL's ``_metrics``.
The history is saved in TRL checkpoints (:data:`HISTORY_FILE`) and restored on ``resume_from_checkpoint``.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch import Tensor

from ugrpo.stats.allocation import IS_RULES
from ugrpo.stats.history import PromptHistory, ScoreNorms
from ugrpo.stats.is_guard import GUARD_G_MIN
from ugrpo.train.alloc import Allocator, step_advantages
from ugrpo.train.config import BudgetConfig, SamplingConfig, TrainConfig

from .trl_specs import AdvantageSpec, AllocationSpec

__all__ = ["INDEX_COLUMN", "HISTORY_FILE", "StepAllocation", "TrlAllocation", "adapter_config", "prepare_allocation",
           "trl_names", "weighted_rewards"]

INDEX_COLUMN = "ugrpo_prompt_index"
"""the column the adapter adds to the train dataset: each row's dataset index, the key of the history"""
HISTORY_FILE = "ugrpo_allocation.json"
"""the per-prompt history in a TRL checkpoint folder (``checkpoint-K/``)"""


def weighted_rewards(rewards_per_func: Tensor, weights: Tensor) -> tuple[Tensor, Tensor]:
    """TRL's per-function rewards (N, F) -> (N,) float64 ``sum_f w_f r_nf`` over the functions that scored row n,
    and the (N,) mask of rows no function scored (they get 0; ugrpo's convention, docs/trl-equivalence.md)."""
    if rewards_per_func.ndim != 2 or rewards_per_func.shape[1] != weights.numel():
        raise ValueError(f"rewards_per_func must be (N, F) with F = {weights.numel()} reward functions; got "
                         f"{tuple(rewards_per_func.shape)}")
    r = rewards_per_func.detach().double().cpu()
    return (r * weights.detach().to(r).unsqueeze(0)).nansum(dim=1), torch.isnan(r).all(dim=1)


def trl_names(message: str) -> str:
    """A message of ``ugrpo train``'s config checks in the adapter's names: ``allocation.rule`` / ``--allocation.g-min``
    -> ``allocation_rule`` / ``allocation_g_min`` (a TRL YAML's field; ``AllocationSpec`` has the part after the
    underscore).

    >>> trl_names("allocation.rule=vip needs ...; raise --allocation.g-min or use --allocation.rule uniform")
    'allocation_rule=vip needs ...; raise allocation_g_min or use allocation_rule uniform'
    """
    message = re.sub(r"--allocation\.([\w-]+)", lambda m: "allocation_" + m.group(1).replace("-", "_"), message)
    return re.sub(r"\ballocation\.(\w+)", r"allocation_\1", message)


def adapter_config(args, spec: AllocationSpec, adv: AdvantageSpec) -> TrainConfig:
    """The ``ugrpo train`` config whose Allocator a TRL run uses: N = ``generation_batch_size``, G =
    ``num_generations``, the advantage of ``adv`` and the allocation ``spec`` (its checks, in TRL's names first)."""
    N, G = int(args.generation_batch_size), int(args.num_generations)
    if spec.g_min > G:
        raise ValueError(f"allocation g_min={spec.g_min} is above num_generations={G}: the B = generation_batch_size "
                         f"/ num_generations = {N // G} prompts cannot each get g_min of the N = {N} samples; lower "
                         "allocation_g_min or raise num_generations")
    if spec.rule in IS_RULES:
        where = f"allocation rule {spec.rule}"
        if float(getattr(args, "beta", 0.0)) > 0:
            raise ValueError(f"{where} with beta={args.beta}: TRL's KL term is averaged over the drawn prompts without "
                             "the weights 1/(P q), so it would regularise toward the law q's prompts; set beta=0.0 or "
                             "choose another rule")
        if float(getattr(args, "entropy_coef", 0.0)) != 0 or getattr(args, "use_adaptive_entropy", False):
            raise ValueError(f"{where} with entropy_coef={args.entropy_coef} (use_adaptive_entropy="
                             f"{getattr(args, 'use_adaptive_entropy', False)}): TRL's entropy bonus is a mean over the "
                             "drawn prompts' tokens without the weights 1/(P q), so it would act on the law q's "
                             "prompts; set entropy_coef=0.0 and use_adaptive_entropy=False or choose another rule")
        if spec.is_guard and G < GUARD_G_MIN:
            raise ValueError(f"{where} with allocation is_guard=True needs num_generations >= {GUARD_G_MIN} (the "
                             f"guard's held-out U-statistics need three samples per prompt), got {G}; raise "
                             "num_generations or set is_guard=False")
    if spec.g_max and spec.g_max < G:  # 0 is the default 4 G
        raise ValueError(f"allocation g_max={spec.g_max} is below num_generations={G}: the B = generation_batch_size "
                         f"/ num_generations = {N // G} prompts of at most g_max samples each cannot spend the N = {N} "
                         "samples; raise allocation_g_max to num_generations or more (0: the default 4 x "
                         "num_generations)")
    try:
        return TrainConfig(
            budget=BudgetConfig(samples_per_step=N, group_size=G, micro_batch=int(args.per_device_train_batch_size)),
            sampling=SamplingConfig(temperature=float(args.temperature), top_p=float(args.top_p),
                                    max_new_tokens=int(args.max_completion_length)),
            allocation=spec, baseline=adv.baseline, oracle_samples=int(adv.baseline == "oracle"),  # V(x): value_fn
            scale=adv.scale, ddof=adv.ddof, eps=adv.eps, zero_std=adv.zero_std, seed=int(args.seed))
    except ValueError as e:  # the advantage fields are those of AdvantageSpec
        raise ValueError(f"UGRPOTrainer(allocation=AllocationSpec(rule={spec.rule!r}), advantages={adv}): "
                         f"{trl_names(str(e))}") from None


def prepare_allocation(bound: dict, advantages: AdvantageSpec | None, spec: AllocationSpec):
    """Refuse what per-prompt group sizes cannot run with (naming the option), then the train dataset with
    :data:`INDEX_COLUMN` added. ``bound``: ``GRPOTrainer.__init__``'s arguments by name."""
    from datasets import Dataset

    where = f"UGRPOTrainer(allocation=AllocationSpec(rule={spec.rule!r}))"
    args, data = bound.get("args"), bound.get("train_dataset")
    if advantages is None:
        raise ValueError(f"{where} needs ugrpo's advantages (advantages=None keeps TRL's, which assume "
                         "num_generations rows per prompt); pass advantages=AdvantageSpec(baseline='grpo')")
    if args is not None and args.use_vllm and args.vllm_mode == "server":
        raise ValueError(f"{where} does not support use_vllm=True with vllm_mode='server': TRL asks the server for "
                         "n = num_generations completions of every prompt in one request, and per-prompt G_b would "
                         "need one request per prompt; use vllm_mode='colocate' (one completion per row, supported) "
                         "or transformers generation")
    if bound.get("rollout_func") is not None:
        raise ValueError(f"{where} does not support rollout_func: it is handed the rows of a batch and may assume "
                         "num_generations rows per prompt; remove rollout_func or use allocation rule 'uniform'")
    if not isinstance(data, Dataset):
        raise ValueError(f"{where} needs a map-style datasets.Dataset as train_dataset (the history is keyed by "
                         f"dataset index); got {type(data).__name__}")
    if args is not None:
        adapter_config(args, spec, advantages)  # the budget and advantage checks, before TRL builds anything
    if INDEX_COLUMN in data.column_names:
        raise ValueError(f"{where}: train_dataset already has a column {INDEX_COLUMN!r}, which the adapter adds; "
                         "rename it")
    return data.add_column(INDEX_COLUMN, list(range(len(data))))


@dataclass(frozen=True)
class StepAllocation:
    """The group sizes of one generation batch and this process's rows.

    Attributes
    ----------
    step : TRL's ``global_step`` when the batch was generated
    batch : the number of the generation batch in the run (0, 1, ...; the Allocator's step)
    prompts : (B,) dataset indices of the batch's prompts, in TRL's order
    sizes : (B,) G_b, sum = N (``generation_batch_size``)
    local_groups : (n,) the group b of each of this process's rows
    local_ranks : (n,) the position g < G_b of each row within its group
    """

    step: int
    batch: int
    prompts: np.ndarray
    sizes: np.ndarray
    local_groups: np.ndarray
    local_ranks: np.ndarray

    @property
    def local_prompts(self) -> np.ndarray:
        """(n,) dataset index of each of this process's rows."""
        return self.prompts[self.local_groups]


class TrlAllocation:
    """The allocation of one TRL run (one per process; every process computes the same sizes).

    Parameters
    ----------
    args : the run's ``GRPOConfig``
    spec : the rule and its bounds
    advantages : the ugrpo advantage (required: TRL's own advantages assume equal groups)
    n_prompts : rows of the train dataset (the history has one entry per dataset index)
    """

    def __init__(self, args, spec: AllocationSpec, advantages: AdvantageSpec, n_prompts: int) -> None:
        self.cfg = adapter_config(args, spec, advantages)
        self.spec, self.advantages = spec, advantages
        self.generate_every = int(args.steps_per_generation) * int(args.num_iterations)  # optimizer steps per batch
        self.N, self.G = self.cfg.budget.samples_per_step, self.cfg.budget.group_size
        self.allocator = Allocator(self.cfg, n_prompts, first_step=0)  # the first generation batch is batch 0
        self.batches: int | None = 0  # generation batches laid out so far (None: a checkpoint without the count)
        self.log: list[StepAllocation] = []
        self._pending: tuple[StepAllocation, dict] | None = None

    @property
    def last(self) -> StepAllocation | None:
        """The latest generation batch's allocation (after it was scored)."""
        return self.log[-1] if self.log else None

    @property
    def current(self) -> StepAllocation | None:
        """The allocation of the batch TRL is generating now (between :meth:`layout` and :meth:`finish`)."""
        return None if self._pending is None else self._pending[0]

    # -- before generation ------------------------------------------------------------------------

    def layout(self, trainer, inputs: list[dict]) -> list[dict]:
        """This process's rows of the ragged batch (copies of the dataset rows, without :data:`INDEX_COLUMN`)."""
        from accelerate.utils import gather_object

        rows = gather_object(list(inputs))  # the global batch in sampler order (processes hold contiguous slices)
        if len(rows) != self.N:
            raise RuntimeError(f"UGRPOTrainer: the generation batch has {len(rows)} rows, expected "
                               f"generation_batch_size = {self.N}")
        step = int(trainer.state.global_step)
        if self.batches is None:  # resumed from a checkpoint written before the count was saved: one batch per step
            self.batches = step
        batch = self.batches
        if self.allocator.is_rule:  # prompt IS: the law's draw replaces the sampler's prompts (module docstring)
            prompts = self.allocator.prompts(batch)
            first = {int(x): _dataset_row(trainer.train_dataset, int(x)) for x in np.unique(prompts)}
        else:
            idx = np.array([int(r[INDEX_COLUMN]) for r in rows], dtype=np.int64).reshape(-1, self.G)
            if (idx != idx[:, :1]).any():
                raise RuntimeError("UGRPOTrainer(allocation=...) expects each prompt's num_generations rows next to "
                                   "each other (TRL's RepeatSampler); a custom sampler or dataloader broke that layout")
            prompts = idx[:, 0]
            first = {int(x): rows[b * self.G] for b, x in enumerate(prompts)}
        sizes, row = self.allocator.choose(prompts, batch)
        group = np.repeat(np.arange(len(prompts)), sizes)
        rank_in = np.concatenate([np.arange(g) for g in sizes])
        n, r = len(inputs), trainer.accelerator.process_index
        part = slice(r * n, (r + 1) * n)
        alloc = StepAllocation(step, batch, prompts, sizes, group[part], rank_in[part])
        self._pending = (alloc, row)
        self.batches = batch + 1
        return [{k: v for k, v in first[int(prompts[b])].items() if k != INDEX_COLUMN} for b in alloc.local_groups]

    # -- after scoring ----------------------------------------------------------------------------

    def finish(self, trainer, out: dict, inputs: list[dict], rewards_per_func: Tensor, value_fn, guard) -> None:
        """Ragged advantages into ``out``, the batch into the history, the metrics into ``trainer._metrics``.

        ``guard(model, args)``: a context manager that turns activation checkpointing off for the sketch (``ustat``).
        """
        if self._pending is None:
            raise RuntimeError("UGRPOTrainer: finish() without layout() (a TRL version this code does not know)")
        alloc, row = self._pending
        self._pending = None
        z, unscorable = weighted_rewards(rewards_per_func, trainer.reward_weights)  # (N,) global, row order
        try:
            self.allocator.check_rewards(z)
        except ValueError as e:  # the trainer's message, in the adapter's names
            w = [float(x) for x in trainer.reward_weights]
            why = ("" if w == [1.0] else f" The reward of a row is TRL's weighted sum of the {len(w)} reward "
                   f"function(s) with reward_weights={w}: each function may lie in [0, 1] while the sum does not; "
                   "rescale the functions or the weights so that the sum does.")
            raise ValueError(f"UGRPOTrainer(allocation=AllocationSpec(rule={self.spec.rule!r})): "
                             f"{trl_names(str(e))}{why}") from None
        sizes = torch.as_tensor(alloc.sizes)
        values = self._values(trainer, inputs, value_fn, sizes) if self.advantages.baseline == "oracle" else None
        weights = self.allocator.prompt_weights(torch.arange(len(sizes)))  # prompt IS: 1/(P q(x_b)); else None
        adv, n_zero = step_advantages(self.cfg, SimpleNamespace(group_sizes=sizes), z, values,
                                      weights)  # (N,) * Gbar/G_b (* w_b)
        n, r = len(inputs), trainer.accelerator.process_index
        old = out["advantages"]
        out["advantages"] = adv[r * n:(r + 1) * n].to(device=old.device, dtype=old.dtype)
        norms, seconds = self._scores(trainer, out, alloc, z, guard)
        seen = self.allocator.observe(alloc.prompts, alloc.sizes, z.numpy(), norms)
        self.log.append(alloc)
        B = len(alloc.sizes)
        m = trainer._metrics["train"]
        for k, v in {**row, **seen, "alloc_g_mean": float(alloc.sizes.mean()), "frac_zero_std": n_zero / B,
                     "frac_unscorable": float(unscorable.double().mean()), "alloc_score_seconds": seconds}.items():
            # numbers only, and no NaN (the guard's held-out ratio before any held-out visit): TRL would log a key
            # whose values are all NaN as None, which TensorBoard's and MLflow's callbacks warn about at every log
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                m[f"ugrpo/{k}"].append(float(v))
        if m.get("frac_reward_zero_std"):  # TRL's value came from its (B, G) view of ragged groups
            m["frac_reward_zero_std"][-1] = n_zero / B
        dq = trainer._logs["advantages"]  # the completions table: TRL appended its own advantages
        for _ in range(min(self.N, len(dq))):
            dq.pop()
        dq.extend(adv.tolist())

    def _values(self, trainer, inputs: list[dict], value_fn, sizes: Tensor) -> Tensor:
        """(B,) V(x_b) from ``value_fn`` on this process's rows, gathered; one value per group."""
        vals = list(value_fn([x["prompt"] for x in inputs]))
        if len(vals) != len(inputs):
            raise ValueError(f"value_fn returned {len(vals)} values for {len(inputs)} prompts; return one per prompt")
        local = torch.tensor([float(v) for v in vals], dtype=torch.float64, device=trainer.accelerator.device)
        v = trainer.accelerator.gather(local).cpu()  # (N,) in row order
        if not torch.isfinite(v).all():
            raise ValueError("value_fn returned a non-finite value; V(x) must be a finite number for every prompt")
        first = torch.cumsum(sizes, 0) - sizes
        per_row = v[first].repeat_interleave(sizes)
        if (v - per_row).abs().max() > 1e-9 * (1 + v.abs().max()):
            raise ValueError("value_fn gave different values to rows of the same group; V(x) must depend on the "
                             "prompt only")
        return v[first]

    def _scores(self, trainer, out: dict, alloc: StepAllocation, z: Tensor, guard) -> tuple[ScoreNorms | None,
                                                                                               float]:
        """The batch's score norms at the sampling parameters (``ustat``, docs/allocation.md A3c), global; else
        None. ``scores: output``: process r measures the whole groups [r B / P, (r + 1) B / P) from the gathered
        rows' token ids (a group's rows may lie on two processes); ``sketch``: each process sketches its rows and
        the (N, k) sketches are gathered."""
        if not self.allocator.uses_scores:
            return None, 0.0
        from accelerate.utils import gather_object

        t0 = time.perf_counter()
        model = trainer.accelerator.unwrap_model(trainer.model)
        keys = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
        acc = trainer.accelerator
        if self.allocator.al.scores == "sketch":
            with guard(model, trainer.args):
                local, _ = self.allocator.sketch(model, tuple(out[k] for k in keys))  # (n, k)
            w = acc.gather(local.to(device=acc.device).contiguous()).double().cpu()  # (N, k), row order
            return ScoreNorms.from_scores(z.numpy(), w.numpy(), alloc.sizes), time.perf_counter() - t0
        rows = gather_object([[out[k][i].cpu() for k in keys] for i in range(len(out["prompt_ids"]))])  # N rows
        B, P, r = len(alloc.sizes), acc.num_processes, acc.process_index
        lo, hi = r * B // P, (r + 1) * B // P  # this process's groups
        start = np.concatenate([[0], np.cumsum(alloc.sizes)])
        mine = list(range(int(start[lo]), int(start[hi])))
        group = torch.as_tensor(np.repeat(np.arange(hi - lo), alloc.sizes[lo:hi]))
        part = ScoreNorms(np.zeros(0), np.zeros(0))
        if mine:
            batch = tuple(_stack([rows[i][j] for i in mine], left=j < 2) for j in range(4))
            with guard(model, trainer.args):
                part = self.allocator.step_scores(model, batch, z[mine], group, forward=False).result()[0]
        return ScoreNorms.concat(gather_object([part])), time.perf_counter() - t0

    # -- checkpoints ------------------------------------------------------------------------------

    def save(self, folder: str | os.PathLike) -> Path:
        """Write the history into a TRL checkpoint folder (:data:`HISTORY_FILE`, atomic)."""
        from ugrpo.fileio import atomic_write_text

        path = Path(folder) / HISTORY_FILE
        data = {"rule": self.spec.rule, "history": self.allocator.history.to_json(), "c1": self.allocator.c1,
                "law_source": self.allocator.law_source_json(),  # is_law_every > 1: the history the law read
                "batches": self.batches}  # generation batches so far: the next batch's number
        atomic_write_text(path, json.dumps(data))
        return path

    def restore(self, folder: str | os.PathLike) -> None:
        """Replace the history by the one saved in TRL checkpoint ``folder`` (ValueError naming the file if it is
        absent or does not fit this run's train dataset)."""
        path = Path(folder) / HISTORY_FILE
        if not path.is_file():
            raise ValueError(f"resume_from_checkpoint={str(folder)!r}: {path.name} is missing, so the per-prompt "
                             f"history of allocation rule {self.spec.rule!r} is lost (the checkpoint was written "
                             "without allocation, or by another trainer); resume with allocation rule 'uniform' or "
                             "start a new run in a new output_dir")
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"{path} is unreadable ({e}); restore it from a copy or start a new run") from None
        if not isinstance(data, dict) or not isinstance(data.get("history"), dict):
            raise ValueError(f"{path} holds no 'history' object; it was not written by UGRPOTrainer")
        self.allocator.history = PromptHistory.from_json(data["history"], self.allocator.history.P, str(path),
                                                         held_out=self.allocator.held_out)
        c1 = data.get("c1")
        self.allocator.c1 = tuple(float(x) for x in c1) if isinstance(c1, list) and len(c1) == 3 else None
        self.allocator.restore_law_source(data.get("law_source"), f"{path} (law_source)")
        batches = data.get("batches")
        if batches is not None and (not isinstance(batches, int) or isinstance(batches, bool) or batches < 0):
            raise ValueError(f"{path}: 'batches' must be the number of generation batches so far (an integer >= 0), "
                             f"got {batches!r}; restore the checkpoint from a copy or start a new run")
        self.batches = batches  # None (an older checkpoint): the next batch takes TRL's global_step
        step = _checkpoint_step(Path(folder))
        if step is not None and step % self.generate_every:
            warnings.warn(
                f"resume_from_checkpoint={str(folder)!r}: step {step} falls inside a generation batch (TRL generates "
                f"every steps_per_generation x num_iterations = {self.generate_every} optimizer steps and keeps the "
                "rest of the batch in memory only), so TRL generates a new batch at once and the resumed run's prompts "
                "and samples differ from an uninterrupted run's from here on; the history is intact. To resume "
                f"exactly, save at multiples of {self.generate_every} (save_steps).", UserWarning, stacklevel=2)


def _checkpoint_step(folder: Path) -> int | None:
    """The ``global_step`` a TRL checkpoint folder was saved at (its ``trainer_state.json``), or None if unreadable."""
    try:
        step = json.loads((folder / "trainer_state.json").read_text()).get("global_step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _dataset_row(dataset, x: int) -> dict:
    """Row ``x`` of the train dataset (with :data:`INDEX_COLUMN`, which must be ``x``)."""
    row = dict(dataset[x])
    if int(row.get(INDEX_COLUMN, -1)) != x:
        raise RuntimeError(f"UGRPOTrainer: train_dataset row {x} carries {INDEX_COLUMN}={row.get(INDEX_COLUMN)!r}; the "
                           "dataset was reordered after the adapter indexed it")
    return row


def _stack(rows: list[Tensor], *, left: bool) -> Tensor:
    """Rows of different lengths as one (n, L) tensor, padded with 0 on the left (prompts) or right (completions);
    the masks say which entries are real."""
    L = max(int(t.shape[0]) for t in rows)
    out = torch.zeros(len(rows), L, dtype=rows[0].dtype)
    for i, t in enumerate(rows):
        if left:
            out[i, L - t.shape[0]:] = t
        else:
            out[i, :t.shape[0]] = t
    return out
