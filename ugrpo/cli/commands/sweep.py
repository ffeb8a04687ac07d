"""``ugrpo sweep``: fixed-budget group-size sweep with Algorithm 1 (paper Fig. 5).

Example: ``ugrpo sweep --env builtin:demo --budget 64,256 --groups 2,4,8,16,32,64 --steps 200
--lr 2,8 --seeds 8 --checkpoints 50,100,200 --out runs/sweep``. Rerunning with the same --out
resumes: finished (N, G, seed) rows in metrics.jsonl are skipped.

On a language model: ``ugrpo sweep --config examples/arith-tiny.yaml --budget 128 --groups 4,8,16,32
--seeds 2 --steps 50 --workers 2 --out runs/lm-sweep [--optim.lr 1e-4] [--plan-pilot 32,16]``
trains one run per (N, G, seed) with ``ugrpo train`` (docs/lm-sweep.md). ``--env`` and ``--config``
are mutually exclusive.

Four modes, each one config and one library call (the flags' defaults are the config's field defaults,
:func:`ugrpo.cli.options.config_default`, which ``--help`` shows):

- ``--env`` (G axis): ``--budget``, ``--groups``, ``--steps``, ``--lr``, ``--lr-schedule``, ``--baseline``,
  ``--seeds``, ``--seed``, ``--checkpoints`` -> :class:`~ugrpo.experiments.sweep.env.SweepConfig`;
- ``--env --allocation RULES`` (rules axis): one ``--budget`` and ``--lr``, plus ``--allocation-moments``,
  ``--g-min``, ``--g-max`` -> :class:`~ugrpo.experiments.sweep.env.AllocSweepConfig`; both run by
  :func:`ugrpo.experiments.sweep.env.sweep_experiment`;
- ``--config`` (G axis): ``--budget``, ``--groups``, ``--seeds``, ``--seed``, ``--steps``, ``--workers``,
  ``--plan-pilot``, ``--ray*``, ``--set`` and the ``--section.field`` overrides ->
  :class:`~ugrpo.experiments.sweep.lm.LMSweepConfig` and :func:`ugrpo.experiments.sweep.lm.sweep_lm`;
- ``--config --allocation RULES`` (rules axis): the same with ``LMSweepConfig.rules``.

A flag of another mode is an error naming it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ugrpo.cli.options import add_override_flags, config_default, given, parse_bool, parse_overrides, ray_options
from ugrpo.experiments.common import check_env_spec, command_line, parse_float_list, parse_int_list
from ugrpo.stats.estimators import ESTIMATORS


def configure(p: argparse.ArgumentParser) -> None:
    from ugrpo.experiments.sweep import SWEEP_KEYS
    from ugrpo.experiments.sweep.env import AllocSweepConfig, SweepConfig
    from ugrpo.experiments.sweep.executors import RayOptions

    def env(name):
        return config_default(SweepConfig, name)

    def alloc(name):
        return config_default(AllocSweepConfig, name)

    p.add_argument("--env", default=None, help=f"env JSON (from `ugrpo make-env`) or {env('env')} (the default "
                   "without --config)")
    p.add_argument("--config", default=None, help="a training YAML (as for `ugrpo train`): sweep a language model")
    p.add_argument("--workers", type=int, default=None,
                   help="with --config: parallel training runs (process pool; default: the CPU cores available; "
                   "1 when a GPU is visible)")
    p.add_argument("--ray", action="store_true",
                   help="with --config: one Ray task per run (pip install 'ugrpo[ray]'); a local Ray of --workers CPUs "
                   "unless --ray-address or $RAY_ADDRESS names a cluster")
    p.add_argument("--ray-address", default=None, help="with --ray: the cluster to join (auto, ray://HOST:10001, ...)")
    p.add_argument("--ray-cpus", type=float, default=None, help="with --ray: CPUs per run (default "
                   f"{config_default(RayOptions, 'cpus_per_run'):g}; also its torch threads)")
    p.add_argument("--ray-gpus", type=float, default=None,
                   help=f"with --ray: GPUs per run (default {config_default(RayOptions, 'gpus_per_run'):g})")
    p.add_argument("--set", action="append", default=None, metavar="KEY=VALUE",
                   help="with --config: override a config field, repeatable (e.g. --set optim.lr=1e-4); the same as "
                   "--optim.lr 1e-4")
    p.add_argument("--plan-pilot", default=None, metavar="B0,G0",
                   help="with --config: also run the planner (Thm 7) from a B0 x G0 pilot at the initial model")
    p.add_argument("--budget", required=True, help="samples per step N = B*G; comma-separated for several")
    p.add_argument("--groups", default=",".join(map(str, env("groups"))),
                   help="group sizes G; each must divide every budget")
    p.add_argument("--steps", type=int, default=None,
                   help=f"SGD steps of Algorithm 1 (default {env('steps')}); with --config: steps per run (default: "
                   "the config's)")
    p.add_argument("--lr", default=None,
                   help="learning rate (constant) or beta (inverse: lr/i); one value, or one per budget "
                   f"(comma-separated); default {env('lr')[0]}")
    p.add_argument("--lr-schedule", default=None, choices=["constant", "inverse"],
                   help=f"default {env('lr_schedule')}")
    p.add_argument("--baseline", default=None, choices=ESTIMATORS, help=f"default {env('baseline')}")
    p.add_argument("--seeds", type=int, default=env("seeds"), help="independent runs per (N, G)")
    p.add_argument("--seed", type=int, default=env("seed"), help="first seed (runs use seed..seed+seeds-1)")
    p.add_argument("--checkpoints", default=None,
                   help="steps at which the gap is recorded, comma-separated (default: steps/4, steps/2, 3 steps/4, "
                   "steps)")
    p.add_argument("--out", required=True, help="run folder (resumed if it holds a sweep with the same settings)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    from ugrpo.stats.allocation import RULES
    from ugrpo.train.config import ALLOCATION_RULES

    p.add_argument("--allocation", default=None, metavar="RULE[,RULE...]", help="per-prompt G_b rules at equal N. "
                   f"With --env: {','.join(RULES)}, exact gap vs samples per rule (docs/math.md M44); with "
                   f"--config: {','.join(ALLOCATION_RULES)}, one training run per (N, G, rule, seed) with "
                   "allocation.rule set, held-out accuracy vs samples spent (docs/lm-sweep.md)")
    moments = {"history": "false", "exact": "true"}[alloc("moments")]
    p.add_argument("--allocation-moments", default=None, help="with --allocation: true = exact per-prompt "
                   f"moments at the current theta (the ceiling); {moments} (default) = the run's own history")
    p.add_argument("--g-min", type=int, default=None,
                   help=f"with --allocation: smallest G_b (default {alloc('g_min')})")
    p.add_argument("--g-max", type=int, default=None,
                   help=f"with --allocation: largest G_b (default {alloc('g_max')})")
    p.add_argument("--is-lambda", type=float, default=None,
                   help=f"with --env --allocation uniform-is/ustat-is: the defensive floor q(x) >= lambda/P, in (0, 1] "
                        f"(default {alloc('is_lambda')}; with --config: --allocation.is-lambda)")
    p.add_argument("--is-guard", default=None, help="with --env --allocation uniform-is/ustat-is and history moments: "
                   "true (default) = the held-out guard picks the law (docs/math.md M78; sizes >= 3), false = the "
                   "posterior's law unchecked (with --config: --allocation.is-guard)")
    # the sweep sets SWEEP_KEYS itself (--budget, --groups, --seed, --steps); --baseline is the synthetic sweep's
    add_override_flags(p, "with --config: training-config overrides", skip=(*SWEEP_KEYS, "baseline"))


def _env_config(args: argparse.Namespace):
    """The flags of a synthetic sweep -> ``SweepConfig`` (flags not given: its defaults)."""
    from ugrpo.experiments.sweep.env import SweepConfig

    lm_only = [f"--{n.replace('_', '-')}" for n in ("set", "plan_pilot", "ray_address", "ray_cpus", "ray_gpus")
               if getattr(args, n, None) is not None]
    if args.ray:
        lm_only.append("--ray")
    if args.workers is not None:
        lm_only.append("--workers")
    if args.overrides:
        lm_only.append(args.overrides[0])
    if lm_only:
        raise ValueError(f"{', '.join(lm_only)} need --config (a language-model sweep); drop them for --env")
    opt = given(args, steps="steps", baseline="baseline", lr_schedule="lr_schedule")
    if args.env:
        opt["env"] = args.env
    if args.checkpoints is not None:
        opt["checkpoints"] = tuple(parse_int_list(args.checkpoints, name="--checkpoints", minimum=0))
    if args.lr is not None:
        opt["lr"] = tuple(parse_float_list(args.lr, name="--lr"))
    return SweepConfig(budgets=tuple(parse_int_list(args.budget, name="--budget")),
                       groups=tuple(parse_int_list(args.groups, name="--groups")), seeds=args.seeds, seed=args.seed,
                       **opt)


def _lm_config(args: argparse.Namespace):
    """The flags of a language-model sweep -> ``LMSweepConfig`` (training-config overrides: ``--section.field
    VALUE``, or the older ``--set section.field=VALUE``)."""
    from ugrpo.experiments.sweep.lm import LMSweepConfig, parse_sets

    env_only = [f"--{n.replace('_', '-')}" for n in ("env", "lr", "lr_schedule", "baseline", "checkpoints")
                if getattr(args, n, None) is not None]
    if env_only:
        raise ValueError(f"--config and {', '.join(env_only)} are mutually exclusive: {', '.join(env_only)} belong "
                         "to the synthetic sweep (--env); set training fields with --optim.lr VALUE (or --set "
                         "KEY=VALUE) instead")
    pilot = None
    if args.plan_pilot is not None:
        parts = [t.strip() for t in str(args.plan_pilot).split(",")]
        if len(parts) != 2 or not all(t.isdigit() for t in parts):
            raise ValueError(f"--plan-pilot {args.plan_pilot!r}: give two numbers B0,G0 (pilot prompts, samples each)")
        pilot = (int(parts[0]), int(parts[1]))
    overrides = parse_sets(args.set) + tuple(parse_overrides(args.overrides))
    rules = () if args.allocation is None else tuple(r.strip() for r in str(args.allocation).split(",") if r.strip())
    if args.allocation is not None and not rules:
        raise ValueError(f"--allocation {args.allocation!r}: give one or more rules, e.g. --allocation uniform,ustat")
    return LMSweepConfig(config=args.config, ray=ray_options(args), rules=rules,
                         budgets=tuple(parse_int_list(args.budget, name="--budget")),
                         groups=tuple(parse_int_list(args.groups, name="--groups")), seeds=args.seeds,
                         seed=args.seed, steps=args.steps, overrides=overrides, plan_pilot=pilot,
                         **given(args, workers="workers"))


def _main_lm(args: argparse.Namespace) -> int:
    from ugrpo.experiments.sweep.lm import sweep_lm
    from ugrpo.report.markdown import fmt_ci, fmt_values, text_table
    from ugrpo.report.sweep import scoring_errors_text

    results = sweep_lm(_lm_config(args), args.out, argv=command_line("sweep", args), progress=not args.no_progress)
    if faults := scoring_errors_text(results, str(Path(args.out) / "runs")):
        print(f"warning: {faults}", file=sys.stderr, flush=True)
    if results.get("allocation"):
        return _print_alloc_lm(args, results)
    rows = results["rows"]
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
        from ugrpo.report.sweep import swept_g_star

        print(f"planner G* = {pl['g_star']} (95% CI {pl['g_star_ci']}), among the swept G: {swept_g_star(pl)}")
    if results["config"]["seeds"] == 1:
        print("one seed per (N, G): no intervals; the ordering of G is not evidence of anything")
    acts = [r["action"] for r in results["runs"]]
    print(f"runs: {acts.count('started')} started, {acts.count('resumed')} resumed, {acts.count('skipped')} skipped")
    print(f"wrote {args.out}/results.json, sweep.png, report.md")
    return 0


def _print_alloc_lm(args: argparse.Namespace, results: dict) -> int:
    """Console summary of ``sweep --config --allocation``: per (N, G) and metric the rule comparison table."""
    from ugrpo.report.markdown import text_table
    from ugrpo.report.sweep_alloc import allocation_reading, comparison_table

    alloc = results["allocation"]
    for e in alloc["cells"]:
        if e["comparison"]:
            print(f"N={e['budget']}, G={e['G']}, {e['metric']} (mean over seeds, {alloc['interval']}):")
            head, rows = comparison_table(e)
            print(text_table(head[:6], [r[:6] for r in rows]))
    for s in allocation_reading(alloc):
        print(s)
    acts = [r["action"] for r in results["runs"]]
    print(f"runs: {acts.count('started')} started, {acts.count('resumed')} resumed, {acts.count('skipped')} skipped")
    plots = [p for p in ("allocation.png", "allocation_pass1.png") if (Path(args.out) / p).exists()]
    print(f"wrote {args.out}/results.json, {', '.join(plots)}, report.md")
    return 0


def main(args: argparse.Namespace) -> int:
    if getattr(args, "env", None) is not None:
        check_env_spec(args.env)  # a missing file: said before torch is imported
    from ugrpo.experiments.sweep.env import sweep_experiment
    from ugrpo.report.markdown import text_table

    if args.allocation is not None and args.config is None:
        return _main_alloc(args)
    own = [f"--{n.replace('_', '-')}" for n in ("allocation_moments", "g_min", "g_max", "is_lambda", "is_guard")
           if getattr(args, n, None) is not None]
    if own and args.config is not None:
        raise ValueError(f"{', '.join(own)} belong to the exact-env allocation sweep (--env); with --config set the "
                         "trainer's allocation fields instead (--allocation.FIELD VALUE, listed by --help)")
    if own:
        raise ValueError(f"{', '.join(own)} only apply with --allocation RULE[,RULE...]; add it or drop them")
    if args.config is not None:
        return _main_lm(args)
    results = sweep_experiment(_env_config(args), args.out, argv=command_line("sweep", args),
                               progress=not args.no_progress)
    last = max(r["checkpoint"] for r in results["rows"])
    rows = [[r["budget"], r["G"], r["B"], r["gap_mean"],
             "-" if r["ci_low"] is None else f"[{r['ci_low']:.4g}, {r['ci_high']:.4g}]"]
            for r in results["rows"] if r["checkpoint"] == last]
    print(f"gap at step {last} (mean over seeds, 95% CI):")
    print(text_table(["N", "G", "B", "gap", "95% CI"], rows))
    best = {b["budget"]: b for b in results["best_G"] if b["checkpoint"] == last}
    star = {p["budget"]: p["g_star"] for p in results["planner"]["per_budget"]}
    for N in sorted(best):
        same = best[N].get("not_distinguishable")
        tie = ("" if same is None else f" (not told apart from G = {', '.join(map(str, same))} by a paired interval "
               "over seeds)" if same else " (every other G's gap is above it, paired by seed)")
        print(f"N={N}: empirical best G = {best[N]['G']}{tie}, planner G* = {star.get(N)}")
    print(f"wrote {args.out}/results.json, sweep.png, report.md")
    return 0


def _alloc_config(args: argparse.Namespace):
    """The flags of ``sweep --allocation`` -> ``AllocSweepConfig`` (an exact env, one budget, the LOO baseline;
    flags not given: its defaults)."""
    from ugrpo.experiments.sweep.env import AllocSweepConfig

    other = [f"--{n.replace('_', '-')}" for n in ("config", "set", "plan_pilot", "workers", "ray_address")
             if getattr(args, n, None) is not None] + (["--ray"] if args.ray else []) + list(args.overrides[:1])
    if other:
        raise ValueError(f"--allocation runs on an exact env (--env); drop {', '.join(other)}")
    if (args.baseline or "grpo") != "grpo":
        raise ValueError(f"--allocation uses the LOO baseline (grpo), unbiased for any G_b >= 2 (docs/math.md M32); "
                         f"drop --baseline {args.baseline}")
    budgets = parse_int_list(args.budget, name="--budget")
    if len(budgets) != 1:
        raise ValueError(f"--allocation compares rules at one budget; give one --budget, got {budgets}")
    opt = given(args, steps="steps", lr_schedule="lr_schedule", g_min="g_min", g_max="g_max", is_lambda="is_lambda")
    if args.env:
        opt["env"] = args.env
    if args.is_guard is not None:
        opt["is_guard"] = parse_bool(args.is_guard, "--is-guard")
    if args.allocation_moments is not None:
        opt["moments"] = {"false": "history", "true": "exact"}.get(str(args.allocation_moments).lower())
        if opt["moments"] is None:
            raise ValueError(f"--allocation-moments {args.allocation_moments!r}: give true (exact moments, the "
                             "ceiling) or false (the run's own history)")
    if args.lr is not None:
        lrs = parse_float_list(args.lr, name="--lr")
        if len(lrs) != 1:
            raise ValueError(f"--allocation runs one budget: give one --lr, got {lrs}")
        opt["lr"] = lrs[0]
    if args.checkpoints is not None:
        opt["checkpoints"] = tuple(parse_int_list(args.checkpoints, name="--checkpoints", minimum=0))
    return AllocSweepConfig(budget=budgets[0], rules=tuple(r.strip() for r in str(args.allocation).split(",")
                                                          if r.strip()),
                            groups=tuple(parse_int_list(args.groups, name="--groups")), seeds=args.seeds,
                            seed=args.seed, **opt)


def _main_alloc(args: argparse.Namespace) -> int:
    from ugrpo.experiments.sweep.env import sweep_experiment
    from ugrpo.report.markdown import fmt_ci, text_table

    cfg = _alloc_config(args)
    res = sweep_experiment(cfg, args.out, argv=command_line("sweep", args), progress=not args.no_progress)
    last = max(r["checkpoint"] for r in res["rows"])
    print(f"gap at step {last} (N={cfg.budget}, B={res['B']}; mean over seeds, 95% CI):")
    print(text_table(["rule", "gap", "95% CI", "seeds"],
                     [[r["rule"], r["gap_mean"], "-" if r["ci_low"] is None else fmt_ci(r["ci_low"], r["ci_high"]),
                       r["seeds"]] for r in res["rows"] if r["checkpoint"] == last]))
    for v in res["versus_uniform"]:
        print(f"{v['rule']}: {v['verdict']}")
    print(f"wrote {args.out}/results.json, allocation_sweep.png, report.md")
    return 0
