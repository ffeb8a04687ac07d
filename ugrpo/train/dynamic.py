"""DAPO's dynamic sampling (arXiv 2503.14476, from its description): ``allocation.rule: dynamic``.

Every group has G samples. Round 0 draws the step's B prompts exactly as the plain trainer (same prompts, same
seeds); a group whose G rewards are all equal is dropped, and round r >= 1 draws as many new prompts as groups
are still missing (seeded by (seed, step, r)) until B groups are informative or ``allocation.dynamic_max_rounds``
rounds are done. Then the batch is the first B informative groups in drawing order, filled up (after the last
round) with all-equal groups in drawing order. Every sample drawn counts in ``samples``.

**Biased** (docs/allocation.md A5): the batch is conditioned on informative prompts, so the step estimates the
gradient of a different objective (prompts weighted by their chance to give a mixed group), not grad J.

Multi-process: each round's prompts are sharded like the plain trainer's; the rewards are gathered so every
process selects the same groups; each process keeps its own selected groups (their number may differ between
processes: the loss divides by the global count B G, so the pieces still sum to the batch's loss).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ugrpo.lm.sampling import Rollout, concat_rollouts, sample_groups
from ugrpo.stats.advantages import zero_std_groups
from ugrpo.tasks.base import ScoreResult, score
from ugrpo.train.distributed import DistContext, gather_objects, shard

__all__ = ["DynamicBatch", "dynamic_batch", "round_prompts"]


@dataclass(frozen=True)
class DynamicBatch:
    """This process's share of the selected groups, and the step's global counts."""

    rollout: Rollout
    """the local selected groups, G rows each"""
    problems: list
    rewards: torch.Tensor
    """(N_local,) rewards of the local rows"""
    score: ScoreResult
    """the local rows' scoring counts (all rounds: unscorable samples of dropped groups are counted too)"""
    position: torch.Tensor
    """(B_local,) position in [0, B) of each local group in the batch (minibatches are position ranges)"""
    prompts: np.ndarray
    """(B,) train-prompt index of the batch's groups, in batch order"""
    samples: int
    """policy samples drawn this step by all processes, all rounds"""
    samples_zero_std: int
    """of those, samples in groups whose rewards were all equal"""
    rounds: int


def round_prompts(n_problems: int, n: int, seed: int, step: int, r: int) -> np.ndarray:
    """Indices of the n new prompts of round r >= 1 of ``step`` (round 0 is :func:`ugrpo.train.loop.choose_prompts`)."""
    return np.random.default_rng([int(seed), int(step), 2, int(r)]).integers(0, n_problems, size=n)


def dynamic_batch(model, tok, task, problems: list, prompts: list[str], first: np.ndarray, cfg, step: int,
                  ctx: DistContext, seed_of) -> DynamicBatch:
    """Draw rounds until B informative groups (module docstring); ``seed_of(r, j)`` is the sampling seed of the
    j-th prompt of round r, ``first`` (B,) the prompts of round 0."""
    B, G = cfg.budget.prompts_per_step, cfg.budget.group_size
    kept: list[tuple[int, int, bool]] = []   # (round, j, informative) of every drawn group, drawing order
    local: dict[tuple[int, int], tuple[Rollout, torch.Tensor, ScoreResult]] = {}
    drawn, idx_of = 0, {}
    r, need, idx = 0, B, first
    while True:
        mine = shard(len(idx), ctx)
        if len(mine):
            ro = sample_groups(model, tok, [prompts[idx[j]] for j in mine], G, seeds=[seed_of(r, j) for j in mine],
                               temperature=cfg.sampling.temperature, top_p=cfg.sampling.top_p,
                               max_new_tokens=cfg.sampling.max_new_tokens, batch_size=cfg.budget.micro_batch or None)
            sc = score(task, ro.texts, [problems[idx[j]] for j in mine for _ in range(G)])
            z = torch.tensor(sc.rewards, dtype=torch.float64).view(-1, G)        # (B_local, G)
            for i, j in enumerate(mine):
                local[(r, j)] = (ro, z[i], sc) if i == 0 else (ro, z[i], None)
        else:
            z = torch.zeros(0, G, dtype=torch.float64)
        flat = [row for part in gather_objects(z.tolist(), ctx) for row in part]  # (len(idx), G) global, j order
        equal = zero_std_groups(torch.tensor(flat, dtype=torch.float64).view(-1, G)).tolist()
        for j, same in enumerate(equal):
            kept.append((r, j, not same))
            idx_of[(r, j)] = int(idx[j])
        drawn += len(idx) * G
        r += 1
        need = B - sum(k[2] for k in kept)
        if need <= 0 or r >= cfg.allocation.dynamic_max_rounds:
            break
        idx = round_prompts(len(problems), need, cfg.seed, step, r)
    chosen = ([k for k in kept if k[2]] + [k for k in kept if not k[2]])[:B]
    zero = sum(G for k in kept if not k[2])
    return _assemble(chosen, local, idx_of, problems, tok, G, drawn, zero, r)


def _assemble(chosen, local, idx_of, problems, tok, G, drawn, zero, rounds) -> DynamicBatch:
    """This process's selected groups as one rollout, in batch order."""
    pieces, rewards, position, sc_parts = [], [], [], []
    for pos, (r, j, _) in enumerate(chosen):
        if (r, j) not in local:
            continue
        ro, z, _ = local[(r, j)]
        first_row = int(torch.nonzero(ro.prompt_index == _local_index(local, r, j)).squeeze(1)[0])
        pieces.append((ro, torch.arange(first_row, first_row + G)))
        rewards.append(z)
        position.append(pos)
    sc_parts = [v[2] for v in local.values() if v[2] is not None]
    rollout = concat_rollouts(pieces, tok.pad_token_id) if pieces else None
    return DynamicBatch(
        rollout=rollout, problems=[problems[idx_of[(r, j)]] for r, j, _ in chosen if (r, j) in local],
        rewards=torch.cat(rewards) if rewards else torch.zeros(0, dtype=torch.float64), score=_merge(sc_parts),
        position=torch.tensor(position, dtype=torch.long),
        prompts=np.array([idx_of[(r, j)] for r, j, _ in chosen]), samples=drawn, samples_zero_std=zero,
        rounds=rounds)


def _local_index(local, r: int, j: int) -> int:
    """Index of group (r, j) within its round's local rollout (groups of a round are this process's shard)."""
    return sorted(jj for (rr, jj) in local if rr == r).index(j)


def _merge(parts: list[ScoreResult]) -> ScoreResult:
    """One ScoreResult with the counts of all rounds (rewards/unscorable lists concatenated)."""
    return ScoreResult(
        rewards=[x for p in parts for x in p.rewards], unscorable=[x for p in parts for x in p.unscorable],
        n_timeouts=sum(p.n_timeouts for p in parts), n_parse_failures=sum(p.n_parse_failures for p in parts),
        n_errors=sum(p.n_errors for p in parts), first_error=next((p.first_error for p in parts if p.first_error),
                                                                   None))
