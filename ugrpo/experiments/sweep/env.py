"""``ugrpo sweep --env``: Algorithm 1 on an exact env at a fixed budget N, along a G axis or a rules axis.

G axis (:class:`SweepConfig`; paper Fig. 5, Table 2): each G dividing each N and each seed; over seeds the exact gap
with a Student-t 95% interval cut at 0, the best G per (N, checkpoint) and the planner's G* (Theorem 7, exact c1,
c2, c3 at theta0). The paper measures an LLM's test accuracy; here the exact gap, so the only noise is over seeds.

Rules axis (``--allocation RULE[,RULE...]``, :class:`AllocSweepConfig`): per-prompt group sizes at equal budget.
For each rule and seed, :func:`ugrpo.envs.algorithm1.run_algorithm1_alloc` trains from theta0 with the same N
samples per step, the same B prompts per step, steps, lr and schedule; the exact gap J* - J(theta) is recorded
at the checkpoints (samples spent = checkpoint * N). ``uniform`` gives every prompt G_u: the --groups value
when one is given, otherwise the G among --groups (dividing N) with the smallest exact MSE M11 at theta0; the
other rules share its B = N / G_u. Over seeds: mean gap with a Student-t 95% interval (clipped at 0) per
(rule, checkpoint); each rule against uniform at the last checkpoint; the samples each rule needs to reach
uniform's final mean gap (linear interpolation of the mean-gap curve on the checkpoint grid).

Resumable: one metrics row per finished (rule, seed); a rerun with the same --out skips those.
(G axis: per (N, G, seed).) :func:`sweep_experiment` runs either; the configs' defaults are the command's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tqdm.auto import tqdm

from ugrpo.experiments.sweep import DEFAULT_GROUPS, DEFAULT_SEEDS, check_checkpoints, default_checkpoints
from ugrpo.experiments.sweep.reach import bootstrap_ratio, samples_to_reach
from ugrpo.runs import RunDir
from ugrpo.stats.budget import check_divides
from ugrpo.stats.exact_mse import uniform_mse
from ugrpo.stats.intervals import paired_t_interval, paired_verdict, t_interval

__all__ = ["AllocSweepConfig", "uniform_group", "run_alloc_sweep", "aggregate_alloc", "samples_to_reach",
           "compare_to_uniform", "sweep_allocation", "allocation_sweep_experiment"]
__all__ += ["SweepConfig", "run_sweep", "sweep_experiment", "aggregate", "best_groups", "check_resume", "RESUME_KEYS"]

RESUME_KEYS = ("env", "steps", "checkpoints", "baseline", "lr_schedule")
"""Settings that must match for a rerun with the same --out to resume instead of failing."""


@dataclass(frozen=True, kw_only=True)
class SweepConfig:
    """Resolved settings of ``ugrpo sweep --env`` (the G axis); the defaults are the command's."""

    env: str = "builtin:demo"
    budgets: tuple[int, ...]
    """samples per step N = B*G"""
    groups: tuple[int, ...] = DEFAULT_GROUPS
    """group sizes G; each must divide every budget"""
    steps: int = 200
    """SGD steps n of Algorithm 1"""
    lr: tuple[float, ...] = (1.0,)
    """learning rate eta (constant) or beta (lr_schedule='inverse': eta_i = beta/i), one per budget (or one for all)"""
    seeds: int = DEFAULT_SEEDS
    """independent runs K per (N, G)"""
    checkpoints: tuple[int, ...] | None = None
    """steps at which the exact gap is recorded (increasing, in 0..steps; 0 = theta0); None = steps/4, ..., steps"""
    baseline: str = "grpo"
    lr_schedule: str = "constant"
    seed: int = 0
    """first seed; runs use seed, seed+1, ..., seed+K-1"""

    def lr_for(self, budget: int) -> float:
        return self.lr[self.budgets.index(budget)]

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"--steps must be >= 1, got {self.steps}")
        if self.checkpoints is None:
            object.__setattr__(self, "checkpoints", default_checkpoints(self.steps))
        if len(self.lr) == 1:
            object.__setattr__(self, "lr", tuple(self.lr) * len(self.budgets))
        if len(self.lr) != len(self.budgets):
            raise ValueError(f"--lr has {len(self.lr)} values for {len(self.budgets)} budgets; give one lr, "
                             "or one per budget in the order of --budget")
        if not all(v > 0 for v in self.lr):
            raise ValueError(f"--lr must be > 0, got {list(self.lr)}")
        if self.seeds < 1:
            raise ValueError(f"--seeds must be >= 1, got {self.seeds}")
        check_checkpoints(self.checkpoints, self.steps)
        for N in self.budgets:
            for G in self.groups:
                check_divides(N, G)
        if self.baseline in ("grpo", "grpo_mean") and min(self.groups) < 2:
            raise ValueError(f"--groups: baseline {self.baseline!r} needs G >= 2, got G = {min(self.groups)}")


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


def sweep_experiment(cfg: SweepConfig | AllocSweepConfig, out: str, *, argv: Sequence[str] | None = None,
                     progress: bool = True) -> dict[str, Any]:
    """``ugrpo sweep --env``: run (or resume) the sweep ``cfg`` in the run folder ``out``, aggregate the gaps,
    compare with the exact planner (G axis) and write results.json, the plot and report.md; return the results."""
    from ugrpo.experiments.common import resolve_env
    from ugrpo.experiments.plan.env import exact_planner
    from ugrpo.report.sweep import write_report

    if isinstance(cfg, AllocSweepConfig):
        return allocation_sweep_experiment(cfg, out, argv=argv, progress=progress)
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
    results = {"rows": rows, "best_G": best_groups(rows, runs),
               "planner": exact_planner(env.exact(env.theta0, sigma=False).policy_moments, cfg.budgets, cfg.groups),
               "config": asdict(cfg), "runs": len(runs)}
    write_report(rd, results, argv)
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
            cut = st.clip(hi=math.inf)  # a suboptimality gap is >= 0
            rows.append({"budget": N, "G": G, "B": N // G, "checkpoint": c, "gap_mean": st.estimate,
                         "ci_low": cut.ci_low, "ci_high": cut.ci_high, "se": st.se, "seeds": st.n})
    return rows


def best_groups(rows: Sequence[dict[str, Any]], runs: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The empirical best G (smallest mean gap) per (budget, checkpoint); with the runs, the other G whose gap the
    seeds cannot tell from the best's: the 95% paired Student-t interval over seeds of (its gap - the best's)
    contains 0 (``not_distinguishable``; every G's run of a seed starts from that seed's generator, and pairs of
    different seeds are independent, so the paired test is valid whatever the coupling)."""
    best: dict[tuple[int, int], dict] = {}
    for r in rows:
        k = (r["budget"], r["checkpoint"])
        if k not in best or r["gap_mean"] < best[k]["gap_mean"]:
            best[k] = r
    gap = {(r["budget"], r["G"], r["seed"]): dict(zip(r["checkpoints"], r["gaps"])) for r in runs}
    out = []
    for (N, c), r in sorted(best.items()):
        entry = {"budget": N, "checkpoint": c, "G": r["G"], "gap_mean": r["gap_mean"]}
        if runs:
            same = []
            for G in sorted({x["G"] for x in rows if x["budget"] == N} - {r["G"]}):
                seeds = [s for (n, g, s) in gap if n == N and g == G and (N, r["G"], s) in gap]
                d = paired_t_interval([gap[(N, G, s)][c] for s in seeds], [gap[(N, r["G"], s)][c] for s in seeds])
                if d.ci_low is None or d.ci_low <= 0:
                    same.append(G)
            entry["not_distinguishable"] = same
        out.append(entry)
    return out


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


@dataclass(frozen=True, kw_only=True)
class AllocSweepConfig:
    """Resolved settings of ``ugrpo sweep --allocation``."""

    env: str = "builtin:demo"
    budget: int
    """N samples per step, the same for every rule"""
    rules: tuple[str, ...]
    groups: tuple[int, ...] = DEFAULT_GROUPS
    """uniform's G: the one given, or the best of these (exact M11 at theta0) dividing N"""
    steps: int = 200
    lr: float = 1.0
    seeds: int = DEFAULT_SEEDS
    checkpoints: tuple[int, ...] | None = None
    """None = 0 and :func:`default_checkpoints` (the curve starts at theta0)"""
    lr_schedule: str = "constant"
    seed: int = 0
    moments: str = "history"
    """``history`` (the run's own past) or ``exact`` (the current theta's exact moments: the ceiling)"""
    g_min: int = 2
    g_max: int = 64
    safe_tol: float = 0.0
    """``ustat``'s safe rule: tolerance on the posterior quantile of MSE / uniform's (docs/math.md M50)"""
    safe_level: float = 0.9
    """the posterior quantile the safe rule bounds"""
    is_lambda: float = 0.1
    """``uniform-is``/``ustat-is``: the defensive floor q(x) >= lambda / P (docs/math.md M55)"""
    is_guard: bool = True
    """``uniform-is``/``ustat-is`` with history moments: the held-out guard (docs/math.md M78); False: unchecked"""

    def __post_init__(self) -> None:
        from ugrpo.envs.algorithm1 import MOMENTS, Safety
        from ugrpo.stats.prompt_is import check_lambda

        Safety(self.safe_tol, self.safe_level)
        check_lambda(self.is_lambda, "--is-lambda")
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
        if self.checkpoints is None:
            object.__setattr__(self, "checkpoints", (0, *default_checkpoints(self.steps)))
        check_checkpoints(self.checkpoints, self.steps)
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
    from ugrpo.envs.algorithm1 import Safety, run_algorithm1_alloc

    G_u, B = uniform_group(env, cfg)
    seeds = range(cfg.seed, cfg.seed + cfg.seeds)
    done = {(r["rule"], r["seed"]): r for r in run.metrics() if "rule" in r}
    safety = Safety(cfg.safe_tol, cfg.safe_level)
    for rule in cfg.rules:
        todo = [s for s in seeds if (rule, s) not in done]
        if not todo:
            continue
        if progress:
            print(f"  {rule}: {len(todo)} seeds x {cfg.steps} steps (N={cfg.budget}, B={B})", flush=True)
        res = run_algorithm1_alloc(env, rule=rule, N=cfg.budget, B=B, steps=cfg.steps, lr=cfg.lr, seeds=todo,
                                   moments=cfg.moments, g_min=cfg.g_min, g_max=cfg.g_max,
                                   lr_schedule=cfg.lr_schedule, checkpoints=cfg.checkpoints, safety=safety,
                                   is_lambda=cfg.is_lambda, is_guard=cfg.is_guard)
        for i, s in enumerate(todo):
            row = {"rule": rule, "seed": s, "budget": cfg.budget, "B": B, "G_uniform": G_u,
                   "checkpoints": list(res.checkpoints), "gaps": res.gaps[i].tolist(),
                   "frac_zero_std": float(res.frac_zero_std[i]),
                   "frac_samples_zero_std": float(res.frac_samples_zero_std[i]),
                   "mean_max_G": float(res.mean_max_G[i]), "samples": res.samples[i].tolist()}
            run.append_metrics(row)
            done[(rule, s)] = row
    return [done[(r, s)] for r in cfg.rules for s in seeds], B


def aggregate_alloc(runs: Sequence[dict], N: int) -> list[dict[str, Any]]:
    """Mean gap with a 95% Student-t interval (clipped at 0: a gap is >= 0) per (rule, checkpoint), at the seeds'
    mean samples spent (checkpoint x N for a rule that spends N every step; ``ustat-is`` spends N in expectation)."""
    rows = []
    for rule in dict.fromkeys(r["rule"] for r in runs):
        rs = [r for r in runs if r["rule"] == rule]
        for j, c in enumerate(rs[0]["checkpoints"]):
            st = t_interval([r["gaps"][j] for r in rs])
            spent = [r["samples"][j] for r in rs if "samples" in r]
            samples = sum(spent) / len(spent) if len(spent) == len(rs) else c * N
            rows.append({"rule": rule, "checkpoint": c, "samples": samples, "gap_mean": st.estimate, "se": st.se,
                         "ci_low": None if st.ci_low is None else max(0.0, st.ci_low),
                         "ci_high": st.ci_high, "seeds": len(rs),
                         "frac_samples_zero_std": sum(r["frac_samples_zero_std"] for r in rs) / len(rs)})
    return rows


def compare_to_uniform(rows: Sequence[dict], runs: Sequence[dict]) -> list[dict[str, Any]]:
    """Each rule vs uniform at the last checkpoint: the per-seed gap differences with a 95% paired Student-t interval
    (the runs are paired by seed: every rule's run of a seed starts from the same generator seed; the pairs of
    different seeds are independent, so the paired test is valid whatever the coupling), the verdict from it, and
    the samples each rule needs to reach uniform's final mean gap, over the samples uniform's own mean curve needs to
    reach it (the same first crossing on both curves, so a rule identical to uniform has ratio 1 even where uniform's
    curve is not monotone), with a paired percentile bootstrap over seeds (as the language-model sweep's)."""
    if not any(r["rule"] == "uniform" for r in rows):
        return []
    last = max(r["checkpoint"] for r in rows)
    u = next(r for r in rows if r["rule"] == "uniform" and r["checkpoint"] == last)
    final = {(r["rule"], r["seed"]): r["gaps"][-1] for r in runs}
    by = {(r["rule"], r["seed"]): r for r in runs}
    need_u = samples_to_reach([(r["samples"], r["gap_mean"]) for r in rows if r["rule"] == "uniform"], u["gap_mean"])
    out = []
    for rule in dict.fromkeys(r["rule"] for r in rows):
        if rule == "uniform":
            continue
        a = next(r for r in rows if r["rule"] == rule and r["checkpoint"] == last)
        curve = [(r["samples"], r["gap_mean"]) for r in rows if r["rule"] == rule]
        need = samples_to_reach(curve, u["gap_mean"])
        seeds = [s for (k, s) in final if k == rule and ("uniform", s) in final]
        diffs = [final[(rule, s)] - final[("uniform", s)] for s in seeds]
        diff = paired_t_interval([final[(rule, s)] for s in seeds], [final[("uniform", s)] for s in seeds])
        verdict = ("the same as uniform at every seed (every paired difference is 0: the rule gave uniform's sizes)"
                   if seeds and all(d == 0 for d in diffs) else
                   paired_verdict(diff, "lower gap than uniform", "higher gap than uniform"))
        boot = bootstrap_ratio(*_per_seed({"uniform": [by[("uniform", s)] for s in seeds],
                                           rule: [by[(rule, s)] for s in seeds]}, rows))[rule] if seeds else {}
        out.append({"rule": rule, "checkpoint": last, "gap": a["gap_mean"], "gap_uniform": u["gap_mean"],
                    "ratio": a["gap_mean"] / u["gap_mean"] if u["gap_mean"] > 0 else None,
                    "diff": diff.estimate, "diff_ci_low": diff.ci_low, "diff_ci_high": diff.ci_high,
                    "paired_seeds": len(seeds), "verdict": verdict,
                    "samples_to_uniform_final": need, "samples_uniform_final": u["samples"],
                    "uniform_samples_to_reach": need_u,
                    "samples_ratio": None if need is None or not need_u else need / need_u,
                    "samples_ratio_ci_low": boot.get("ci_low"), "samples_ratio_ci_high": boot.get("ci_high")})
    return out


def _per_seed(runs: dict[str, list[dict]], rows: Sequence[dict]):
    """({rule: (S, C) minus the gaps}, {rule: (S, C) samples spent}) of runs listed seed by seed: the arrays of
    :func:`ugrpo.experiments.sweep.reach.bootstrap_ratio`, whose accuracy reaching up is a gap reaching down (a run
    that did not record its samples spent takes its rule's row, checkpoint x N)."""
    import numpy as np

    mean = {k: [r["samples"] for r in rows if r["rule"] == k] for k in runs}
    acc = {k: -np.array([r["gaps"] for r in rs], dtype=float) for k, rs in runs.items()}
    spent = {k: np.array([r.get("samples", mean[k]) for r in rs], dtype=float) for k, rs in runs.items()}
    return acc, spent


def sweep_allocation(env, cfg: AllocSweepConfig, out: str, argv: Sequence[str] | None = None, *,
                     progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the sweep into ``out``; write results.json, allocation_sweep.png and report.md."""
    from ugrpo.report.sweep import write_report

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
               "j_star_exact": bool(env.j_star_exact), "rows": rows, "versus_uniform": compare_to_uniform(rows, runs),
               "runs": len(runs)}
    write_report(rd, results, argv)
    return results


def allocation_sweep_experiment(cfg: AllocSweepConfig, out: str, *, argv: Sequence[str] | None = None,
                                progress: bool = True) -> dict[str, Any]:
    """``ugrpo sweep --allocation``: the env ``cfg.env``, its budget checked before any work, then
    :func:`sweep_allocation` into the run folder ``out``; returns the results."""
    from ugrpo.experiments.common import resolve_env

    env = resolve_env(cfg.env)
    uniform_group(env, cfg)  # budget errors before any work
    return sweep_allocation(env, cfg, out, argv, progress=progress)
