"""The trainer's per-step bookkeeping: the metrics row and its log, the console line, metrics repair, non-finite
guards.

Helpers of :mod:`ugrpo.train.loop`, kept apart so the loop reads top to bottom.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ugrpo.errors import NonFiniteError
from ugrpo.report.coverage import coverage_phrase, is_coverage_phrase
from ugrpo.runs import repair_metrics
from ugrpo.tasks.custom import CustomTask
from ugrpo.tasks.custom_check import failure_advice
from ugrpo.train.distributed import gather_objects
from ugrpo.train.monitor import console_column
from ugrpo.train.report_to import open_backends

__all__ = ["step_metrics", "finish_row", "MetricsLog", "repair_run_metrics", "nonfinite_message",
           "unscored_message", "check_finite_weights", "fmt_value", "line"]


def step_metrics(step, rewards, n_groups, n_zero_std, sc, rollout, updates, lr, ctx) -> dict:
    """Reduce one step's numbers over processes into a metrics row."""
    local = {
        "rewards": rewards.reshape(-1).tolist(),  # (N_local,) flat, ragged order
        "lengths": rollout.completion_mask.sum(dim=1).tolist(),
        "truncated": int(rollout.truncated.sum()),
        "empty": sum(1 for t in rollout.texts if not t.strip()),
        "n_zero_std": n_zero_std,
        "n_groups": n_groups,
        "unscorable": sc.n_unscorable,
        "timeouts": sc.n_timeouts,
        "parse": sc.n_parse_failures,
        "errors": sc.n_errors,
        "first_error": sc.first_error,
    }
    parts = gather_objects(local, ctx)
    z = np.array([r for p in parts for r in p["rewards"]])
    lengths = np.array([n for p in parts for n in p["lengths"]])
    n = len(z)
    return {
        "step": step,
        "reward_mean": float(z.mean()),
        "reward_std": float(z.std()),
        "frac_reward_zero_std": sum(p["n_zero_std"] for p in parts) / max(1, sum(p["n_groups"] for p in parts)),
        "loss": float(np.mean([u.loss for u in updates])),
        "grad_norm": float(np.mean([u.grad_norm for u in updates])),
        "kl": float(np.mean([u.kl for u in updates])),
        "clip_frac": float(np.mean([u.clip_frac for u in updates])),
        "ratio_mean": float(np.mean([u.ratio_mean for u in updates])),
        "lr": lr,
        "completion_len_mean": float(lengths.mean()),
        "truncated_frac": sum(p["truncated"] for p in parts) / n,
        "n_unscorable": sum(p["unscorable"] for p in parts),
        "n_empty": sum(p["empty"] for p in parts),
        "n_timeouts": sum(p["timeouts"] for p in parts),
        "n_parse_failures": sum(p["parse"] for p in parts),
        "n_errors": sum(p["errors"] for p in parts),
        "first_error": next((p["first_error"] for p in parts if p["first_error"]), None),
        "_tokens": float(lengths.sum()),
    }


def finish_row(row: dict, *, alloc: dict, samples_cum: int, t0: float, t_sample: float, t_scores: float | None,
               oracle_samples: int, monitored: dict, n_nonfinite: int) -> dict:
    """Complete a :func:`step_metrics` row in place, in metrics.jsonl's key order: the cumulative samples and the
    allocation keys, the timings (``t0``: the step's start; ``t_scores``: the seconds of ``ustat``'s score
    statistics, else None), the oracle's extra samples, the G* monitor's keys and the count of dropped non-finite
    updates."""
    row.update(samples_cum=samples_cum, **alloc)
    if t_scores is not None:
        row["s_alloc_scores"] = t_scores
    row["s_per_step"] = time.time() - t0
    row["s_sampling"] = t_sample
    row["tokens_per_s"] = row.pop("_tokens") / max(row["s_per_step"], 1e-9)
    row["oracle_samples"] = oracle_samples
    row.update(monitored)
    row["n_nonfinite_updates"] = n_nonfinite
    return row


class MetricsLog:
    """Rank 0's metrics.jsonl rows, also sent to the backends of ``report_to`` (:mod:`ugrpo.train.report_to`);
    other ranks: nothing."""

    def __init__(self, run, out: Path, report_to: Sequence[str] = (), config: dict | None = None) -> None:
        self.run = run
        self.backends = open_backends(report_to, out, config or {}) if run is not None else []

    def __call__(self, row: dict) -> None:
        if self.run is not None:
            self.run.append_metrics(row)
            for backend in self.backends:
                backend.log(row)

    def close(self) -> None:
        backends, self.backends = self.backends, []
        for backend in backends:
            backend.close()


def repair_run_metrics(out: Path, start: int) -> None:
    """Cut metrics.jsonl back to the checkpoint (torn line, later rows); warn about steps it lost before it."""
    rep = repair_metrics(out / "metrics.jsonl", start)
    if rep.torn_line_dropped:
        print(f"warning: {out / 'metrics.jsonl'}: a torn last line (a crash mid-write) was dropped", file=sys.stderr)
    if rep.missing_steps:
        k = rep.missing_steps
        ranges = f"{k[0]}..{k[-1]}" if len(k) == k[-1] - k[0] + 1 else ", ".join(map(str, k[:10]))
        print(f"warning: {out / 'metrics.jsonl'} has no rows for {len(k)} step(s) before the checkpoint at step "
              f"{start} ({ranges}): the weights resume exactly, but those rows are lost", file=sys.stderr)


def nonfinite_message(step: int, updates, out: Path) -> str:
    loss = [u.loss for u in updates]
    norm = [u.grad_norm for u in updates]
    return (f"step {step}: the loss ({loss}) or gradient norm ({norm}) is not finite; the update was not made "
            f"and the last checkpoint in {out / 'checkpoints'} is intact. Lower optim.lr, set optim.grad_clip or check "
            "the rewards; or set optim.nonfinite=skip to skip such steps (counted as n_nonfinite_updates)")


def unscored_message(step: int, row: dict, task, problems, out: Path) -> str:
    """Why a run stops when every completion of its first step was a scoring error (``row``: that step's metrics):
    the reward code is broken (a custom task's function: :func:`ugrpo.tasks.custom_check.failure_advice` when it
    raised), and training on all-zero rewards would only waste the run."""
    first = str(row.get("first_error") or "")
    error = next((ln.strip() for ln in reversed(first.splitlines()) if ln.strip()), "no message")
    what, advice, fix = f"task {getattr(task, 'name', task)!r}'s verifier", "", "fix the verifier or its environment"
    if isinstance(task, CustomTask):
        what, fix = f"task.options.reward_fn {task.spec()!r}", "fix the function (same task.options.reward_fn)"
        if first.startswith("Traceback"):  # it raised (else the message says what it returned)
            advice = f" {failure_advice(task, problems, error)}."
    return (f"step {step}: {what} failed on all {row['samples']} completions ({error}); the run stops rather than "
            f"train on zero rewards.{advice} {out / 'metrics.jsonl'} has the rows up to step {step}; {fix}, then run "
            "the same command with --resume (from the last checkpoint, or from step 0 if there is none) or into a "
            "new --out")


def check_finite_weights(params, step: int, out: Path) -> None:
    """Never write a NaN model: non-finite weights stop the run before any checkpoint or final model."""
    bad = sum(int((~torch.isfinite(p.detach())).sum()) for p in params)
    if bad:
        raise NonFiniteError(f"after step {step} {bad} weight(s) are NaN/inf (an update overflowed); nothing was "
                             f"written for this step and earlier checkpoints in {out / 'checkpoints'} are intact. "
                             "Lower optim.lr or set optim.grad_clip")


def fmt_value(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def line(row: dict) -> str:
    keys = ("reward_mean", "frac_reward_zero_std", "loss", "grad_norm", "kl", "clip_frac", "completion_len_mean",
            "s_per_step")
    parts = [f"step {row['step']}"] + [f"{k}={row[k]:.4g}" for k in keys if isinstance(row.get(k), (int, float))]
    if row.get("eval_accuracy") is not None or row.get("eval_pass1") is not None:
        parts.append(f"eval_accuracy={fmt_value(row.get('eval_accuracy'))} "
                     f"eval_pass1={fmt_value(row.get('eval_pass1'))}")
    parts += [c for c in [console_column(row)] if c]  # the G* monitor's column (steps it measured)
    if "is_ess" in row:  # prompt importance sampling (docs/allocation.md A8)
        parts.append(f"law={row.get('is_guard_choice', '-')} G_b={row['alloc_g_min']}..{row['alloc_g_max']} "
                     f"samples={row['samples']} ess={row['is_ess']:.3g} w_max={row['is_weight_max']:.3g}"
                     + (f" predicted_S_ratio={row['is_predicted_ratio']:.3g}" if "is_predicted_ratio" in row else "")
                     + (f" (95% interval {row['is_predicted_ratio_low']:.3g}-{row['is_predicted_ratio_high']:.3g}, "
                        f"{is_coverage_phrase(short=True)})" if row.get("is_predicted_ratio_low") is not None else ""))
    elif "alloc_g_hist" in row:  # per-prompt group sizes (docs/allocation.md)
        parts.append(f"G_b={row['alloc_g_min']}..{row['alloc_g_max']} "
                     f"predicted_mse_ratio={row['alloc_predicted_ratio']:.3g}"
                     + (f" (95% interval {row['alloc_predicted_ratio_low']:.3g}-"
                        f"{row['alloc_predicted_ratio_high']:.3g}, {coverage_phrase(short=True)})"
                        if row.get("alloc_predicted_ratio_low") is not None else ""))
    if "dynamic_rounds" in row:
        parts.append(f"rounds={row['dynamic_rounds']} samples={row['samples']}")
    return " ".join(parts)
