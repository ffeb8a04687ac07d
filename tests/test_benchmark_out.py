"""A benchmark's ``--out`` is a results folder (benchmarks/common.py's ``results_folder``, the convention of the
benchmarks that write through ``write_result``): a ``.json`` name is one argparse error before any work, not a
folder named like a file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_prediction.py"


def _run(tmp_path: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), "--reps", "2", "--steps", "1", "--out", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)


def test_a_json_out_is_one_error_before_any_work_and_a_folder_gets_the_result(tmp_path):
    p = _run(tmp_path, tmp_path / "X.json")
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout, p.stderr)
    assert "argument --out" in lines[-1] and "names a file; --out is the results folder" in lines[-1], p.stderr
    assert f"--out {tmp_path / 'X'}" in lines[-1], lines[-1]
    assert not (tmp_path / "X.json").exists()
    p = _run(tmp_path, tmp_path / "results")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "results" / "prediction.json").is_file()


def test_a_result_is_strict_json_with_nan_as_null(tmp_path):
    """An interval from one seed (NaN) or an unbounded end (inf) is written as null: Python's json wrote NaN, which
    strict JSON readers refuse (bench_trl_allocation --seeds 1)."""
    import json
    import math

    sys.path.insert(0, str(BENCH.parent))
    try:
        from common import write_result
    finally:
        sys.path.remove(str(BENCH.parent))
    path = write_result("strict", {"ci": [math.nan, math.inf], "ok": 1.5}, tmp_path)

    def refuse(token):
        raise ValueError(token)

    doc = json.loads(path.read_text(), parse_constant=refuse)
    assert doc["ci"] == [None, None] and doc["ok"] == 1.5 and doc["name"] == "strict"
