"""One folder per run (DESIGN.md): config.json, metrics.jsonl, results.json, plots, report.

Writers are atomic (write to a temp file, fsync, rename) so a crash or Ctrl-C never leaves a
half-written JSON file; ``metrics.jsonl`` is appended and flushed one line at a time so the
rows finished so far are on disk whenever the run stops.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["RunDir", "to_jsonable", "atomic_write_text", "atomic_write_json", "read_jsonl"]


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, tensors, numpy scalars/arrays, paths -> plain JSON types; NaN/inf -> None."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (bool, int, str)) or obj is None:
        return obj
    if hasattr(obj, "tolist"):  # torch.Tensor, numpy array or scalar
        return to_jsonable(obj.tolist())
    if hasattr(obj, "item"):
        return to_jsonable(obj.item())
    return str(obj)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(to_jsonable(obj), indent=2, allow_nan=False) + "\n")


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


class RunDir:
    """A run folder: ``config.json``, ``metrics.jsonl``, ``results.json``, plots, report."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    def file(self, name: str) -> Path:
        return self.path / name

    def write_config(self, config: Any) -> None:
        atomic_write_json(self.file("config.json"), config)

    def read_config(self) -> dict | None:
        p = self.file("config.json")
        return json.loads(p.read_text()) if p.exists() else None

    def append_metrics(self, row: dict) -> None:
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
