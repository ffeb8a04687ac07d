"""``ugrpo sweep``: fixed-budget group-size sweep with Algorithm 1 (paper Fig. 5).

Example: ``ugrpo sweep --env builtin:demo --budget 64,256 --groups 2,4,8,16,32,64 --steps 200
--lr 2,8 --seeds 8 --checkpoints 50,100,200 --out runs/sweep``. Rerunning with the same --out
resumes: finished (N, G, seed) rows in metrics.jsonl are skipped.

On a language model: ``ugrpo sweep --config examples/arith-tiny.yaml --budget 128 --groups 4,8,16,32
--seeds 2 --steps 50 --workers 2 --out runs/lm-sweep [--set optim.lr=1e-4] [--plan-pilot 32,16]``
trains one run per (N, G, seed) with ``ugrpo train`` (docs/lm-sweep.md). ``--env`` and ``--config``
are mutually exclusive. Parsing only; the logic is :mod:`ugrpo.experiments.sweep` (env) and
:mod:`ugrpo.experiments.lm_sweep` (config).
"""

from __future__ import annotations

import argparse

from ugrpo.experiments.common import (command_line, default_workers, guarded, parse_float_list, parse_int_list,
                                      resolve_env)
from ugrpo.runs import RunDir


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", default=None, help="env JSON (from `ugrpo make-env`) or builtin:demo (the default "
                   "without --config)")
    p.add_argument("--config", default=None, help="a training YAML (as for `ugrpo train`): sweep a language model")
    p.add_argument("--workers", type=int, default=None,
                   help="with --config: parallel training runs (process pool; default: the CPU cores available; "
                   "1 when a GPU is visible)")
    p.add_argument("--ray", action="store_true",
                   help="with --config: one Ray task per run (pip install 'ugrpo[ray]'); a local Ray of --workers CPUs "
                   "unless --ray-address or $RAY_ADDRESS names a cluster")
    p.add_argument("--ray-address", default=None, help="with --ray: the cluster to join (auto, ray://HOST:10001, ...)")
    p.add_argument("--ray-cpus", type=float, default=None, help="with --ray: CPUs per run (default 1; also its "
                   "torch threads)")
    p.add_argument("--ray-gpus", type=float, default=None, help="with --ray: GPUs per run (default 0)")
    p.add_argument("--set", action="append", default=None, metavar="KEY=VALUE",
                   help="with --config: override a config field, repeatable (e.g. --set optim.lr=1e-4)")
    p.add_argument("--plan-pilot", default=None, metavar="B0,G0",
                   help="with --config: also run the planner (Thm 7) from a B0 x G0 pilot at the initial model")
    p.add_argument("--budget", required=True, help="samples per step N = B*G; comma-separated for several")
    p.add_argument("--groups", default="2,4,8,16,32,64", help="group sizes G; each must divide every budget")
    p.add_argument("--steps", type=int, default=None,
                   help="SGD steps of Algorithm 1 (default 200); with --config: steps per run (default: the config's)")
    p.add_argument("--lr", default=None,
                   help="learning rate (constant) or beta (inverse: lr/i); one value, or one per budget "
                   "(comma-separated); default 1.0")
    p.add_argument("--lr-schedule", default=None, choices=["constant", "inverse"], help="default constant")
    p.add_argument("--baseline", default=None, choices=["vanilla", "grpo", "grpo_mean", "oracle"], help="default grpo")
    p.add_argument("--seeds", type=int, default=5, help="independent runs per (N, G)")
    p.add_argument("--seed", type=int, default=0, help="first seed (runs use seed..seed+seeds-1)")
    p.add_argument("--checkpoints", default=None,
                   help="steps at which the gap is recorded, comma-separated (default: steps/4, steps/2, 3 steps/4, steps)")
    p.add_argument("--out", required=True, help="run folder (resumed if it holds a sweep with the same settings)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--allocation", default=None, metavar="RULE[,RULE...]", help="per-prompt G_b rules "
                   "(uniform,vip,knapsack,ustat) at equal N: gap vs samples per rule (docs/math.md M44)")
    p.add_argument("--allocation-moments", default=None, help="with --allocation: true = exact per-prompt "
                   "moments at the current theta (the ceiling); false (default) = the run's own history")
    p.add_argument("--g-min", type=int, default=None, help="with --allocation: smallest G_b (default 2)")
    p.add_argument("--g-max", type=int, default=None, help="with --allocation: largest G_b (default 64)")


def default_checkpoints(steps: int) -> tuple[int, ...]:
    return tuple(sorted({max(1, steps * k // 4) for k in (1, 2, 3, 4)}))


def run(args: argparse.Namespace, argv: list[str] | None = None) -> dict:
    """Run ``ugrpo sweep`` from parsed args; returns results (also used by ``ugrpo demo``)."""
    from ugrpo.experiments.plan import exact_planner
    from ugrpo.experiments.sweep import SweepConfig, aggregate, best_groups, check_resume, run_sweep, write_sweep_outputs

    if args.config is not None:
        return run_lm(args, argv)
    lm_only = [f"--{n.replace('_', '-')}" for n in ("set", "plan_pilot", "ray_address", "ray_cpus", "ray_gpus")
               if getattr(args, n, None) is not None]
    if getattr(args, "ray", False):
        lm_only.append("--ray")
    if getattr(args, "workers", None) is not None:
        lm_only.append("--workers")
    if lm_only:
        raise ValueError(f"{', '.join(lm_only)} need --config (a language-model sweep); drop them for --env")
    args.env = args.env or "builtin:demo"
    args.steps = 200 if args.steps is None else args.steps
    args.lr = "1.0" if args.lr is None else args.lr
    args.lr_schedule = args.lr_schedule or "constant"
    args.baseline = args.baseline or "grpo"
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
        raise KeyboardInterrupt(f"interrupted: finished runs are in {rd.file('metrics.jsonl')}; rerun the same "
                                "command to resume") from None
    rows = aggregate(runs, cps)
    results = {"rows": rows, "best_G": best_groups(rows),
               "planner": exact_planner(env.exact(env.theta0, sigma=False).policy_moments, cfg.budgets, cfg.groups),
               "config": asdict(cfg), "runs": len(runs)}
    write_sweep_outputs(rd, results, argv)
    return results


def ray_options(args: argparse.Namespace):
    """``--ray`` and its ``--ray-*`` flags -> RayOptions (None without --ray; the flags alone are an error)."""
    from ugrpo.experiments.executors import RayOptions, import_ray

    given = [f"--{n.replace('_', '-')}" for n in ("ray_address", "ray_cpus", "ray_gpus")
             if getattr(args, n, None) is not None]
    if not getattr(args, "ray", False):
        if given:
            raise ValueError(f"{', '.join(given)} only apply with --ray; add --ray or drop them")
        return None
    import_ray()  # not installed: say so before any work
    return RayOptions(address=args.ray_address, cpus_per_run=1.0 if args.ray_cpus is None else args.ray_cpus,
                      gpus_per_run=0.0 if args.ray_gpus is None else args.ray_gpus)


def run_lm(args: argparse.Namespace, argv: list[str] | None = None) -> dict:
    """``ugrpo sweep --config``: parse the flags into an ``LMSweepConfig`` and run it."""
    from ugrpo.experiments.lm_sweep import LMSweepConfig, parse_sets, sweep_lm

    env_only = [f"--{n.replace('_', '-')}" for n in ("env", "lr", "lr_schedule", "baseline", "checkpoints")
                if getattr(args, n, None) is not None]
    if env_only:
        raise ValueError(f"--config and {', '.join(env_only)} are mutually exclusive: {', '.join(env_only)} belong "
                         "to the synthetic sweep (--env); set training fields with --set KEY=VALUE instead")
    pilot = None
    if args.plan_pilot is not None:
        parts = [t.strip() for t in str(args.plan_pilot).split(",")]
        if len(parts) != 2 or not all(t.isdigit() for t in parts):
            raise ValueError(f"--plan-pilot {args.plan_pilot!r}: give two numbers B0,G0 (pilot prompts, samples each)")
        pilot = (int(parts[0]), int(parts[1]))
    cfg = LMSweepConfig(config=args.config, ray=ray_options(args),
                        budgets=tuple(parse_int_list(args.budget, name="--budget")),
                        groups=tuple(parse_int_list(args.groups, name="--groups")), seeds=args.seeds, seed=args.seed,
                        steps=args.steps, overrides=parse_sets(args.set),
                        workers=default_workers() if args.workers is None else args.workers, plan_pilot=pilot)
    return sweep_lm(cfg, args.out, argv=argv, progress=not args.no_progress)


def _main_lm(args: argparse.Namespace) -> int:
    from ugrpo.report.markdown import fmt_ci, fmt_values, text_table

    results = run_lm(args, command_line("sweep", args))
    cps, rows = results["checkpoints"], results["rows"]
    metric = "eval_accuracy" if any(r["metric"] == "eval_accuracy" for r in rows) else "eval_pass1"
    print(f"held-out {metric} per checkpoint (mean over seeds, {results.get('interval', '95% t-interval')}):")
    print(text_table(["N", "G", "B", "step", "mean", "95% CI", "seeds"],
                     [[r["budget"], r["G"], r["B"], r["checkpoint"], r["mean"],
                       "-" if r["ci_low"] is None else fmt_ci(r["ci_low"], r["ci_high"]), r["seeds"]]
                      for r in rows if r["metric"] == metric]))
    for b in results["best_G"]:
        if b["metric"] == metric:
            tie = f", tied with {fmt_values(b['tied'])}" if b["tied"] else ""
            print(f"N={b['budget']} step {b['checkpoint']}: empirical best G = {b['G']} ({b['mean']:.3f}{tie})")
    pl = results.get("planner")
    if pl:
        from ugrpo.experiments.lm_sweep import swept_g_star

        print(f"planner G* = {pl['g_star']} (95% CI {pl['g_star_ci']}), among the swept G: {swept_g_star(pl)}")
    if results["config"]["seeds"] == 1:
        print("one seed per (N, G): no intervals; the ordering of G is not evidence of anything")
    acts = [r["action"] for r in results["runs"]]
    print(f"runs: {acts.count('started')} started, {acts.count('resumed')} resumed, {acts.count('skipped')} skipped")
    print(f"wrote {args.out}/results.json, sweep.png, report.md")
    return 0


def _main(args: argparse.Namespace) -> int:
    from ugrpo.report.markdown import text_table

    from ugrpo.experiments.sweep_alloc import main_from_args

    rc = main_from_args(args, command_line("sweep", args))  # None without --allocation
    if rc is not None:
        return rc
    if args.config is not None:
        return _main_lm(args)
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
