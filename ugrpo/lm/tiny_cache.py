"""``tiny:<name>`` -> a folder: the shipped warm models, and the cache of ``tiny:random``.

``tiny:base``, ``tiny:instruct`` and ``tiny:fewshot`` are the tiny model warmed up by
:func:`ugrpo.lm.pretrain.pretrain_tiny` to the sampled accuracies of :data:`ugrpo.lm.tiny.STRENGTHS`;
they ship with the package (:mod:`ugrpo.lm.tiny_shipped`) and are never built at run time.
``tiny:random`` is the same model with its random initial weights (seed 0, no warm-up: built in
seconds on first use; its rewards on arithmetic are almost always 0, so it checks the plumbing, not
the paper's claims: ``ugrpo reproduce --scale smoke`` uses it).

Where ``tiny:random`` is cached: ``<root>/tiny/random-<CACHE_VERSION>`` with root = ``cache_dir``,
else ``$UGRPO_CACHE``, else ``~/.cache/ugrpo``. A build runs into a temporary folder
``.random-<CACHE_VERSION>.*.tmp`` next to it and is renamed into place under an exclusive file lock
(``random-<CACHE_VERSION>.lock``): a second process waits for the first and then reuses its model;
no process ever sees a half-written folder. A build killed outright (``kill -9``, a lost machine)
leaves its temporary folder behind; the next build removes it (it holds the lock, so no other build
of that name can be running).

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
from ugrpo.lm.source import TINY_NAMES
from ugrpo.lm.tiny_shipped import SHIPPED_NAMES, shipped_model_path

__all__ = ["CACHE_VERSION", "TINY_NAMES", "cache_root", "tiny_model_path"]

CACHE_VERSION = "v2"
"""Bump when the tiny model or tokenizer changes (invalidates the cached ``tiny:random``)."""


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
    """The folder of ``tiny:<strength>``: the shipped model (no build), or the cached ``tiny:random``.

    ``tiny:random`` is built on first use (a few seconds); the build says what it builds and where, then how long
    it took; ``log`` receives those lines (default: stderr).

    Raises
    ------
    ValueError
        An unknown name.
    FileNotFoundError
        A shipped model's folder is incomplete (:func:`ugrpo.lm.tiny_shipped.shipped_model_path`).
    """
    if strength not in TINY_NAMES:
        raise ValueError(f"unknown tiny model strength {strength!r}; choose one of {', '.join(TINY_NAMES)} "
                         "(the part after 'tiny:' of a model name, e.g. 'instruct')")
    if strength in SHIPPED_NAMES:
        return shipped_model_path(strength)
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
        log(f"building tiny:{strength} (random weights, no warm-up; first use only, a few seconds) into {final}. "
            "The cache folder is $UGRPO_CACHE (default ~/.cache/ugrpo).")
        t0 = time.perf_counter()
        try:
            _build_random(tmp)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log(f"built tiny:{strength} in {_duration(time.perf_counter() - t0)}")
    return final


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
