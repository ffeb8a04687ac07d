"""One step's batch: its prompts and seeds, and "sample, then score" for every kind of batch the trainer draws.

:func:`sample_and_score` is the one place in ``ugrpo.train`` that samples completions and scores them; a
:class:`Sampler` (the run's policy, task and train prompts) calls it for

* a **uniform** or **allocated** step (:meth:`Sampler.step`): the B prompts of :func:`choose_prompts`, G_b
  completions for prompt b (G for all under ``uniform``) seeded by :func:`prompt_seed` ``(seed, step, b)``;
* a **dynamic** step (``allocation.rule: dynamic``, DAPO's dynamic sampling, arXiv 2503.14476, from its
  description): round 0 is the plain step; a group whose G rewards are all equal is dropped and round r >= 1
  draws as many new prompts as groups are still missing (:func:`round_prompts`, seeds of stream 1 + r) until B
  groups are informative or ``allocation.dynamic_max_rounds`` rounds are done. The batch is the first B
  informative groups in drawing order, filled up (after the last round) with all-equal groups in drawing order;
  every sample drawn counts in ``samples``. **Biased** (docs/allocation.md A5): the batch is conditioned on
  informative prompts, so the step estimates the gradient of a different objective (prompts weighted by their
  chance to give a mixed group), not grad J;
* the **oracle** baseline's ``oracle_samples`` extra samples per prompt (:meth:`Sampler.oracle_values`, seed
  stream 1), whose mean reward estimates V(x).

Who draws: ``sampling.backend=hf`` the policy itself (:func:`ugrpo.lm.sampling.sample_groups`); ``vllm`` a colocated
vLLM engine (:mod:`ugrpo.lm.vllm_engine`, one request per prompt with ``n = G_b``) that :meth:`Sampler.sync_weights`
refreshes before step 1 and after every update. Both return the same :class:`~ugrpo.lm.rollout.Rollout`; what
follows (log-probs recomputed by the training model, scores, advantages) does not know which one drew it.

Multi-process: a step's prompts are sharded (:func:`ugrpo.train.distributed.shard`), each process samples its own
share; a dynamic round's rewards are gathered so every process selects the same groups, and each process keeps
its own selected groups (their number may differ between processes: the loss divides by the global count B G, so
the pieces still sum to the batch's loss).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ugrpo.lm.sampling import Rollout, concat_rollouts, sample_groups
from ugrpo.stats.advantages import zero_std_groups
from ugrpo.stats.seeds import stream_seed
from ugrpo.tasks.base import ScoreResult, score
from ugrpo.train.config import TrainConfig
from ugrpo.train.distributed import DistContext, gather_objects, shard

__all__ = ["Scored", "StepRollout", "Sampler", "sample_and_score", "choose_prompts", "prompt_generator",
           "prompt_seed", "round_prompts"]


def prompt_generator(seed: int, step: int) -> np.random.Generator:
    """The generator of ``step``'s prompt draw, seeded by (seed, step): uniform here, or from a prompt-IS law."""
    return np.random.default_rng([int(seed), int(step), 1])


def choose_prompts(n_problems: int, B: int, seed: int, step: int) -> np.ndarray:
    """Indices of the B prompts of ``step``: iid uniform over the train set (Algorithm 1), seeded by (seed, step)."""
    return prompt_generator(seed, step).integers(0, n_problems, size=B)


def prompt_seed(seed: int, step: int, b: int, stream: int = 0) -> int:
    """Sampling seed of prompt b of ``step`` (stream 1 = the oracle's extra samples, 1 + r = dynamic round r)."""
    return stream_seed(seed, step, b, stream)


def round_prompts(n_problems: int, n: int, seed: int, step: int, r: int) -> np.ndarray:
    """Indices of the n new prompts of dynamic round r >= 1 of ``step`` (round 0 is :func:`choose_prompts`)."""
    return np.random.default_rng([int(seed), int(step), 2, int(r)]).integers(0, n_problems, size=n)


@dataclass(frozen=True)
class Scored:
    """Completions of some prompts with their scores."""

    rollout: Rollout
    score: ScoreResult
    rewards: Tensor
    """(N,) float64, prompt-major (the rows of ``rollout``)"""


def sample_and_score(model, tok, task, problems: Sequence, prompts: Sequence[str], sizes: int | Sequence[int],
                     seeds: Sequence[int], *, temperature: float, top_p: float, max_new_tokens: int,
                     batch_size: int | None, engine=None) -> Scored:
    """``sizes[b]`` (or ``sizes``) completions of prompt b (text ``prompts[b]``, seed ``seeds[b]``), each scored
    against ``problems[b]`` by the task's verifier; drawn by ``engine`` (a :class:`ugrpo.lm.vllm_engine.VLLMEngine`,
    ``sampling.backend=vllm``) when given, else by ``model`` with Hugging Face ``generate``. Same Rollout either way."""
    kw = {"seeds": list(seeds), "temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens}
    ro = (sample_groups(model, tok, list(prompts), sizes, batch_size=batch_size, **kw) if engine is None
          else engine.sample_groups(tok, list(prompts), sizes, **kw))
    sc = score(task, ro.texts, [p for p, g in zip(problems, ro.group_sizes.tolist()) for _ in range(g)])
    return Scored(ro, sc, torch.tensor(sc.rewards, dtype=torch.float64))


@dataclass(frozen=True)
class StepRollout:
    """This process's share of a step's batch, and the step's global counts."""

    rollout: Rollout
    """the local groups, prompt-major"""
    problems: list
    """(B_local,) the problem of each local group"""
    score: ScoreResult
    """the local rows' scoring counts (dynamic: all rounds, unscorable samples of dropped groups too)"""
    rewards: Tensor
    """(N_local,) float64 rewards of the local rows"""
    position: Tensor
    """(B_local,) position in [0, B) of each local group in the batch (minibatches are position ranges)"""
    prompts: np.ndarray
    """(B,) train-prompt index of the batch's groups, in batch order"""
    samples: int
    """policy samples drawn this step by all processes (dynamic: all rounds)"""
    samples_zero_std: int | None = None
    """dynamic: of ``samples``, those in groups whose rewards were all equal (else None: the allocator counts)"""
    rounds: int | None = None
    """dynamic: sampling rounds drawn (else None)"""

    def sample_counts(self) -> dict:
        """The metrics row's sample counts this batch knows: ``samples`` (dynamic: and its zero-std/round counts)."""
        if self.rounds is None:
            return {"samples": self.samples}
        return {"samples": self.samples, "samples_zero_std": self.samples_zero_std, "dynamic_rounds": self.rounds}


@dataclass(frozen=True)
class Sampler:
    """Sample, then score, with the run's policy and task on its train prompts (``problems``, their texts
    ``prompts``)."""

    model: object
    tok: object
    task: object
    problems: list
    prompts: list[str]
    cfg: TrainConfig
    ctx: DistContext
    engine: object | None = None
    """``sampling.backend=vllm``: the colocated engine that draws the samples (None: ``model`` does, with HF)"""

    def draw(self, idx: Sequence[int], sizes: int | Sequence[int], seeds: Sequence[int]) -> Scored:
        """:func:`sample_and_score` on train prompts ``idx`` with the run's sampling settings."""
        s = self.cfg.sampling
        return sample_and_score(self.model, self.tok, self.task, [self.problems[i] for i in idx],
                                [self.prompts[i] for i in idx], sizes, seeds, temperature=s.temperature, top_p=s.top_p,
                                max_new_tokens=s.max_new_tokens, batch_size=self.cfg.budget.micro_batch or None,
                                engine=self.engine)

    def sync_weights(self) -> None:
        """``sampling.backend=vllm``: push the policy's current weights into the engine (before step 1, after every
        update); the HF backend samples from the policy itself and has nothing to sync."""
        if self.engine is not None:
            self.engine.sync_weights(self.model)

    def step(self, step: int, idx: np.ndarray, sizes: np.ndarray) -> StepRollout:
        """The batch of ``step``: G_b completions of prompt ``idx[b]`` (``sizes`` (B,)), or the dynamic rounds."""
        if self.cfg.allocation.rule == "dynamic":
            return self._dynamic(step, idx)
        mine = shard(len(idx), self.ctx)  # this process's prompts b in [0, B)
        s = self.draw([idx[b] for b in mine], [int(sizes[b]) for b in mine],
                      [prompt_seed(self.cfg.seed, step, b) for b in mine])
        return StepRollout(rollout=s.rollout, problems=[self.problems[idx[b]] for b in mine], score=s.score,
                           rewards=s.rewards, position=torch.as_tensor(list(mine), dtype=torch.long), prompts=idx,
                           samples=int(sizes.sum()))

    def oracle_values(self, batch: StepRollout, step: int) -> Tensor:
        """V(x) of each local prompt: mean reward of ``oracle_samples`` extra samples (seed stream 1)."""
        M, pos = self.cfg.oracle_samples, batch.position.tolist()
        s = self.draw([batch.prompts[b] for b in pos], M, [prompt_seed(self.cfg.seed, step, b, stream=1) for b in pos])
        return s.rewards.view(-1, M).mean(dim=1)  # (B_local,)

    def _dynamic(self, step: int, first: np.ndarray) -> StepRollout:
        """Draw rounds until B informative groups (module docstring); ``first`` (B,) the prompts of round 0."""
        cfg, ctx = self.cfg, self.ctx
        B, G = cfg.budget.prompts_per_step, cfg.budget.group_size
        kept: list[tuple[int, int, bool]] = []   # (round, j, informative) of every drawn group, drawing order
        local: dict[tuple[int, int], tuple[Rollout, Tensor, ScoreResult | None]] = {}
        drawn, idx_of = 0, {}
        r, idx = 0, first
        while True:
            mine = shard(len(idx), ctx)
            if len(mine):
                s = self.draw([idx[j] for j in mine], G,
                              [prompt_seed(cfg.seed, step, j, stream=0 if r == 0 else 1 + r) for j in mine])
                z = s.rewards.view(-1, G)        # (B_local, G)
                for i, j in enumerate(mine):
                    local[(r, j)] = (s.rollout, z[i], s.score if i == 0 else None)
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
            idx = round_prompts(len(self.problems), need, cfg.seed, step, r)
        chosen = ([k for k in kept if k[2]] + [k for k in kept if not k[2]])[:B]
        zero = sum(G for k in kept if not k[2])
        return self._assemble(chosen, local, idx_of, drawn, zero, r)

    def _assemble(self, chosen, local, idx_of, drawn: int, zero: int, rounds: int) -> StepRollout:
        """This process's selected groups of a dynamic step as one rollout, in batch order."""
        G = self.cfg.budget.group_size
        pieces, rewards, position = [], [], []
        for pos, (r, j, _) in enumerate(chosen):
            if (r, j) not in local:
                continue
            ro, z, _ = local[(r, j)]
            first_row = int(torch.nonzero(ro.prompt_index == _local_index(local, r, j)).squeeze(1)[0])
            pieces.append((ro, torch.arange(first_row, first_row + G)))
            rewards.append(z)
            position.append(pos)
        sc_parts = [v[2] for v in local.values() if v[2] is not None]
        return StepRollout(
            rollout=concat_rollouts(pieces, self.tok.pad_token_id) if pieces else None,
            problems=[self.problems[idx_of[(r, j)]] for r, j, _ in chosen if (r, j) in local], score=_merge(sc_parts),
            rewards=torch.cat(rewards) if rewards else torch.zeros(0, dtype=torch.float64),
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
