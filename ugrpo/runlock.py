"""What a run folder is and who writes it: the manifest ``run.json`` and the lock ``.lock``.

* The manifest is written first: the command, a hash of its config and the folder format. A
  command refuses a folder that another command or another config wrote (the error names the
  folder and the fix: a new ``--out``, or ``--resume`` with the same config), so a measurement
  can never delete a training run's files, and two configs never mix in one ``metrics.jsonl``.
* The lock is an exclusive ``flock`` on ``.lock`` held for the life of the process (or until
  :func:`release`): the kernel drops it on any exit, kill -9 included, so a lock left by a dead
  process is never in the way; the file names the last holder (pid, host, command) for the error.
* A damaged manifest (not UTF-8, not JSON, no ``command`` / ``config_hash``) is an error naming the file; a
  command refuses another command's folder (:func:`check_owner`) before it reads any of its files.
* :data:`UNFINISHED` marks a folder whose command has not written its report yet (:mod:`ugrpo.runs`); the
  refusal of another config calls such a folder an unfinished run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ugrpo.errors import RunFolderError
from ugrpo.fileio import atomic_write_json, read_json, to_jsonable

__all__ = ["MANIFEST", "FORMAT", "config_hash", "claim", "check_claim", "release", "read_manifest", "holds_lock",
           "make_folder", "check_owner"]

MANIFEST = "run.json"
LOCK = ".lock"
FORMAT = 1
UNFINISHED = "UNFINISHED"
"""Marker file of a folder whose command has not finished writing it (written and removed by :mod:`ugrpo.runs`)."""
RUN_FILES = ("config.json", "metrics.jsonl", "results.json", "report.md")
"""Files that mark a folder as holding a run's outputs."""
NOT_HASHED = ("argv", "command", "part", "workers", "ray", "progress", "no_progress")
"""Config keys that do not change what a run computes (the command line as typed, labels, parallelism)."""

EXTENDABLE: dict[str, tuple[str, ...]] = {"sweep": ("budgets", "groups", "seeds", "rules")}
"""Config keys a rerun may change to extend a run (a sweep's rows are keyed by (N, G[, rule], seed), so more cells,
rules or seeds add rows without mixing); left out of the manifest's hash."""
LM_SWEEP_CHECKED = ("train_config", "config", "overrides", "steps", "plan_pilot")
"""Keys of ``sweep --config`` whose training config ``lm_sweep.check_lm_resume`` compares field by field."""

_HELD: dict[str, int] = {}  # real path of a locked folder -> open descriptor of its lock file


def config_hash(config: Any, ignore: Iterable[str] = ()) -> str:
    """sha256 (16 hex digits) of a config's canonical JSON, top-level keys in ``ignore`` left out."""
    cfg = to_jsonable(config)
    if isinstance(cfg, dict):
        skip = set(NOT_HASHED) | set(ignore)
        cfg = {k: v for k, v in cfg.items() if k not in skip}
    return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]


def read_manifest(folder: str | os.PathLike) -> dict | None:
    """The manifest of ``folder`` (None if it has none); a damaged one is a RunFolderError naming the file."""
    p = Path(folder) / MANIFEST
    if not p.exists():
        return None
    fix = f"it records which command and config own {Path(folder)}: restore it from a copy, or choose a new --out"
    try:
        m = read_json(p)
    except (OSError, ValueError) as e:
        raise RunFolderError(f"{e}; {fix}") from None
    if not isinstance(m, dict) or not isinstance(m.get("command"), str) or not isinstance(m.get("config_hash"), str):
        raise RunFolderError(f"{p} is not a ugrpo run manifest (it needs \"command\" and \"config_hash\" strings, "
                             f"got {json.dumps(m)[:80]}); {fix}")
    return m


def check_owner(folder: str | os.PathLike, command: str) -> None:
    """Refuse ``folder`` when its manifest names another command (before anything reads its files as ours)."""
    m = read_manifest(folder)
    if m is not None and m["command"] != command:
        raise RunFolderError(
            f"{folder} belongs to a 'ugrpo {m['command']}' run; 'ugrpo {command}' will not write into it: "
            "choose a new --out"
        )


def make_folder(folder: str | os.PathLike) -> Path:
    """Create the run folder; a file in the way or no permission is a :class:`RunFolderError`."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise RunFolderError(f"--out {folder} is a file, not a folder; choose a new --out")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunFolderError(f"cannot create the run folder {folder} ({e.strerror}); choose a writable --out") from e
    if not os.access(folder, os.W_OK | os.X_OK):
        raise RunFolderError(f"the run folder {folder} is not writable; choose a writable --out")
    return folder


def holds_run(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a run: its manifest or its ``config.json`` (what ``--resume`` continues)."""
    return any((Path(folder) / f).exists() for f in (MANIFEST, "config.json"))


def holds_lock(folder: str | os.PathLike) -> bool:
    return os.path.realpath(folder) in _HELD


def _lock(folder: Path, command: str) -> None:
    key = os.path.realpath(folder)
    if key in _HELD:  # this process holds it already (e.g. a sweep that runs its cells in-process)
        return
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, the manifest still guards against mixing
        return
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 400, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise RunFolderError(
            f"the run folder {folder} is in use by {holder}; wait for it to finish, or choose another --out"
        ) from None
    except OSError:  # a file system without flock (some network mounts): the manifest still guards
        os.close(fd)
        return
    _HELD[key] = fd


def _note_holder(folder: Path, command: str) -> None:
    """Write who holds the lock into the lock file (read by a refused second writer)."""
    fd = _HELD.get(os.path.realpath(folder))
    if fd is not None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} (ugrpo {command}, since "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S')})\n".encode(), 0)


def release(folder: str | os.PathLike) -> None:
    """Drop this process's lock on ``folder`` (no-op if not held). Process exit drops it too."""
    fd = _HELD.pop(os.path.realpath(folder), None)
    if fd is not None:
        os.close(fd)  # closing the descriptor releases the flock


def abandon(folder: str | os.PathLike, *, created: bool) -> None:
    """Undo a claim whose command failed before it wrote anything of its own (e.g. a ``report_to`` backend that
    did not start): the next try, with the input fixed, is not refused as an unfinished run.

    ``created``: the claim created the folder, so the whole folder goes (backends may have written into it);
    otherwise only the claim's own files (:data:`MANIFEST`, :data:`UNFINISHED`, :data:`LOCK`).
    """
    folder = Path(folder)
    release(folder)
    if created:
        shutil.rmtree(folder, ignore_errors=True)
        return
    for name in (MANIFEST, UNFINISHED, LOCK):
        (folder / name).unlink(missing_ok=True)


def claim(
    folder: str | os.PathLike,
    command: str,
    config: Any,
    *,
    resume: bool = False,
    exclusive: bool = False,
    ignore: Iterable[str] = (),
) -> Path:
    """Lock ``folder`` and make sure it is ``command``'s with this config; write the manifest.

    Parameters
    ----------
    command : the command that writes the folder ("train", "mse", ...)
    config : its config (a dict or dataclass); hashed without ``argv`` and the keys in ``ignore``
    resume : the caller continues the run and compares configs itself (``train --resume``)
    exclusive : an existing run of the same command and config is refused too unless ``resume``
        (``train``: a finished or interrupted run is continued, never started over)
    """
    folder = make_folder(folder)
    held = holds_lock(folder)
    _lock(folder, command)
    h = config_hash(config, _ignored(command, config, ignore))
    try:
        if _check(folder, command, h, resume=resume, exclusive=exclusive):  # new, or a folder with no results
            atomic_write_json(folder / MANIFEST, {"format": FORMAT, "command": command, "config_hash": h})
    except BaseException:
        if not held:
            release(folder)
        raise
    if not held:
        _note_holder(folder, command)
    return folder


def _has_results(folder: Path) -> bool:
    """Whether anything measured is in the folder (a result or a metrics row): a command that failed before
    measuring anything (bad input found late) leaves nothing that another config could lose."""
    m = folder / "metrics.jsonl"
    return (folder / "results.json").exists() or (m.exists() and m.stat().st_size > 0)


def check_claim(
    folder: str | os.PathLike,
    command: str,
    config: Any,
    *,
    resume: bool = False,
    exclusive: bool = False,
    ignore: Iterable[str] = (),
    probe_lock: bool = True,
) -> None:
    """What :func:`claim` would refuse, found without creating, locking or writing anything.

    A command whose setup is slow or can fail on its input (``train``: loading the model, reading the data) checks
    its folder this way first, and claims it only once that setup has passed: an error on the way leaves no
    folder, manifest or lock behind, and the next try is not refused. ``probe_lock``: also refuse a folder whose
    lock a live process holds (the lock is taken and dropped at once; one process of a multi-process launch
    probes, or two probes could see each other).
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise RunFolderError(f"--out {folder} is a file, not a folder; choose a new --out")
    if not folder.exists():
        parent = next((p for p in folder.absolute().parents if p.exists()), None)
        if parent is not None and (not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK)):
            why = "is a file" if not parent.is_dir() else "is not writable"
            raise RunFolderError(f"cannot create the run folder {folder} ({parent} {why}); choose a writable --out")
        return
    if not os.access(folder, os.W_OK | os.X_OK):
        raise RunFolderError(f"the run folder {folder} is not writable; choose a writable --out")
    if probe_lock and (folder / LOCK).exists() and not holds_lock(folder):
        _lock(folder, command)
        release(folder)
    _check(folder, command, config_hash(config, _ignored(command, config, ignore)), resume=resume, exclusive=exclusive)


def _ignored(command: str, config: Any, ignore: Iterable[str]) -> set[str]:
    """The config keys left out of the manifest's hash: ``ignore``, the extendable ones, an LM sweep's checked ones."""
    out = set(ignore) | set(EXTENDABLE.get(command, ()))
    if command == "sweep" and isinstance(config, dict) and "train_config" in config:
        out |= set(LM_SWEEP_CHECKED)
    return out


def _check(folder: Path, command: str, h: str, *, resume: bool, exclusive: bool) -> bool:
    """Refuse what ``command`` with config hash ``h`` may not write into; whether the manifest is to be (re)written."""
    m = read_manifest(folder)
    again = "--resume with the same config" if exclusive else "the same config"
    if m is None:
        present = [f for f in RUN_FILES if (folder / f).exists()]
        if present and not (resume and (folder / "config.json").exists()):
            raise RunFolderError(
                f"{folder} already holds {', '.join(present)} without a run manifest ({MANIFEST}: written by another "
                f"tool or an older ugrpo); choose a new --out"
            )
    elif m["command"] != command:
        check_owner(folder, command)
    elif not resume and (exclusive or (m["config_hash"] != h and _has_results(folder))):
        what = "a run" if m["config_hash"] == h else "a run with another config"
        if (folder / UNFINISHED).exists():
            what = "an unfinished r" + what[3:]
        raise RunFolderError(
            f"{folder} already holds {what} of 'ugrpo {command}'; choose a new --out, or rerun with {again}"
        )
    return m is None or m.get("config_hash") != h and not resume
