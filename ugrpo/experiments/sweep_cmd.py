"""``ugrpo sweep``: fixed-budget group-size sweep with Algorithm 1 (paper Fig. 5).

Example: ``ugrpo sweep --env builtin:demo --budget 64,256 --groups 2,4,8,16,32,64 --steps 200
--lr 2,8 --seeds 8 --checkpoints 50,100,200 --out runs/sweep``. Rerunning with the same --out
resumes: finished (N, G, seed) rows in metrics.jsonl are skipped.
Parsing only; the logic is :mod:`ugrpo.experiments.sweep`.
"""

from __future__ import annotations

import argparse
import sys

from ugrpo.experiments.common import command_line, guarded, parse_float_list, parse_int_list, resolve_env
from ugrpo.runs import RunDir


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", default="builtin:demo", help="env JSON (from `ugrpo make-env`) or builtin:demo")
    p.add_argument("--budget", required=True, help="samples per step N = B*G; comma-separated for several")
    p.add_argument("--groups", default="2,4,8,16,32,64", help="group sizes G; each must divide every budget")
    p.add_argument("--steps", type=int, default=200, help="SGD steps of Algorithm 1")
    p.add_argument("--lr", default="1.0",
                   help="learning rate (constant) or beta (inverse: lr/i); one value, or one per budget (comma-separated)")
    p.add_argument("--lr-schedule", default="constant", choices=["constant", "inverse"])
    p.add_argument("--baseline", default="grpo", choices=["vanilla", "grpo", "grpo_mean", "oracle"])
    p.add_argument("--seeds", type=int, default=5, help="independent runs per (N, G)")
    p.add_argument("--seed", type=int, default=0, help="first seed (runs use seed..seed+seeds-1)")
    p.add_argument("--checkpoints", default=None,
                   help="steps at which the gap is recorded, comma-separated (default: steps/4, steps/2, 3 steps/4, steps)")
    p.add_argument("--out", required=True, help="run folder (resumed if it holds a sweep with the same settings)")
    p.add_argument("--no-progress", action="store_true")


def default_checkpoints(steps: int) -> tuple[int, ...]:
    return tuple(sorted({max(1, steps * k // 4) for k in (1, 2, 3, 4)}))


def run(args: argparse.Namespace, argv: list[str] | None = None) -> dict:
    """Run ``ugrpo sweep`` from parsed args; returns results (also used by ``ugrpo demo``)."""
    from ugrpo.experiments.plan import exact_planner
    from ugrpo.experiments.sweep import SweepConfig, aggregate, best_groups, check_resume, run_sweep, write_sweep_outputs

    env = resolve_env(args.env)
    cps = (default_checkpoints(args.steps) if args.checkpoints is None
           else tuple(parse_int_list(args.checkpoints, name="--checkpoints", minimum=0)))
    budgets = tuple(parse_int_list(args.budget, name="--budget"))
    lrs = tuple(parse_float_list(args.lr, name="--lr"))
    lrs = lrs * len(budgets) if len(lrs) == 1 else lrs
    cfg = SweepConfig(env=args.env, budgets=budgets,
                      groups=tuple(parse_int_list(args.groups, name="--groups")), steps=args.steps, lr=lrs,
                      seeds=args.seeds, checkpoints=cps, baseline=args.baseline, lr_schedule=args.lr_schedule,
                      seed=args.seed)
    rd = RunDir(args.out)
    old = rd.read_config()
    check_resume(old, cfg, args.out)
    from dataclasses import asdict

    rd.write_config({**asdict(cfg), "command": "sweep", "argv": argv})
    try:
        runs = run_sweep(env, cfg, rd, progress=not args.no_progress)
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished runs are in {rd.file('metrics.jsonl')}; rerun the same command to resume",
              file=sys.stderr)
        raise
    rows = aggregate(runs, cps)
    results = {"rows": rows, "best_G": best_groups(rows),
               "planner": exact_planner(env.exact(env.theta0, sigma=False).policy_moments, cfg.budgets, cfg.groups),
               "config": asdict(cfg), "runs": len(runs)}
    write_sweep_outputs(rd, results, argv)
    return results


def _main(args: argparse.Namespace) -> int:
    from ugrpo.report.markdown import text_table

    results = run(args, command_line("sweep", args))
    last = max(r["checkpoint"] for r in results["rows"])
    rows = [[r["budget"], r["G"], r["B"], r["gap_mean"],
             "-" if r["ci_low"] is None else f"[{r['ci_low']:.4g}, {r['ci_high']:.4g}]"]
            for r in results["rows"] if r["checkpoint"] == last]
    print(f"gap at step {last} (mean over seeds, 95% CI):")
    print(text_table(["N", "G", "B", "gap", "95% CI"], rows))
    best = {b["budget"]: b["G"] for b in results["best_G"] if b["checkpoint"] == last}
    star = {p["budget"]: p["g_star"] for p in results["planner"]["per_budget"]}
    for N in sorted(best):
        print(f"N={N}: empirical best G = {best[N]}, planner G* = {star.get(N)}")
    print(f"wrote {args.out}/results.json, sweep.png, report.md")
    return 0


def main(args: argparse.Namespace) -> int:
    return guarded(_main, args)
