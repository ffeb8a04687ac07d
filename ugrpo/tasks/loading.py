"""Reading question/answer rows from local files: JSONL, Parquet, or a saved ``datasets`` folder.

Nothing is downloaded: a path must exist on disk. Accepted sources:

* ``*.jsonl`` / ``*.json`` with one JSON object per line (blank lines are ignored);
  rows are located as ``file:line N`` (1-based line numbers);
* ``*.parquet`` (read with pyarrow); rows are located as ``file:row N`` (0-based);
* a folder written by ``datasets.Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``
  (read with ``datasets.load_from_disk``), or any other folder of data files that
  ``datasets.load_dataset(path)`` reads offline. For a ``DatasetDict`` the split is
  chosen by the caller (``"train"`` for train paths, ``"test"`` for eval paths).

Every row is returned with its location, so that a task can report a bad row as
``file:line N: field 'answer' is missing``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["Row", "BadRowPolicy", "read_rows", "text_field", "BadRow", "RowError"]

BadRowPolicy = Literal["error", "skip"]


@dataclass(frozen=True)
class Row:
    """One record and where it came from (``file:line 3`` / ``file:row 2`` / ``dir[train]:row 7``)."""

    where: str
    index: int
    fields: Mapping[str, Any]


@dataclass(frozen=True)
class BadRow:
    """A row a task could not use, and why (kept when ``on_bad_row="skip"``)."""

    where: str
    problem: str


class RowError(ValueError):
    """A row that a task cannot use; the message names the file, the line/row and the field."""


def read_rows(path: str | os.PathLike[str], *, split: str | None = None) -> list[Row]:
    """All rows of a local JSONL / Parquet file or saved ``datasets`` folder.

    Parameters
    ----------
    path : str or PathLike
        The file or folder.
    split : str, optional
        The split to read when the folder holds several (a ``DatasetDict``). None takes
        the only split, or raises if there are several.

    Raises
    ------
    FileNotFoundError
        If the path does not exist.
    RowError
        If a JSONL line is not a JSON object.
    ValueError
        For an unknown file type or a missing split.
    """
    p = Path(path)
    if not p.exists():
        where = "" if p.is_absolute() else f"; a relative path is read from the current directory, {Path.cwd()}"
        raise FileNotFoundError(f"data file {str(p)!r} does not exist (nothing is downloaded: give a local "
                                f"path{where})")
    if p.is_dir():
        return _read_dataset_dir(p, split)
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return _read_jsonl(p)
    if suffix == ".parquet":
        return _read_parquet(p)
    raise ValueError(
        f"data file {str(p)!r}: unknown type {suffix!r}; use .jsonl (one JSON object per line), "
        ".parquet, or a folder saved with datasets' save_to_disk"
    )


def _read_jsonl(p: Path) -> list[Row]:
    rows: list[Row] = []
    with p.open(encoding="utf-8-sig") as f:  # a byte-order mark (some editors write one) is not part of line 1
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{p}:line {lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise RowError(f"{where}: not valid JSON ({e.msg}); each line must be one JSON object") from None
            if not isinstance(obj, dict):
                raise RowError(f"{where}: expected a JSON object per line, got {type(obj).__name__}")
            rows.append(Row(where, len(rows), obj))
    return rows


def _read_parquet(p: Path) -> list[Row]:
    import pyarrow.parquet as pq

    table = pq.read_table(p)
    return [Row(f"{p}:row {i}", i, rec) for i, rec in enumerate(table.to_pylist())]


def _read_dataset_dir(p: Path, split: str | None) -> list[Row]:
    import datasets

    if (p / "dataset_dict.json").exists() or (p / "state.json").exists():
        ds: Any = datasets.load_from_disk(str(p))
    else:
        ds = datasets.load_dataset(str(p))
    if isinstance(ds, (datasets.DatasetDict, dict)):
        names = list(ds.keys())
        if split is None:
            if len(names) != 1:
                raise ValueError(f"dataset folder {str(p)!r} has splits {names}; choose one")
            split = names[0]
        if split not in ds:
            raise ValueError(f"dataset folder {str(p)!r} has no split {split!r}; its splits are {names}")
        ds = ds[split]
        label = f"{p}[{split}]"
    else:
        label = str(p)
    return [Row(f"{label}:row {i}", i, rec) for i, rec in enumerate(ds)]


def text_field(row: Row, name: str) -> str:
    """The field ``name`` of ``row`` as a non-empty string, else :class:`RowError` naming row and field."""
    if name not in row.fields or row.fields[name] is None:
        present = ", ".join(sorted(map(str, row.fields))) or "none"
        raise RowError(f"{row.where}: field {name!r} is missing (fields present: {present})")
    value = row.fields[name]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise RowError(f"{row.where}: field {name!r} must be text, got {type(value).__name__} {value!r}")
    text = str(value)
    if not text.strip():
        raise RowError(f"{row.where}: field {name!r} is empty")
    return text
