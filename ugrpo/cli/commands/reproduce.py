"""``ugrpo reproduce``: the paper's experiments at the scale the machine allows, into one report.html.

Example: ``ugrpo reproduce --scale tiny --out runs/reproduce [--skip fig4,thm8] [--workers 2] [--optim.lr 1e-4]``.
Parsing only: the flags become a ``ReproduceConfig`` and one call of
:func:`ugrpo.experiments.reproduce.run.run_reproduce`.
"""

from __future__ import annotations

import argparse
import time

from ugrpo.cli.options import add_override_flags, parse_overrides, ray_options
from ugrpo.experiments.common import default_workers


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scale", default="tiny", choices=("smoke", "tiny", "paper"),
                   help="smoke: under a minute on tiny:random, the untrained tiny model (checks the plumbing; every "
                        "claim 'too small to decide'); tiny (default): the built-in tiny models on 2 CPU cores; paper: "
                        "the paper's Qwen models and budgets (needs local weights and a GPU)")
    p.add_argument("--out", required=True, help="run folder; rerunning into it skips finished parts")
    p.add_argument("--skip", default="", help="comma-separated parts to leave out: fig4,fig5,table2,thm8")
    p.add_argument("--workers", type=int, default=None,
                   help="parallel training runs of the sweeps (default: the CPU cores available, one thread each; "
                   "1 when a GPU is visible)")
    p.add_argument("--ray", action="store_true", help="train the sweeps' runs as Ray tasks (see `ugrpo sweep --help`)")
    p.add_argument("--ray-address", default=None, help="with --ray: the cluster to join")
    p.add_argument("--ray-cpus", type=float, default=None, help="with --ray: CPUs per run (default 1)")
    p.add_argument("--ray-gpus", type=float, default=None, help="with --ray: GPUs per run (default 0; use 1 at "
                   "--scale paper)")
    p.add_argument("--seed", type=int, default=0, help="seed of every part")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    # hidden: tests run every part on one small local model and a custom task
    p.add_argument("--model-override", default=None, help=argparse.SUPPRESS)
    p.add_argument("--task", default=None, help=argparse.SUPPRESS)
    p.add_argument("--task-option", action="append", default=[], help=argparse.SUPPRESS)
    add_override_flags(p, "training-config overrides of the fig5 and table2 sweeps",
                       skip=("seed", "scale", "budget.samples_per_step", "budget.group_size"))


def main(args: argparse.Namespace) -> int:
    from ugrpo.experiments.plan.lm import parse_task_options
    from ugrpo.experiments.reproduce.run import ReproduceConfig, run_reproduce

    skip = tuple(s.strip() for s in str(args.skip).split(",") if s.strip())
    workers = default_workers() if args.workers is None else args.workers
    cfg = ReproduceConfig(scale=args.scale, out=args.out, skip=skip, model_override=args.model_override,
                          task=args.task, task_options=parse_task_options(args.task_option), workers=workers,
                          ray=ray_options(args), seed=args.seed, overrides=tuple(parse_overrides(args.overrides)))
    t0 = time.perf_counter()
    res = run_reproduce(cfg, progress=not args.no_progress)
    for c in res["claims"]:
        print(f"[{c['verdict']}] {c['claim']}")
    total = time.perf_counter() - t0
    print(f"wrote {args.out}/report.html and results.json; total time {total:.1f} s ({total / 60:.1f} min)")
    return 0

