"""What the loop builds before step 1: prompt-length checks, optimizer, schedule, reference policy."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import torch

from ugrpo.lm.sampling import Rollout
from ugrpo.tasks.base import Problem
from ugrpo.train.config import OptimConfig, TrainConfig
from ugrpo.train.update import rollout_logprobs

__all__ = ["check_prompt_lengths", "make_optimizer", "make_scheduler", "lr_factor", "Reference"]


def check_prompt_lengths(
    problems: Sequence[Problem],
    fmt: Callable[[Problem], str],
    tokenizer,
    context: int | None,
    max_new_tokens: int,
    policy: str,
    split: str,
) -> tuple[list[Problem], int]:
    """Problems whose prompt tokens + ``max_new_tokens`` fit the model context.

    ``policy='error'`` raises naming the first problem id that does not fit; ``'skip'`` drops
    such problems and returns how many were dropped.
    """
    if not problems:
        raise ValueError(f"the task has no {split} problems; check task.options")
    if context is None:
        return list(problems), 0
    lengths = [len(ids) for ids in tokenizer([fmt(p) for p in problems])["input_ids"]]
    keep, too_long = [], []
    for p, n in zip(problems, lengths):
        (keep if n + max_new_tokens <= context else too_long).append((p, n))
    if too_long and policy == "error":
        p, n = too_long[0]
        raise ValueError(
            f"{split} problem {p.id!r}: prompt has {n} tokens + sampling.max_new_tokens={max_new_tokens} > model "
            "context "
            f"{context} ({len(too_long)} {split} problem(s) too long); lower sampling.max_new_tokens, use a model "
            "with a longer "
            "context, or set task.long_prompts=skip to drop them (counted in results.json)"
        )
    if not keep:
        raise ValueError(f"every {split} problem is longer than the model context {context} minus "
                         f"max_new_tokens={max_new_tokens}")
    return [p for p, _ in keep], len(too_long)


def make_optimizer(cfg: OptimConfig, params: Sequence[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """SGD (the paper's plain ascent step, no momentum) or AdamW."""
    if not params:
        raise ValueError("the model has no trainable parameters (requires_grad); check the LoRA settings")
    if cfg.name == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    return torch.optim.AdamW(params, lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay)


def lr_factor(k: int, *, steps: int, warmup: int, kind: str) -> float:
    """Multiplier of the peak lr for the update after ``k`` completed steps (k = 0 .. steps-1).

    Linear warmup over ``warmup`` steps, then constant, linear or cosine decay that would reach
    0 one step after the last one (so no step has lr 0).
    """
    if warmup and k < warmup:
        return (k + 1) / warmup
    if kind == "constant":
        return 1.0
    progress = (k - warmup) / max(1, steps - warmup)
    if kind == "linear":
        return max(0.0, 1.0 - progress)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def make_scheduler(cfg: OptimConfig, optimizer: torch.optim.Optimizer, steps: int):
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda k: lr_factor(k, steps=steps, warmup=cfg.warmup_steps, kind=cfg.scheduler)
    )


class Reference:
    """The reference policy pi_ref of the KL term: a frozen copy, another model, or the base under LoRA."""

    def __init__(self, model=None, *, disable_adapter: bool = False):
        self.model = model
        self.disable_adapter = disable_adapter

    @classmethod
    def build(cls, cfg: TrainConfig, model, device) -> Reference:
        if cfg.loss.ref_model is not None:
            from ugrpo.lm.loading import load_policy

            ref = load_policy(cfg.loss.ref_model, dtype=cfg.model.dtype, device=device).model
        elif cfg.model.lora_r:
            return cls(disable_adapter=True)  # the base weights are the initial policy
        else:
            ref = copy.deepcopy(model)
        ref.eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        return cls(ref)

    def logprobs(self, model, rollout: Rollout, temperature: float, micro_batch: int) -> torch.Tensor:
        """(N, T) reference log-probs of the rollout, no gradient."""
        if self.disable_adapter:
            with model.disable_adapter():
                return rollout_logprobs(model, rollout, temperature=temperature, micro_batch=micro_batch)
        return rollout_logprobs(self.model, rollout, temperature=temperature, micro_batch=micro_batch)
