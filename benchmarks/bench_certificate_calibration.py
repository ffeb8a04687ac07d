"""Coverage of the allocation certificate's posterior interval (stats.certificate, docs/math.md M45, M51), exact truth.

On the instances of bench_allocation.py (the demo, the four heterogeneous ones of issue 12 and the three kinds of
issue 19), each repetition simulates a fresh history of ``steps`` uniform steps (N/4 prompts x 4 samples,
ugrpo.experiments.allocate.history_sums), draws one batch of B = N/8 prompts, chooses sizes as the trainer's
``ustat`` does (the one predictor's posterior, ugrpo.stats.predict, and the safe rule, ugrpo.stats.safe), and
computes the certificate (the ratio within-batch MSE of the chosen sizes over uniform G = 8, M33) with its 95%
posterior interval from the same history: draws pooled over ``--boot`` bootstrap refits of the population model
(M51; 0 = the fitted model only). The TRUE ratio uses the exact per-prompt moments with the same sizes. Reported per
instance and history length: the share of repetitions whose interval holds the true ratio (binomial SE), the mean
interval width, the mean true and posterior-median ratios, how often the guard moved the sizes. One batch per
history: the repetitions are independent. ``miss_overstated``: the share whose true ratio lies ABOVE the interval
(it promised more gain than the sizes give; the rest of the misses under-state the gain). Diagnostic
``coverage_p_only``: the same interval with the TRUE per-prompt score moments m_1, m_0 and eta put into the
posterior (only p uncertain): the p part alone.

Run: ``nice -n 10 python benchmarks/bench_certificate_calibration.py`` -> benchmarks/results/local/
certificate_calibration.json; ``--ship`` also writes the coverage table the trainer quotes
(ugrpo/data/calibration/certificate_coverage.json, read by ugrpo.report.coverage). ``--seed-offset K``: other
instances of the same kinds (settings are chosen there, never on the benchmark's own instances).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_allocation import INSTANCES, _env  # noqa: E402
from common import write_result  # noqa: E402

from ugrpo.experiments.allocate import AllocateConfig, build_lab, history_sums  # noqa: E402
from ugrpo.stats.certificate import certificate  # noqa: E402
from ugrpo.stats.exact_mse import prompt_error  # noqa: E402
from ugrpo.stats.predict import bootstrap_posteriors, posterior, posterior_means  # noqa: E402
from ugrpo.stats.safe import choose_sizes  # noqa: E402

SHIP = Path(__file__).resolve().parent.parent / "ugrpo" / "data" / "calibration" / "certificate_coverage.json"
G = 8
BOOT = 0  # bootstrap refits of the population model per certificate (M51); the trainer's default


def _true_scores(lab) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(log m1, log m0, eta) per prompt from the exact (p, c2, c3, ||g||^2), inverting M38's polynomials (p != 1/2)
    and ||g||^2 = eta p(1-p) E||W (Z - p)||^2 (M48)."""
    t = lab.true
    p, g2 = t.value, t.g_norm2
    q = np.maximum(p * (1 - p), 1e-300)
    e1, e2 = (t.c3 - g2) / q, (t.c2 + g2) / q                        # p m1 + (1-p) m0, (1-p) m1 + p m0
    det = p**2 - (1 - p) ** 2
    det = np.where(np.abs(det) < 1e-9, 1e-9, det)
    m1, m0 = (p * e1 - (1 - p) * e2) / det, (p * e2 - (1 - p) * e1) / det
    e = t.c2 + g2
    eta = np.where(e > 0, g2 / (q * np.maximum(e, 1e-300)), 0.0)
    return np.log(np.maximum(m1, 1e-300)), np.log(np.maximum(m0, 1e-300)), eta


def _cell(env, lab, budget: int, steps: int, reps: int, seed: int, boot: int) -> dict:
    B = budget // G
    cfg = AllocateConfig(budget=budget, history_steps=steps)
    hit = hit_p = moved = over = 0
    l1, l0, eta = _true_scores(lab)
    width, true_r, med_r, secs = [], [], [], []
    for rep in range(reps):
        h = history_sums(env, cfg, torch.Generator().manual_seed(seed * 100003 + rep))
        idx = np.random.default_rng([seed, rep, 5]).integers(env.n_prompts, size=B)
        rng = np.random.default_rng([seed, rep, 6])
        t0 = time.perf_counter()
        post = posterior(h, idx)
        sizes, choice = choose_sizes("ustat", post, budget, G, g_max=4 * G, rng=rng)
        moved += int(choice.blend != 0.0)
        st = posterior_means(post)
        posts = bootstrap_posteriors(h, idx, scores=True, replicates=boot, rng=rng) if boot else post
        c = certificate(posts, sizes, G, st.c2, st.c3, seed=rep)
        secs.append(time.perf_counter() - t0)
        known = dataclasses.replace(post, logm=np.stack([l1[idx], l0[idx]], 1), logm_cov=np.zeros((B, 2, 2)),
                                    eta=eta[idx], eta_sd=np.zeros(B), seen=np.ones(B, bool))
        cp = certificate(known, sizes, G, st.c2, st.c3, seed=rep)
        t = lab.true.take(idx)
        true = prompt_error(t.c2, t.c3, sizes).sum() / prompt_error(t.c2, t.c3, np.full(B, G)).sum()
        hit += int(c.ratio_low <= true <= c.ratio_high)
        over += int(true > c.ratio_high)  # the interval promised more gain than there is
        hit_p += int(cp.ratio_low <= true <= cp.ratio_high)
        width.append(c.ratio_high - c.ratio_low)
        true_r.append(true)
        med_r.append(c.ratio)
    cov, cp = hit / reps, hit_p / reps
    return {"coverage": cov, "coverage_se": math.sqrt(cov * (1 - cov) / reps), "reps": reps,
            "miss_overstated": over / reps, "coverage_p_only": cp,
            "coverage_p_only_se": math.sqrt(cp * (1 - cp) / reps),
            "mean_width": float(np.mean(width)), "mean_true_ratio": float(np.mean(true_r)),
            "mean_median_ratio": float(np.mean(med_r)), "guard_moved_share": moved / reps,
            "certificate_ms": 1000 * float(np.mean(secs))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--steps", default="2,10,50")
    ap.add_argument("--boot", type=int, default=BOOT)
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--only", default="", help="comma-separated instance names (default: all)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--ship", action="store_true", help=f"also write the coverage table to {SHIP}")
    a = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    rows = []
    only = {x for x in a.only.split(",") if x}
    for k, (name, budget, spec) in enumerate(INSTANCES):
        if only and name not in only:
            continue
        env = _env(spec, a.seed_offset)
        lab = build_lab(env, 0)
        for steps in (int(s) for s in a.steps.split(",")):
            rows.append({"instance": name, "budget": budget, "B": budget // G, "G": G, "history_steps": steps,
                         **_cell(env, lab, budget, steps, a.reps, seed=k + a.seed_offset, boot=a.boot)})
            print({k2: (round(v, 4) if isinstance(v, float) else v) for k2, v in rows[-1].items()}, flush=True)
    payload = {"description": "coverage of the certificate's 95% posterior interval for the TRUE within-batch MSE "
                              "ratio of the trainer's ustat sizes / uniform G (exact synthetic lab)", "level": 0.95,
               "boot": a.boot, "seed_offset": a.seed_offset, "rows": rows, "seconds": time.perf_counter() - t0}
    path = write_result("certificate_calibration", payload, Path(a.out) if a.out else None)
    print(f"wrote {path}")
    if a.ship:
        SHIP.parent.mkdir(parents=True, exist_ok=True)
        cells = [{"instance": r["instance"], "history_steps": r["history_steps"], "coverage": r["coverage"],
                  "se": r["coverage_se"], "reps": r["reps"], "miss_overstated": r["miss_overstated"]} for r in rows]
        src = f"benchmarks/bench_certificate_calibration.py --reps {a.reps} --boot {a.boot} -> {path.name}"
        SHIP.write_text(json.dumps({"level": 0.95, "boot": a.boot, "source": src, "cells": cells}, indent=1) + "\n")
        print(f"wrote {SHIP}")


if __name__ == "__main__":
    main()
