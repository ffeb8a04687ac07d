"""How long ``--help`` and an input error take to come back, before and after the lazy imports (issue 23 item 2).

Each case is a fresh ``python -m ugrpo.cli ...`` process, run against two copies of the package side by side: this
checkout and the tree of ``--before REV`` (default 920d0fa, main before the lazy imports; extracted with
``git archive`` into a temporary folder). The runs alternate (before, after, before, ...) so that load changes hit
both; each case runs ``--repeats`` times (default 5) per version, with a fresh ``--out`` folder each time. The
child processes get the user's default environment for threads (``UGRPO_THREADS`` and ``OMP_NUM_THREADS``
removed), so the thread choice is measured too. One extra run per case and version under ``python -X importtime``
records the total import time and which heavy modules (torch, transformers, trl, matplotlib, scipy) were imported.

Run: ``.venv/bin/python benchmarks/bench_cli_startup.py [--before REV] [--repeats 5]``
-> benchmarks/results/local/cli_startup.json (reference: benchmarks/results/cli_startup.json)
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "trl", "matplotlib", "scipy")


def cases(tmp: Path) -> dict[str, list[str]]:
    """name -> argv after ``python -m ugrpo.cli`` ({out} is replaced by a fresh folder per run)."""
    return {
        "ugrpo --help": ["--help"],
        "train --help": ["train", "--help"],
        "train: G does not divide N": ["train", "--out", "{out}", "--budget.group-size", "3"],
        "train: missing model folder": ["train", "--out", "{out}", "--model.name", str(tmp / "no-such-model")],
        "train: gsm8k without its data": ["train", "--out", "{out}", "--task.name", "gsm8k"],
        "mse --help": ["mse", "--help"],
        "plan --help": ["plan", "--help"],
        "sweep --help": ["sweep", "--help"],
    }


def extract(rev: str, dest: Path) -> Path:
    """The ``ugrpo`` package of ``rev`` under ``dest`` (``git archive``)."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = dest / "before.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev, "ugrpo"], stdout=f, check=True)
    with tarfile.open(archive) as t:
        t.extractall(dest, filter="data")
    return dest


def child_env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("UGRPO_THREADS", "OMP_NUM_THREADS", "PYTHONPATH")}
    return {**env, "PYTHONPATH": str(tree)}


def run_once(tree: Path, argv: list[str], out: Path, *, importtime: bool = False) -> tuple[float, int, str]:
    cmd = [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "ugrpo.cli",
           *[a.replace("{out}", str(out)) for a in argv]]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=child_env(tree), capture_output=True, text=True, cwd=out.parent)
    return time.perf_counter() - t0, done.returncode, done.stderr


def import_profile(stderr: str) -> dict:
    """Total import time (top-level modules' cumulative microseconds) and the heavy modules imported."""
    total, names = 0, set()
    for m in re.finditer(r"^import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)$", stderr, re.M):
        names.add(m.group(3))
        if m.group(2) == " ":
            total += int(m.group(1))
    return {"import_s": total / 1e6, "heavy_imported": [h for h in HEAVY if h in names]}


def _timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default="920d0fa", help="the revision to compare against (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp_name:
        tmp = Path(tmp_name)
        trees = {"before": extract(args.before, tmp / "before"), "after": ROOT}
        load = [os.getloadavg()[0]]
        python_start = statistics.median(_timed([sys.executable, "-c", "pass"]) for _ in range(3))
        rows = {}
        for name, argv in cases(tmp).items():
            times: dict[str, list[float]] = {"before": [], "after": []}
            codes: dict[str, set[int]] = {"before": set(), "after": set()}
            for i in range(args.repeats):
                for version, tree in trees.items():
                    out = tmp / f"run-{version}-{len(rows)}-{i}"
                    t, rc, _ = run_once(tree, argv, out)
                    times[version].append(t)
                    codes[version].add(rc)
            profile = {v: import_profile(run_once(tree, argv, tmp / f"imp-{v}-{len(rows)}", importtime=True)[2])
                       for v, tree in trees.items()}
            med = {v: statistics.median(t) for v, t in times.items()}
            rows[name] = {
                "argv": argv,
                **{v: {"median_s": med[v], "min_s": min(times[v]), "times_s": times[v], "exit_codes": sorted(codes[v]),
                       **profile[v]} for v in trees},
                "ratio_before_over_after": med["before"] / med["after"],
            }
            print(f"{name:32s} before {med['before']:6.2f} s  after {med['after']:6.2f} s  "
                  f"x{med['before'] / med['after']:5.1f}  heavy after: {profile['after']['heavy_imported']}")
        load.append(os.getloadavg()[0])
    path = write_result("cli_startup", {
        "before_rev": args.before, "repeats": args.repeats, "python_startup_s": python_start,
        "load_average_1min": {"start": load[0], "end": load[1]}, "cases": rows,
    })
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
