"""Command line: ``ugrpo <command> ...``. Argument parsing only; every command lives in a module.

Each command module exposes ``configure(parser)`` (adds its arguments) and
``main(args) -> int`` (runs it). Modules are imported only when their command runs, so
``ugrpo --help`` is fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "mse": ("ugrpo.experiments.mse_cmd", "Monte-Carlo gradient MSE of vanilla/grpo/grpo_mean/oracle per group size (Fig. 4)"),
    "plan": ("ugrpo.experiments.plan_cmd", "estimate c1, c2, c3 from a pilot and recommend G for a budget N (Thm 7)"),
    "sweep": ("ugrpo.experiments.sweep_cmd", "fixed-budget group-size sweep: Algorithm 1 on a synthetic env, or LM training runs per (G, seed) (Fig. 5, Table 2)"),
    "demo": ("ugrpo.experiments.demo_cmd", "mse + plan + sweep on a built-in synthetic policy, in minutes"),
    "gap": ("ugrpo.experiments.gap_cmd", "asymptotic distribution of the suboptimality gap n*gap vs Theorem 8's weighted chi-square"),
    "allocate": ("ugrpo.experiments.allocate_cmd", "exact MSE of per-prompt rollout allocation rules at equal budget"),
    "make-env": ("ugrpo.experiments.make_env_cmd", "write a random synthetic policy (JSON) with difficulty controls"),
    "train": ("ugrpo.train.train_cmd", "train a language model with Algorithm 1 or 2 on a verifiable task"),
    "pretrain-tiny": ("ugrpo.lm.pretrain_cmd", "warm up the built-in tiny model on arithmetic (supervised)"),
    "reproduce": ("ugrpo.experiments.reproduce_cmd", "run the paper's experiments at the scale the machine allows; one report.html"),
}


def _build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ugrpo",
        description="GRPO's policy gradient is a U-statistic: estimate, measure, and choose the group size G.",
        epilog="Environment: UGRPO_CACHE is the folder of the built-in tiny models (default ~/.cache/ugrpo); "
               "`ugrpo pretrain-tiny --all` builds them ahead of time.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == only:
            importlib.import_module(module).configure(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in COMMANDS:
        _build_parser().parse_args(argv or ["--help"])
        return 2
    parser = _build_parser(only=command)
    args = parser.parse_args(argv)
    if getattr(args, "no_progress", False):  # also Hugging Face's own bars ("Loading weights"), here and in workers
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    module = importlib.import_module(COMMANDS[command][0])
    try:
        return int(module.main(args) or 0)
    except Exception as e:  # a user error (bad input, folder in use, full disk): one line, exit 2; a bug: traceback
        msg = user_error_message(e)
        if msg is None:
            raise
        print(f"ugrpo {command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # a command that knows what it saved says so in the exception
        print("\n" + (str(e) if e.args else "interrupted: rows finished so far are on disk in the run folder"),
              file=sys.stderr)
        return 130


def user_error_message(e: BaseException) -> str | None:
    """The one-line message of an error the user can fix, or None for a bug (which keeps its traceback)."""
    import errno

    from ugrpo.errors import UserError

    fixable_os = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR,
                  errno.EEXIST, errno.ENOENT, errno.ENAMETOOLONG)
    if isinstance(e, (UserError, ValueError)) or type(e).__module__.startswith("yaml"):
        pass
    elif isinstance(e, MemoryError) or (isinstance(e, RuntimeError) and "can't allocate memory" in str(e)):
        return "out of memory: the inputs ask for more memory than this machine has; use smaller sizes"
    elif not (isinstance(e, OSError) and e.errno in fixable_os):
        return None
    return " ".join(str(e).split()) or type(e).__name__


if __name__ == "__main__":
    sys.exit(main())
