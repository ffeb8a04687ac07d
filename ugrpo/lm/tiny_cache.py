"""The cache of built-in tiny models: ``tiny:<name>`` -> a folder, built once on first use.

``tiny:base``, ``tiny:instruct`` and ``tiny:fewshot`` are the tiny model warmed up by
:func:`ugrpo.lm.pretrain.pretrain_tiny` to the sampled accuracies of :data:`ugrpo.lm.tiny.STRENGTHS`
(minutes on a CPU, once); ``tiny:random`` is the same model with its random initial weights (seed 0,
no warm-up: built in seconds; its rewards on arithmetic are almost always 0, so it checks the
plumbing, not the paper's claims: ``ugrpo reproduce --scale smoke`` uses it).

Where: ``<root>/tiny/<name>-<CACHE_VERSION>`` with root = ``cache_dir``, else ``$UGRPO_CACHE``, else
``~/.cache/ugrpo``. A build runs into a temporary folder ``.<name>-<CACHE_VERSION>.*.tmp`` next to it
and is renamed into place under an exclusive file lock (``<name>-<CACHE_VERSION>.lock``): a second
process waits for the first and then reuses its model; no process ever sees a half-written folder. A
build killed outright (``kill -9``, a lost machine) leaves its temporary folder behind; the next build
of that name removes it (it holds the lock, so no other build of that name can be running).

Imports run one way: :mod:`ugrpo.lm.tiny` <- :mod:`ugrpo.lm.pretrain` <- this module.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ugrpo.lm import pretrain
from ugrpo.lm.tiny import STRENGTHS

__all__ = ["CACHE_VERSION", "TINY_NAMES", "BUILD_TIME", "cache_root", "tiny_model_path", "build_all"]

CACHE_VERSION = "v2"
"""Bump when the tiny model, tokenizer, task or warm-up recipe changes (invalidates caches).
v2: the warm-up stream is one draw with repeats per step (``pretrain._training_batch``), not draws of 64 distinct."""

TINY_NAMES: tuple[str, ...] = ("random", *STRENGTHS)
"""Every ``tiny:<name>`` the cache knows, fastest build first."""

BUILD_TIME: dict[str, str] = {"random": "a few seconds", "base": "about 1 minute", "instruct": "about 3 minutes",
                              "fewshot": "about 15 minutes"}
"""Rough build time on 2 CPU cores with ``OMP_NUM_THREADS=1`` (measured: instruct 650 steps in 3.0 min, base 175
steps in 68.5 s; fewshot scaled from its v1 step count, :data:`ugrpo.lm.pretrain.EXPECTED_STEPS`); longer on busy
cores."""


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """``cache_dir``, else ``$UGRPO_CACHE``, else ``~/.cache/ugrpo`` (user-expanded)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("UGRPO_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ugrpo"


def tiny_model_path(strength: str = "instruct", cache_dir: str | os.PathLike | None = None, *,
                    log: Callable[[str], None] | None = None) -> Path:
    """The folder of the cached tiny model ``tiny:<strength>``; built on first use (see the module docstring).

    A build says first what it builds, where, and roughly how long it takes, then shows the warm-up's progress
    bar, then how long it took; ``log`` receives those lines (default: stderr).

    Raises
    ------
    ValueError
        An unknown name.
    """
    if strength not in TINY_NAMES:
        raise ValueError(f"unknown tiny model strength {strength!r}; choose one of {', '.join(TINY_NAMES)} "
                         "(e.g. 'tiny:instruct')")
    log = log or _stderr
    root = cache_root(cache_dir) / "tiny"
    final = root / f"{strength}-{CACHE_VERSION}"
    if _complete(final):
        return final
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{strength}-{CACHE_VERSION}.lock", "w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the file closes
        if _complete(final):  # another process built it while we waited
            return final
        if final.exists():  # an incomplete folder can only come from outside; do not trust it
            shutil.rmtree(final)
        _remove_stale(root, strength, log)
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{strength}-{CACHE_VERSION}.", suffix=".tmp"))
        log(f"building tiny:{strength} ({_what(strength)}; first use only, {BUILD_TIME[strength]} on 2 CPU cores) "
            f"into {final}. The cache folder is $UGRPO_CACHE (default ~/.cache/ugrpo); "
            "`ugrpo pretrain-tiny --all` builds every tiny model ahead of time.")
        t0 = time.perf_counter()
        result = None
        try:
            if strength == "random":
                _build_random(tmp)
            else:
                result = pretrain.pretrain_tiny(tmp, strength=strength, seed=0, progress=True)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        short = ("" if getattr(result, "reached_target", True) else
                 f"; its sampled accuracy reached {result.sampled_accuracy:.3f}, short of the "
                 f"{result.target_accuracy:.2f} target, at the {result.steps}-step cap")
        log(f"built tiny:{strength} in {_duration(time.perf_counter() - t0)}{short}")
    return final


def build_all(cache_dir: str | os.PathLike | None = None, *,
              log: Callable[[str], None] | None = None) -> dict[str, Path]:
    """Build (or find) every ``tiny:<name>`` of :data:`TINY_NAMES`; returns name -> folder (``pretrain-tiny --all``)."""
    return {name: tiny_model_path(name, cache_dir, log=log) for name in TINY_NAMES}


def _what(name: str) -> str:
    if name == "random":
        return "random weights, no warm-up"
    return f"warmed up on arithmetic until its sampled accuracy reaches {STRENGTHS[name]:.2f}"


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def _remove_stale(root: Path, name: str, log: Callable[[str], None]) -> None:
    """Remove the temporary folders that killed builds of ``name`` left; the caller holds the name's lock."""
    for old in sorted(root.glob(f".{name}-{CACHE_VERSION}.*.tmp")):
        shutil.rmtree(old, ignore_errors=True)
        log(f"removed {old}, left by an earlier build of tiny:{name} that did not finish")


def _build_random(out_dir: Path) -> None:
    """The tiny model with its seed-0 random weights, its tokenizer and ``ugrpo_tiny.json``."""
    from ugrpo.lm.tiny import build_tiny_model
    from ugrpo.lm.tokenizer import DEFAULT_CHARS, build_char_tokenizer

    tokenizer = build_char_tokenizer(DEFAULT_CHARS)
    model = build_tiny_model(tokenizer, size="1m", seed=0)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    meta = {"strength": "random", "steps": 0, "seed": 0, "size": "1m", "task_options": dict(pretrain.TINY_TASK_OPTIONS)}
    (out_dir / "ugrpo_tiny.json").write_text(json.dumps(meta, indent=2) + "\n")


def _complete(folder: Path) -> bool:
    return (folder / "ugrpo_tiny.json").is_file() and (folder / "model.safetensors").is_file()
