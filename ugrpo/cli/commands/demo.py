"""``ugrpo demo``: mse + plan + sweep on the built-in synthetic policy, in a few minutes.

Example: ``ugrpo demo --out runs/demo``; then open ``runs/demo/report.md``.
Parsing only: one call of :func:`ugrpo.experiments.demo.run_demo` (which composes the three commands'
config objects), then the summary tables.
"""

from __future__ import annotations

import argparse
import time


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="folder for the three sub-runs and the top-level report.md")
    p.add_argument("--env", default="builtin:demo", help="env JSON or builtin:NAME")
    p.add_argument("--seed", type=int, default=0, help="seed of every sub-run")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.add_argument("--quick", action="store_true", help="tiny settings (seconds; for smoke tests, numbers are noisy)")


def main(args: argparse.Namespace) -> int:
    from ugrpo.experiments.demo import QUICK_SETTINGS, run_demo
    from ugrpo.report.composite import summary_rows
    from ugrpo.report.markdown import text_table

    t0 = time.perf_counter()
    res = run_demo(args.out, env=args.env, seed=args.seed, progress=not args.no_progress,
                   settings=QUICK_SETTINGS if args.quick else None)
    t = summary_rows(res)
    print("\nGradient MSE (Monte Carlo vs exact):")
    print(text_table(["G", "estimator", "MC MSE", "exact"], t["mse"]))
    print("\nScaling-law constants and G* (pilot vs exact):")
    print(text_table(["", "pilot", "95% CI", "exact"], t["constants"]))
    print("\nSweep: empirical best G at the last checkpoint vs the planner:")
    print(text_table(["budget N", "step", "best G", "G not told apart (paired, by seed)", "planner G*"], t["best"]))
    print(f"\ndone in {time.perf_counter() - t0:.0f} s; report: {args.out}/report.md")
    return 0
