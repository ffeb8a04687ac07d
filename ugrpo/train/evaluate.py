"""Held-out evaluation: greedy accuracy and sampled pass@1 (mean reward of k samples per problem).

Both use the first ``eval.n_problems`` problems of ``task.eval_problems()``; processes split
them and the sums are reduced. The pass@1 samples of problem i use the same seeds at every
evaluation (common random numbers), so a change of ``eval_pass1`` between steps comes from
the policy, not from fresh sampling noise. The pass@1 samples go through the trainer's one "sample, then
score" (:func:`ugrpo.train.rollout.sample_and_score`); greedy decoding is its own thing (argmax ``generate``, one
completion per problem, no seeds and no Rollout).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ugrpo.lm.sampling import eos_token_ids
from ugrpo.stats.seeds import stream_seed
from ugrpo.tasks.base import Problem, score
from ugrpo.train.config import TrainConfig
from ugrpo.train.distributed import DistContext, gather_objects, reduce_sum, shard
from ugrpo.train.rollout import sample_and_score

__all__ = ["EvalResult", "evaluate", "eval_metrics", "greedy_completions", "eval_seed"]


@dataclass(frozen=True)
class EvalResult:
    """``accuracy``: mean reward of greedy completions (= accuracy for a binary verifier);
    ``pass1``: mean reward of sampled completions; None where that evaluation is disabled. ``per_problem``: each
    problem's greedy reward and mean sampled reward, in problem order (what a paired before/after change needs).
    ``n_unscorable``: completions scored 0 because they could not be scored (no answer in them included);
    ``n_errors``: those of them that the scorer failed on (it raised or timed out), a fault of the scorer."""

    accuracy: float | None
    pass1: float | None
    n_problems: int
    n_unscorable: int
    per_problem: dict[str, list[float]] | None = None
    n_errors: int = 0


def eval_seed(seed: int, index: int) -> int:
    """Seed of the pass@1 samples of held-out problem ``index`` (fixed across evaluations)."""
    return stream_seed(seed, index, 7919)


@torch.no_grad()
def greedy_completions(model, tokenizer, prompts: Sequence[str], *, max_new_tokens: int, batch_size: int) -> list[str]:
    """Greedy (argmax) completions, decoded without special tokens, cut at the first EOS."""
    eos = eos_token_ids(tokenizer, model)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    texts: list[str] = []
    try:
        for start in range(0, len(prompts), batch_size):
            enc = tokenizer(list(prompts[start:start + batch_size]), padding=True, return_tensors="pt")
            out = model.generate(
                input_ids=enc["input_ids"].to(device),
                attention_mask=enc["attention_mask"].to(device),
                do_sample=False,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=eos,
            )
            for row in out[:, enc["input_ids"].shape[1]:].tolist():
                cut = next((i for i, t in enumerate(row) if t in eos), len(row))
                texts.append(tokenizer.decode(row[:cut], skip_special_tokens=True))
    finally:
        model.train(was_training)
    return texts


def evaluate(
    model,
    tokenizer,
    task,
    problems: Sequence[Problem],
    prompts: Sequence[str],
    *,
    greedy: bool,
    pass1_samples: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    batch_size: int,
    seed: int,
    ctx: DistContext,
    engine=None,
) -> EvalResult:
    """Greedy accuracy and sampled pass@1 on ``problems`` (``prompts`` = their formatted text); with ``engine``
    (``sampling.backend=vllm``) both are decoded by the engine, else by ``model``."""
    mine = shard(len(problems), ctx)
    probs = [problems[i] for i in mine]
    texts = [prompts[i] for i in mine]
    sums = [0.0, 0.0, 0.0, 0.0, 0.0]  # greedy reward sum, sampled reward sum, n sampled, unscorable, scorer faults
    mine_greedy: list[float] = []
    mine_pass1: list[float] = []
    if probs and greedy:
        done = (greedy_completions(model, tokenizer, texts, max_new_tokens=max_new_tokens, batch_size=batch_size)
                if engine is None else engine.greedy_completions(tokenizer, texts, max_new_tokens=max_new_tokens))
        sc = score(task, done, probs)
        sums[0] += sum(sc.rewards)
        sums[3] += sc.n_unscorable
        sums[4] += sc.n_errors + sc.n_timeouts
        mine_greedy = [float(r) for r in sc.rewards]
    if probs and pass1_samples > 0:
        k = pass1_samples
        sc = sample_and_score(model, tokenizer, task, probs, texts, k, [eval_seed(seed, i) for i in mine],
                              temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                              batch_size=batch_size, engine=engine).score
        sums[1] += sum(sc.rewards)
        sums[2] += len(sc.rewards)
        sums[3] += sc.n_unscorable
        sums[4] += sc.n_errors + sc.n_timeouts
        mine_pass1 = [float(sum(sc.rewards[i * k:(i + 1) * k])) / k for i in range(len(probs))]  # prompt-major
    g_sum, s_sum, s_n, bad, faults = reduce_sum(sums, ctx)
    parts = gather_objects((mine_greedy, mine_pass1), ctx)  # contiguous shards in rank order: problem order
    n = len(problems)
    per_problem = {"greedy": [v for p in parts for v in p[0]], "pass1": [v for p in parts for v in p[1]]}
    return EvalResult(
        accuracy=g_sum / n if greedy and n else None,
        pass1=s_sum / s_n if s_n else None,
        n_problems=n,
        n_unscorable=int(bad),
        per_problem={k: v for k, v in per_problem.items() if v} or None,
        n_errors=int(faults),
    )


def eval_metrics(cfg: TrainConfig, model, tokenizer, task, problems: Sequence[Problem], prompts: Sequence[str],
                 ctx: DistContext, engine=None) -> dict:
    """The trainer's held-out evaluation (:func:`evaluate` with the run's settings) as metrics-row keys."""
    ev = evaluate(
        model, tokenizer, task, problems, prompts, greedy=cfg.eval.greedy, pass1_samples=cfg.eval.pass1_samples,
        temperature=cfg.sampling.temperature, top_p=cfg.sampling.top_p, max_new_tokens=cfg.sampling.max_new_tokens,
        batch_size=cfg.eval.batch_size, seed=cfg.seed, ctx=ctx, engine=engine,
    )
    return {"eval_accuracy": ev.accuracy, "eval_pass1": ev.pass1, "eval_n_unscorable": ev.n_unscorable,
            "eval_n_errors": ev.n_errors, "eval_n_problems": ev.n_problems, "eval_per_problem": ev.per_problem}
