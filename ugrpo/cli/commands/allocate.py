"""``ugrpo allocate``: exact MSE of per-prompt allocation rules (uniform, vip, knapsack, ustat, and the prompt
importance-sampling rules uniform-is, ustat-is) at equal budget.

Example: ``ugrpo allocate --env builtin:demo --budget 256 --rules uniform,vip,knapsack,ustat --seed 0
--out runs/alloc`` (seconds). Parsing only: the flags become an ``AllocateConfig`` and one call of
:func:`ugrpo.experiments.allocate.allocate_experiment`.
"""

from __future__ import annotations

import argparse
import time

from ugrpo.cli.options import parse_bool
from ugrpo.experiments.common import check_env_spec, command_line


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", required=True, help="env JSON written by `ugrpo make-env`, or builtin:demo")
    p.add_argument("--budget", type=int, required=True, help="N samples per step (the same for every rule)")
    from ugrpo.stats.allocation import RULES

    p.add_argument("--rules", default=",".join(RULES), help="comma-separated rules")
    p.add_argument("--seed", type=int, default=0, help="seed of the drawn batches and the simulated history")
    p.add_argument("--batches", type=int, default=2000, help="drawn prompt batches (samples table)")
    p.add_argument("--token-batches", type=int, default=100, help="drawn prompt batches (tokens table)")
    p.add_argument("--prompts", type=int, default=None,
                   help="prompts B per step for the per-prompt rules (default: N / the best uniform G)")
    p.add_argument("--g-min", type=int, default=2, help="smallest group size a rule may give a prompt")
    p.add_argument("--g-max", type=int, default=64, help="largest group size a rule may give a prompt")
    p.add_argument("--history-steps", type=int, default=10, help="simulated earlier steps behind the predictions")
    p.add_argument("--history-group", type=int, default=4, help="G of the simulated earlier steps (>= 3)")
    p.add_argument("--safe-tol", type=float, default=0.0,
                   help="ustat's safe rule: the chosen sizes' posterior 90%% quantile of MSE / uniform's may not "
                        "exceed 1 + tol (in [0, 1); docs/math.md M50)")
    p.add_argument("--safe-level", type=float, default=0.9, help="the posterior quantile the safe rule bounds")
    p.add_argument("--screen", action="store_true",
                   help="also run ustat+screen: prompts may get G_b = 0 (biased unless g(x_b) = 0; never a default)")
    p.add_argument("--is-lambda", type=float, default=0.1,
                   help="uniform-is/ustat-is: the defensive floor q(x) >= lambda/P, in (0, 1] (weights <= 1/lambda; "
                        "docs/math.md M55)")
    p.add_argument("--is-guard", default="true", help="uniform-is/ustat-is with predicted moments: true = the held-out "
                   "guard picks the law (docs/math.md M78; level and tolerance --safe-level, --safe-tol; sizes >= 3), "
                   "false = the posterior's law unchecked")
    p.add_argument("--out", required=True, help="run folder")
    p.add_argument("--no-progress", action="store_true", help="print nothing while it runs")


def main(args: argparse.Namespace) -> int:
    check_env_spec(args.env)  # a missing file: said before torch is imported
    from ugrpo.experiments.allocate import AllocateConfig, allocate_experiment
    from ugrpo.report.markdown import text_table

    rules = tuple(r.strip() for r in str(args.rules).split(",") if r.strip())
    cfg = AllocateConfig(budget=args.budget, rules=rules, seed=args.seed, batches=args.batches,
                         token_batches=args.token_batches, prompts=args.prompts, g_min=args.g_min, g_max=args.g_max,
                         history_steps=args.history_steps, history_group=args.history_group,
                         safe_tol=args.safe_tol, safe_level=args.safe_level, screen=args.screen,
                         is_lambda=args.is_lambda, is_guard=parse_bool(args.is_guard, "--is-guard"))
    t0 = time.perf_counter()
    results = allocate_experiment(cfg, args.env, args.out, argv=command_line("allocate", args),
                                  progress=not args.no_progress)
    print(text_table(["rule", "moments", "G", "B", "MSE", "95% low", "95% high"],
                     [[r["rule"], r["moments"], r.get("G"), r["B"], r["mse"], r["ci_low"], r["ci_high"]]
                      for r in results["rows"]]))
    print(f"wrote {args.out}/results.json, allocation.png, report.md ({time.perf_counter() - t0:.1f} s)")
    return 0
