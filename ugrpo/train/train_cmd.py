"""``ugrpo train --config FILE.yaml --out DIR [--resume] [--section.field VALUE ...]``.

Every config field can be overridden with its dotted name (``--optim.lr 1e-4``,
``--budget.group_size 8``, ``--task.options.prompt_style compact``); values follow YAML
scalar rules. Multi-process: ``torchrun --nproc_per_node 2 -m ugrpo.cli train ...`` or
``accelerate launch --cpu --num_processes 2 -m ugrpo.cli train ...``.
"""

from __future__ import annotations

import argparse
import shlex
import sys

__all__ = ["configure", "main", "overrides_from_args"]


_PREFIX = "override:"


def configure(parser: argparse.ArgumentParser) -> None:
    from ugrpo.train.config import field_names

    parser.add_argument("--config", default=None, help="YAML config (see examples/*.yaml); defaults if omitted")
    parser.add_argument("--out", required=True, help="run folder to write (config.json, metrics.jsonl, checkpoints/, report.md)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    group = parser.add_argument_group("config overrides (YAML scalar values; '-' or '_' in names)")
    for name in field_names():
        flags = sorted({f"--{name}", f"--{name.replace('_', '-')}"})
        group.add_argument(*flags, dest=_PREFIX + name, default=argparse.SUPPRESS, metavar="VALUE")
    parser.epilog = "Task options: --task.options.NAME VALUE (e.g. --task.options.prompt_style compact)."
    # ``--task.options.NAME VALUE`` cannot be declared in advance: collect what argparse does not know
    # and let load_config report unknown names with close matches.
    known = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):
        ns, extra = known(args, namespace)
        ns.extra_overrides = list(getattr(ns, "extra_overrides", [])) + list(extra)
        return ns, []

    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]


def overrides_from_args(args: argparse.Namespace) -> list[str]:
    """The override tokens of parsed arguments, e.g. ``['--optim.lr', '1e-4']``."""
    out: list[str] = []
    for key, value in vars(args).items():
        if key.startswith(_PREFIX):
            out += [f"--{key[len(_PREFIX):]}", value]
    return out + list(getattr(args, "extra_overrides", []))


def main(args: argparse.Namespace) -> int:
    from ugrpo.train.config import load_config
    from ugrpo.train.loop import train

    try:
        cfg = load_config(args.config, overrides_from_args(args))
    except (ValueError, FileNotFoundError, TypeError) as e:
        print(f"ugrpo train: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    try:
        result = train(cfg, args.out, resume=args.resume)
    except KeyboardInterrupt as e:  # say what is on disk and the exact command that continues
        again = ["ugrpo", "train", *(["--config", args.config] if args.config else []), "--out", args.out, "--resume",
                 *overrides_from_args(args)]
        raise KeyboardInterrupt(f"{e}\nresume with: {shlex.join(again)}") from None
    print(
        f"done: {result.steps} steps in {result.minutes:.1f} min (+ {result.load_minutes:.1f} min loading the model); "
        f"held-out greedy accuracy "
        f"{_f(result.initial_eval_accuracy)} -> {_f(result.final_eval_accuracy)}, sampled pass@1 "
        f"{_f(result.initial_eval_pass1)} -> {_f(result.final_eval_pass1)}; run folder {result.out_dir}"
    )
    return 0


def _f(v) -> str:
    return "-" if v is None else f"{v:.3f}"
