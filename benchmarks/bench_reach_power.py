"""How many seeds would a training study need to show 'samples to reach uniform's final accuracy <= goal'?

Plug-in power from a study already run: the per-seed held-out curves of a paired two-rule sweep (``uniform`` and one
other rule, the same seeds) stand for the population of seeds. A simulated study of n seeds draws n of them with
replacement (pairs kept), and is read the way ``ugrpo sweep --allocation`` reads a real one: the point ratio of
:func:`ugrpo.experiments.sweep.lm_alloc.reach_ratio` and its paired percentile bootstrap interval
(:func:`bootstrap_ratio`). Reported per n: how often the point is at most the goal, how often the interval has an
upper end at all and how often that end is at most the goal (what "the goal is shown" needs), the median upper end;
and, for comparison, how often the paired t-interval of the final accuracy difference lies above 0. The resampled
seeds repeat, so at n above the study's own seed count this is optimistic about the seed-to-seed spread (it cannot
invent curves unlike those seen).

Curves: ``--curves FILE`` (the JSON this script writes with ``--from-runs``), default
benchmarks/results/is_training_study_long600_curves.json (the 600-step mixed-pool study, seeds 0-23, docs/lm-sweep.md).
``--from-runs DIR [DIR ...]`` reads the sweep run folders ``DIR/N<N>-G<G>-<rule>-s<seed>/metrics.jsonl`` instead
and writes that curves file for later runs.

Run: ``python benchmarks/bench_reach_power.py [--sims 200] [--reps 500] [--seeds 12,24,48,96]``
-> benchmarks/results/local/reach_power.json (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REFERENCE_DIR, results_folder, write_result  # noqa: E402

from ugrpo.experiments.sweep.lm_alloc import bootstrap_ratio, eval_points, reach_ratio  # noqa: E402
from ugrpo.runs import read_jsonl  # noqa: E402
from ugrpo.stats.intervals import paired_t_interval  # noqa: E402

CURVES = REFERENCE_DIR / "is_training_study_long600_curves.json"
RUN = re.compile(r"N(\d+)-G(\d+)-(.+)-s(\d+)$")


def curves_from_runs(folders: list[Path], metric: str) -> dict:
    """{'metric', 'rules': {rule: {'seeds', 'acc' (S, C), 'samples' (S, C)}}} from sweep run folders (each run's
    evaluations as the sweep reads them, :func:`eval_points`); every rule must have the same seeds and checkpoints."""
    rules: dict[str, dict[int, tuple[list, list]]] = {}
    for folder in folders:
        for run in sorted(Path(folder).iterdir()):
            m = RUN.match(run.name)
            if not m or not (run / "metrics.jsonl").is_file():
                continue
            points, _ = eval_points(list(read_jsonl(run / "metrics.jsonl")), int(m.group(1)), [metric],
                                    rule=m.group(3))
            steps = sorted(points)
            rules.setdefault(m.group(3), {})[int(m.group(4))] = ([float(points[k][metric]) for k in steps],
                                                               [float(points[k]["samples"]) for k in steps])
    seeds = {r: sorted(v) for r, v in rules.items()}
    if "uniform" not in rules or len({tuple(s) for s in seeds.values()}) != 1:
        raise SystemExit(f"--from-runs: need uniform and every rule on the same seeds; found {seeds}")
    lengths = {len(a) for v in rules.values() for a, _ in v.values()}
    if len(lengths) != 1:
        raise SystemExit(f"--from-runs: the runs have different numbers of evaluations {sorted(lengths)}")
    return {"metric": metric, "sources": [str(f) for f in folders],
            "rules": {r: {"seeds": seeds[r], "acc": [v[s][0] for s in seeds[r]], "samples": [v[s][1] for s in seeds[r]]}
                      for r, v in rules.items()}}


def study(acc: dict, samples: dict, rule: str, goal: float, reps: int, seed: int) -> dict:
    """One simulated study read like the sweep: the point ratio, its bootstrap interval, the final difference."""
    point = reach_ratio(acc, samples)[rule]["ratio"]
    b = bootstrap_ratio(acc, samples, reps=reps, seed=seed)[rule]
    diff = paired_t_interval(acc[rule][:, -1].tolist(), acc["uniform"][:, -1].tolist())
    return {"point_at_goal": point is not None and point <= goal, "bounded": b["ci_high"] is not None,
            "shown": b["ci_high"] is not None and b["ci_high"] <= goal, "ci_high": b["ci_high"],
            "diff_above_0": diff.ci_low is not None and diff.ci_low > 0}


def power(data: dict, n: int, sims: int, reps: int, goal: float, rng: np.random.Generator) -> dict:
    rule = next(r for r in data["rules"] if r != "uniform")
    acc = {r: np.asarray(v["acc"], dtype=float) for r, v in data["rules"].items()}
    samples = {r: np.asarray(v["samples"], dtype=float) for r, v in data["rules"].items()}
    S = acc["uniform"].shape[0]
    rows = []
    for i in range(sims):
        idx = rng.integers(0, S, size=n)
        rows.append(study({r: a[idx] for r, a in acc.items()}, {r: s[idx] for r, s in samples.items()}, rule, goal,
                          reps, seed=i))
    highs = np.array([np.inf if r["ci_high"] is None else r["ci_high"] for r in rows])
    med = float(np.median(highs))
    return {"seeds": n, "sims": sims, "point_at_most_goal": float(np.mean([r["point_at_goal"] for r in rows])),
            "upper_end_bounded": float(np.mean([r["bounded"] for r in rows])),
            "goal_shown": float(np.mean([r["shown"] for r in rows])),
            "median_upper_end": None if np.isinf(med) else med,
            "final_difference_above_0": float(np.mean([r["diff_above_0"] for r in rows]))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--curves", type=Path, default=CURVES)
    p.add_argument("--from-runs", type=Path, nargs="+", default=None,
                   help="sweep run folders (their runs/ subfolders); writes the curves file given by --curves")
    p.add_argument("--metric", default="eval_pass1")
    p.add_argument("--goal", type=float, default=0.7)
    p.add_argument("--seeds", default="12,24,48,96")
    p.add_argument("--sims", type=int, default=200)
    p.add_argument("--reps", type=int, default=500)
    p.add_argument("--out", type=results_folder, default=None, help="results folder, default benchmarks/results/local")
    args = p.parse_args()
    if args.from_runs:
        data = curves_from_runs(args.from_runs, args.metric)
        args.curves.write_text(json.dumps(data) + "\n")
        print(f"wrote {args.curves}")
    if not args.curves.is_file():
        raise SystemExit(f"--curves {args.curves}: no such file; write one from a sweep's run folders with --from-runs "
                         "DIR [DIR ...] --curves FILE")
    data = json.loads(args.curves.read_text())
    acc = {r: np.asarray(v["acc"], dtype=float) for r, v in data["rules"].items()}
    samples = {r: np.asarray(v["samples"], dtype=float) for r, v in data["rules"].items()}
    rule = next(r for r in acc if r != "uniform")
    own = study(acc, samples, rule, args.goal, args.reps, seed=0)
    point = reach_ratio(acc, samples)[rule]["ratio"]
    print(f"{args.curves.name}: {acc['uniform'].shape[0]} seeds; {rule} reaches uniform's final {data['metric']} "
          f"after {point:.2f}x the samples (the plug-in truth), interval upper end "
          f"{own['ci_high'] if own['ci_high'] is not None else 'unbounded'}")
    rng = np.random.default_rng(0)
    t0 = time.time()
    rows = []
    for n in (int(s) for s in args.seeds.split(",")):
        r = power(data, n, args.sims, args.reps, args.goal, rng)
        rows.append(r)
        print(f"  {n:4d} seeds: point <= {args.goal} in {r['point_at_most_goal']:.0%}, upper end bounded in "
              f"{r['upper_end_bounded']:.0%}, <= {args.goal} (the goal shown) in {r['goal_shown']:.0%}, median upper "
              f"end {r['median_upper_end'] if r['median_upper_end'] is not None else 'unbounded'}; final "
              f"{data['metric']} difference above 0 in {r['final_difference_above_0']:.0%}", flush=True)
    config = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k not in ("out", "from_runs")}
    path = write_result("reach_power", {"config": config, "rule": rule, "plug_in_ratio": point,
                                        "study_itself": own, "power": rows, "seconds": time.time() - t0},
                        args.out and Path(args.out))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
