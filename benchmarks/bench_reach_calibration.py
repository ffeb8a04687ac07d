"""Coverage of the 'samples to reach uniform's final accuracy' ratio interval of ``ugrpo sweep --config --allocation``.

Synthetic sweeps with a known truth (no language model): each rule has an expected accuracy curve
mu(t) = a0 + gain * (1 - exp(-t / tau)) at evaluation steps 0, 20, ..., 100 (N samples per step); a seed's curve is
mu(t) + a seed offset (sd ``--seed-sd``, shared by its evaluations after step 0) + independent evaluation noise (sd
``--eval-sd``, e.g. a greedy accuracy on 100 problems); step 0 is the same for every seed (one initial model). The
truth is :func:`ugrpo.experiments.sweep.lm_alloc.reach_ratio` applied to the expected curves (the quantity the
estimator converges to with many seeds). Each scenario draws ``--sims`` sweeps of ``--seeds`` seeds per rule and
scores the paired percentile bootstrap interval (:func:`bootstrap_ratio`): coverage of the true ratio (an unbounded
upper end covers everything above its lower end; no interval is a miss), how often the point estimate is
'not reached', and the median interval.

Run: ``python benchmarks/bench_reach_calibration.py [--sims 200] [--reps 500]``
-> benchmarks/results/local/reach_calibration.json (a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import results_folder, write_result  # noqa: E402

from ugrpo.experiments.sweep.lm_alloc import bootstrap_ratio, reach_ratio  # noqa: E402

STEPS = np.arange(0, 101, 20)
N = 128
SCENARIOS = {  # name: {rule: (gain, tau)}; a0 = 0.40 for every rule
    "faster": {"uniform": (0.15, 40.0), "ustat": (0.15, 15.0)},
    "equal": {"uniform": (0.15, 40.0), "ustat": (0.15, 40.0)},
    "slightly faster": {"uniform": (0.15, 40.0), "ustat": (0.16, 30.0)},
}


def expected(gain: float, tau: float) -> np.ndarray:
    return 0.40 + gain * (1 - np.exp(-STEPS / tau))


def draw(mu: np.ndarray, seeds: int, rng: np.random.Generator, seed_sd: float, eval_sd: float) -> np.ndarray:
    acc = mu + rng.normal(0, seed_sd, (seeds, 1)) + rng.normal(0, eval_sd, (seeds, len(mu)))
    acc[:, 0] = mu[0]
    return np.clip(acc, 0, 1)


def scenario(rules: dict, args: argparse.Namespace, rng: np.random.Generator) -> dict:
    mus = {r: expected(*p) for r, p in rules.items()}
    samples = {r: np.tile(STEPS * float(N), (args.seeds, 1)) for r in rules}
    truth = reach_ratio({r: m[None, :] for r, m in mus.items()}, {r: s[:1] for r, s in samples.items()})
    true_ratio = truth["ustat"]["ratio"]
    cover = not_reached = 0
    lows, highs, points = [], [], []
    for i in range(args.sims):
        acc = {r: draw(m, args.seeds, rng, args.seed_sd, args.eval_sd) for r, m in mus.items()}
        point = reach_ratio(acc, samples)["ustat"]["ratio"]
        b = bootstrap_ratio(acc, samples, reps=args.reps, seed=i)["ustat"]
        lo, hi = b["ci_low"], b["ci_high"]
        not_reached += point is None
        points.append(np.nan if point is None else point)
        lows.append(np.nan if lo is None else lo)
        highs.append(np.inf if hi is None else hi)
        cover += lo is not None and lo <= true_ratio and (hi is None or true_ratio <= hi)  # no interval: a miss
    return {"true_ratio": true_ratio, "coverage": cover / args.sims, "sims": args.sims,
            "point_not_reached": not_reached / args.sims, "median_point": float(np.nanmedian(points)),
            "median_ci_low": float(np.nanmedian(lows)),
            "median_ci_high": None if np.isinf(np.median(highs)) else float(np.median(highs)),  # None: unbounded
            "frac_unbounded_high": float(np.isinf(highs).mean())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sims", type=int, default=200)
    p.add_argument("--reps", type=int, default=500)
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--seed-sd", type=float, default=0.02)
    p.add_argument("--eval-sd", type=float, default=0.04)
    p.add_argument("--out", type=results_folder, default=None, help="results folder, default benchmarks/results/local")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    t0 = time.time()
    out = {name: scenario(rules, args, rng) for name, rules in SCENARIOS.items()}
    for name, r in out.items():
        print(f"{name}: true {r['true_ratio']:.3f}, coverage {r['coverage']:.3f}, median point "
              f"{r['median_point']:.3f}, median CI [{r['median_ci_low']:.3f}, {r['median_ci_high'] or 'unbounded'}], "
              f"point not reached {r['point_not_reached']:.2f}", flush=True)
    config = {k: v for k, v in vars(args).items() if k != "out"}
    path = write_result("reach_calibration", {"config": config, "scenarios": out, "seconds": time.time() - t0},
                        args.out and Path(args.out))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
