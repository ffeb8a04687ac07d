"""One optimizer update on a set of rollout rows: log-probs, loss, backward, all-reduce, step.

The rows of a (mini)batch may be spread over processes and over micro-batches; every piece
divides by the *global* count (``denominator``), so the gradients of the pieces sum to the
gradient of the whole batch's loss (paper Algorithm 1: 1/(B G) sum_b,g, or Algorithm 2:
1/|B_j| sum_{b in B_j}).

Micro-batches hold whole groups: a ``micro_batch`` of at least G rows is rounded down to a
multiple of G (ragged groups, docs/allocation.md: whole groups are packed greedily), so
:func:`ugrpo.lm.logprobs.completion_logprobs` (with ``share_prompts=True``)
runs each prompt once and shares it across its G completions (same result, less work). A ``micro_batch`` below G
splits groups (still correct, less sharing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ugrpo.lm.logprobs import completion_logprobs
from ugrpo.lm.rollout import group_chunks
from ugrpo.lm.sampling import Rollout
from ugrpo.train.alloc import row_weights
from ugrpo.train.config import TrainConfig
from ugrpo.train.distributed import DistContext, all_reduce_grads, reduce_sum
from ugrpo.train.loss import policy_loss

__all__ = ["UpdateStats", "rollout_logprobs", "global_denominator", "update_on_rows", "step_updates"]


@dataclass(frozen=True)
class UpdateStats:
    """Global (all processes) numbers of one optimizer update."""

    loss: float
    kl: float
    clip_frac: float
    ratio_mean: float
    grad_norm: float
    skipped: bool = False
    """the loss or the gradient was not finite: no update was made (the gradient was dropped)"""


def _chunks(rows: Tensor, size: int, group_size: int = 1, prompt_index: Tensor | None = None) -> list[Tensor]:
    """Split ``rows`` into micro-batches of ``size`` rows (0 = one), rounded down to whole groups.

    With ``prompt_index`` (ragged groups: the prompt of every rollout row) whole groups are packed greedily into
    micro-batches of at most ``size`` rows; a group larger than ``size`` is split into pieces of ``size``.
    """
    if size <= 0 or size >= len(rows):
        return [rows]
    if prompt_index is not None:
        return group_chunks(rows, size, prompt_index[rows])
    if size >= group_size:
        size -= size % group_size
    return [rows[i:i + size] for i in range(0, len(rows), size)]


def _rollout_chunks(rows: Tensor, size: int, rollout: Rollout) -> list[Tensor]:
    return _chunks(rows, size, rollout.group_size, rollout.prompt_index if rollout.ragged else None)


def _logp(model, rollout: Rollout, rows: Tensor, temperature: float, on_logits=None) -> Tensor:
    return completion_logprobs(
        model,
        rollout.prompt_ids[rows],
        rollout.prompt_mask[rows],
        rollout.completion_ids[rows],
        rollout.completion_mask[rows],
        temperature=temperature,
        share_prompts=True,  # rows come in groups: each prompt runs once (same result, less work)
        on_logits=None if on_logits is None else (lambda sl, h, lp: on_logits(rows[sl], h, lp)),
    )  # (n, T)


@torch.no_grad()
def rollout_logprobs(model, rollout: Rollout, *, temperature: float, micro_batch: int, on_logits=None) -> Tensor:
    """``(N, T)`` token log-probs of every rollout row, without gradient (pi_old or pi_ref); ``on_logits``: as in
    :func:`update_on_rows`."""
    rows = torch.arange(len(rollout.texts))
    if len(rows) == 0:
        return torch.zeros(0, rollout.completion_ids.shape[1])
    return torch.cat([_logp(model, rollout, c, temperature, on_logits).cpu()
                      for c in _rollout_chunks(rows, micro_batch, rollout)])


def global_denominator(cfg: TrainConfig, rollout: Rollout, rows: Tensor, n_sequences: int, ctx: DistContext) -> float:
    """The count the loss divides by: sequences (seq_sum, seq_mean) or tokens (token_mean), all processes."""
    if cfg.loss.aggregation == "token_mean":
        local = float(rollout.completion_mask[rows].sum()) if len(rows) else 0.0
        return max(1.0, reduce_sum([local], ctx)[0])
    return float(n_sequences)


def update_on_rows(
    model,
    params: Sequence[torch.nn.Parameter],
    optimizer: torch.optim.Optimizer,
    rollout: Rollout,
    rows: Tensor,
    advantages: Tensor,
    *,
    logp_old: Tensor | None,
    logp_ref: Tensor | None,
    denominator: float,
    cfg: TrainConfig,
    ctx: DistContext,
    on_logits=None,
    kl_weights: Tensor | None = None,
) -> UpdateStats:
    """Backward over ``rows`` (local rollout row indices) in micro-batches, all-reduce, clip, step.

    Parameters
    ----------
    advantages : (N_local,) advantages of all local rows (indexed by ``rows``)
    logp_old : (N_local, T) sampling-policy log-probs (Algorithm 2) or None (Algorithm 1)
    logp_ref : (N_local, T) reference log-probs when ``loss.kl_coef > 0``, else None
    denominator : global sequence or token count of this (mini)batch
    on_logits : None, or ``on_logits(rollout_rows, hidden, logprobs)`` called with what each micro-batch's forward
        computed (:class:`ugrpo.lm.output_scores.OutputScores`, ``ustat``'s statistics); it changes no gradient
    kl_weights : (N_local,) weights of the rows' KL terms (Gbar / G_b: :func:`ugrpo.train.alloc.row_weights`), or None
    """
    optimizer.zero_grad(set_to_none=True)
    device = next(model.parameters()).device
    sums = [0.0, 0.0, 0.0, 0.0, 0.0]  # loss, kl, clipped tokens, ratio * tokens, tokens
    for chunk in _rollout_chunks(rows, cfg.budget.micro_batch, rollout) if len(rows) else []:
        logp = _logp(model, rollout, chunk, cfg.sampling.temperature, on_logits)  # (n, T)
        mask = rollout.completion_mask[chunk].to(device)  # (n, T)
        out = policy_loss(
            logp,
            advantages[chunk].to(device),
            mask,
            logp_old=None if logp_old is None else logp_old[chunk].to(device),
            logp_ref=None if logp_ref is None else logp_ref[chunk].to(device),
            clip_low=cfg.loss.clip_low,
            clip_high=cfg.loss.clip_high,
            kl_coef=cfg.loss.kl_coef,
            aggregation=cfg.loss.aggregation,
            denominator=denominator,
            kl_weights=None if kl_weights is None else kl_weights[chunk].to(device),
        )
        out.loss.backward()
        n_tok = float(mask.sum())
        sums[0] += float(out.loss.detach())
        sums[1] += float(out.kl)
        sums[2] += float(out.clip_frac) * n_tok
        sums[3] += float(out.ratio_mean) * n_tok
        sums[4] += n_tok
    all_reduce_grads(params, ctx)
    max_norm = cfg.optim.grad_clip if cfg.optim.grad_clip is not None else float("inf")
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    loss, kl, clipped, ratio, tokens = reduce_sum(sums, ctx)  # global, so every process decides alike
    skipped = not (math.isfinite(loss) and math.isfinite(grad_norm))
    if not skipped:  # a NaN/inf gradient never reaches the weights (or the optimizer's moments)
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    tokens = max(tokens, 1.0)
    return UpdateStats(loss=loss, kl=kl, clip_frac=clipped / tokens, ratio_mean=ratio / tokens, grad_norm=grad_norm,
                       skipped=skipped)


def step_updates(model, params: Sequence[torch.nn.Parameter], optimizer: torch.optim.Optimizer, rollout: Rollout,
                 position: Tensor, advantages: Tensor, *, reference, cfg: TrainConfig,
                 ctx: DistContext, on_logits=None) -> list[UpdateStats]:
    """The step's updates: one on the whole batch (Algorithm 1) or m on disjoint prompt minibatches with the token
    ratio pi/pi_old (Algorithm 2, ``minibatches = m``).

    ``position`` (B_local,) is each local group's place in [0, B) of the batch: minibatch j holds the groups at
    positions [j B/m, (j+1) B/m). ``reference`` (a :class:`ugrpo.train.setup.Reference` or None) gives the KL
    term's log-probs, taken like pi_old's before the first update. ``on_logits`` (``ustat``'s output-projection
    statistics, docs/allocation.md A3c) sees every row once, from the one forward at the sampling parameters:
    pi_old's (Algorithm 2) or the update's (Algorithm 1).
    """
    mb, T = cfg.budget.micro_batch, cfg.sampling.temperature
    logp_ref = reference.logprobs(model, rollout, T, mb) if reference else None
    logp_old = (rollout_logprobs(model, rollout, temperature=T, micro_batch=mb, on_logits=on_logits)
                if cfg.algorithm == 2 else None)
    first = on_logits if cfg.algorithm == 1 else None  # Algorithm 1: one update, at the sampling parameters
    updates = []
    G, sizes = cfg.budget.group_size, rollout.group_sizes
    kl_weights = row_weights(sizes, G) if reference and bool((sizes != G).any()) else None  # each prompt's KL once
    Bm = cfg.budget.prompts_per_step // cfg.minibatches
    owner = position[rollout.prompt_index]  # (N_local,) place in the batch of each row's group
    for j in range(cfg.minibatches):  # Algorithm 1: m = 1, the whole batch
        mb_rows = torch.nonzero((owner >= j * Bm) & (owner < (j + 1) * Bm)).squeeze(1)
        denom = global_denominator(cfg, rollout, mb_rows, Bm * cfg.budget.group_size, ctx)  # Bm * Gbar rows (seq_*)
        updates.append(update_on_rows(
            model, params, optimizer, rollout, mb_rows, advantages, logp_old=logp_old, logp_ref=logp_ref,
            denominator=denom, cfg=cfg, ctx=ctx, on_logits=first, kl_weights=kl_weights,
        ))
    return updates

