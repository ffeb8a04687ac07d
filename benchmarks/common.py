"""Tiny benchmark helpers: alternate the timed functions, take medians, write JSON results.

Results go to ``benchmarks/results/local/<name>.json`` (untracked: ``make bench`` never rewrites a
tracked file). A benchmark's ``--out`` is another results folder (:func:`results_folder`, as ``write_result`` takes
it; ``bench_train_step.py`` and ``bench_train_allocation.py``, which write one file, take its path). The committed
reference results, measured on 2 shared CPU cores and quoted in the README, are ``benchmarks/results/<name>.json``;
compare a local run against them. Timings on shared CPUs are noisy: the functions are called in alternation
(A B A B ...) so that load changes hit all of them.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

REFERENCE_DIR = Path(__file__).resolve().parent / "results"
"""The committed reference results (tracked; updated by hand when the README's numbers are re-measured)."""
RESULTS_DIR = REFERENCE_DIR / "local"
"""Where a benchmark run writes (in .gitignore)."""


def time_alternating(fns: dict[str, Callable[[], object]], *, repeats: int = 5, warmup: int = 1) -> dict[str, dict]:
    """Call each function ``warmup`` times, then ``repeats`` rounds of one call each, in alternation.

    Returns ``{name: {"median_s", "min_s", "times_s"}}``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: {"median_s": statistics.median(t), "min_s": min(t), "times_s": t} for name, t in times.items()}


def environment() -> dict:
    """Where the numbers were measured."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "unix_time": time.time(),
    }


def results_folder(value: str) -> Path:
    """``--out``: the results folder a benchmark's :func:`write_result` writes ``<name>.json`` into (argparse
    ``type``). A ``.json`` name or an existing file is refused while the arguments are parsed, before any work
    (it would become a folder named like a file)."""
    import argparse

    out = Path(value)
    if out.suffix == ".json" or out.exists() and not out.is_dir():
        raise argparse.ArgumentTypeError(
            f"{value} names a file; --out is the results folder (the benchmark writes <folder>/<name>.json): give a "
            f"folder, e.g. --out {out.parent / out.stem if out.suffix == '.json' else RESULTS_DIR}")
    return out


def write_result(name: str, payload: dict, results_dir: Path | None = None) -> Path:
    """Write ``payload`` (plus the environment) to ``<results_dir>/<name>.json`` atomically, as strict JSON: a NaN or
    infinite value (an interval from one seed, an unbounded end) is written as null, as the run folders do."""
    from ugrpo.fileio import to_jsonable

    out_dir = Path(results_dir) if results_dir is not None else RESULTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    doc = to_jsonable({"name": name, "environment": environment(), **payload})
    tmp.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    tmp.replace(path)
    return path
