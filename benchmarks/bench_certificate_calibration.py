"""Coverage of the allocation certificate's interval (stats.certificate, docs/math.md M45, M60, M61), exact truth.

On the instances of bench_allocation.py (the demo, the four heterogeneous ones of issue 12 and the three kinds of
issue 19), each repetition simulates a fresh history of ``steps`` uniform steps (N/4 prompts x 4 samples,
ugrpo.experiments.allocate.history_sums), draws one batch of B = N/8 prompts, chooses sizes as the trainer's
``ustat`` does (the one predictor's posterior, ugrpo.stats.predict, and the safe rule, ugrpo.stats.safe), and
computes the certificate as the trainer does: draws from the predictor's posterior under 16 draws of the
population model (ugrpo.stats.population, M60), the interval widened by the history's factor (M61). The TRUE ratio
(within-batch MSE of the chosen sizes over uniform G = 8, M33) uses the exact per-prompt moments with the same
sizes. Reported per instance and history length: the share of repetitions whose interval holds the true ratio
(binomial SE), the same for the posterior quantiles before the widening, the misses on each side
(``miss_overstated``: true ratio ABOVE the interval, it promised more gain than the sizes give;
``miss_understated``: below), the mean interval width, the mean true and posterior-median ratios, how often the
guard moved the sizes, the mean samples per visited prompt of the histories. One batch per history: the
repetitions are independent. Diagnostic ``coverage_p_only``: the same interval with the TRUE per-prompt score
moments m_1, m_0 and eta put into every posterior (only p uncertain): the p part alone.

``z``: per repetition, how far the true ratio lies from the median in units of the posterior half-width on its side
(log scale); an interval widened by k holds it iff z <= k. ``--fit-widening`` writes, per history size (samples per
visited prompt, the buckets of stats.certificate.WIDEN), the smallest k with which the cells together reach 95% and
each at least 90%: the factors stats.certificate.WIDEN holds (M61), fitted on development offsets only (100, 200).

Run: ``nice -n 10 python benchmarks/bench_certificate_calibration.py`` -> benchmarks/results/local/
certificate_calibration.json; ``--ship`` also writes the coverage table the trainer quotes
(ugrpo/data/calibration/certificate_coverage.json, read by ugrpo.report.coverage). ``--seed-offset K[,K2]``: other
instances of the same kinds (0: the benchmark's fixed instances; settings are chosen on others).
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
from common import results_folder, write_result  # noqa: E402

from ugrpo.experiments.allocate import AllocateConfig, build_lab, history_sums  # noqa: E402
from ugrpo.stats.certificate import WIDEN, certificate, samples_per_prompt, widening  # noqa: E402
from ugrpo.stats.exact_mse import prompt_error  # noqa: E402
from ugrpo.stats.population import REPLICATES, population_posteriors  # noqa: E402
from ugrpo.stats.predict import posterior, posterior_means  # noqa: E402
from ugrpo.stats.safe import choose_sizes  # noqa: E402

SHIP = Path(__file__).resolve().parent.parent / "ugrpo" / "data" / "calibration" / "certificate_coverage.json"
G = 8
TARGET = 0.95  # the coverage the development cells of a history size reach together with the fitted widening (M61)
CELL_FLOOR = 0.90  # ... and each of them at least


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


def _z(true: float, med: float, lo: float, hi: float) -> float:
    """Distance of the true ratio from the median in units of the posterior half-width on its side (log scale)."""
    lt, lm = math.log(true), math.log(med)
    half = math.log(hi) - lm if lt > lm else lm - math.log(lo)
    return abs(lt - lm) / max(half, 1e-300)


def _cell(env, lab, budget: int, steps: int, reps: int, seed: int, widen: bool) -> dict:
    B = budget // G
    cfg = AllocateConfig(budget=budget, history_steps=steps)
    hit = hit_post = hit_p = moved = over = under = 0
    l1, l0, eta = _true_scores(lab)
    width, true_r, med_r, secs, zs, nbar, ks = [], [], [], [], [], [], []
    for rep in range(reps):
        h = history_sums(env, cfg, torch.Generator().manual_seed(seed * 100003 + rep))
        idx = np.random.default_rng([seed, rep, 5]).integers(env.n_prompts, size=B)
        rng = np.random.default_rng([seed, rep, 6])
        post = posterior(h, idx)
        sizes, choice = choose_sizes("ustat", post, budget, G, g_max=4 * G, rng=rng)
        moved += int(choice.blend != 0.0)
        st = posterior_means(post)
        t0 = time.perf_counter()  # what the trainer adds for the certificate (M60, M61)
        posts = population_posteriors(h, idx, post.hyper, rng=np.random.default_rng([seed, rep, 7]))
        k = widening(h) if widen else 1.0
        c = certificate(posts, sizes, G, st.c2, st.c3, seed=rep, widen=k)
        secs.append(time.perf_counter() - t0)
        known = [dataclasses.replace(p, logm=np.stack([l1[idx], l0[idx]], 1), logm_cov=np.zeros((B, 2, 2)),
                                     logm_slope=None, eta=eta[idx], eta_sd=np.zeros(B), seen=np.ones(B, bool))
                 for p in posts]
        cp = certificate(known, sizes, G, st.c2, st.c3, seed=rep, widen=k)
        t = lab.true.take(idx)
        true = prompt_error(t.c2, t.c3, sizes).sum() / prompt_error(t.c2, t.c3, np.full(B, G)).sum()
        hit += int(c.ratio_low <= true <= c.ratio_high)
        over += int(true > c.ratio_high)  # the interval promised more gain than there is
        under += int(true < c.ratio_low)
        hit_post += int(c.ratio_low_posterior <= true <= c.ratio_high_posterior)
        hit_p += int(cp.ratio_low <= true <= cp.ratio_high)
        zs.append(_z(true, c.ratio, c.ratio_low_posterior, c.ratio_high_posterior))
        width.append(c.ratio_high - c.ratio_low)
        true_r.append(true)
        med_r.append(c.ratio)
        nbar.append(samples_per_prompt(h))
        ks.append(k)
    cov, cp, cpost = hit / reps, hit_p / reps, hit_post / reps
    return {"coverage": cov, "coverage_se": math.sqrt(cov * (1 - cov) / reps), "reps": reps,
            "miss_overstated": over / reps, "miss_understated": under / reps,
            "coverage_posterior": cpost, "coverage_p_only": cp,
            "coverage_p_only_se": math.sqrt(cp * (1 - cp) / reps), "widen": float(np.mean(ks)),
            "mean_width": float(np.mean(width)), "mean_true_ratio": float(np.mean(true_r)),
            "mean_median_ratio": float(np.mean(med_r)), "guard_moved_share": moved / reps,
            "samples_per_prompt": float(np.mean(nbar)), "z_q95": float(np.quantile(zs, TARGET)), "z": zs,
            "certificate_ms": 1000 * float(np.mean(secs))}


def _table() -> list[list]:
    """stats.certificate.WIDEN as JSON (the open last bucket's bound as null)."""
    return [[None if math.isinf(hi) else hi, k] for hi, k in WIDEN]


def fit_widening(rows: list[dict], table=WIDEN) -> list[dict]:
    """Per bucket of ``table`` (stats.certificate.WIDEN, or the prompt-IS certificate's IS_WIDEN, M89; samples per
    visited prompt): the smallest factor, rounded up to 0.05, with which the bucket's cells together cover TARGET of
    their repetitions and every one of them covers at least CELL_FLOOR (M61): the larger of the pooled TARGET
    quantile of z and the largest cell's CELL_FLOOR quantile. A row is a cell with ``z`` (its repetitions' z),
    ``samples_per_prompt``, ``instance``, ``seed_offset``, ``history_steps`` (and ``rule`` for IS_WIDEN)."""
    out, lo = [], 0.0
    for hi, _ in table:
        cells = [r for r in rows if lo <= r["samples_per_prompt"] < hi]
        need, worst = 1.0, None
        if cells:
            pooled = float(np.quantile(np.concatenate([r["z"] for r in cells]), TARGET))
            worst = max(cells, key=lambda r: np.quantile(r["z"], CELL_FLOOR))
            need = max(pooled, float(np.quantile(worst["z"], CELL_FLOOR)))
        out.append({"samples_per_prompt_below": None if math.isinf(hi) else hi, "cells": len(cells),
                    "widen": max(1.0, math.ceil(need * 20 - 1e-9) / 20),
                    "worst": f"{worst['instance']}{' ' + worst['rule'] if 'rule' in worst else ''} offset "
                             f"{worst['seed_offset']} at {worst['history_steps']} steps" if worst else None})
        lo = hi
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--steps", default="2,10,50")
    ap.add_argument("--seed-offset", default="0", help="comma-separated make-env seed offsets (0: the fixed ones)")
    ap.add_argument("--only", default="", help="comma-separated instance names (default: all)")
    ap.add_argument("--no-widen", action="store_true", help="the posterior quantiles only (no M61 factor)")
    ap.add_argument("--fit-widening", action="store_true",
                    help="also fit the M61 factors on these cells -> certificate_widening.json (development offsets)")
    ap.add_argument("--out", type=results_folder, default=None, help="results folder, default benchmarks/results/local")
    ap.add_argument("--ship", action="store_true", help=f"also write the coverage table to {SHIP}")
    a = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    rows = []
    only = {x for x in a.only.split(",") if x}
    offsets = [int(x) for x in a.seed_offset.split(",")]
    if a.ship and (a.no_widen or a.fit_widening):
        raise SystemExit("--ship writes what the trainer does: drop --no-widen / --fit-widening")
    for off in offsets:
        for k, (name, budget, spec) in enumerate(INSTANCES):
            if only and name not in only:
                continue
            env = _env(spec, off)
            lab = build_lab(env, 0)
            for steps in (int(s) for s in a.steps.split(",")):
                rows.append({"instance": name, "seed_offset": off, "budget": budget, "B": budget // G, "G": G,
                             "history_steps": steps,
                             **_cell(env, lab, budget, steps, a.reps, seed=k + off, widen=not a.no_widen)})
                print({k2: (round(v, 4) if isinstance(v, float) else v) for k2, v in rows[-1].items() if k2 != "z"},
                      flush=True)
    payload = {"description": "coverage of the certificate's nominal-95% interval for the TRUE within-batch MSE "
                              "ratio of the trainer's ustat sizes / uniform G (exact synthetic lab)", "level": 0.95,
               "replicates": REPLICATES, "widening": _table() if not a.no_widen else None,
               "seed_offsets": offsets, "rows": rows, "seconds": time.perf_counter() - t0}
    out = Path(a.out) if a.out else None
    path = write_result("certificate_calibration", payload, out)
    print(f"wrote {path}")
    if a.fit_widening:
        fit = fit_widening(rows)
        print(fit)
        cells = [{k2: r[k2] for k2 in ("instance", "seed_offset", "history_steps", "samples_per_prompt",
                                       "coverage_posterior", "z_q95", "z")} for r in rows]
        payload = {"target": TARGET, "cell_floor": CELL_FLOOR, "seed_offsets": offsets, "reps": a.reps,
                   "buckets": fit, "cells": cells}
        print(f"wrote {write_result('certificate_widening', payload, out)}")
    if a.ship:
        SHIP.parent.mkdir(parents=True, exist_ok=True)
        cells = [{"instance": r["instance"], "seed_offset": r["seed_offset"], "history_steps": r["history_steps"],
                  "coverage": r["coverage"], "se": r["coverage_se"], "reps": r["reps"],
                  "miss_overstated": r["miss_overstated"], "miss_understated": r["miss_understated"]} for r in rows]
        src = (f"benchmarks/bench_certificate_calibration.py --reps {a.reps} --seed-offset {a.seed_offset} -> "
               f"{path.name}")
        SHIP.write_text(json.dumps({"level": 0.95, "replicates": REPLICATES, "widening": _table(),
                                    "source": src, "cells": cells}, indent=1) + "\n")
        print(f"wrote {SHIP}")


if __name__ == "__main__":
    main()
