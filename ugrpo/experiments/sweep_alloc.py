"""``ugrpo sweep --allocation RULE[,RULE...]``: Algorithm 1 at equal budget with per-prompt group sizes.

For each rule and seed, :func:`ugrpo.envs.algorithm1.run_algorithm1_alloc` trains from theta0 with the same N
samples per step, the same B prompts per step, steps, lr and schedule; the exact gap J* - J(theta) is recorded
at the checkpoints (samples spent = checkpoint * N). ``uniform`` gives every prompt G_u: the --groups value
when one is given, otherwise the G among --groups (dividing N) with the smallest exact MSE M11 at theta0; the
other rules share its B = N / G_u. Over seeds: mean gap with a Student-t 95% interval (clipped at 0) per
(rule, checkpoint); each rule against uniform at the last checkpoint; the samples each rule needs to reach
uniform's final mean gap (linear interpolation of the mean-gap curve on the checkpoint grid).

Resumable: one metrics row per finished (rule, seed); a rerun with the same --out skips those.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ugrpo.runs import RunDir
from ugrpo.stats.exact_mse import uniform_mse
from ugrpo.stats.intervals import t_interval, welch_half_width

__all__ = ["AllocSweepConfig", "uniform_group", "run_alloc_sweep", "aggregate_alloc", "samples_to_reach",
           "compare_to_uniform", "sweep_allocation", "allocation_sweep_experiment"]


@dataclass(frozen=True)
class AllocSweepConfig:
    """Resolved settings of ``ugrpo sweep --allocation``."""

    env: str
    budget: int
    """N samples per step, the same for every rule"""
    rules: tuple[str, ...]
    groups: tuple[int, ...]
    """uniform's G: the one given, or the best of these (exact M11 at theta0) dividing N"""
    steps: int
    lr: float
    seeds: int
    checkpoints: tuple[int, ...]
    lr_schedule: str = "constant"
    seed: int = 0
    moments: str = "history"
    """``history`` (the run's own past) or ``exact`` (the current theta's exact moments: the ceiling)"""
    g_min: int = 2
    g_max: int = 64
    prior_a: float = 1.0
    prior_b: float = 1.0
    shrink: float = 4.0

    def __post_init__(self) -> None:
        from ugrpo.envs.algorithm1 import MOMENTS
        from ugrpo.stats.allocation import RULES

        bad = [r for r in self.rules if r not in RULES]
        if bad or not self.rules:
            raise ValueError(f"--allocation: unknown rule(s) {bad}; choose among {list(RULES)}")
        if len(set(self.rules)) != len(self.rules):
            raise ValueError(f"--allocation lists a rule twice: {list(self.rules)}")
        if self.moments not in MOMENTS:
            raise ValueError(f"--allocation-moments {self.moments!r}: choose 'history' (false) or 'exact' (true)")
        if self.g_min < 2 or self.g_max < self.g_min:
            raise ValueError(f"--g-min {self.g_min} / --g-max {self.g_max}: need 2 <= g_min <= g_max")
        if self.steps < 1 or self.seeds < 1 or not self.lr > 0:
            raise ValueError(f"need --steps >= 1, --seeds >= 1 and --lr > 0; got {self.steps}, {self.seeds}, {self.lr}")
        cps = list(self.checkpoints)
        if not cps or cps != sorted(set(cps)) or cps[0] < 0 or cps[-1] > self.steps:
            raise ValueError(f"--checkpoints {cps}: need strictly increasing step counts in 0..steps={self.steps}")
        divisors = [G for G in self.groups if self.budget % G == 0 and G >= 2]
        if not divisors:
            raise ValueError(f"--groups {list(self.groups)}: none is >= 2 and divides --budget {self.budget}; "
                             "uniform needs such a G")


def uniform_group(env, cfg: AllocSweepConfig) -> tuple[int, int]:
    """(G_u, B): the G given, or the best single G among --groups dividing N by the exact M11 at theta0."""
    N = cfg.budget
    cands = [G for G in cfg.groups if N % G == 0 and G >= 2]
    if len(cfg.groups) == 1:
        G = cands[0]
    else:
        pm = env.exact(env.theta0, sigma=False).policy_moments
        G = min(cands, key=lambda G: uniform_mse(pm.c1, pm.c2, pm.c3, N, G))
    B = N // G
    if N < B * cfg.g_min:
        raise ValueError(f"budget N = {N} is below B * g_min = {B} * {cfg.g_min} (B = N / G_u, G_u = {G}); "
                         "raise --budget or lower --g-min")
    if N > B * cfg.g_max:
        raise ValueError(f"budget N = {N} exceeds B * g_max = {B} * {cfg.g_max} (B = N / G_u, G_u = {G}); "
                         "raise --g-max")
    return G, B


def run_alloc_sweep(env, cfg: AllocSweepConfig, run: RunDir, *, progress: bool = True) -> tuple[list[dict], int]:
    """Every missing (rule, seed); returns (all per-run rows in rule/seed order, B)."""
    from ugrpo.envs.algorithm1 import HistoryPrior, run_algorithm1_alloc

    G_u, B = uniform_group(env, cfg)
    seeds = range(cfg.seed, cfg.seed + cfg.seeds)
    done = {(r["rule"], r["seed"]): r for r in run.metrics() if "rule" in r}
    prior = HistoryPrior(cfg.prior_a, cfg.prior_b, cfg.shrink)
    for rule in cfg.rules:
        todo = [s for s in seeds if (rule, s) not in done]
        if not todo:
            continue
        if progress:
            print(f"  {rule}: {len(todo)} seeds x {cfg.steps} steps (N={cfg.budget}, B={B})", flush=True)
        res = run_algorithm1_alloc(env, rule=rule, N=cfg.budget, B=B, steps=cfg.steps, lr=cfg.lr, seeds=todo,
                                   moments=cfg.moments, g_min=cfg.g_min, g_max=cfg.g_max,
                                   lr_schedule=cfg.lr_schedule, checkpoints=cfg.checkpoints, prior=prior)
        for i, s in enumerate(todo):
            row = {"rule": rule, "seed": s, "budget": cfg.budget, "B": B, "G_uniform": G_u,
                   "checkpoints": list(res.checkpoints), "gaps": res.gaps[i].tolist(),
                   "frac_zero_std": float(res.frac_zero_std[i]),
                   "frac_samples_zero_std": float(res.frac_samples_zero_std[i]),
                   "mean_max_G": float(res.mean_max_G[i])}
            run.append_metrics(row)
            done[(rule, s)] = row
    return [done[(r, s)] for r in cfg.rules for s in seeds], B


def aggregate_alloc(runs: Sequence[dict], N: int) -> list[dict[str, Any]]:
    """Mean gap with a 95% Student-t interval (clipped at 0: a gap is >= 0) per (rule, checkpoint)."""
    rows = []
    for rule in dict.fromkeys(r["rule"] for r in runs):
        rs = [r for r in runs if r["rule"] == rule]
        for j, c in enumerate(rs[0]["checkpoints"]):
            st = t_interval([r["gaps"][j] for r in rs])
            rows.append({"rule": rule, "checkpoint": c, "samples": c * N, "gap_mean": st["mean"], "se": st["se"],
                         "ci_low": None if st["ci_low"] is None else max(0.0, st["ci_low"]),
                         "ci_high": st["ci_high"], "seeds": len(rs),
                         "frac_samples_zero_std": sum(r["frac_samples_zero_std"] for r in rs) / len(rs)})
    return rows


def samples_to_reach(curve: Sequence[tuple[float, float]], target: float) -> float | None:
    """First samples s at which the piecewise-linear (samples, mean gap) curve reaches ``target`` (None: never).

    >>> samples_to_reach([(0, 1.0), (100, 0.5), (200, 0.2)], 0.35)
    150.0
    """
    for (s0, g0), (s1, g1) in zip(curve, curve[1:]):
        if g0 <= target:
            return float(s0)
        if g1 <= target:
            return float(s0 + (s1 - s0) * (g0 - target) / (g0 - g1))
    return float(curve[-1][0]) if curve and curve[-1][1] <= target else None


def compare_to_uniform(rows: Sequence[dict]) -> list[dict[str, Any]]:
    """Each rule vs uniform: last-checkpoint gaps (intervals overlap -> 'cannot tell') and samples to reach."""
    if not any(r["rule"] == "uniform" for r in rows):
        return []
    last = max(r["checkpoint"] for r in rows)
    u = next(r for r in rows if r["rule"] == "uniform" and r["checkpoint"] == last)
    out = []
    for rule in dict.fromkeys(r["rule"] for r in rows):
        if rule == "uniform":
            continue
        a = next(r for r in rows if r["rule"] == rule and r["checkpoint"] == last)
        curve = [(r["samples"], r["gap_mean"]) for r in rows if r["rule"] == rule]
        need = samples_to_reach(curve, u["gap_mean"])
        diff = a["gap_mean"] - u["gap_mean"]
        if None in (a["ci_low"], u["ci_low"]):
            verdict = "cannot tell (one seed: no interval)"
        elif a["ci_high"] < u["ci_low"]:
            verdict = "lower gap than uniform"
        elif a["ci_low"] > u["ci_high"]:
            verdict = "higher gap than uniform"
        else:
            verdict = "cannot tell (95% intervals overlap)"
        half = welch_half_width(a["se"], u["se"], a["seeds"], u["seeds"])
        out.append({"rule": rule, "checkpoint": last, "gap": a["gap_mean"], "gap_uniform": u["gap_mean"],
                    "ratio": a["gap_mean"] / u["gap_mean"] if u["gap_mean"] > 0 else None,
                    "diff": diff, "diff_ci_low": None if half is None else diff - half,
                    "diff_ci_high": None if half is None else diff + half, "verdict": verdict,
                    "samples_to_uniform_final": need, "samples_uniform_final": u["samples"],
                    "samples_ratio": None if need is None else need / u["samples"]})
    return out


def sweep_allocation(env, cfg: AllocSweepConfig, out: str, argv: Sequence[str] | None = None, *,
                     progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the sweep into ``out``; write results.json, allocation_sweep.png and report.md."""
    from ugrpo.report.alloc_sweep_report import write_alloc_sweep_outputs

    rd = RunDir(out)
    old = rd.read_config("sweep")  # a folder of another command is refused as such
    new = json.loads(json.dumps({**asdict(cfg), "command": "sweep", "mode": "allocation"}))  # tuples as lists
    if old is not None:
        keys = [k for k in new if k not in ("seeds", "rules") and old.get(k) != new[k]]
        if keys:
            raise ValueError(f"--out {out} holds a run with different settings ({', '.join(keys)}); "
                             "use a new --out or the same settings to resume")
    rd.write_config({**new, "argv": list(argv) if argv else None})
    runs, B = run_alloc_sweep(env, cfg, rd, progress=progress)
    rows = aggregate_alloc(runs, cfg.budget)
    results = {"config": asdict(cfg), "B": B, "G_uniform": runs[0]["G_uniform"], "env_name": env.name or cfg.env,
               "j_star_exact": bool(env.j_star_exact), "rows": rows, "versus_uniform": compare_to_uniform(rows),
               "runs": len(runs)}
    write_alloc_sweep_outputs(rd, results, argv)
    return results


def allocation_sweep_experiment(cfg: AllocSweepConfig, out: str, *, argv: Sequence[str] | None = None,
                                progress: bool = True) -> dict[str, Any]:
    """``ugrpo sweep --allocation``: the env ``cfg.env``, its budget checked before any work, then
    :func:`sweep_allocation` into the run folder ``out``; returns the results."""
    from ugrpo.experiments.common import resolve_env

    env = resolve_env(cfg.env)
    uniform_group(env, cfg)  # budget errors before any work
    return sweep_allocation(env, cfg, out, argv, progress=progress)
