"""Supervised warm-up of the tiny model on compact arithmetic (``ugrpo pretrain-tiny``).

From random weights the reward is almost always 0 and RL has no signal (RUNTIME.md), so the
tiny model is first trained by teacher forcing on ``"<bos><expr>=<answer><eos>"``, with the
loss on the answer tokens and EOS only. Every ``eval_every`` steps it is evaluated on the
task's held-out problems with the task's own verifier: **sampled** accuracy (temperature 1,
the quantity RL optimises, ``eval_samples`` completions per problem) and greedy accuracy.
It stops as soon as the sampled accuracy reaches ``target_accuracy`` (or at ``steps``).

The learning rate (:func:`lr_factor`): a 20-step linear warm-up, constant up to step ``decay_start`` (1000), then a
cosine decay to ``final_lr_fraction`` (0.1) of it at the step cap. ``tiny:base`` and ``tiny:instruct`` stop before
step 1000, so the decay does not touch them; without it ``tiny:fewshot`` oscillated at sampled accuracy 0.45-0.56
from step 1400 on and never reached its 0.60 in 3000 steps (measured 2026-12-03, seed 0); with it, it reached 0.60
at step 2100.

Training problems are drawn fresh every step with
:func:`ugrpo.tasks.arithmetic.generate_problems` (see ``_training_batch`` for the seeds), never
one of the eval problems of ``TINY_TASK_OPTIONS`` (:func:`warmup_exclusions`); they include
the RL task's training problems, which the model has then seen (see
:func:`warmup_exclusions` for why excluding them was worse).

A build is resumable: every ``checkpoint_every`` steps it saves what it needs to continue into
``<out_dir>/pretrain-checkpoint.pt``, and a rerun with the same settings continues from there and
ends with the weights an uninterrupted build would have (:func:`pretrain_tiny`).

The models this produced for ``tiny:base`` / ``tiny:instruct`` / ``tiny:fewshot`` ship with the
package (:mod:`ugrpo.lm.tiny_shipped`); a rebuild is used by its folder, never under those names.

Deviation worth knowing: the paper starts RL from pretrained Qwen / Llama models; this
warm-up only makes a CPU-sized stand-in whose sampled accuracy leaves RL room to improve.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ugrpo.lm.sampling import sample_groups
from ugrpo.lm.tiny import STRENGTHS, TinySize, build_tiny_model
from ugrpo.lm.tokenizer import DEFAULT_CHARS, build_char_tokenizer

__all__ = ["TINY_TASK_OPTIONS", "EXPECTED_STEPS", "CHECKPOINT", "PretrainResult", "pretrain_tiny",
           "warmup_exclusions", "lr_factor", "DECAY_START", "FINAL_LR_FRACTION"]

TINY_TASK_OPTIONS: dict = {"prompt_style": "compact", "difficulty": "easy", "n_train": 200, "n_eval": 100}
"""The arithmetic task the tiny model is warmed up on, and the one RL with ``tiny:*`` should use
(``get_task("arithmetic", **TINY_TASK_OPTIONS)``): compact prompts such as ``"7-3+5="``."""

EXPECTED_STEPS: dict[str, int] = {"base": 150, "instruct": 775, "fewshot": 2100}
"""Steps at which each shipped model's warm-up stopped (seed 0, defaults; :data:`ugrpo.lm.tiny.STRENGTHS`): the
progress bar's first total, so that its ETA means something (the bar grows by a quarter whenever the target comes
later, and ends at 100% when it is reached)."""

CHECKPOINT = "pretrain-checkpoint.pt"
"""The file in ``out_dir`` that a warm-up resumes from (removed when the model is saved)."""

CHECKPOINT_FORMAT = 1

DECAY_START = 1000
"""The step after which the warm-up's learning rate decays (:func:`lr_factor`); after base and instruct stop."""
FINAL_LR_FRACTION = 0.1
"""The learning rate at the step cap, as a fraction of ``lr`` (:func:`lr_factor`)."""

MAX_NEW_TOKENS = 6
"""Completion budget of the warm-up evaluation: the longest answer (``"-18"``, ``"81"``) plus EOS fits."""


@dataclass(frozen=True)
class PretrainResult:
    """What a warm-up produced; also written to ``<out_dir>/ugrpo_tiny.json``.

    Attributes
    ----------
    out_dir : str
        The saved HF folder (``model.safetensors``, ``config.json``, tokenizer files).
    strength : str
        ``base`` / ``instruct`` / ``fewshot`` or ``custom`` (an explicit target).
    target_accuracy : float
        Sampled accuracy at which training stopped early.
    reached_target : bool
        False if the step cap came first.
    steps : int
        Optimiser steps taken.
    sampled_accuracy, sampled_accuracy_se : float
        Held-out accuracy at temperature 1 (``eval_samples`` per problem) and its binomial SE.
    greedy_accuracy : float
        Held-out greedy accuracy.
    seconds : float
        Wall time of the warm-up.
    seed, size, batch_size, lr, decay_start, final_lr_fraction : as passed
    task_options : dict
        The arithmetic task options (``TINY_TASK_OPTIONS``).
    history : list[dict]
        One row per evaluation: step, loss, sampled_accuracy, greedy_accuracy, seconds.
    """

    out_dir: str
    strength: str
    target_accuracy: float
    reached_target: bool
    steps: int
    sampled_accuracy: float
    sampled_accuracy_se: float
    greedy_accuracy: float
    seconds: float
    seed: int
    size: str
    batch_size: int
    lr: float
    task_options: dict = field(default_factory=dict)
    history: list = field(default_factory=list)
    decay_start: int = DECAY_START
    final_lr_fraction: float = FINAL_LR_FRACTION


def pretrain_tiny(
    out_dir: str | Path,
    *,
    strength: str = "instruct",
    target_accuracy: float | None = None,
    steps: int = 3000,
    batch_size: int = 128,
    lr: float = 1e-3,
    seed: int = 0,
    size: TinySize = "1m",
    eval_every: int = 25,
    eval_samples: int = 4,
    checkpoint_every: int = 50,
    progress: bool = True,
    decay_start: int = DECAY_START,
    final_lr_fraction: float = FINAL_LR_FRACTION,
) -> PretrainResult:
    """Warm up a fresh tiny model until its sampled accuracy reaches the strength's target; resumable.

    Every ``checkpoint_every`` steps the model, the optimiser, the schedule, the torch RNG and the
    evaluation history are saved to ``<out_dir>/pretrain-checkpoint.pt`` (written to a temporary
    file, then renamed). A build that was killed continues from its last checkpoint when it is run
    again with the same settings, and ends with the same weights as an uninterrupted build (the
    training problems of step s depend only on (seed, s)); the checkpoint is removed once the
    model is saved.

    Parameters
    ----------
    out_dir : path
        Folder to write (created; existing model files are overwritten).
    strength : {"base", "instruct", "fewshot"}
        Picks ``target_accuracy`` from :data:`ugrpo.lm.tiny.STRENGTHS` (0.15 / 0.35 / 0.60).
    target_accuracy : float or None
        Overrides the strength's target (strength is then recorded as ``custom``).
    steps : int
        Step cap; the run stops there even below the target (``reached_target=False``).
    batch_size, lr : int, float
        Problems per step and the AdamW learning rate (schedule: :func:`lr_factor`).
    decay_start, final_lr_fraction : int, float
        The learning rate is constant (after a 20-step warm-up) up to step ``decay_start``, then decays along a
        cosine to ``final_lr_fraction * lr`` at ``steps`` (no decay when ``steps <= decay_start``).
    seed : int
        Seeds the weights, the training problems and the evaluation samples.
    size : {"1m", "4m"}
        Model size (:func:`ugrpo.lm.tiny.build_tiny_model`).
    eval_every : int
        Steps between evaluations (the stopping rule is checked there).
    eval_samples : int
        Sampled completions per held-out problem.
    checkpoint_every : int
        Steps between checkpoints (does not change what is computed).
    progress : bool
        Show a tqdm bar (rate, ETA, loss and accuracies).

    Returns
    -------
    PretrainResult

    Raises
    ------
    ValueError
        A bad setting, or a checkpoint in ``out_dir`` left by a build with other settings.
    """
    settings = _settings(strength, target_accuracy, steps, batch_size, lr, seed, size, eval_every, eval_samples)
    if not isinstance(decay_start, int) or decay_start < 0 or not 0.0 <= final_lr_fraction <= 1.0:
        raise ValueError(f"pretrain_tiny: decay_start={decay_start!r} must be an integer >= 0 and final_lr_fraction="
                         f"{final_lr_fraction!r} in [0, 1]")
    settings.update(decay_start=decay_start, final_lr_fraction=float(final_lr_fraction))
    if not isinstance(checkpoint_every, int) or checkpoint_every < 1:
        raise ValueError(f"pretrain_tiny: checkpoint_every={checkpoint_every!r} must be an integer >= 1")
    strength, target_accuracy = settings["strength"], settings["target_accuracy"]
    from ugrpo.tasks.arithmetic import generate_problems, make_arithmetic

    out_dir = Path(out_dir)
    task = make_arithmetic(**TINY_TASK_OPTIONS)
    eval_problems = task.eval_problems()
    held_out = warmup_exclusions(task)  # eval texts: the warm-up never sees a held-out problem
    tokenizer = build_char_tokenizer(DEFAULT_CHARS)
    model = build_tiny_model(tokenizer, size=size, seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, steps=steps, decay_start=decay_start,
                                                                       final=final_lr_fraction))
    state = {"step": 0, "loss_ema": math.nan, "acc": [0.0, 0.0, 0.0], "history": [], "seconds": 0.0}
    ckpt = out_dir / CHECKPOINT
    if ckpt.is_file():
        state = _load_checkpoint(ckpt, settings, model, opt, sched)
    t0 = time.perf_counter() - state["seconds"]
    history, acc, loss_ema, first = state["history"], tuple(state["acc"]), state["loss_ema"], state["step"] + 1
    reached, step = False, state["step"]
    bar = tqdm(total=min(steps, max(first, EXPECTED_STEPS.get(strength, steps))), initial=state["step"],
               unit="step", disable=not progress,
               desc=f"pretrain-tiny {strength} (until sampled accuracy {target_accuracy:.2f})")
    if state["step"]:
        bar.write(f"pretrain-tiny: resuming from step {state['step']} ({ckpt})", file=sys.stderr)
    for step in range(first, steps + 1):
        loss = _train_step(model, tokenizer, opt, sched,
                           *_training_batch(generate_problems, batch_size, seed, step, held_out))
        loss_ema = loss if math.isnan(loss_ema) else 0.9 * loss_ema + 0.1 * loss
        if step > bar.total:  # slower than measured: a quarter more, never past the step cap
            bar.total = min(steps, max(step, int(bar.total * 1.25)))
        bar.update(1)
        if step % eval_every == 0 or step == steps:
            acc = _evaluate(model, tokenizer, task, eval_problems, eval_samples, seed)
            history.append({"step": step, "loss": loss_ema, "sampled_accuracy": acc[0], "greedy_accuracy": acc[2],
                            "seconds": time.perf_counter() - t0})
            bar.set_postfix(loss=f"{loss_ema:.3f}", sampled=f"{acc[0]:.3f}", greedy=f"{acc[2]:.3f}")
            if acc[0] >= target_accuracy:
                reached = True
                break
        if step % checkpoint_every == 0 and step < steps:
            _save_checkpoint(ckpt, settings, model, opt, sched, {
                "step": step, "loss_ema": loss_ema, "acc": list(acc), "history": history,
                "seconds": time.perf_counter() - t0})
    bar.total = step  # the bar ends full: the warm-up is done
    bar.refresh()
    bar.close()
    result = PretrainResult(
        out_dir=str(out_dir), strength=strength, target_accuracy=target_accuracy, reached_target=reached, steps=step,
        sampled_accuracy=acc[0], sampled_accuracy_se=acc[1], greedy_accuracy=acc[2], seconds=time.perf_counter() - t0,
        seed=seed, size=size, batch_size=batch_size, lr=lr, task_options=dict(TINY_TASK_OPTIONS), history=history,
        decay_start=decay_start, final_lr_fraction=float(final_lr_fraction),
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    meta = {k: v for k, v in asdict(result).items() if k != "out_dir"}  # the folder may be renamed (cache)
    (out_dir / "ugrpo_tiny.json").write_text(json.dumps(meta, indent=2) + "\n")
    ckpt.unlink(missing_ok=True)  # the model is saved: nothing is left to resume
    return result


def lr_factor(s: int, *, steps: int, decay_start: int = DECAY_START, final: float = FINAL_LR_FRACTION) -> float:
    """The learning-rate multiplier of the warm-up's step ``s + 1`` (``s`` steps done; torch's ``LambdaLR``).

    Linear warm-up over the first 20 steps, constant up to step ``decay_start``, then a cosine from 1 down to
    ``final`` at step ``steps``.

    >>> [round(lr_factor(s, steps=3000), 3) for s in (0, 19, 999, 1999, 2999)]
    [0.05, 1.0, 1.0, 0.55, 0.1]
    """
    k = s + 1  # the step being taken
    if k <= decay_start or steps <= decay_start:
        return min(1.0, k / 20)
    progress = min(1.0, (k - decay_start) / (steps - decay_start))
    return final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _train_step(model, tokenizer, opt, sched, prompts: list[str], answers: list[str]) -> float:
    """One AdamW step on the answer loss (gradient norm clipped at 1); the loss before the step."""
    model.train()
    loss = _answer_loss(model, tokenizer, prompts, answers)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return loss.item()


def _settings(strength, target_accuracy, steps, batch_size, lr, seed, size, eval_every, eval_samples) -> dict:
    """The checked settings of a warm-up: what a checkpoint must match to be resumed."""
    if target_accuracy is None:
        if strength not in STRENGTHS:
            raise ValueError(f"pretrain_tiny: unknown strength {strength!r}; choose one of {', '.join(STRENGTHS)}")
        target_accuracy = STRENGTHS[strength]
    else:
        strength = "custom"
    if not 0.0 < target_accuracy <= 1.0:
        raise ValueError(f"pretrain_tiny: target_accuracy={target_accuracy} must be in (0, 1]")
    for name, v in (("steps", steps), ("batch_size", batch_size), ("eval_every", eval_every),
                    ("eval_samples", eval_samples)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"pretrain_tiny: {name}={v!r} must be an integer >= 1")
    if not lr > 0:
        raise ValueError(f"pretrain_tiny: lr={lr} must be > 0")
    return {"strength": strength, "target_accuracy": float(target_accuracy), "steps": steps,
            "batch_size": batch_size, "lr": float(lr), "seed": seed, "size": size, "eval_every": eval_every,
            "eval_samples": eval_samples, "task_options": dict(TINY_TASK_OPTIONS),
            "checkpoint_format": CHECKPOINT_FORMAT}


def _save_checkpoint(path: Path, settings: dict, model, opt, sched, state: dict) -> None:
    """Everything a resumed warm-up needs, written atomically (temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"settings": settings, "state": state, "model": model.state_dict(), "opt": opt.state_dict(),
               "sched": sched.state_dict(), "torch_rng": torch.get_rng_state()}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def _load_checkpoint(path: Path, settings: dict, model, opt, sched) -> dict:
    """Restore a checkpoint of the same settings into ``model``/``opt``/``sched``; its loop state."""
    try:
        payload = torch.load(path, weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is reported the same way
        raise ValueError(f"pretrain_tiny: {path} is not a readable checkpoint ({e}); delete it to start over") from e
    diff = {k: (payload["settings"].get(k), v) for k, v in settings.items() if payload["settings"].get(k) != v}
    if diff:
        shown = ", ".join(f"{k}: checkpoint {a!r}, now {b!r}" for k, (a, b) in sorted(diff.items()))
        raise ValueError(f"pretrain_tiny: {path} was left by a build with other settings ({shown}); rerun with its "
                         "settings to resume it, or delete it (or choose another --out) to start over")
    model.load_state_dict(payload["model"])
    opt.load_state_dict(payload["opt"])
    sched.load_state_dict(payload["sched"])
    torch.set_rng_state(payload["torch_rng"])
    return payload["state"]


def warmup_exclusions(task) -> frozenset[str]:
    """Compact texts (without ``=``) the warm-up never trains on: the task's eval problems.

    The RL train problems are deliberately *not* excluded. Measured (seed 0, 2026-12-02): a
    warm-up that also excluded them (to 0.25 sampled accuracy, 600 steps) left a model that
    memorises rather than computes: 200 grpo steps raised train greedy accuracy by
    +0.27 +- 0.04 but *lowered* held-out greedy accuracy by -0.10 +- 0.05 (paired SEs, 100 problems).
    """
    return frozenset(p.prompt[:-1] for p in task.eval_problems())


def _training_batch(generate_problems, batch_size: int, seed: int, step: int,
                    held_out: frozenset) -> tuple[list[str], list[str]]:
    """Fresh compact problems for one step: ``batch_size`` iid draws (repeats allowed) outside ``held_out``.

    The ``easy`` pool has only 81 products and 81 quotients (fewer outside the eval set), so a
    draw of distinct problems could run out; the stream is drawn with ``distinct=False`` from
    the seed ``seed * 1_000_003 + step``.
    """
    exprs = generate_problems(batch_size, seed=seed * 1_000_003 + step, difficulty=TINY_TASK_OPTIONS["difficulty"],
                              exclude=held_out, distinct=False)
    return [e.text + "=" for e in exprs], [str(e.value) for e in exprs]


def _answer_loss(model, tokenizer, prompts: list[str], answers: list[str]) -> torch.Tensor:
    """Mean cross-entropy of the answer tokens and EOS given ``<bos><prompt>`` (teacher forcing)."""
    p_ids = tokenizer(prompts, add_special_tokens=True)["input_ids"]
    a_ids = tokenizer(answers, add_special_tokens=False)["input_ids"]
    L = max(len(p) + len(a) + 1 for p, a in zip(p_ids, a_ids))
    ids = torch.full((len(prompts), L), tokenizer.pad_token_id, dtype=torch.long)  # (n, L) right-padded
    labels = torch.full((len(prompts), L), -100, dtype=torch.long)
    mask = torch.zeros((len(prompts), L), dtype=torch.long)
    for i, (p, a) in enumerate(zip(p_ids, a_ids)):
        seq = p + a + [tokenizer.eos_token_id]
        ids[i, : len(seq)] = torch.tensor(seq)
        mask[i, : len(seq)] = 1
        labels[i, len(p): len(seq)] = torch.tensor(a + [tokenizer.eos_token_id])
    logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, :-1].float()  # (n, L-1, V)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                             ignore_index=-100)


def _evaluate(model, tokenizer, task, problems, n_samples: int, seed: int) -> tuple[float, float, float]:
    """(sampled accuracy, its binomial SE, greedy accuracy) on ``problems`` with the task's verifier."""
    from ugrpo.tasks.base import score

    prompts = [p.prompt for p in problems]
    seeds = [seed * 7919 + i for i in range(len(prompts))]
    sampled = sample_groups(model, tokenizer, prompts, n_samples, seeds=seeds, max_new_tokens=MAX_NEW_TOKENS)
    rewards = score(task, sampled.texts, [p for p in problems for _ in range(n_samples)]).rewards
    acc = sum(rewards) / len(rewards)
    # SE over problems (samples of one problem are correlated): sd of per-problem means / sqrt(B)
    per_problem = torch.tensor(rewards).view(len(problems), n_samples).mean(dim=1)
    se = float(per_problem.std(unbiased=True) / math.sqrt(len(problems))) if len(problems) > 1 else math.nan
    greedy_texts = _greedy(model, tokenizer, prompts)
    greedy = score(task, greedy_texts, problems).rewards
    return acc, se, sum(greedy) / len(greedy)


@torch.no_grad()
def _greedy(model, tokenizer, prompts: list[str]) -> list[str]:
    from transformers import GenerationConfig

    model.eval()
    enc = tokenizer(prompts, padding=True, return_tensors="pt")
    cfg = GenerationConfig(do_sample=False, max_new_tokens=MAX_NEW_TOKENS, pad_token_id=tokenizer.pad_token_id,
                           eos_token_id=tokenizer.eos_token_id)
    out = model.generate(**enc, generation_config=cfg)
    model.train()
    return tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
