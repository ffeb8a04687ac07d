"""``ugrpo mse``: Monte-Carlo gradient MSE of vanilla/grpo/grpo_mean/oracle per G (paper Fig. 4).

Example: ``ugrpo mse --env builtin:demo --groups 2,4,8,16,32,64 --batch 8 --reps 2000 --out runs/mse``.
Parsing only; the logic is :mod:`ugrpo.experiments.mse`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from ugrpo.experiments.common import command_line, guarded, parse_int_list, parse_theta, resolve_env
from ugrpo.runs import RunDir


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", default="builtin:demo", help="env JSON (from `ugrpo make-env`) or builtin:demo")
    p.add_argument("--groups", default="2,4,8,16,32,64", help="comma-separated group sizes G (each >= 2)")
    p.add_argument("--batch", type=int, default=8, help="prompts per minibatch B")
    p.add_argument("--reps", type=int, default=1000, help="independent minibatches R per G")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--theta", default=None, help="comma-separated parameters (length D); default: the env's theta0")
    p.add_argument("--out", required=True, help="run folder to write")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args: argparse.Namespace, argv: list[str] | None = None) -> dict:
    """Run ``ugrpo mse`` from parsed args; returns results (also used by ``ugrpo demo``)."""
    from ugrpo.experiments.mse import MSEConfig, run_mse, write_mse_outputs

    env = resolve_env(args.env)
    theta = parse_theta(args.theta, env)
    cfg = MSEConfig(env=args.env, groups=tuple(parse_int_list(args.groups, name="--groups", minimum=2)),
                    batch=args.batch, reps=args.reps, seed=args.seed,
                    theta=None if args.theta is None else tuple(theta.tolist()))
    rd = RunDir(args.out)
    rd.file("metrics.jsonl").unlink(missing_ok=True)  # a fresh measurement, not a resume
    rd.write_config({**asdict(cfg), "command": "mse", "argv": argv})
    try:
        results = run_mse(env, theta, cfg, rd, progress=not args.no_progress)
    except KeyboardInterrupt:
        print(f"\ninterrupted: the rows finished so far are in {rd.file('metrics.jsonl')}", file=sys.stderr)
        raise
    write_mse_outputs(rd, results, argv)
    return results


def _main(args: argparse.Namespace) -> int:
    from ugrpo.experiments.mse import table_rows
    from ugrpo.report.markdown import text_table

    results = run(args, command_line("mse", args))
    print(text_table(["G", "estimator", "MC MSE", "95% CI", "exact"], table_rows(results)))
    print(f"wrote {args.out}/results.json, mse.png, report.md")
    return 0


def main(args: argparse.Namespace) -> int:
    return guarded(_main, args)
