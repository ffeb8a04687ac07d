"""Coverage of the prompt-IS certificate's posterior interval (stats.is_certificate, docs/math.md M59), exact truth.

On the instances of bench_allocation.py, each repetition simulates a fresh history of ``steps`` uniform steps (N/4
prompts x 4 samples, ugrpo.experiments.allocate.simulated_history), computes the law of ``uniform-is`` / ``ustat-is``
as the trainer does (ugrpo.stats.is_guard.guarded_law: the posterior's law through the held-out guard, M78; the
budget N and B = N / G of the best uniform G, as in bench_allocation.py) and its certificate: the posterior median
and 95% posterior interval of R = S(q, G_x) / S(1/P, G) from 1000 joint draws of every prompt's moments (M59). The
TRUE R uses the exact per-prompt moments with the same law. Reported per instance, rule and history length: the
share of repetitions whose interval holds the true R (binomial SE), overall and over the repetitions whose law is
not uniform prompts (uniform prompts have R = 1 in every draw and in truth, so they are covered trivially), the
share that missed by promising more than the law gives (``miss_overstated``: true R above the interval), the mean
interval width, the mean true and posterior-median R, and how often each guard candidate was used.

Run: ``nice -n 10 python benchmarks/bench_is_certificate.py`` -> benchmarks/results/local/is_certificate.json.
``--seed-offset K``: other instances of the same kinds. ``--ship`` also writes the pooled coverage per history length
that ``ugrpo train``'s report quotes (ugrpo/data/calibration/is_certificate_coverage.json, read by
ugrpo.report.coverage); ``--ship-from RESULT.json`` writes it from an earlier result without running.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_allocation import INSTANCES, _env  # noqa: E402
from common import write_result  # noqa: E402

from ugrpo.experiments.allocate import AllocateConfig, build_lab, simulated_history  # noqa: E402
from ugrpo.stats.allocation import best_uniform  # noqa: E402
from ugrpo.stats.is_certificate import is_certificate  # noqa: E402
from ugrpo.stats.is_guard import GUARD_G_MIN, guarded_law  # noqa: E402
from ugrpo.stats.prompt_is import second_moment  # noqa: E402

RULES = ("uniform-is", "ustat-is")
SHIP = Path(__file__).resolve().parent.parent / "ugrpo" / "data" / "calibration" / "is_certificate_coverage.json"


def _share(k: int, n: int) -> dict:
    p = k / n if n else math.nan
    return {"share": p, "se": math.sqrt(p * (1 - p) / n) if n else math.nan, "n": n}


def _cell(env, lab, budget: int, rule: str, steps: int, reps: int, seed: int) -> dict:
    G, _ = best_uniform(lab.c1, lab.c2, lab.c3, budget, g_min=2, g_max=64)
    B, P = budget // G, env.n_prompts
    cfg = AllocateConfig(budget=budget, history_steps=steps, rules=(rule,))
    s_u = second_moment(np.full(P, 1.0 / P), np.full(P, G), lab.true)
    hit = hit_law = n_law = over = 0
    width, true_r, med_r, secs, choices = [], [], [], [], Counter()
    for rep in range(reps):
        hist = simulated_history(env, cfg, torch.Generator().manual_seed(seed * 100003 + rep))
        t0 = time.perf_counter()
        gl = guarded_law(rule, hist, B, budget, lam=cfg.is_lambda, g_min=GUARD_G_MIN, g_max=cfg.g_max,
                         level=cfg.safe_level, tol=cfg.safe_tol)
        c = is_certificate(gl.posterior, gl.law, G, seed=rep)
        secs.append(time.perf_counter() - t0)
        true = second_moment(gl.law.q, gl.law.sizes, lab.true) / s_u
        inside = c.ratio_low <= true <= c.ratio_high
        hit += inside
        over += true > c.ratio_high
        choices[gl.choice] += 1
        if gl.choice != "uniform":
            n_law += 1
            hit_law += inside
        width.append(c.ratio_high - c.ratio_low)
        true_r.append(true)
        med_r.append(c.ratio)
    cov, cov_law = _share(hit, reps), _share(hit_law, n_law)
    return {"coverage": cov["share"], "coverage_se": cov["se"], "reps": reps,
            "coverage_non_uniform": cov_law["share"], "coverage_non_uniform_se": cov_law["se"], "non_uniform": n_law,
            "miss_overstated": over / reps, "mean_width": float(np.mean(width)),
            "mean_true_ratio": float(np.mean(true_r)), "mean_median_ratio": float(np.mean(med_r)),
            "choices": dict(choices), "law_and_certificate_ms": 1000 * float(np.mean(secs))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--steps", default="10")
    ap.add_argument("--rules", default=",".join(RULES))
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--only", default="", help="comma-separated instance names (default: all)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--ship", action="store_true", help=f"also write the coverage table the trainer's report quotes "
                                                        f"to {SHIP}")
    ap.add_argument("--ship-from", default=None, help="write that table from an earlier result JSON; run nothing")
    a = ap.parse_args()
    if a.ship_from:
        ship(json.loads(Path(a.ship_from).read_text()), a.ship_from)
        return
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    rows = []
    only = {x for x in a.only.split(",") if x}
    for k, (name, budget, spec) in enumerate(INSTANCES):
        if only and name not in only:
            continue
        env = _env(spec, a.seed_offset)
        lab = build_lab(env, 0)
        for rule in a.rules.split(","):
            for steps in (int(s) for s in a.steps.split(",")):
                rows.append({"instance": name, "budget": budget, "rule": rule, "history_steps": steps,
                             **_cell(env, lab, budget, rule, steps, a.reps, seed=k + a.seed_offset)})
                print({k2: (round(v, 4) if isinstance(v, float) else v) for k2, v in rows[-1].items()}, flush=True)
    hits = sum(r["coverage"] * r["reps"] for r in rows)
    n = sum(r["reps"] for r in rows)
    law_hits = sum(r["coverage_non_uniform"] * r["non_uniform"] for r in rows if r["non_uniform"])
    n_law = sum(r["non_uniform"] for r in rows)
    payload = {"description": "coverage of the prompt-IS certificate's 95% posterior interval for the TRUE "
                              "second-moment ratio S(q, G_x) / S(uniform, G) of the trainer's guarded law (exact "
                              "synthetic lab)", "level": 0.95, "seed_offset": a.seed_offset, "rows": rows,
               "pooled": {"coverage": hits / n, "reps": n, "coverage_non_uniform": law_hits / n_law if n_law else None,
                          "non_uniform": n_law},
               "seconds": time.perf_counter() - t0}
    path = write_result("is_certificate", payload, Path(a.out) if a.out else None)
    print(f"wrote {path}")
    if a.ship:
        ship(payload, str(path))


def ship(result: dict, source: str) -> None:
    """Write the per-history-length pooled coverage that ``ugrpo train``'s report quotes (ugrpo.report.coverage)."""
    rows = result["rows"]
    by_steps = []
    for steps in sorted({r["history_steps"] for r in rows}):
        cell = [r for r in rows if r["history_steps"] == steps]
        n = sum(r["reps"] for r in cell)
        by_steps.append({"history_steps": steps, "coverage": sum(r["coverage"] * r["reps"] for r in cell) / n,
                         "reps": n, "cells": len(cell), "cell_min": min(r["coverage"] for r in cell),
                         "cell_max": max(r["coverage"] for r in cell)})
    SHIP.parent.mkdir(parents=True, exist_ok=True)
    SHIP.write_text(json.dumps({"level": result.get("level", 0.95), "by_history_steps": by_steps,
                                "source": "benchmarks/bench_is_certificate.py", "result": Path(source).name},
                               indent=2) + "\n")
    print(f"wrote {SHIP}")


if __name__ == "__main__":
    main()
