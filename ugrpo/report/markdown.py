"""Markdown report helpers: tables, numbers, headers (generic; read only run-folder files).

A report is built from plain strings; these helpers only keep formatting consistent across
commands (synthetic experiments now, LM commands later).

Examples
--------
>>> print(md_table(["G", "mse"], [[2, 0.12345678], [4, None]]))
| G | mse |
|---|---|
| 2 | 0.1235 |
| 4 | - |
>>> fmt(1.23456e-5)
'1.235e-05'
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["count", "fmt", "fmt_ci", "fmt_values", "md_table", "text_table", "header", "image", "config_block",
           "task_text", "read_run"]


def count(n: int, noun: str) -> str:
    """``1 seed``, ``2 seeds``: a count with its noun in the right number.

    >>> count(1, "seed"), count(8, "seed")
    ('1 seed', '8 seeds')
    """
    return f"{n} {noun}{'' if n == 1 else 's'}"


def fmt_values(values: Sequence[Any], *, prefix: str = "G = ", none: str = "no G") -> str:
    """A list for a sentence, never a Python list: ``'G = 4, 8'``, or ``none`` when empty.

    >>> fmt_values([4, 8]), fmt_values([]), fmt_values([25, 50], prefix="steps ", none="no step")
    ('G = 4, 8', 'no G', 'steps 25, 50')
    """
    return prefix + ", ".join(str(v) for v in values) if len(values) else none


def fmt(v: Any, digits: int = 4) -> str:
    """A number for a table: 4 significant digits, scientific when small or large; None -> '-'."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return "-" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e5):
            return f"{v:.{digits - 1}e}"
        return f"{v:.{digits}g}"
    return str(v)


def fmt_ci(low: Any, high: Any, digits: int = 4) -> str:
    """'[low, high]' with ``fmt``; a None end prints as '-' (e.g. an unbounded upper end)."""
    return f"[{fmt(low, digits)}, {fmt(high, digits)}]"


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured markdown table; cells go through :func:`fmt`."""
    out = ["| " + " | ".join(str(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        if len(r) != len(headers):
            raise ValueError(f"md_table: row {list(r)} has {len(r)} cells, expected {len(headers)}")
        out.append("| " + " | ".join(fmt(c) for c in r) + " |")
    return "\n".join(out)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned table for stdout."""
    cells = [[str(h) for h in headers]] + [[fmt(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def header(title: str, argv: Sequence[str] | None = None) -> str:
    """Report title plus the command that produced it (shell-quoted)."""
    s = f"# {title}\n"
    if argv:
        s += "\nCommand:\n\n```\n" + " ".join(shlex.quote(a) for a in argv) + "\n```\n"
    return s


def task_text(task: dict[str, Any]) -> str:
    """``task `arithmetic` (difficulty=medium, n_train=200)``: a task and its effective options (the config file's
    with every command-line override applied), sorted by name."""
    opts = task.get("options") or {}
    text = ", ".join(f"{k}={v}" for k, v in sorted(opts.items()))
    return f"task `{task.get('name')}`" + (f" ({text})" if text else " (default options)")


def image(path: str, alt: str) -> str:
    """An embedded image link (relative to the report)."""
    return f"![{alt}]({path})"


def config_block(config: dict) -> str:
    """The resolved config as a fenced JSON block."""
    return "```json\n" + json.dumps(config, indent=2, sort_keys=True) + "\n```"


def read_run(path: str | Path) -> tuple[dict | None, list[dict], dict | None]:
    """(config, metrics rows, results) of a run folder; a missing file gives None / []."""
    from ugrpo.runs import RunDir  # local import: report must not create folders on import

    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"run folder {path} does not exist; pass the --out folder of a finished run")
    run = RunDir(path)
    return run.read_config(), run.metrics(), run.read_results()
