"""How well the one predictor predicts a prompt's error before sampling, as a function of its visits (issue 19).

On the instances of bench_allocation.py, for histories of ``--steps`` uniform steps (N/4 prompts x 4 samples, the
lab's simulated history, ugrpo.experiments.allocate.history_sums) and ``--reps`` independent histories each, the
predictor (ugrpo.stats.predict, docs/math.md M46-M49) gives every prompt's posterior; against the exact per-prompt
error f_x(4) = c2/4 + c3/12 (M33) it records, per instance and history length:

* ``spearman``: rank correlation over prompts of the posterior-mean f_x(4) with the true one (what ranks the
  allocation);
* ``sum_ratio``: sum of predicted over sum of true f_x(4) (calibration of the total);
* ``median_abs_log_ratio``: the typical per-prompt factor by which the prediction misses (exp of it);
* ``interval_coverage``: the share of prompts whose true f_x(4) lies in the central 90% posterior interval (400
  draws, M49): calibration of the per-prompt uncertainty;
* ``mean_visits``: visits per prompt in the history (the x axis), with the share of prompts never visited.

Means over the repetitions, with their standard errors. Run: ``python benchmarks/bench_prediction.py`` ->
benchmarks/results/local/prediction.json. Instances and history lengths are fixed before any result was seen.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_allocation import INSTANCES, _env  # noqa: E402
from common import results_folder, write_result  # noqa: E402

from ugrpo.experiments.allocate import AllocateConfig, build_lab, history_sums  # noqa: E402
from ugrpo.stats.exact_mse import prompt_error  # noqa: E402
from ugrpo.stats.predict import draw, posterior, posterior_means  # noqa: E402

STEPS = (1, 2, 5, 10, 20, 50)


def _rank(v: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(v)).astype(float)


def _one(env, lab, budget: int, steps: int, seed: int) -> dict:
    h = history_sums(env, AllocateConfig(budget=budget, history_steps=steps), torch.Generator().manual_seed(seed))
    post = posterior(h)
    st = posterior_means(post)
    ft = prompt_error(lab.true.c2, lab.true.c3, 4.0)
    fp = prompt_error(st.c2, st.c3, 4.0)
    _, c2, c3 = draw(post, np.random.default_rng(seed), 400)
    fd = prompt_error(c2, c3, 4.0)                                                   # (400, P)
    lo, hi = np.quantile(fd, (0.05, 0.95), axis=0)
    ok = (fp > 0) & (ft > 0)
    return {"spearman": float(np.corrcoef(_rank(fp), _rank(ft))[0, 1]), "sum_ratio": float(fp.sum() / ft.sum()),
            "median_abs_log_ratio": float(np.median(np.abs(np.log(fp[ok] / ft[ok])))),
            "interval_coverage": float(((ft >= lo) & (ft <= hi)).mean()),
            "mean_visits": float(h["visits"].mean()), "never_visited": float((h["visits"] == 0).mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", default=",".join(map(str, STEPS)))
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--out", type=results_folder, default=None, help="results folder, default benchmarks/results/local")
    a = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    rows = []
    for k, (name, budget, spec) in enumerate(INSTANCES):
        env = _env(spec, a.seed_offset)
        lab = build_lab(env, 0)
        for steps in (int(s) for s in a.steps.split(",")):
            runs = [_one(env, lab, budget, steps, 7919 * (k + a.seed_offset) + 101 * steps + r) for r in range(a.reps)]
            row = {"instance": name, "history_steps": steps, "reps": a.reps}
            for key in runs[0]:
                v = np.array([r[key] for r in runs])
                row[key] = float(v.mean())
                row[key + "_se"] = float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else 0.0
            rows.append(row)
            print(f"{name:16s} steps {steps:3d} visits {row['mean_visits']:6.2f} spearman {row['spearman']:.3f} "
                  f"sum_ratio {row['sum_ratio']:.3f} |log| {row['median_abs_log_ratio']:.3f} "
                  f"cover90 {row['interval_coverage']:.3f}", flush=True)
    path = write_result("prediction", {
        "description": "the predictor's per-prompt f_x(4) against the exact one, by history length (issue 19)",
        "seed_offset": a.seed_offset, "rows": rows, "seconds": time.perf_counter() - t0},
        Path(a.out) if a.out else None)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
