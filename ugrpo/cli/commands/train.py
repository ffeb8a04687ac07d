"""``ugrpo train --config FILE.yaml --out DIR [--resume] [--section.field VALUE ...]``.

Every config field can be overridden with its dotted name (``--optim.lr 1e-4``,
``--budget.group_size 8``, ``--task.options.prompt_style compact``); values follow YAML
scalar rules. ``--help`` lists every field with its type, default and description.
Multi-process: ``torchrun --nproc_per_node 2 -m ugrpo.cli train ...`` or
``accelerate launch --cpu --num_processes 2 -m ugrpo.cli train ...``.
Parsing only: the flags become a ``TrainConfig`` (:func:`ugrpo.train.config.load_config`), checked by
:func:`ugrpo.train.preflight.preflight` before torch is imported (an error in the input comes back at once), and one
call of :func:`ugrpo.train.loop.train`.
"""

from __future__ import annotations

import argparse
import shlex

from ugrpo.cli.options import add_override_flags

__all__ = ["configure", "main"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="YAML config (see examples/*.yaml); the defaults below if "
                        "omitted")
    parser.add_argument("--out", required=True,
                        help="run folder to write (config.json, metrics.jsonl, checkpoints/, report.md)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    add_override_flags(parser, "config fields (--section.field VALUE; YAML scalar values, '-' or '_' in names)")
    from ugrpo.cli.options import _PREFIX
    from ugrpo.train.config import ALLOCATION_RULES

    parser.add_argument("--allocation", dest=_PREFIX + "allocation", default=argparse.SUPPRESS, metavar="RULE",
                        help=f"shorthand for --allocation.rule RULE: per-prompt group sizes G_b, one of "
                        f"{', '.join(ALLOCATION_RULES)} (docs/allocation.md)")


def main(args: argparse.Namespace) -> int:
    from ugrpo.train.config import load_config
    from ugrpo.train.preflight import preflight

    cfg = load_config(args.config, args.overrides)
    checked = preflight(cfg, args.out, resume=args.resume)  # the input errors that need no model: before torch
    from ugrpo.train.loop import train

    try:
        result = train(cfg, args.out, resume=args.resume, checked=checked)
    except KeyboardInterrupt as e:  # say what is on disk and the exact command that continues
        from ugrpo.runlock import holds_run

        if not holds_run(args.out):  # stopped while the model loaded
            raise KeyboardInterrupt(f"interrupted before the run folder {args.out} held a run: nothing was written; "
                                    "run the same command again") from None
        again = ["ugrpo", "train", *(["--config", args.config] if args.config else []), "--out", args.out, "--resume",
                 *args.overrides]
        raise KeyboardInterrupt(f"{e}\nresume with: {shlex.join(str(a) for a in again)}") from None
    print(
        f"done: {_ran(result)} in {result.minutes:.1f} min (+ {result.load_minutes:.1f} min loading the model); "
        f"held-out greedy accuracy "
        f"{_f(result.initial_eval_accuracy)} -> {_f(result.final_eval_accuracy)}, sampled pass@1 "
        f"{_f(result.initial_eval_pass1)} -> {_f(result.final_eval_pass1)}; run folder {result.out_dir}"
    )
    return 0


def _ran(result) -> str:
    """The steps this call trained: ``200 steps``, or after a resume ``steps 101..200 (of 200)``."""
    if result.resumed_from and result.resumed_from < result.steps:
        return f"steps {result.resumed_from + 1}..{result.steps} (of {result.steps})"
    return f"{result.steps} steps"


def _f(v) -> str:
    return "-" if v is None else f"{v:.3f}"
