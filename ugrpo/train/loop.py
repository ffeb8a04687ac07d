"""Algorithm 1 and Algorithm 2 of the paper on a language model: one narrative loop.

Each step i (paper Algorithm 1):
    sample B = N/G prompts iid from the train set (seeded by (seed, i); the prompt-IS rules: from a law q, M52)
    -> G completions per prompt from pi_theta (seeded by (seed, i, prompt index))
    -> rewards Z (B, G) from the task's verifier
    -> advantages A = Z - C (and optional std scaling) from ``ugrpo.stats``
    -> loss whose gradient is -ghat  -> optimizer step          (Algorithm 1: one update)
       or m updates on disjoint prompt minibatches with the token ratio pi/pi_old  (Algorithm 2)
    -> metrics.jsonl row; held-out eval at step 0 and every ``eval.every`` steps.

The pieces: :func:`ugrpo.train.setup.build_run` (policy, task, optimizer), :mod:`ugrpo.train.rollout` (the step's
prompts and seeds, and "sample, then score" for uniform, allocated and dynamic batches and the oracle's extra
samples), :mod:`ugrpo.train.alloc` (G_b per prompt, advantages), :func:`ugrpo.train.update.step_updates`,
:mod:`ugrpo.train.steplog` (the metrics row and its log).

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

import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ugrpo.console import logs_above_bar
from ugrpo.errors import NonFiniteError, ResumeError, RewardFunctionError, UserError
from ugrpo.fileio import naming
from ugrpo.lm.vllm_engine import require_vllm
from ugrpo.runlock import abandon, claim, release
from ugrpo.runs import RunDir, follow_umask, read_jsonl
from ugrpo.stats.history import ScoreNorms
from ugrpo.train.alloc import Allocator, step_advantages
from ugrpo.train.checkpoint import latest_checkpoint, load_latest, save_checkpoint
from ugrpo.train.config import TrainConfig, summary_line
from ugrpo.train.distributed import DistContext, barrier, destroy, gather_objects, init_distributed
from ugrpo.train.evaluate import eval_metrics
from ugrpo.train.monitor import TrainMonitor
from ugrpo.train.preflight import Checked, preflight
from ugrpo.train.resume import check_resume_config, finished_result, hashed_config
from ugrpo.train.rollout import Sampler, StepRollout, choose_prompts, prompt_seed
from ugrpo.train.setup import RunObjects, build_run, run_device
from ugrpo.train.steplog import (
    MetricsLog,
    check_finite_weights,
    finish_row,
    fmt_value,
    line,
    nonfinite_message,
    repair_run_metrics,
    step_metrics,
    unscored_message,
)
from ugrpo.train.update import step_updates

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
    resumed_from: int = 0
    """the checkpoint step this call went on from (``--resume``; 0: it ran every step), so ``minutes`` timed steps
    ``resumed_from + 1`` to ``steps``"""


def train(
    cfg: TrainConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    on_step: Callable[[int, dict], None] | None = None,
    checked: Checked | None = None,
    progress: bool = True,
) -> TrainResult:
    """Run Algorithm 1 or 2 as configured, writing the run folder ``out_dir``.

    Parameters
    ----------
    cfg : the validated configuration
    out_dir : run folder (config.json, metrics.jsonl, checkpoints/, results.json, report.md)
    resume : continue from the last checkpoint in ``out_dir`` (metrics rows after it are dropped)
    on_step : called as ``on_step(step, row)`` after each step's row is logged (tests use it to
        interrupt a run)
    checked : what :func:`ugrpo.train.preflight.preflight` returned for this ``cfg`` and ``out`` (the command line
        runs it before it imports torch); None: it runs here
    progress : show the training bar (rank 0 only); False where the console is a log file, as under ``sweep``,
        whose runs' ``train.log`` keep the step lines and warnings without the bar's redraws

    Every check of the input runs before the run folder is claimed: :func:`~ugrpo.train.preflight.preflight` (the
    folder read only, the model name, the task's data, the logging backends), then the model and the checks that
    need it (:func:`ugrpo.train.setup.build_run`: prompt lengths against the context, LoRA targets, ...). Only then
    does rank 0 lock ``out`` for the run's life and write its manifest (:mod:`ugrpo.runlock`), so an error in the
    input leaves nothing behind. A folder of another command is refused, and an existing run is only ever continued
    with ``resume``, whose config may differ only in :data:`ugrpo.train.resume.RESUMABLE`. A resume of a finished
    run returns its saved result and rewrites nothing.
    """
    out = Path(out_dir)
    ctx = init_distributed()
    if cfg.sampling.backend == "vllm":  # vLLM missing, or no CUDA: say so before anything is written
        require_vllm(run_device(cfg, ctx))
    checked = checked or preflight(cfg, out, resume=resume)
    try:
        with logs_above_bar():  # a warning logged while the training bar is shown goes above it, not onto its line
            return _train(cfg, out, ctx, checked, resume=resume, on_step=on_step, progress=progress)
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


def _train(cfg: TrainConfig, out: Path, ctx: DistContext, checked: Checked, *, resume: bool, on_step,
           progress: bool) -> TrainResult:
    t_start = time.time()
    if resume and (done := _finished_run(cfg, out, ctx)) is not None:
        return done  # nothing to resume: the saved result, nothing rewritten
    # ---------------------------------------------------------------- setup, resume
    s = build_run(cfg, ctx, checked)  # policy, task and prompts, reference, optimizer and schedule
    created = not out.exists()
    if ctx.is_main:  # every check has passed: now the folder is created, locked and given its manifest
        claim(out, "train", hashed_config(cfg), resume=resume, exclusive=True)
    run = RunDir(out) if ctx.is_main else None
    try:  # rank 0: metrics.jsonl and the report_to backends; a backend that does not start leaves no claim behind
        log = MetricsLog(run, out, cfg.report_to, asdict(cfg))
    except UserError:
        if run is not None and not resume:
            abandon(out, created=created)
        raise
    model, tok, params, optimizer, scheduler = s.model, s.tokenizer, s.params, s.optimizer, s.scheduler
    B = cfg.budget.prompts_per_step
    sampler = Sampler(model, tok, s.task, s.train_problems, s.train_prompts, cfg, ctx, s.engine)
    allocator = Allocator(cfg, len(s.train_problems))  # G_b per prompt (uniform: G for all) and the history
    start, initial, logged = _restore(cfg, out, s, allocator, run, ctx) if resume else (0, {}, [])
    samples_cum = next((r["samples_cum"] for r in reversed(logged) if "samples_cum" in r),
                       start * cfg.budget.samples_per_step)  # policy samples spent up to the checkpoint
    if run is not None:
        run.write_config({**asdict(cfg), "derived": {"prompts_per_step": B, "world_size": ctx.world_size}})
        print(f"{summary_line(cfg)}; full config: {run.file('config.json')}", flush=True)
    for r in logged:  # resume: the monitor's latest c1 before the checkpoint, for the certificate
        allocator.note_monitor(r)
    monitor = (TrainMonitor.from_config(cfg, warned=any("monitor_warning" in r for r in logged))
               if cfg.monitor_every else None)
    run_eval = lambda: eval_metrics(cfg, model, tok, s.task, s.eval_problems, s.eval_prompts, ctx,  # noqa: E731
                                    engine=s.engine)
    sampler.sync_weights()  # backend vllm: the engine gets the (initial or restored) weights

    # ---------------------------------------------------------------- step 0: evaluate before any update
    if start == 0:
        initial = {"step": 0, **run_eval(), "lr": scheduler.get_last_lr()[0], "samples": 0, "samples_cum": 0}
        log(initial)
    last_eval = next((r for r in reversed(logged) if "eval_accuracy" in r or "eval_pass1" in r), initial)
    bar = tqdm(range(start + 1, cfg.steps + 1), desc="train", unit="step", disable=not (ctx.is_main and progress),
               dynamic_ncols=True)
    for step in bar:
        t0 = time.time()
        # ------------------------------------------------------------ 1. prompts: B iid from the train set
        idx = allocator.prompts(step)  # (B,) global: uniform, or from the prompt-IS law q of the history (M52)
        sizes, alloc_row = allocator.choose(idx, step)  # (B,) G_b from the run's history only, not this step's samples
        # ------------------------------------------------------------ 2-3. G_b completions of prompt b, rewards Z
        # (N_local,) prompt-major; dynamic (DAPO): all-equal groups replaced by new prompts (biased; A5)
        batch = sampler.step(step, idx, sizes)
        t_sample = time.time() - t0
        allocator.check_rewards(batch.rewards)  # rewards in [0, 1] for the history's Beta posterior (before the update)
        values = None
        if cfg.baseline == "oracle":  # V(x) from M extra samples per prompt (counted as cost)
            values = sampler.oracle_values(batch, step)
        # ------------------------------------------------------------ 4. advantages from ugrpo.stats
        advantages, n_zero_std = step_advantages(cfg, batch.rollout, batch.rewards, values,  # (N_local,) float32
                                                 allocator.prompt_weights(batch.position))  # prompt IS: 1/(P q)
        # ------------------------------------------------------------ 4b. G* monitor: c1, c2, c3 of this batch at theta
        # (Thm 7); ustat's score statistics (||W||^2 per sample for the history) at the sampling parameters: read off
        # the update's own forward (scores: output) or sketched now (scores: sketch)
        monitored = (monitor.observe(step, model, batch.rollout, batch.rewards, ctx)
                     if monitor and monitor.due(step) else {})
        scores = allocator.step_scores(model, batch.rollout, batch.rewards, batch.rollout.prompt_index, forward=True)
        # ------------------------------------------------------------ 5. update(s): Algorithm 1, or 2 (m minibatches)
        updates = step_updates(model, params, optimizer, batch.rollout, batch.position, advantages,
                               reference=s.reference, cfg=cfg, ctx=ctx, on_logits=scores.on_logits)
        norms, t_scores = scores.result()  # ScoreNorms of the local rows, or None
        sampler.sync_weights()  # backend vllm: the next samples (and this step's eval) come from the updated policy
        lr = scheduler.get_last_lr()[0]
        scheduler.step()
        n_nonfinite = sum(u.skipped for u in updates)  # updates dropped: NaN/inf loss or gradient
        # ------------------------------------------------------------ 6. metrics (all processes), eval, checkpoint
        row = step_metrics(step, batch.rewards, batch.rollout.num_prompts, n_zero_std, batch.score, batch.rollout,
                           updates, lr, ctx)
        alloc_row.update(_observe(allocator, batch, sizes, norms, ctx), **batch.sample_counts())
        samples_cum += alloc_row["samples"]
        finish_row(row, alloc=alloc_row, samples_cum=samples_cum, t0=t0, t_sample=t_sample,
                   t_scores=t_scores if allocator.uses_scores else None,
                   oracle_samples=B * cfg.oracle_samples if cfg.baseline == "oracle" else 0, monitored=monitored,
                   n_nonfinite=n_nonfinite)
        allocator.note_monitor(monitored)  # c1 for the next steps' certificate against uniform G*
        if n_nonfinite and cfg.optim.nonfinite == "stop":
            log(row)
            raise NonFiniteError(nonfinite_message(step, updates, out))
        if step == start + 1 and row["n_errors"] == row["samples"]:  # the reward code failed on every completion
            log(row)
            raise RewardFunctionError(unscored_message(step, row, s.task, batch.problems, out))
        if step == cfg.steps or (cfg.eval.every and step % cfg.eval.every == 0):
            last_eval = run_eval()
            row.update(last_eval)
        log(row)
        if step == cfg.steps or (cfg.checkpoint_every and step % cfg.checkpoint_every == 0):
            check_finite_weights(params, step, out)
            save_checkpoint(out / "checkpoints", step, model, optimizer, scheduler, ctx,
                            extra=None if allocator.uniform else {"history.json": allocator.history.to_json(),
                                                                  **allocator.law_source_extra()})
        bar.set_postfix(reward=f"{row['reward_mean']:.3f}", acc=fmt_value(last_eval.get("eval_accuracy")))
        if ctx.is_main and step % cfg.log_every == 0:
            tqdm.write(line(row))
            sys.stdout.flush()  # a file (SLURM, nohup) gets each step's line as it happens, not at exit
        if on_step is not None:
            on_step(step, row)
    bar.close()
    # ---------------------------------------------------------------- results, final model, report
    result = TrainResult(
        out_dir=str(out), steps=cfg.steps,
        initial_eval_accuracy=initial.get("eval_accuracy"), initial_eval_pass1=initial.get("eval_pass1"),
        final_eval_accuracy=last_eval.get("eval_accuracy"), final_eval_pass1=last_eval.get("eval_pass1"),
        minutes=(time.time() - s.loaded_at) / 60, samples=samples_cum,
        oracle_samples=cfg.steps * B * cfg.oracle_samples if cfg.baseline == "oracle" else 0,
        skipped_prompts=s.skipped, load_minutes=(s.loaded_at - t_start) / 60, resumed_from=start,
    )
    check_finite_weights(params, cfg.steps, out)
    if run is not None:
        _write_final(run, result, s, log)
    if s.engine is not None:
        s.engine.close()
    destroy(ctx)
    return result


# ---------------------------------------------------------------------- helpers


def _finished_run(cfg: TrainConfig, out: Path, ctx: DistContext) -> TrainResult | None:
    """``--resume``: check the config may continue the run; a finished run's saved result (after ``destroy``), or
    None when there are steps to go."""
    check_resume_config(RunDir(out).read_config(), cfg, out)
    done = finished_result(out, cfg.steps)
    last = latest_checkpoint(out / "checkpoints")
    if done is None or last is None or last.name != f"step-{cfg.steps}":
        return None
    if ctx.is_main:
        print(f"{out}: the run is finished ({cfg.steps} steps); nothing to resume, report.md left as it is "
              "(to train further, resume with a larger --steps)", flush=True)
    destroy(ctx)
    return TrainResult(**{**{f: done.get(f) for f in TrainResult.__dataclass_fields__}, "resumed_from": cfg.steps})


def _restore(cfg: TrainConfig, out: Path, s: RunObjects, allocator: Allocator, run: RunDir | None,
             ctx: DistContext) -> tuple[int, dict, list[dict]]:
    """``--resume``: load the last checkpoint into the run's objects (and the allocation history); cut
    metrics.jsonl back to it. Returns (its step, the step-0 row, the rows up to it); a run that died before its
    first checkpoint starts over: (0, {}, [])."""
    loaded = load_latest(out / "checkpoints", s.model, s.optimizer, s.scheduler, ctx)
    if loaded is None:
        if run is not None:  # died before its first checkpoint: nothing to continue, start over
            print(f"resuming: {out} has no checkpoint yet, so the run starts over from step 0", flush=True)
            (out / "metrics.jsonl").unlink(missing_ok=True)
        return 0, {}, []
    start, ckpt = loaded
    if not allocator.uniform:
        allocator.restore(ckpt)
    if start > cfg.steps:
        raise ResumeError(f"--resume: steps={cfg.steps} but the checkpoint {ckpt} is at step {start}; "
                          f"resume with --steps {start} or more")
    if run is not None:
        repair_run_metrics(out, start)
        (out / "results.json").unlink(missing_ok=True)  # the run goes on: its old result no longer holds
        print(f"resuming from step {start} ({ckpt}); steps {start + 1}..{cfg.steps} to go", flush=True)
    barrier(ctx)
    logged = [r for r in read_jsonl(out / "metrics.jsonl") if r.get("step", 0) <= start]
    return start, next((r for r in logged if r["step"] == 0), {}), logged


def _observe(allocator: Allocator, batch: StepRollout, sizes: np.ndarray, norms: ScoreNorms | None,
             ctx: DistContext) -> dict:
    """The allocator learns from the step's GLOBAL rewards (and ``ustat``'s score norms), gathered from all
    processes (each holds whole groups, in global prompt order); its realised-variance metrics."""
    parts = gather_objects((batch.rewards.numpy(), norms), ctx)
    return allocator.observe(batch.prompts, sizes, np.concatenate([p[0] for p in parts]),
                             None if norms is None else ScoreNorms.concat([p[1] for p in parts]))


def _write_final(run: RunDir, result: TrainResult, s: RunObjects, log: MetricsLog) -> None:
    """Rank 0 at the end: results.json, the final model with its tokenizer, report.md; the metrics log closed."""
    run.write_results(result)
    with naming(run.path / "final_model"):  # a full disk under transformers' writers names the folder
        s.model.save_pretrained(run.path / "final_model", safe_serialization=True)
        s.tokenizer.save_pretrained(run.path / "final_model")
    follow_umask(run.path / "final_model")
    from ugrpo.report.train import write_report

    write_report(run)
    log.close()
