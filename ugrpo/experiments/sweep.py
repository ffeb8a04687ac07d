"""Fixed-budget group-size sweep with Algorithm 1 on an exact env (paper Fig. 5, Table 2).

For each budget N, each G dividing N (B = N/G) and each seed, ``run_algorithm1`` trains from
the env's theta0 and reports the exact suboptimality gap Delta(pi_theta) = J* - J(theta) at the
checkpoints. Over seeds: mean and a Student-t 95% interval cut at 0; per (N, checkpoint)
the empirical best G (smallest mean gap); and the planner's G* of Theorem 7 from the exact
constants c1, c2, c3 at theta0.

Resumable: one metrics row per finished (N, G, seed); rerunning with the same ``--out`` skips
those and refuses to mix in different settings.

Deviation from the paper: the paper measures test accuracy of an LLM (GSM8K, MATH); here the
exact gap of a synthetic policy, so the only noise is over seeds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tqdm.auto import tqdm

from ugrpo.runs import RunDir
from ugrpo.stats.budget import check_divides
from ugrpo.stats.intervals import clip_interval, t_interval

__all__ = ["SweepConfig", "run_sweep", "sweep_experiment", "default_checkpoints", "aggregate", "best_groups",
           "check_resume", "RESUME_KEYS"]

RESUME_KEYS = ("env", "steps", "checkpoints", "baseline", "lr_schedule")
"""Settings that must match for a rerun with the same --out to resume instead of failing."""


@dataclass(frozen=True)
class SweepConfig:
    """Resolved settings of ``ugrpo sweep``."""

    env: str
    budgets: tuple[int, ...]
    """samples per step N = B*G"""
    groups: tuple[int, ...]
    """group sizes G; each must divide every budget"""
    steps: int
    """SGD steps n of Algorithm 1"""
    lr: tuple[float, ...]
    """learning rate eta (constant) or beta (lr_schedule='inverse': eta_i = beta/i), one per budget"""
    seeds: int
    """independent runs K per (N, G)"""
    checkpoints: tuple[int, ...]
    """steps at which the exact gap is recorded (increasing, in 0..steps; 0 = theta0)"""
    baseline: str = "grpo"
    lr_schedule: str = "constant"
    seed: int = 0
    """first seed; runs use seed, seed+1, ..., seed+K-1"""

    def lr_for(self, budget: int) -> float:
        return self.lr[self.budgets.index(budget)]

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"--steps must be >= 1, got {self.steps}")
        if len(self.lr) != len(self.budgets):
            raise ValueError(f"--lr has {len(self.lr)} values for {len(self.budgets)} budgets; give one lr, "
                             "or one per budget in the order of --budget")
        if not all(v > 0 for v in self.lr):
            raise ValueError(f"--lr must be > 0, got {list(self.lr)}")
        if self.seeds < 1:
            raise ValueError(f"--seeds must be >= 1, got {self.seeds}")
        cps = list(self.checkpoints)
        if not cps or cps != sorted(set(cps)) or cps[0] < 0 or cps[-1] > self.steps:
            raise ValueError(f"--checkpoints {cps}: need strictly increasing step counts in 0..steps={self.steps}")
        for N in self.budgets:
            for G in self.groups:
                check_divides(N, G)
        if self.baseline in ("grpo", "grpo_mean") and min(self.groups) < 2:
            raise ValueError(f"--groups: baseline {self.baseline!r} needs G >= 2, got G = {min(self.groups)}")


def default_checkpoints(steps: int) -> tuple[int, ...]:
    """steps/4, steps/2, 3 steps/4 and steps (distinct, >= 1): the default ``--checkpoints``."""
    return tuple(sorted({max(1, steps * k // 4) for k in (1, 2, 3, 4)}))


def run_sweep(env, cfg: SweepConfig, run: RunDir, *, progress: bool = True) -> list[dict[str, Any]]:
    """Run every missing (N, G, seed); return all per-run rows (old and new), sorted.

    The missing seeds of one (N, G) run together through ``run_algorithm1_batch`` (its row s
    equals ``run_algorithm1(seed=s)``); a row per seed is appended when the cell finishes.
    """
    from ugrpo.envs.algorithm1 import run_algorithm1_batch

    seeds = range(cfg.seed, cfg.seed + cfg.seeds)
    done = {(r["budget"], r["G"], r["seed"]): r for r in run.metrics() if "budget" in r}
    cells = [(N, G, [s for s in seeds if (N, G, s) not in done]) for N in cfg.budgets for G in cfg.groups]
    cells = [c for c in cells if c[2]]
    if done:
        print(f"resuming: {len(done)} runs already in {run.file('metrics.jsonl')}; "
              f"{sum(len(c[2]) for c in cells)} to go")
    bar = tqdm(total=sum(len(c[2]) for c in cells), desc="sweep runs", unit="run",
               disable=not progress, dynamic_ncols=True)
    try:
        for N, G, todo in cells:
            bar.set_postfix_str(f"N={N} G={G}")
            res = run_algorithm1_batch(env, N=N, G=G, steps=cfg.steps, lr=cfg.lr_for(N), seeds=todo,
                                       baseline=cfg.baseline, lr_schedule=cfg.lr_schedule,
                                       checkpoints=list(cfg.checkpoints))
            for i, s in enumerate(todo):
                row = {"budget": N, "G": G, "B": N // G, "seed": s, "checkpoints": list(res.checkpoints),
                       "gaps": res.gaps[i].tolist(), "frac_zero_std": float(res.frac_zero_std[i])}
                run.append_metrics(row)
                done[(N, G, s)] = row
            bar.update(len(todo))
    finally:
        bar.close()
    return [done[(N, G, s)] for N in cfg.budgets for G in cfg.groups for s in seeds]


def sweep_experiment(cfg: SweepConfig, out: str, *, argv: Sequence[str] | None = None,
                     progress: bool = True) -> dict[str, Any]:
    """``ugrpo sweep --env``: run (or resume) the sweep ``cfg`` in the run folder ``out``, aggregate the gaps,
    compare with the exact planner and write results.json, sweep.png and report.md; return the results."""
    from ugrpo.experiments.common import resolve_env
    from ugrpo.experiments.plan import exact_planner
    from ugrpo.report.sweep_report import write_sweep_outputs

    env = resolve_env(cfg.env)
    rd = RunDir(out)
    check_resume(rd.read_config("sweep"), cfg, out)  # a folder of another command is refused as such
    rd.write_config({**asdict(cfg), "command": "sweep", "argv": None if argv is None else list(argv)})
    try:
        runs = run_sweep(env, cfg, rd, progress=progress)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"interrupted: finished runs are in {rd.file('metrics.jsonl')}; rerun the same "
                                "command to resume") from None
    rows = aggregate(runs, cfg.checkpoints)
    results = {"rows": rows, "best_G": best_groups(rows),
               "planner": exact_planner(env.exact(env.theta0, sigma=False).policy_moments, cfg.budgets, cfg.groups),
               "config": asdict(cfg), "runs": len(runs)}
    write_sweep_outputs(rd, results, argv)
    return results


def aggregate(runs: Sequence[dict[str, Any]], checkpoints: Sequence[int]) -> list[dict[str, Any]]:
    """Mean gap with a 95% interval over seeds for each (N, G, checkpoint)."""
    cells: dict[tuple[int, int], list[dict]] = {}
    for r in runs:
        cells.setdefault((r["budget"], r["G"]), []).append(r)
    rows = []
    for (N, G), rs in sorted(cells.items()):
        for j, c in enumerate(checkpoints):
            st = t_interval([float(r["gaps"][j]) for r in rs])  # few seeds: Student t, not 1.96
            lo, hi = clip_interval(st["ci_low"], st["ci_high"], hi=math.inf)  # a suboptimality gap is >= 0
            rows.append({"budget": N, "G": G, "B": N // G, "checkpoint": c, "gap_mean": st["mean"],
                         "ci_low": lo, "ci_high": hi, "se": st["se"], "seeds": st["n"]})
    return rows


def best_groups(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The empirical best G (smallest mean gap) per (budget, checkpoint)."""
    best: dict[tuple[int, int], dict] = {}
    for r in rows:
        k = (r["budget"], r["checkpoint"])
        if k not in best or r["gap_mean"] < best[k]["gap_mean"]:
            best[k] = r
    return [{"budget": N, "checkpoint": c, "G": r["G"], "gap_mean": r["gap_mean"]} for (N, c),
            r in sorted(best.items())]


def check_resume(old: dict | None, cfg: SweepConfig, out: str) -> None:
    """A rerun into an existing folder must use the same settings (else the rows would mix)."""
    if not old:
        return
    new = asdict(cfg)
    old_lr = dict(zip(old.get("budgets", []), old.get("lr", [])))
    for N, lr in zip(cfg.budgets, cfg.lr):
        if N in old_lr and old_lr[N] != lr:
            raise ValueError(f"--out {out} holds a sweep with lr = {old_lr[N]} at budget N={N}, but this run has "
                             f"lr = {lr}; use a new --out folder or the same settings to resume")
    diff = [k for k in RESUME_KEYS if k in old and _norm(old[k]) != _norm(new[k])]
    if diff:
        k = diff[0]
        raise ValueError(
            f"--out {out} holds a sweep with {k} = {old[k]!r}, but this run has {k} = {new[k]!r}; "
            "use a new --out folder or the same settings to resume"
        )


def _norm(v: Any) -> Any:
    return list(v) if isinstance(v, (list, tuple)) else v
