"""The certificate's measured coverage, read from the calibration benchmark's result (docs/allocation.md A6).

``benchmarks/bench_certificate_calibration.py --ship`` writes ``ugrpo/data/calibration/certificate_coverage.json``
(a small table made from its result: per instance, seed offset (0: the benchmark's fixed instances, others: new
instances of the same kinds) and history length the coverage of the nominal-95% interval, its standard error, the
repetitions and the misses on each side); the console line of ``ugrpo train`` and its report quote it from here,
so the number shown is the one measured, never a hand-written string.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

__all__ = ["COVERAGE_FILE", "IS_COVERAGE_FILE", "certificate_coverage", "coverage_phrase", "is_coverage_phrase"]

COVERAGE_FILE = Path(__file__).resolve().parent.parent / "data" / "calibration" / "certificate_coverage.json"
IS_COVERAGE_FILE = COVERAGE_FILE.with_name("is_certificate_coverage.json")
"""the prompt-IS certificate's pooled coverage per history length (``benchmarks/bench_is_certificate.py --ship``)"""


@lru_cache(maxsize=1)
def certificate_coverage() -> dict | None:
    """The shipped coverage table ({"level", "cells": [{"instance", "seed_offset", "history_steps", "coverage",
    "se", "reps", "miss_overstated", "miss_understated"}], "source"}), or None when the file is absent or
    unreadable."""
    try:
        data = json.loads(COVERAGE_FILE.read_text())
    except (OSError, ValueError):
        return None
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list) or not cells or not all(isinstance(c.get("coverage"), (int, float)) for c in cells):
        return None
    return data


def coverage_phrase(short: bool = False) -> str:
    """``measured coverage 0.xx-0.yy, below 95% in k of n cells`` (short, the console) or a sentence with the cell
    count, the cells below 0.90 by name and the source (the report)."""
    data = certificate_coverage()
    if data is None:
        return "coverage not measured" if short else "its coverage has not been measured (no calibration table)"
    cells = data["cells"]
    cov = [float(c["coverage"]) for c in cells]
    lo, hi = min(cov), max(cov)
    level = float(data.get("level", 0.95))
    under = sum(c < level for c in cov)
    if short:
        return f"measured coverage {lo:.2f}-{hi:.2f}, below {level:.0%} in {under} of {len(cov)} cells"
    low = [c for c in cells if float(c["coverage"]) < 0.9]
    named = ", ".join(f"{_name(c)} at {c.get('history_steps', '?')} steps {float(c['coverage']):.2f}{_side(c)}"
                      for c in low)
    src = data.get("source", "benchmarks/bench_certificate_calibration.py")
    return (f"its measured coverage of the true ratio in the exact synthetic lab was {lo:.3g}-{hi:.3g} over "
            f"{len(cov)} cells (instances x history lengths; below {level:.0%} in {under}, below 0.90 in {len(low)}"
            f"{': ' + named if named else ''}; {src}, docs/allocation.md A6): the posterior's quantiles under draws "
            f"of its population model, widened by a factor calibrated by simulation on other instances, nominal "
            f"{level:.0%}; a measured coverage, not a guarantee")


def _name(cell: dict) -> str:
    off = cell.get("seed_offset", 0)
    return f"{cell.get('instance', '?')}{f' (new instance, offset {off})' if off else ''}"


def _side(cell: dict) -> str:
    """Which way the misses go: above (the sizes gain less than promised) or below the interval."""
    over, under = cell.get("miss_overstated"), cell.get("miss_understated")
    if not isinstance(over, (int, float)) or not isinstance(under, (int, float)):
        return ""
    return f" (true ratio above {over:.2f}, below {under:.2f})"


def is_coverage_phrase(short: bool = False) -> str:
    """How often the prompt-IS certificate's nominal interval held the true ratio in the lab, per history length,
    with its lowest cell where the table has one (``in 94% (2 steps of history; lowest cell 83%), 96% (10 steps ...)
    of the lab's histories``), and that it is widened when it is (M89), read from the shipped table; ``short`` (the
    console): ``lab coverage 94% (2 steps), 96% (10 steps)``."""
    try:
        data = json.loads(IS_COVERAGE_FILE.read_text())
        cells = data["by_history_steps"]
        parts = [f"{_pct(c['coverage'])} ({int(c['history_steps'])} steps of history"
                 + (f"; lowest cell {_pct(c['cell_min'])}" if "cell_min" in c else "") + ")" for c in cells]
        brief = [f"{_pct(c['coverage'])} ({int(c['history_steps'])} steps)" for c in cells]
    except (OSError, ValueError, KeyError, TypeError):
        return "coverage not measured" if short else "its coverage has not been measured (no calibration table)"
    if not parts:
        return "coverage not measured" if short else "its coverage has not been measured (no calibration table)"
    if short:
        return "lab coverage " + ", ".join(brief)
    wide = ", widened by a factor calibrated by simulation on other instances (M89)," if data.get("widening") else ""
    return f"its nominal {float(data.get('level', 0.95)):.0%} interval{wide} held the true ratio in " \
           f"{', '.join(parts)} of the lab's histories ({data.get('source', 'benchmarks/bench_is_certificate.py')})"


def _pct(share) -> str:
    """A share as a whole percentage, with one decimal where rounding would show 100% (or 0%) for less (more).

    >>> _pct(0.614), _pct(0.99625), _pct(1.0)
    ('61%', '99.6%', '100%')
    """
    v = float(share)
    s = f"{v:.0%}"
    return f"{v:.1%}" if s in ("100%", "0%") and 0.0 < v < 1.0 else s
