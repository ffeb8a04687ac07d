"""One folder per run (DESIGN.md): config.json, metrics.jsonl, results.json, plots, report.

Writers are atomic (write to a temp file, fsync, rename) so a crash or Ctrl-C never leaves a
half-written JSON file; ``metrics.jsonl`` is appended and flushed one line at a time so the
rows finished so far are on disk whenever the run stops.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ugrpo.fileio import atomic_write_json, atomic_write_text, file_mode, follow_umask, to_jsonable

__all__ = [
    "RunDir", "to_jsonable", "atomic_write_text", "atomic_write_json", "read_jsonl", "file_mode", "repair_metrics",
    "MetricsRepair", "follow_umask",
]


def read_jsonl(path: str | os.PathLike) -> Iterator[dict]:
    """Rows of a JSONL file; a torn last line (a crash mid-write) is skipped, others must parse."""
    path = Path(path)
    if not path.exists():
        return
    lines = path.read_text().splitlines()
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
    lines = path.read_text().splitlines() if path.exists() else []
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

    def file(self, name: str) -> Path:
        return self.path / name

    def claim(self, command: str, config: Any, **kw: Any) -> None:
        """Lock the folder and check it is ``command``'s with this config (:func:`ugrpo.runlock.claim`)."""
        from ugrpo.runlock import claim

        claim(self.path, command, config, **kw)

    def write_config(self, config: Any) -> None:
        """Write ``config.json``; a config naming its ``command`` claims the folder first (manifest, lock)."""
        if isinstance(config, dict) and isinstance(config.get("command"), str):
            self.claim(config["command"].split()[0], config)
        atomic_write_json(self.file("config.json"), config)

    def read_config(self) -> dict | None:
        p = self.file("config.json")
        return json.loads(p.read_text()) if p.exists() else None

    def append_metrics(self, row: dict) -> None:
        if not self._line_ended:  # never append to a torn last line (left by a crash or a full disk)
            _end_line(self.file("metrics.jsonl"))
            self._line_ended = True
        with open(self.file("metrics.jsonl"), "a") as f:
            f.write(json.dumps(to_jsonable(row), allow_nan=False) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def metrics(self) -> list[dict]:
        return list(read_jsonl(self.file("metrics.jsonl")))

    def write_results(self, results: Any) -> None:
        atomic_write_json(self.file("results.json"), results)

    def read_results(self) -> dict | None:
        p = self.file("results.json")
        return json.loads(p.read_text()) if p.exists() else None

    def write_report(self, markdown: str, name: str = "report.md") -> Path:
        atomic_write_text(self.file(name), markdown)
        return self.file(name)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"
