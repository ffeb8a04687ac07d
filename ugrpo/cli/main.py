"""Command line: ``ugrpo <command> ...``: the command table and the one error policy.

Each command is a module under :mod:`ugrpo.cli.commands` exposing ``configure(parser)`` (adds its
flags) and ``main(args) -> int`` (parses them into a config object and calls one library function).
Modules are imported only when their command runs, so ``ugrpo --help`` is fast.

Error policy (every command, every depth):

- a user error (:func:`user_error_message`: ``ValueError``, :class:`ugrpo.errors.UserError`, a full disk, a
  missing or unwritable path, out of memory) raised anywhere -- while parsing, or deep inside ``train()`` --
  prints ``ugrpo <command>: error: <message>`` on one line to stderr and exits 2; a full disk names the file it
  was writing (:mod:`ugrpo.fileio`), and the run folder says it is unfinished (:data:`ugrpo.runs.UNFINISHED`);
- Ctrl-C exits 130; the run folder keeps what was written (a command that knows what it saved says so
  in the ``KeyboardInterrupt`` it raises);
- anything else is a bug: Python's traceback, exit 1. ``UGRPO_DEBUG=1`` shows the traceback of user
  errors too.

Flags are never abbreviated (``allow_abbrev=False``): ``--resum`` is an unknown flag, not ``--resume``.

Output is line-buffered (:func:`line_buffered`): with stdout redirected to a file (SLURM, ``nohup``) each line is
there as soon as it is printed.

Quiet by default: no Hugging Face progress bars, no third-party FutureWarning / DeprecationWarning
(our own progress bars stay; ``--no-progress`` hides them). Under ``torchrun`` / ``accelerate launch`` only
rank 0 prints. On CPU the command runs with one torch thread unless told otherwise (``--threads N``,
``UGRPO_THREADS`` or ``OMP_NUM_THREADS``): the models these commands run on a CPU are small, and one thread
is several times faster for them than threads that contend for a shared core; it says so once, just before the
command's first output (:class:`DeferredNote`), so that an error in the input stays one line. The count is set when
the command first imports torch (:func:`after_import`), not before: ``--help`` and an error in the input need no
torch (transformers, matplotlib, ...) and come back in well under 2 s (``benchmarks/bench_cli_startup.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import importlib.abc
import importlib.util
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

__all__ = ["COMMANDS", "main", "user_error_message", "choose_threads", "after_import"]

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "mse": ("ugrpo.cli.commands.mse",
            "Monte-Carlo gradient MSE of vanilla/grpo/grpo_mean/oracle per group size (Fig. 4)"),
    "plan": ("ugrpo.cli.commands.plan", "estimate c1, c2, c3 from a pilot and recommend G for a budget N (Thm 7)"),
    "sweep": ("ugrpo.cli.commands.sweep", "fixed-budget group-size sweep: Algorithm 1 on a synthetic env, or LM "
              "training runs per (G, seed) (Fig. 5, Table 2)"),
    "demo": ("ugrpo.cli.commands.demo", "mse + plan + sweep on a built-in synthetic policy, in minutes"),
    "gap": ("ugrpo.cli.commands.gap",
            "asymptotic distribution of the suboptimality gap n*gap vs Theorem 8's weighted chi-square"),
    "allocate": ("ugrpo.cli.commands.allocate", "exact MSE of per-prompt rollout allocation rules at equal budget"),
    "make-env": ("ugrpo.cli.commands.make_env", "write a random synthetic policy (JSON) with difficulty controls"),
    "train": ("ugrpo.cli.commands.train", "train a language model with Algorithm 1 or 2 on a verifiable task"),
    "pretrain-tiny": ("ugrpo.cli.commands.pretrain_tiny",
                      "warm up the built-in tiny model on arithmetic (supervised)"),
    "reproduce": ("ugrpo.cli.commands.reproduce",
                  "run the paper's experiments at the scale the machine allows; one report.html"),
}

FIXABLE_OS_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR,
                     errno.EEXIST, errno.ENOENT, errno.ENAMETOOLONG)
"""operating-system errors the user can fix (a full disk, a missing or unwritable path)"""


def user_error_message(e: BaseException) -> str | None:
    """The one-line message of an error the user can fix, or None for a bug (which keeps its traceback).

    User errors: :class:`ugrpo.errors.UserError` (a run folder in use, a resume that cannot continue, ...),
    ``ValueError`` (bad input anywhere: a flag, a config field, a task option), YAML parse errors, running out of
    memory, and the operating-system errors in ``FIXABLE_OS_ERRORS`` (or raised by ugrpo with a message of its own,
    such as a missing config file).
    """
    from ugrpo.errors import UserError
    from ugrpo.fileio import DISK_FULL, os_error_of

    path_errors = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError, FileExistsError)
    os_error = None if isinstance(e, (UserError, ValueError)) else os_error_of(e)  # a Rust writer's too
    if os_error is not None and os_error.errno in DISK_FULL:
        where = f" while writing {os_error.filename}" if os_error.filename else ""
        return (f"{os.strerror(os_error.errno)}{where}: free some space (or choose an --out on another disk), then "
                "run the same command again (ugrpo train: with --resume); a run folder left part-written says so in "
                "its UNFINISHED file")
    if isinstance(e, (UserError, ValueError)) or type(e).__module__.startswith("yaml"):
        pass
    elif isinstance(e, MemoryError) or (isinstance(e, RuntimeError) and "can't allocate memory" in str(e)):
        return "out of memory: the inputs ask for more memory than this machine has; use smaller sizes"
    elif not (os_error is not None and (os_error.errno in FIXABLE_OS_ERRORS
                                        or (os_error.errno is None and isinstance(os_error, path_errors)))):
        return None
    else:
        e = os_error
    return " ".join(str(e).split()) or type(e).__name__


class HelpFormatter(argparse.HelpFormatter):
    """Shows each flag's default, unless its help text already states it or there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or default is None or default is False or default in ([], "")
                or default is argparse.SUPPRESS or "default" in text or text == argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


def _build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ugrpo", allow_abbrev=False,
        description="GRPO's policy gradient is a U-statistic: estimate, measure, and choose the group size G.",
        epilog="Environment: UGRPO_CACHE is the folder of the cached tiny:random (default ~/.cache/ugrpo; "
               "tiny:base/instruct/fewshot ship with ugrpo). UGRPO_THREADS sets the torch threads; "
               "UGRPO_DEBUG=1 shows the traceback of a user error.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, allow_abbrev=False,
                           formatter_class=HelpFormatter)
        if name == only:
            importlib.import_module(module).configure(p)
            p.add_argument("--threads", type=int, default=None, metavar="N",
                           help="torch threads (default: $UGRPO_THREADS, else $OMP_NUM_THREADS, else 1 on CPU; "
                           "with a GPU, torch's own default)")
    return parser


THIRD_PARTY = r"(transformers|torch|trl|accelerate|peft|datasets|huggingface_hub|tokenizers)(\.|$)"
"""modules whose FutureWarning / DeprecationWarning a user of the CLI cannot act on"""


def quiet_third_party() -> None:
    """No Hugging Face progress bars or advisory logs, no third-party deprecation warnings (in this process and,
    through the environment, in the worker processes it starts)."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")  # "Generating train split" of a local file
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning,ignore::DeprecationWarning")
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category, module=THIRD_PARTY)
    if "transformers" in sys.modules:  # imported before main() ran (tests): the variables came too late
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "datasets" in sys.modules:
        import datasets

        datasets.disable_progress_bars()


def choose_threads(flag: int | None, environ=os.environ, *, gpu: bool | None = None) -> tuple[int | None, str]:
    """The torch thread count for this command and the one line that says why (None: leave torch's default).

    ``--threads`` wins, then ``UGRPO_THREADS``, then ``OMP_NUM_THREADS`` (torch reads it itself); otherwise 1
    thread on a CPU-only machine and torch's default when a GPU is visible.

    >>> choose_threads(None, {}, gpu=False)[0], choose_threads(3, {}, gpu=False)[0]
    (1, 3)
    >>> choose_threads(None, {"OMP_NUM_THREADS": "4"}, gpu=False)
    (None, '')
    """
    if flag is not None:
        if flag < 1:
            raise ValueError(f"--threads {flag}: give a number of threads >= 1")
        return flag, ""
    if environ.get("UGRPO_THREADS"):
        try:
            n = int(environ["UGRPO_THREADS"])
        except ValueError:
            raise ValueError(f"UGRPO_THREADS={environ['UGRPO_THREADS']!r}: give a number of threads >= 1") from None
        if n < 1:
            raise ValueError(f"UGRPO_THREADS={n}: give a number of threads >= 1")
        return n, ""
    if environ.get("OMP_NUM_THREADS"):
        return None, ""
    if gpu is None:
        import torch

        gpu = torch.cuda.is_available()
    if gpu:
        return None, ""
    return 1, ("ugrpo: 1 torch thread (the fastest for the small models run on a CPU); "
               "--threads N or UGRPO_THREADS=N to change")


class DeferredNote:
    """A note for stderr held back until the command first prints something (on stdout or stderr).

    The thread-choice line would otherwise come before a user error found while the command checks its
    input, making the error two lines. Use as a context manager around the command: it wraps ``sys.stdout`` and
    ``sys.stderr`` while the command runs; a command that ends (or fails) before printing anything never shows it.
    """

    class _Stream:
        def __init__(self, note: DeferredNote, stream):
            self._note, self._stream = note, stream

        def write(self, text: str) -> int:
            if text:
                self._note.emit()
            return self._stream.write(text)

        def __getattr__(self, name: str):
            return getattr(self._stream, name)

    def __init__(self, text: str):
        self.text = text

    def emit(self) -> None:
        """Print the note now, once (nothing once it was printed or the command has ended)."""
        text, self.text = self.text, ""
        if text:
            self._stderr.write(text + "\n")
            self._stderr.flush()

    def __enter__(self) -> DeferredNote:
        self._stdout, self._stderr = sys.stdout, sys.stderr  # wrapped even when empty: the text may come later
        sys.stdout, sys.stderr = self._Stream(self, sys.stdout), self._Stream(self, sys.stderr)
        return self

    def __exit__(self, *exc) -> None:
        self.text = ""  # a stream kept past the command (a logging handler) must not say it late
        sys.stdout, sys.stderr = self._stdout, self._stderr


@contextlib.contextmanager
def after_import(name: str, callback: Callable[[ModuleType], None]):
    """Call ``callback(module)`` once module ``name`` is imported: at once if it already is, else right after the
    command first imports it; nothing once the block has ended.

    The command line sets torch's thread count this way: importing torch takes seconds, and ``--help`` or an error in
    the input (a config field, a missing file) must not wait for it. It is a finder at the front of
    ``sys.meta_path`` that lets the other finders find the module and runs ``callback`` after its loader.
    """
    if name in sys.modules:
        callback(sys.modules[name])
        yield
        return
    finder = _AfterImport(name, callback)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        finder.remove()


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, callback: Callable[[ModuleType], None]):
        self.name, self.callback = name, callback

    def remove(self) -> None:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        self.remove()  # once; the other finders find the module
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_call(module: ModuleType) -> None:
            exec_module(module)
            self.callback(module)

        spec.loader.exec_module = exec_then_call
        return spec


def line_buffered() -> None:
    """Every line printed reaches a file or pipe at once (SLURM, ``nohup``, ``| tee``): Python block-buffers stdout
    when it is not a terminal, so a run's per-step lines would otherwise appear only when it ends."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):  # a stream that cannot (a test's capture): as it is
                reconfigure(line_buffering=True)


def _rank() -> int:
    for name in ("RANK", "LOCAL_RANK"):  # torchrun and accelerate launch set both
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the command, return its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in COMMANDS:
        _build_parser().parse_args(argv or ["--help"])
        return 2
    parser = _build_parser(only=command)
    args = parser.parse_args(argv)
    module = importlib.import_module(COMMANDS[command][0])
    main_rank = _rank() == 0
    line_buffered()
    with warnings.catch_warnings(), contextlib.ExitStack() as stack:
        quiet_third_party()
        if not main_rank:  # torchrun / accelerate: rank 0 speaks for all
            os.environ.setdefault("TQDM_DISABLE", "1")
            stack.enter_context(contextlib.redirect_stdout(stack.enter_context(open(os.devnull, "w"))))
        note = DeferredNote("")
        try:
            choose_threads(args.threads, gpu=False)  # a bad --threads or UGRPO_THREADS is an input error: now

            def set_threads(torch) -> None:
                threads, why = choose_threads(args.threads)
                if threads is not None:
                    torch.set_num_threads(threads)
                note.text = why if main_rank else ""

            with note, after_import("torch", set_threads):  # the note is said when the command first prints
                return int(module.main(args) or 0)
        except KeyboardInterrupt as e:  # a command that knows what it saved says so in the exception
            print("\n" + (str(e) if e.args else _interrupted(getattr(args, "out", None))), file=sys.stderr)
            return 130
        except Exception as e:  # a user error: one line, exit 2; a bug: its traceback
            msg = user_error_message(e)
            if msg is None or os.environ.get("UGRPO_DEBUG"):
                raise
            if main_rank:
                print(f"ugrpo {command}: error: {msg}", file=sys.stderr)
            return 2

def _interrupted(out) -> str:
    """What a Ctrl-C that no command explained left behind: the run folder's rows, or nothing yet."""
    if out is not None and not Path(out).exists():
        return f"interrupted before the run folder {out} was created: nothing was written; run the command again"
    return f"interrupted: rows finished so far are on disk in the run folder{'' if out is None else f' {out}'}"


if __name__ == "__main__":
    sys.exit(main())
