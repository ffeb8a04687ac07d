"""Coverage of the allocation certificate's posterior interval (ugrpo.stats.certificate, docs/math.md M45), exact truth.

On the heterogeneous instances of bench_allocation.py (plus the demo), each repetition simulates a fresh history of
``steps`` uniform steps (N/4 prompts x 4 samples, ugrpo.experiments.allocate.history_sums), draws one batch of
B = N/8 prompts, chooses ``ustat`` sizes from the history's plug-in moments (Beta(1, 1) prior, shrink 4: the
trainer's defaults), and computes the certificate (the ratio within-batch MSE of the chosen sizes over uniform
G = 8, M33) with its 95% posterior interval from the same history. The TRUE ratio uses the exact per-prompt
moments with the same sizes. Reported per instance and history length: the share of repetitions whose interval
holds the true ratio (binomial SE), the mean interval width, how often the plug-in point lies inside the
interval, and the mean true, plug-in and posterior-median ratios. One batch per history: the repetitions are
independent. Diagnostic ``coverage_p_only``: the same interval with the TRUE per-prompt score moments m_1, m_0,
||g(x)||^2 put into the posterior (only p uncertain), which separates the Beta part from the score part.

Run: ``nice -n 10 python benchmarks/bench_certificate_calibration.py`` -> benchmarks/results/local/
certificate_calibration.json (a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import dataclasses
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
from ugrpo.stats.allocation import allocate  # noqa: E402
from ugrpo.stats.certificate import certificate, fit_beta_prior, history_posterior  # noqa: E402
from ugrpo.stats.exact_mse import prompt_error  # noqa: E402
from ugrpo.stats.history import FIELDS, history_stats  # noqa: E402

G = 8


def _true_scores(lab) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(m1, m0, g2) per prompt from the exact (p, c2, c3, ||g||^2), inverting M38's polynomials (p != 1/2)."""
    t = lab.true
    p, g2 = t.value, t.g_norm2
    q = np.maximum(p * (1 - p), 1e-300)
    e1, e2 = (t.c3 - g2) / q, (t.c2 + g2) / q                        # p m1 + (1-p) m0, (1-p) m1 + p m0
    det = p**2 - (1 - p) ** 2
    det = np.where(np.abs(det) < 1e-9, 1e-9, det)
    return (p * e1 - (1 - p) * e2) / det, (p * e2 - (1 - p) * e1) / det, g2


def _cell(env, lab, budget: int, steps: int, reps: int, seed: int) -> dict:
    B = budget // G
    cfg = AllocateConfig(budget=budget, history_steps=steps)
    hit = inside = hit_p = 0
    m1t, m0t, g2t = _true_scores(lab)
    width, true_r, plug_r, med_r, secs = [], [], [], [], []
    for rep in range(reps):
        h = history_sums(env, cfg, torch.Generator().manual_seed(seed * 100003 + rep))
        idx = np.random.default_rng([seed, rep, 5]).integers(env.n_prompts, size=B)
        st = history_stats(*(h[k] for k in FIELDS)).take(idx)
        sizes = allocate("ustat", st, budget, g_max=4 * G).sizes
        t0 = time.perf_counter()
        a, b = fit_beta_prior(h["successes"], h["samples"])
        c = certificate(history_posterior(idx, **h, prior_a=a, prior_b=b), sizes, G, st.c2, st.c3, seed=rep)
        secs.append(time.perf_counter() - t0)
        post = history_posterior(idx, **h, prior_a=a, prior_b=b)
        known = dataclasses.replace(post, m1=m1t[idx], m0=m0t[idx], shape1=np.full(B, np.inf),
                                    shape0=np.full(B, np.inf), g2=g2t[idx], g2_sd=np.zeros(B))
        cp = certificate(known, sizes, G, st.c2, st.c3, seed=rep)
        t = lab.true.take(idx)
        true = prompt_error(t.c2, t.c3, sizes).sum() / prompt_error(t.c2, t.c3, np.full(B, G)).sum()
        hit += c.ratio_low <= true <= c.ratio_high
        hit_p += cp.ratio_low <= true <= cp.ratio_high
        inside += c.ratio_low <= c.plugin <= c.ratio_high
        width.append(c.ratio_high - c.ratio_low)
        true_r.append(true)
        plug_r.append(c.plugin)
        med_r.append(c.ratio)
    cov, cp = hit / reps, hit_p / reps
    return {"coverage": cov, "coverage_se": math.sqrt(cov * (1 - cov) / reps), "reps": reps,
            "coverage_p_only": cp, "coverage_p_only_se": math.sqrt(cp * (1 - cp) / reps),
            "mean_width": float(np.mean(width)), "plugin_inside": inside / reps,
            "mean_true_ratio": float(np.mean(true_r)),
            "mean_plugin_ratio": float(np.mean(plug_r)), "mean_median_ratio": float(np.mean(med_r)),
            "certificate_ms": 1000 * float(np.mean(secs))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--steps", default="2,10,50")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    rows = []
    for k, (name, budget, spec) in enumerate(INSTANCES):
        env = _env(spec)
        lab = build_lab(env, 0)
        for steps in (int(s) for s in a.steps.split(",")):
            rows.append({"instance": name, "budget": budget, "B": budget // G, "G": G, "history_steps": steps,
                         **_cell(env, lab, budget, steps, a.reps, seed=k)})
            print({k2: (round(v, 4) if isinstance(v, float) else v) for k2, v in rows[-1].items()}, flush=True)
    path = write_result("certificate_calibration", {
        "description": "coverage of the certificate's 95% posterior interval for the TRUE within-batch MSE ratio "
                       "ustat sizes / uniform G (exact synthetic lab)", "level": 0.95, "rows": rows,
        "seconds": time.perf_counter() - t0}, Path(a.out) if a.out else None)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
