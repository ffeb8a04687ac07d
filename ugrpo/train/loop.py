"""Algorithm 1 and Algorithm 2 of the paper on a language model: one narrative loop.

Each step i (paper Algorithm 1):
    sample B = N/G prompts iid from the train set (seeded by (seed, i))
    -> G completions per prompt from pi_theta (seeded by (seed, i, prompt index))
    -> rewards Z (B, G) from the task's verifier
    -> advantages A = Z - C (and optional std scaling) from ``ugrpo.stats``
    -> loss whose gradient is -ghat  -> optimizer step          (Algorithm 1: one update)
       or m updates on disjoint prompt minibatches with the token ratio pi/pi_old  (Algorithm 2)
    -> metrics.jsonl row; held-out eval at step 0 and every ``eval.every`` steps.

Deviations from the paper, all explicit in the config:
* the optimizer may be AdamW (the paper analyses SGD) and the lr may follow a schedule;
* ``baseline=oracle`` estimates V(x) from ``oracle_samples`` extra samples per prompt (the
  paper's oracle is the true V(x), "not implementable"); the extra samples are counted;
* ``loss.aggregation`` may be token_mean / seq_mean (the paper: seq_sum);
* sampling may use temperature / top_p != 1 (then the samples are not exactly on-policy).

With ``monitor_every = K`` the G* monitor (:mod:`ugrpo.train.monitor`) estimates c1, c2, c3 and G*
(Theorem 7) from every K-th batch before its update (one sketched backward, no extra samples) and
adds ``monitor_*`` keys to that step's row; it warns once when G is outside G*'s 95% interval.

Multi-process (``torchrun`` / ``accelerate launch``): prompts of a step are split across
processes; seeds and the global batch are those of a 1-process run; gradients are summed
(see :mod:`ugrpo.train.distributed`); only rank 0 writes files.

Run: ``ugrpo train --config examples/arith-tiny.yaml --out runs/x [--resume] [--optim.lr 1e-4 ...]``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ugrpo.errors import NonFiniteError, ResumeError
from ugrpo.fileio import naming
from ugrpo.lm.loading import LoraSettings, context_length, format_prompt, load_policy
from ugrpo.lm.sampling import sample_groups
from ugrpo.runlock import claim, release
from ugrpo.runs import RunDir, follow_umask, read_jsonl
from ugrpo.tasks.base import score
from ugrpo.tasks.registry import get_task
from ugrpo.train.alloc import Allocator, step_advantages
from ugrpo.train.checkpoint import latest_checkpoint, load_latest, save_checkpoint
from ugrpo.train.config import TrainConfig, summary_line
from ugrpo.train.distributed import (
    DistContext,
    barrier,
    broadcast_params,
    destroy,
    gather_objects,
    init_distributed,
    shard,
)
from ugrpo.train.dynamic import dynamic_batch
from ugrpo.train.evaluate import evaluate
from ugrpo.train.history import PromptHistory
from ugrpo.train.monitor import TrainMonitor
from ugrpo.train.resume import check_resume_config, finished_result, hashed_config
from ugrpo.train.setup import Reference, check_prompt_lengths, make_optimizer, make_scheduler
from ugrpo.train.steplog import (
    check_finite_weights,
    fmt_value,
    line,
    nonfinite_message,
    repair_run_metrics,
    step_metrics,
    tensorboard,
)
from ugrpo.train.update import global_denominator, rollout_logprobs, update_on_rows

__all__ = ["TrainResult", "train", "choose_prompts", "prompt_seed"]


@dataclass(frozen=True)
class TrainResult:
    """What a finished run reports (also written to ``results.json``)."""

    out_dir: str
    steps: int
    initial_eval_accuracy: float | None
    initial_eval_pass1: float | None
    final_eval_accuracy: float | None
    final_eval_pass1: float | None
    minutes: float
    samples: int
    oracle_samples: int
    skipped_prompts: int
    load_minutes: float = 0.0
    """loading the model, including a first-use build of a ``tiny:*`` model; not counted in ``minutes``"""


def choose_prompts(n_problems: int, B: int, seed: int, step: int) -> np.ndarray:
    """Indices of the B prompts of ``step``: iid uniform over the train set (Algorithm 1), seeded by (seed, step)."""
    return np.random.default_rng([int(seed), int(step), 1]).integers(0, n_problems, size=B)


def prompt_seed(seed: int, step: int, b: int, stream: int = 0) -> int:
    """Sampling seed of prompt b of ``step`` (stream 1 = the oracle's extra samples)."""
    return int(np.random.SeedSequence([int(seed), int(step), int(b), int(stream)]).generate_state(1)[0])


def train(
    cfg: TrainConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    on_step: Callable[[int, dict], None] | None = None,
) -> TrainResult:
    """Run Algorithm 1 or 2 as configured, writing the run folder ``out_dir``.

    Parameters
    ----------
    cfg : the validated configuration
    out_dir : run folder (config.json, metrics.jsonl, checkpoints/, results.json, report.md)
    resume : continue from the last checkpoint in ``out_dir`` (metrics rows after it are dropped)
    on_step : called as ``on_step(step, row)`` after each step's row is logged (tests use it to
        interrupt a run)

    Rank 0 locks ``out`` for the run's life and checks its manifest (:mod:`ugrpo.runlock`): a folder
    of another command is refused, and an existing run is only ever continued with ``resume``, whose
    config may differ only in :data:`ugrpo.train.resume.RESUMABLE`. A resume of a finished run
    returns its saved result and rewrites nothing.
    """
    out = Path(out_dir)
    ctx = init_distributed()
    if ctx.is_main:
        claim(out, "train", hashed_config(cfg), resume=resume, exclusive=True)
    try:
        return _train(cfg, out, ctx, resume=resume, on_step=on_step)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(_saved_state(out)) from None
    finally:
        if ctx.is_main:
            release(out)


def _saved_state(out: Path) -> str:
    """What an interrupted run left on disk, read back from the folder (never assumed)."""
    steps = [r.get("step") for r in read_jsonl(out / "metrics.jsonl") if isinstance(r.get("step"), int)]
    ckpt = latest_checkpoint(out / "checkpoints")
    rows = f"metrics.jsonl has rows up to step {max(steps)}" if steps else "no metrics rows were written"
    if ckpt is None:
        return f"interrupted: {rows}; no checkpoint yet, so a resume starts over from step 0"
    return f"interrupted: {rows}; the last checkpoint is {ckpt}, where a resume restarts"


def _train(cfg: TrainConfig, out: Path, ctx: DistContext, *, resume: bool, on_step) -> TrainResult:
    t_start = time.time()
    if resume:
        check_resume_config(RunDir(out).read_config(), cfg, out)
        done = finished_result(out, cfg.steps)
        last = latest_checkpoint(out / "checkpoints")
        if done is not None and last is not None and last.name == f"step-{cfg.steps}":
            if ctx.is_main:
                print(f"{out}: the run is finished ({cfg.steps} steps); nothing to resume, report.md left as it is "
                      "(to train further, resume with a larger --steps)", flush=True)
            destroy(ctx)
            return TrainResult(**{f: done.get(f) for f in TrainResult.__dataclass_fields__})
    run = RunDir(out) if ctx.is_main else None
    # ---------------------------------------------------------------- setup
    device = _device(cfg, ctx)
    lora = LoraSettings(cfg.model.lora_r, cfg.model.lora_alpha, cfg.model.lora_dropout,
                        cfg.model.lora_targets) if cfg.model.lora_r else None
    policy = load_policy(cfg.model.name, lora=lora, dtype=cfg.model.dtype, device=device, seed=cfg.seed)
    t_loaded = time.time()  # `minutes` counts from here: a first-use tiny-model build is not training time
    model, tok = policy.model, policy.tokenizer
    broadcast_params(model, ctx)
    task = get_task(cfg.task.name, **cfg.task.options)
    fmt = lambda p: format_prompt(tok, p.prompt, chat=cfg.model.chat)  # noqa: E731
    train_problems, skipped = check_prompt_lengths(
        task.train_problems(), fmt, tok, context_length(model), cfg.sampling.max_new_tokens, cfg.task.long_prompts,
        "train"
    )
    eval_problems: list = []
    if cfg.eval.n_problems and (cfg.eval.greedy or cfg.eval.pass1_samples):
        eval_problems, _ = check_prompt_lengths(
            task.eval_problems()[: cfg.eval.n_problems], fmt, tok, context_length(model), cfg.sampling.max_new_tokens,
            "error", "eval"
        )
    train_prompts = [fmt(p) for p in train_problems]
    eval_prompts = [fmt(p) for p in eval_problems]
    reference = Reference.build(cfg, model, device) if cfg.loss.kl_coef > 0 else None
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(cfg.optim, params)
    scheduler = make_scheduler(cfg.optim, optimizer, cfg.steps)
    B, G = cfg.budget.prompts_per_step, cfg.budget.group_size
    dynamic = cfg.allocation.rule == "dynamic"
    if dynamic and ctx.world_size > 1:
        raise ValueError("allocation.rule=dynamic runs in one process only (several processes are not implemented); "
                         "launch without torchrun or choose another allocation.rule")
    if B < ctx.world_size:
        raise ValueError(f"B = N/G = {B} prompts per step cannot be shared by {ctx.world_size} processes; raise N or "
                         "lower G")

    start, initial, logged = 0, {}, []
    allocator = Allocator(cfg, len(train_problems))  # G_b per prompt (uniform: G for all) and the history
    loaded = load_latest(out / "checkpoints", model, optimizer, scheduler, ctx) if resume else None
    if loaded is not None:
        start, ckpt = loaded
        if not allocator.uniform:
            allocator.history = PromptHistory.from_checkpoint(ckpt, len(train_problems))
        if start > cfg.steps:
            raise ResumeError(f"--resume: steps={cfg.steps} but the checkpoint {ckpt} is at step {start}; "
                              f"resume with --steps {start} or more")
        if run is not None:
            repair_run_metrics(out, start)
            (out / "results.json").unlink(missing_ok=True)  # the run goes on: its old result no longer holds
            print(f"resuming from step {start} ({ckpt}); steps {start + 1}..{cfg.steps} to go", flush=True)
        barrier(ctx)
        logged = [r for r in read_jsonl(out / "metrics.jsonl") if r.get("step", 0) <= start]
        initial = next((r for r in logged if r["step"] == 0), {})
    elif resume and run is not None:  # died before its first checkpoint: nothing to continue, start over
        print(f"resuming: {out} has no checkpoint yet, so the run starts over from step 0", flush=True)
        (out / "metrics.jsonl").unlink(missing_ok=True)
    samples_cum = next((r["samples_cum"] for r in reversed(logged) if "samples_cum" in r),
                       start * cfg.budget.samples_per_step)  # policy samples spent up to the checkpoint
    if run is not None:
        run.write_config({**asdict(cfg), "derived": {"prompts_per_step": B, "world_size": ctx.world_size}})
        print(f"{summary_line(cfg)}; full config: {run.file('config.json')}", flush=True)
    writer = tensorboard(out) if ctx.is_main else None
    for r in logged:  # resume: the monitor's latest c1 before the checkpoint, for the certificate
        allocator.note_monitor(r)
    monitor = (TrainMonitor.from_config(cfg, warned=any("monitor_warning" in r for r in logged))
               if cfg.monitor_every else None)

    def log(row: dict) -> None:
        if run is not None:
            run.append_metrics(row)
            if writer is not None:
                for k, v in row.items():
                    if isinstance(v, (int, float)) and k != "step":
                        writer.add_scalar(k, v, row["step"])

    def run_eval() -> dict:
        ev = evaluate(
            model, tok, task, eval_problems, eval_prompts, greedy=cfg.eval.greedy, pass1_samples=cfg.eval.pass1_samples,
            temperature=cfg.sampling.temperature, top_p=cfg.sampling.top_p, max_new_tokens=cfg.sampling.max_new_tokens,
            batch_size=cfg.eval.batch_size, seed=cfg.seed, ctx=ctx,
        )
        return {"eval_accuracy": ev.accuracy, "eval_pass1": ev.pass1, "eval_n_unscorable": ev.n_unscorable,
                "eval_n_problems": ev.n_problems}

    # ---------------------------------------------------------------- step 0: evaluate before any update
    if start == 0:
        initial = {"step": 0, **run_eval(), "lr": scheduler.get_last_lr()[0], "samples": 0, "samples_cum": 0}
        log(initial)
    last_eval = next((r for r in reversed(logged) if "eval_accuracy" in r or "eval_pass1" in r), initial)
    bar = tqdm(range(start + 1, cfg.steps + 1), desc="train", unit="step", disable=not ctx.is_main, dynamic_ncols=True)
    for step in bar:
        t0 = time.time()
        # ------------------------------------------------------------ 1. prompts: B iid from the train set
        idx = choose_prompts(len(train_problems), B, cfg.seed, step)  # (B,) global
        sizes, alloc_row = allocator.choose(idx, step)  # (B,) G_b from the run's history only, not this step's samples
        mine = shard(B, ctx)  # this process's prompts b in [0, B)
        if dynamic:  # DAPO: all-equal groups replaced by new prompts until B informative ones (biased; A5)
            dyn = dynamic_batch(model, tok, task, train_problems, train_prompts, idx, cfg, step, ctx,
                                lambda r, j, i=step: prompt_seed(cfg.seed, i, j, stream=0 if r == 0 else 1 + r))
            rollout, problems, sc, rewards, position, idx = (dyn.rollout, dyn.problems, dyn.score, dyn.rewards,
                                                             dyn.position, dyn.prompts)
        else:
            problems = [train_problems[idx[b]] for b in mine]
            prompts = [train_prompts[idx[b]] for b in mine]
            # -------------------------------------------------------- 2. G_b completions for prompt b
            rollout = sample_groups(
                model, tok, prompts, [int(sizes[b]) for b in mine],
                seeds=[prompt_seed(cfg.seed, step, b) for b in mine], temperature=cfg.sampling.temperature,
                top_p=cfg.sampling.top_p, max_new_tokens=cfg.sampling.max_new_tokens,
                batch_size=cfg.budget.micro_batch or None,
            )
            # -------------------------------------------------------- 3. rewards Z (N_local,), prompt-major
            sc = score(task, rollout.texts,
                       [p for p, g in zip(problems, rollout.group_sizes.tolist()) for _ in range(g)])
            rewards = torch.tensor(sc.rewards, dtype=torch.float64)  # (N_local,)
            position = torch.as_tensor(list(mine), dtype=torch.long)  # (B_local,) place of each group in the batch
        t_sample = time.time() - t0
        local_sizes = rollout.group_sizes  # (B_local,)
        allocator.check_rewards(rewards)  # rewards in [0, 1] for the history's Beta posterior (before the update)
        values = None
        if cfg.baseline == "oracle":  # V(x) from M extra samples per prompt (counted as cost)
            values = _oracle_values(cfg, model, tok, task, problems, prompts, step, mine)
        # ------------------------------------------------------------ 4. advantages from ugrpo.stats
        advantages, n_zero_std = step_advantages(cfg, rollout, rewards, values)  # (N_local,) float32
        # ------------------------------------------------------------ 4b. G* monitor: c1, c2, c3 of this batch at theta
        # (Thm 7); ustat's score sketch (||W||^2 per sample for the history) at the sampling parameters
        monitored = (monitor.observe(step, model, rollout, rewards, ctx)
                     if monitor and monitor.due(step) else {})
        sketch, t_sketch = allocator.sketch(model, rollout, step)  # (N_local, k) or None
        # ------------------------------------------------------------ 5. update(s)
        mb = cfg.budget.micro_batch
        logp_ref = reference.logprobs(model, rollout, cfg.sampling.temperature, mb) if reference else None
        logp_old = rollout_logprobs(model, rollout, temperature=cfg.sampling.temperature,
                                    micro_batch=mb) if cfg.algorithm == 2 else None
        updates = []
        Bm = B // cfg.minibatches
        owner = position[rollout.prompt_index]  # (N_local,) place in the batch of each row's group
        for j in range(cfg.minibatches):  # Algorithm 1: m = 1, the whole batch
            mb_rows = torch.nonzero((owner >= j * Bm) & (owner < (j + 1) * Bm)).squeeze(1)
            denom = global_denominator(cfg, rollout, mb_rows, Bm * G, ctx)  # Bm * Gbar rows (seq_*)
            updates.append(update_on_rows(
                model, params, optimizer, rollout, mb_rows, advantages, logp_old=logp_old, logp_ref=logp_ref,
                denominator=denom, cfg=cfg, ctx=ctx,
            ))
        lr = scheduler.get_last_lr()[0]
        scheduler.step()
        n_nonfinite = sum(u.skipped for u in updates)  # updates dropped: NaN/inf loss or gradient
        # ------------------------------------------------------------ 6. metrics (all processes), eval, checkpoint
        row = step_metrics(step, rewards, len(local_sizes), n_zero_std, sc, rollout, updates, lr, ctx)
        parts = gather_objects((rewards.numpy(), None if sketch is None else sketch.numpy()), ctx)
        alloc_row.update(allocator.observe(idx, sizes, np.concatenate([p[0] for p in parts]),
                                           None if sketch is None else np.concatenate([p[1] for p in parts])))
        if dynamic:
            alloc_row.update(samples=dyn.samples, samples_zero_std=dyn.samples_zero_std, dynamic_rounds=dyn.rounds)
        samples_cum += alloc_row.setdefault("samples", int(sizes.sum()))
        row.update(samples_cum=samples_cum, **alloc_row)
        if allocator.uses_scores:
            row["s_alloc_sketch"] = t_sketch
        row["s_per_step"] = time.time() - t0
        row["s_sampling"] = t_sample
        row["tokens_per_s"] = row.pop("_tokens") / max(row["s_per_step"], 1e-9)
        row["oracle_samples"] = B * cfg.oracle_samples if cfg.baseline == "oracle" else 0
        row.update(monitored)
        allocator.note_monitor(monitored)  # c1 for the next steps' certificate against uniform G*
        row["n_nonfinite_updates"] = n_nonfinite
        if n_nonfinite and cfg.optim.nonfinite == "stop":
            log(row)
            raise NonFiniteError(nonfinite_message(step, updates, out))
        if step == cfg.steps or (cfg.eval.every and step % cfg.eval.every == 0):
            last_eval = run_eval()
            row.update(last_eval)
        log(row)
        if step == cfg.steps or (cfg.checkpoint_every and step % cfg.checkpoint_every == 0):
            check_finite_weights(params, step, out)
            save_checkpoint(out / "checkpoints", step, model, optimizer, scheduler, ctx,
                            extra=None if allocator.uniform else {"history.json": allocator.history.to_json()})
        bar.set_postfix(reward=f"{row['reward_mean']:.3f}", acc=fmt_value(last_eval.get("eval_accuracy")))
        if ctx.is_main and step % cfg.log_every == 0:
            tqdm.write(line(row))
        if on_step is not None:
            on_step(step, row)
    bar.close()
    # ---------------------------------------------------------------- results, final model, report
    result = TrainResult(
        out_dir=str(out), steps=cfg.steps,
        initial_eval_accuracy=initial.get("eval_accuracy"), initial_eval_pass1=initial.get("eval_pass1"),
        final_eval_accuracy=last_eval.get("eval_accuracy"), final_eval_pass1=last_eval.get("eval_pass1"),
        minutes=(time.time() - t_loaded) / 60, samples=samples_cum,
        oracle_samples=cfg.steps * B * cfg.oracle_samples if cfg.baseline == "oracle" else 0,
        skipped_prompts=skipped, load_minutes=(t_loaded - t_start) / 60,
    )
    check_finite_weights(params, cfg.steps, out)
    if run is not None:
        run.write_results(result)
        with naming(out / "final_model"):  # a full disk under transformers' writers names the folder
            model.save_pretrained(out / "final_model", safe_serialization=True)
            tok.save_pretrained(out / "final_model")
        follow_umask(out / "final_model")
        from ugrpo.report.train_report import write_report

        write_report(run)
        if writer is not None:
            writer.close()
    destroy(ctx)
    return result


# ---------------------------------------------------------------------- helpers


def _device(cfg: TrainConfig, ctx: DistContext) -> torch.device:
    if cfg.model.device != "auto":
        return torch.device(cfg.model.device)
    return torch.device(f"cuda:{ctx.local_rank}") if torch.cuda.is_available() else torch.device("cpu")


def _oracle_values(cfg, model, tok, task, problems, prompts, step, mine) -> torch.Tensor:
    """V(x) of each local prompt: mean reward of ``oracle_samples`` extra samples (seed stream 1)."""
    M = cfg.oracle_samples
    ro = sample_groups(
        model, tok, prompts, M, seeds=[prompt_seed(cfg.seed, step, b, stream=1) for b in mine],
        temperature=cfg.sampling.temperature, top_p=cfg.sampling.top_p, max_new_tokens=cfg.sampling.max_new_tokens,
        batch_size=cfg.budget.micro_batch or None,
    )
    sc = score(task, ro.texts, [p for p in problems for _ in range(M)])
    return torch.tensor(sc.rewards, dtype=torch.float64).view(-1, M).mean(dim=1)  # (B_local,)


