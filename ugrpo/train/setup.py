"""What the loop builds before step 1: policy, task, prompt-length checks, optimizer, schedule, reference policy, and
(``sampling.backend=vllm``) the colocated vLLM engine."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ugrpo.lm.loading import LoraSettings, context_length, format_prompt, load_policy
from ugrpo.lm.sampling import Rollout
from ugrpo.tasks.base import Problem
from ugrpo.train.config import OptimConfig, TrainConfig
from ugrpo.train.distributed import DistContext, broadcast_params
from ugrpo.train.preflight import Checked
from ugrpo.train.update import rollout_logprobs

__all__ = ["RunObjects", "build_run", "run_device", "check_prompt_lengths", "make_optimizer", "make_scheduler",
           "lr_factor", "Reference"]


@dataclass(frozen=True)
class RunObjects:
    """What a run trains with, built once before step 1 (:func:`build_run`)."""

    model: torch.nn.Module
    tokenizer: object
    task: object
    train_problems: list
    train_prompts: list[str]
    """the formatted prompt text of each train problem"""
    eval_problems: list
    eval_prompts: list[str]
    skipped: int
    """train problems dropped as too long (``task.long_prompts=skip``)"""
    reference: Reference | None
    """pi_ref of the KL term (``loss.kl_coef > 0``)"""
    params: list
    """the trainable parameters"""
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    loaded_at: float
    """``time.time()`` once the model was loaded (a first-use tiny-model build is not training time)"""
    engine: object | None = None
    """``sampling.backend=vllm``: the colocated vLLM engine (placeholder weights until the loop's first sync)"""


def build_run(cfg: TrainConfig, ctx: DistContext, checked: Checked) -> RunObjects:
    """Load the policy (same initial weights on every process), format the task's prompts (``checked``: the task
    and problems :func:`ugrpo.train.preflight.preflight` read; too-long train prompts handled by
    ``task.long_prompts``, eval prompts must fit), the reference policy, the optimizer and schedule."""
    device = run_device(cfg, ctx)
    lora = LoraSettings(cfg.model.lora_r, cfg.model.lora_alpha, cfg.model.lora_dropout,
                        cfg.model.lora_targets) if cfg.model.lora_r else None
    policy = load_policy(cfg.model.name, lora=lora, dtype=cfg.model.dtype, device=device, seed=cfg.seed)
    loaded_at = time.time()
    model, tok = policy.model, policy.tokenizer
    broadcast_params(model, ctx)
    task = checked.task
    fmt = lambda p: format_prompt(tok, p.prompt, chat=cfg.model.chat)  # noqa: E731
    context = context_length(model)
    if cfg.sampling.backend == "vllm" and cfg.sampling.vllm_max_model_len:  # the engine accepts no longer sequence
        context = min(context or cfg.sampling.vllm_max_model_len, cfg.sampling.vllm_max_model_len)
    train_problems, skipped = check_prompt_lengths(
        checked.train_problems, fmt, tok, context, cfg.sampling.max_new_tokens, cfg.task.long_prompts, "train"
    )
    eval_problems: list = []
    if checked.eval_problems:
        eval_problems, _ = check_prompt_lengths(
            checked.eval_problems, fmt, tok, context, cfg.sampling.max_new_tokens, "error", "eval"
        )
    train_prompts = [fmt(p) for p in train_problems]
    eval_prompts = [fmt(p) for p in eval_problems]
    reference = Reference.build(cfg, model, device) if cfg.loss.kl_coef > 0 else None
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(cfg.optim, params)
    scheduler = make_scheduler(cfg.optim, optimizer, cfg.steps)
    B = cfg.budget.prompts_per_step
    if cfg.allocation.rule == "dynamic" and ctx.world_size > 1:
        raise ValueError("allocation.rule=dynamic runs in one process only (several processes are not implemented); "
                         "launch without torchrun or choose another allocation.rule")
    if B < ctx.world_size:
        raise ValueError(f"B = N/G = {B} prompts per step cannot be shared by {ctx.world_size} processes; raise N or "
                         "lower G")
    engine = None
    if cfg.sampling.backend == "vllm":  # last: every cheaper check has passed
        from ugrpo.lm.vllm_engine import build_engine

        engine = build_engine(model, tok, gpu_memory=cfg.sampling.vllm_gpu_memory,
                              max_model_len=cfg.sampling.vllm_max_model_len, distributed=ctx.world_size > 1,
                              dtype=None if cfg.sampling.vllm_dtype == "auto" else cfg.sampling.vllm_dtype)
    return RunObjects(model, tok, task, train_problems, train_prompts, eval_problems, eval_prompts, skipped,
                      reference, params, optimizer, scheduler, loaded_at, engine)


def run_device(cfg: TrainConfig, ctx: DistContext) -> torch.device:
    """Where this process's policy lives: ``model.device``, or (``auto``) its GPU if there is one, else the CPU."""
    if cfg.model.device != "auto":
        return torch.device(cfg.model.device)
    return torch.device(f"cuda:{ctx.local_rank}") if torch.cuda.is_available() else torch.device("cpu")


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
