"""One folder per run (DESIGN.md): config.json, metrics.jsonl, results.json, plots, report.

Writers are atomic (write to a temp file, fsync, rename) so a crash or Ctrl-C never leaves a
half-written JSON file; ``metrics.jsonl`` is appended and flushed one line at a time so the
rows finished so far are on disk whenever the run stops.

A folder says whether it is finished. The first write of a run (its config, a metrics row, its results)
creates the marker file :data:`UNFINISHED`; writing the report (``report.md``, ``report.html``), the last file
every command writes, removes it. A folder that holds ``results.json`` next to ``UNFINISHED`` stopped part way
(a full disk, a kill, an error after the results): :func:`finished_results` and :meth:`RunDir.finished_results`,
which every "is this run done?" check reads, see no result there, so the run is done again, never skipped.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ugrpo import fileio
from ugrpo.errors import RunFolderError
from ugrpo.fileio import (
    atomic_write_json,
    atomic_write_text,
    file_mode,
    follow_umask,
    naming,
    read_json,
    read_text,
    to_jsonable,
)
from ugrpo.runlock import UNFINISHED

__all__ = [
    "RunDir", "to_jsonable", "atomic_write_text", "atomic_write_json", "read_jsonl", "file_mode", "repair_metrics",
    "MetricsRepair", "follow_umask", "UNFINISHED", "finished_results", "is_unfinished",
]

FIX = "restore it from a copy, or choose a new --out"
"""What to do about a damaged run-folder file"""


def is_unfinished(folder: str | os.PathLike) -> bool:
    """Whether a command started writing ``folder`` and has not written its report since."""
    return (Path(folder) / UNFINISHED).exists()


def _read_object(path: Path) -> dict | None:
    """The JSON object in ``path`` (None if the file is absent); damage is a RunFolderError naming the file."""
    if not path.exists():
        return None
    try:
        data = read_json(path)
    except (OSError, ValueError) as e:
        raise RunFolderError(f"{e}; {FIX}") from None
    if not isinstance(data, dict):
        raise RunFolderError(f"{path} holds a JSON {type(data).__name__}, not an object; {FIX}")
    return data


def finished_results(folder: str | os.PathLike) -> dict | None:
    """``results.json`` of a run that finished (its report written, no :data:`UNFINISHED` marker), else None.

    A damaged ``results.json`` (not JSON, not an object) is no finished run either: the run is done again and the
    file rewritten, as for a run that stopped part way.
    """
    folder = Path(folder)
    if is_unfinished(folder):
        return None
    try:
        return _read_object(folder / "results.json")
    except RunFolderError:
        return None


def read_jsonl(path: str | os.PathLike) -> Iterator[dict]:
    """Rows of a JSONL file; a torn last line (a crash mid-write) is skipped, others must parse."""
    path = Path(path)
    if not path.exists():
        return
    lines = read_text(path, "move the file away, or choose a new --out").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                return
            raise ValueError(f"{path}: line {i + 1} is not valid JSON ({e})") from e


@dataclasses.dataclass(frozen=True)
class MetricsRepair:
    """What :func:`repair_metrics` changed: rows kept, a torn last line dropped, rows after the checkpoint
    dropped, and the steps in ``[0, step]`` that have no row (a gap the file cannot fill)."""

    kept: int
    torn_line_dropped: bool
    rows_after_dropped: int
    missing_steps: tuple[int, ...]


def repair_metrics(path: str | os.PathLike, step: int) -> MetricsRepair:
    """Make ``metrics.jsonl`` match a checkpoint at ``step`` before a resume appends to it.

    A torn last line (a crash mid-write) and the rows after ``step`` (recomputed by the resume) are
    dropped; one row per step is kept (the last written); the steps ``0..step`` with no row are
    returned so the caller can report the gap. The file is rewritten atomically.
    """
    path = Path(path)
    lines = read_text(path, "move the file away to resume").splitlines() if path.exists() else []
    torn = False
    by_step: dict[int, dict] = {}
    after = 0
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                torn = True
                continue
            raise ValueError(f"{path}: line {i + 1} is not valid JSON ({e}); move the file away to resume") from e
        k = int(row.get("step", 0))
        if k > step:
            after += 1
        else:
            by_step[k] = row
    rows = [by_step[k] for k in sorted(by_step)]
    atomic_write_text(path, "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows))
    missing = tuple(k for k in range(step + 1) if k not in by_step)
    return MetricsRepair(kept=len(rows), torn_line_dropped=torn, rows_after_dropped=after, missing_steps=missing)


def _end_line(path: Path) -> None:
    """If ``path`` ends inside a line (a write cut short by a crash or a full disk), cut that torn line off."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        f.truncate(f.read().rfind(b"\n") + 1)
        f.flush()
        os.fsync(f.fileno())


class RunDir:
    """A run folder: ``config.json``, ``metrics.jsonl``, ``results.json``, plots, report."""

    def __init__(self, path: str | os.PathLike):
        from ugrpo.runlock import make_folder

        self.path = make_folder(path)
        self._line_ended = False
        self._started = False

    def file(self, name: str) -> Path:
        return self.path / name

    def start(self) -> None:
        """Mark the folder :data:`UNFINISHED` (once per run; every writer of run files calls it first)."""
        if self._started and self.file(UNFINISHED).exists():
            return
        import socket
        import time

        atomic_write_text(self.file(UNFINISHED), (
            f"a ugrpo command started writing this folder (pid {os.getpid()} on {socket.gethostname()}, "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}) and has not finished: its files may be partial or stale. Run "
            "the same command again to finish it (ugrpo train: add --resume). The command removes this file when it "
            "writes its report.\n"))
        self._started = True

    def finish(self) -> None:
        """Remove the :data:`UNFINISHED` marker: every file of the run is written."""
        self.file(UNFINISHED).unlink(missing_ok=True)
        self._started = False

    @property
    def unfinished(self) -> bool:
        return is_unfinished(self.path)

    def claim(self, command: str, config: Any, **kw: Any) -> None:
        """Lock the folder and check it is ``command``'s with this config (:func:`ugrpo.runlock.claim`); mark it
        unfinished."""
        from ugrpo.runlock import claim

        claim(self.path, command, config, **kw)
        self.start()

    def write_config(self, config: Any) -> None:
        """Write ``config.json``; a config naming its ``command`` claims the folder first (manifest, lock)."""
        if isinstance(config, dict) and isinstance(config.get("command"), str):
            self.claim(config["command"].split()[0], config)
        self.start()
        atomic_write_json(self.file("config.json"), config)

    def read_config(self, command: str | None = None) -> dict | None:
        """``config.json`` (None if absent). With ``command``: a folder whose manifest names another command is
        refused first (:func:`ugrpo.runlock.check_owner`), so its config is never read as ``command``'s."""
        if command is not None:
            from ugrpo.runlock import check_owner

            check_owner(self.path, command)
        return _read_object(self.file("config.json"))

    def append_metrics(self, row: dict) -> None:
        path = self.file("metrics.jsonl")
        self.start()
        with naming(path):
            if not self._line_ended:  # never append to a torn last line (left by a crash or a full disk)
                _end_line(path)
                self._line_ended = True
            with open(path, "ab") as f:
                fileio.write_chunk(f, (json.dumps(to_jsonable(row), allow_nan=False) + "\n").encode(), path)
                f.flush()
                os.fsync(f.fileno())

    def metrics(self) -> list[dict]:
        return list(read_jsonl(self.file("metrics.jsonl")))

    def write_results(self, results: Any) -> None:
        self.start()
        atomic_write_json(self.file("results.json"), results)

    def read_results(self) -> dict | None:
        """``results.json`` as written, finished or not (None if absent); see :meth:`finished_results`."""
        return _read_object(self.file("results.json"))

    def finished_results(self) -> dict | None:
        """``results.json`` of a finished run, else None (:func:`finished_results`)."""
        return finished_results(self.path)

    def write_report(self, markdown: str, name: str = "report.md") -> Path:
        """Write the report, the last file of a run: the folder is finished (:meth:`finish`)."""
        atomic_write_text(self.file(name), markdown)
        self.finish()
        return self.file(name)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"
