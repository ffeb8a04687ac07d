"""Coverage of the prompt-IS certificate's interval (stats.is_certificate, docs/math.md M59, M89), exact truth.

On the instances of bench_allocation.py, each repetition simulates a fresh history of ``steps`` uniform steps (N/4
prompts x 4 samples, ugrpo.experiments.allocate.simulated_history), computes the law of ``uniform-is`` / ``ustat-is``
as the trainer does (ugrpo.stats.is_guard.guarded_law: the posterior's law through the held-out guard, M78; the
budget N and B = N / G of the best uniform G, as in bench_allocation.py) and its certificate as the trainer does:
1000 joint draws of every prompt's moments from the predictor's posterior under 16 draws of its population model
(ugrpo.stats.population, M60), the median and the 2.5%/97.5% quantiles of R = S(q, G_x) / S(1/P, G) widened by the
history's factor of stats.is_certificate.IS_WIDEN (M89). The TRUE R uses the exact per-prompt moments with the same
law. Reported per instance, rule and history length: the share of repetitions whose interval holds the true R
(binomial SE), overall and over the repetitions whose law is not uniform prompts (uniform prompts have R = 1 in
every draw and in truth, so they are covered trivially), the misses on each side (``miss_overstated``: true R above
the interval, the law gains less than promised; ``miss_understated``: below), the mean interval width, the mean true
and posterior-median R, and how often each guard candidate was used. Side by side on the same histories: the
certificate as first built (``*_plain``: the one posterior's quantiles, M59), the population draws' quantiles before
the widening (``coverage_population``), and the guard's own held-out cross-fitted estimate of the chosen candidate
(M76: R -+ 1.96 se, ``*_held_out``; uniform prompts: exactly 1).

``z``: per repetition, how far the true R lies from the median in units of the population draws' half-width on its
side (log scale); an interval widened by k holds it iff z <= k. ``--fit-widening`` (development offsets only: 100,
200) writes, per bucket of IS_WIDEN (samples per visited prompt), the smallest k with which the cells together reach
95% and each at least 90% (bench_certificate_calibration.fit_widening, M61) -> is_certificate_widening.json;
``--fit-from A.json,B.json`` fits from earlier results (e.g. one process per offset) without running.

Run: ``nice -n 10 python benchmarks/bench_is_certificate.py`` -> benchmarks/results/local/is_certificate.json.
``--seed-offset K[,K2]``: other instances of the same kinds (0 and 7000: the evaluation offsets; settings are chosen
on 100 and 200). ``--ship`` also writes the coverage per history length and per cell that ``ugrpo train``'s report
quotes (ugrpo/data/calibration/is_certificate_coverage.json, read by ugrpo.report.coverage); ``--ship-from
A.json[,B.json]`` writes it from earlier results without running (several: merged into one result first, e.g. one
process per offset).
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
from bench_certificate_calibration import CELL_FLOOR, TARGET, _z, fit_widening  # noqa: E402
from common import results_folder, write_result  # noqa: E402

from ugrpo.experiments.allocate import AllocateConfig, build_lab, simulated_history  # noqa: E402
from ugrpo.stats.allocation import best_uniform  # noqa: E402
from ugrpo.stats.certificate import samples_per_prompt, widening  # noqa: E402
from ugrpo.stats.is_certificate import IS_WIDEN, is_certificate  # noqa: E402
from ugrpo.stats.is_guard import GUARD_G_MIN, guarded_law  # noqa: E402
from ugrpo.stats.population import REPLICATES, population_posteriors  # noqa: E402
from ugrpo.stats.prompt_is import second_moment  # noqa: E402

RULES = ("uniform-is", "ustat-is")
SHIP = Path(__file__).resolve().parent.parent / "ugrpo" / "data" / "calibration" / "is_certificate_coverage.json"


def _share(k: int, n: int) -> dict:
    p = k / n if n else math.nan
    return {"share": p, "se": math.sqrt(p * (1 - p) / n) if n else math.nan, "n": n}


def _cell(env, lab, budget: int, rule: str, steps: int, reps: int, seed: int, widen: bool) -> dict:
    G, _ = best_uniform(lab.c1, lab.c2, lab.c3, budget, g_min=2, g_max=64)
    B, P = budget // G, env.n_prompts
    cfg = AllocateConfig(budget=budget, history_steps=steps, rules=(rule,))
    s_u = second_moment(np.full(P, 1.0 / P), np.full(P, G), lab.true)
    z95 = 1.959963984540054
    n = {k: 0 for k in ("hit", "hit_law", "law", "over", "under", "hit_plain", "hit_pop", "hit_held")}
    width, w_plain, w_held, true_r, med_r, secs, zs, nbar, ks, choices = [], [], [], [], [], [], [], [], [], Counter()
    for rep in range(reps):
        hist = simulated_history(env, cfg, torch.Generator().manual_seed(seed * 100003 + rep))
        sums = hist.sums_for_prediction()
        t0 = time.perf_counter()
        gl = guarded_law(rule, hist, B, budget, lam=cfg.is_lambda, g_min=GUARD_G_MIN, g_max=cfg.g_max,
                         level=cfg.safe_level, tol=cfg.safe_tol)
        t1 = time.perf_counter()  # what the trainer adds for the certificate (M59, M60, M89)
        pops = population_posteriors(sums, np.arange(P), gl.posterior.hyper, rng=np.random.default_rng([seed, rep, 7]))
        k = widening(sums, IS_WIDEN) if widen else 1.0
        c = is_certificate(gl.posterior, gl.law, G, population=pops, seed=rep, widen=k)
        secs.append(time.perf_counter() - t1)
        plain = is_certificate(gl.posterior, gl.law, G, seed=rep)
        true = second_moment(gl.law.q, gl.law.sizes, lab.true) / s_u
        uniform = gl.choice == "uniform"
        inside = c.ratio_low <= true <= c.ratio_high
        n["hit"] += inside
        n["over"] += true > c.ratio_high
        n["under"] += true < c.ratio_low
        n["hit_plain"] += plain.ratio_low <= true <= plain.ratio_high
        n["hit_pop"] += c.ratio_low_posterior <= true <= c.ratio_high_posterior
        if uniform:  # R = 1 in every draw, in the held-out check and in truth
            n["hit_held"] += 1
            w_held.append(0.0)
            zs.append(0.0)
        else:
            chk = gl.checks[-1]
            lo, hi = chk.ratio - z95 * chk.se, chk.ratio + z95 * chk.se
            n["hit_held"] += lo <= true <= hi
            w_held.append(hi - lo)
            zs.append(_z(true, c.ratio, c.ratio_low_posterior, c.ratio_high_posterior))
            n["law"] += 1
            n["hit_law"] += inside
        choices[gl.choice] += 1
        width.append(c.ratio_high - c.ratio_low)
        w_plain.append(plain.ratio_high - plain.ratio_low)
        true_r.append(true)
        med_r.append(c.ratio)
        nbar.append(samples_per_prompt(sums))
        ks.append(k)
        secs[-1] = (t1 - t0, secs[-1])
    cov, cov_law = _share(n["hit"], reps), _share(n["hit_law"], n["law"])
    return {"coverage": cov["share"], "coverage_se": cov["se"], "reps": reps,
            "coverage_non_uniform": cov_law["share"], "coverage_non_uniform_se": cov_law["se"], "non_uniform": n["law"],
            "miss_overstated": n["over"] / reps, "miss_understated": n["under"] / reps,
            "mean_width": float(np.mean(width)), "coverage_plain": n["hit_plain"] / reps,
            "mean_width_plain": float(np.mean(w_plain)), "coverage_population": n["hit_pop"] / reps,
            "coverage_held_out": n["hit_held"] / reps, "mean_width_held_out": float(np.mean(w_held)),
            "widen": float(np.mean(ks)), "samples_per_prompt": float(np.mean(nbar)),
            "mean_true_ratio": float(np.mean(true_r)), "mean_median_ratio": float(np.mean(med_r)),
            "choices": dict(choices), "law_ms": 1000 * float(np.mean([a for a, _ in secs])),
            "certificate_ms": 1000 * float(np.mean([b for _, b in secs])), "z_q95": float(np.quantile(zs, TARGET)),
            "z": zs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--steps", default="10")
    ap.add_argument("--rules", default=",".join(RULES))
    ap.add_argument("--seed-offset", default="0", help="comma-separated make-env seed offsets (0: the fixed ones)")
    ap.add_argument("--only", default="", help="comma-separated instance names (default: all)")
    ap.add_argument("--no-widen", action="store_true", help="the population draws' quantiles only (no M89 factor)")
    ap.add_argument("--fit-widening", action="store_true",
                    help="also fit IS_WIDEN's factors on these cells -> is_certificate_widening.json (development "
                         "offsets)")
    ap.add_argument("--fit-from", default=None, help="result JSONs (comma-separated): fit IS_WIDEN, run nothing")
    ap.add_argument("--out", type=results_folder, default=None, help="results folder, default benchmarks/results/local")
    ap.add_argument("--ship", action="store_true", help=f"also write the coverage table the trainer's report quotes "
                                                        f"to {SHIP}")
    ap.add_argument("--ship-from", default=None, help="write that table from earlier result JSONs (comma-separated: "
                                                      "merged into one result in --out first); run nothing")
    a = ap.parse_args()
    out = Path(a.out) if a.out else None
    if a.ship_from:  # one result, or several (e.g. one process per offset) merged into one result first
        files = a.ship_from.split(",")
        results = [json.loads(Path(f).read_text()) for f in files]
        if len(results) == 1:
            ship(results[0], files[0])
            return
        rows = [r for res in results for r in res["rows"]]
        offs = [o for res in results for o in res["seed_offsets"]]
        merged = {k: results[0][k] for k in ("description", "level", "replicates", "widening", "reps")}
        merged.update(seed_offsets=offs, rows=rows, pooled=_pooled(rows), merged_from=[Path(f).name for f in files],
                      seconds=sum(res["seconds"] for res in results))
        path = write_result("is_certificate", merged, out)
        print(f"wrote {path}")
        print(json.dumps(merged["pooled"], indent=1))
        steps = ",".join(str(s) for s in sorted({r["history_steps"] for r in rows}))
        ship(merged, str(path), f"benchmarks/bench_is_certificate.py --reps {merged['reps']} --steps {steps} "
                                f"--seed-offset K, K in {','.join(str(o) for o in offs)}")
        return
    if a.fit_from:
        results = [json.loads(Path(f).read_text()) for f in a.fit_from.split(",")]
        offs = sorted({o for res in results for o in res["seed_offsets"]})
        write_fit([r for res in results for r in res["rows"]], offs, results[0]["reps"], out)
        return
    offsets = [int(x) for x in a.seed_offset.split(",")]
    if a.ship and (a.no_widen or a.fit_widening):
        raise SystemExit("--ship writes what the trainer does: drop --no-widen / --fit-widening")
    if a.fit_widening and 0 in offsets:
        raise SystemExit("--fit-widening fits on development offsets (e.g. 100,200), never the benchmark's offset 0")
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    rows = []
    only = {x for x in a.only.split(",") if x}
    for off in offsets:
        for k, (name, budget, spec) in enumerate(INSTANCES):
            if only and name not in only:
                continue
            env = _env(spec, off)
            lab = build_lab(env, 0)
            for rule in a.rules.split(","):
                for steps in (int(s) for s in a.steps.split(",")):
                    rows.append({"instance": name, "seed_offset": off, "budget": budget, "rule": rule,
                                 "history_steps": steps,
                                 **_cell(env, lab, budget, rule, steps, a.reps, seed=k + off, widen=not a.no_widen)})
                    print({k2: (round(v, 4) if isinstance(v, float) else v) for k2, v in rows[-1].items()
                           if k2 != "z"}, flush=True)
    payload = {"description": "coverage of the prompt-IS certificate's nominal-95% interval for the TRUE "
                              "second-moment ratio S(q, G_x) / S(uniform, G) of the trainer's guarded law (exact "
                              "synthetic lab)", "level": 0.95, "replicates": REPLICATES,
               "widening": None if a.no_widen else _table(), "seed_offsets": offsets, "reps": a.reps, "rows": rows,
               "pooled": _pooled(rows), "seconds": time.perf_counter() - t0}
    path = write_result("is_certificate", payload, out)
    print(f"wrote {path}")
    print(json.dumps(payload["pooled"], indent=1))
    if a.fit_widening:
        write_fit(rows, offsets, a.reps, out)
    if a.ship:
        ship(payload, str(path), f"benchmarks/bench_is_certificate.py --reps {a.reps} --steps {a.steps} "
                                 f"--seed-offset {a.seed_offset}")


def _table() -> list[list]:
    """stats.is_certificate.IS_WIDEN as JSON (the open last bucket's bound as null)."""
    return [[None if math.isinf(hi) else hi, k] for hi, k in IS_WIDEN]


def _pooled(rows: list[dict]) -> dict:
    """Per history length: pooled coverage of each interval, its lowest cell, the mean widths."""
    out = {}
    for steps in sorted({r["history_steps"] for r in rows}):
        cell = [r for r in rows if r["history_steps"] == steps]
        n = sum(r["reps"] for r in cell)
        low = min(cell, key=lambda r: r["coverage"])
        out[str(steps)] = {
            "reps": n, "cells": len(cell), "coverage": sum(r["coverage"] * r["reps"] for r in cell) / n,
            "cell_min": low["coverage"],
            "cell_min_name": f"{low['instance']} {low['rule']} offset {low['seed_offset']}",
            "cells_below_0.85": sum(r["coverage"] < 0.85 for r in cell),
            **{f"coverage_{x}": sum(r[f"coverage_{x}"] * r["reps"] for r in cell) / n
               for x in ("plain", "population", "held_out")},
            **{f"cell_min_{x}": min(r[f"coverage_{x}"] for r in cell) for x in ("plain", "held_out")},
            **{f"mean_width{x}": sum(r[f"mean_width{x}"] * r["reps"] for r in cell) / n
               for x in ("", "_plain", "_held_out")}}
    return out


def write_fit(rows: list[dict], offsets: list[int], reps: int, out: Path | None) -> None:
    """IS_WIDEN's factors fitted on development cells (M89; bench_certificate_calibration.fit_widening)."""
    if 0 in offsets or 7000 in offsets:
        raise SystemExit("the widening is fitted on development offsets only, never the evaluation offsets 0, 7000")
    fit = fit_widening(rows, IS_WIDEN)
    print(fit)
    cells = [{k2: r[k2] for k2 in ("instance", "rule", "seed_offset", "history_steps", "samples_per_prompt",
                                   "coverage_population", "z_q95", "z")} for r in rows]
    payload = {"target": TARGET, "cell_floor": CELL_FLOOR, "seed_offsets": offsets, "reps": reps, "buckets": fit,
               "cells": cells}
    print(f"wrote {write_result('is_certificate_widening', payload, out)}")


def ship(result: dict, source: str, command: str | None = None) -> None:
    """Write the per-history-length pooled coverage and the per-cell coverage that ``ugrpo train``'s report quotes
    (ugrpo.report.coverage)."""
    rows = result["rows"]
    by_steps = []
    for steps in sorted({r["history_steps"] for r in rows}):
        cell = [r for r in rows if r["history_steps"] == steps]
        n = sum(r["reps"] for r in cell)
        by_steps.append({"history_steps": steps, "coverage": sum(r["coverage"] * r["reps"] for r in cell) / n,
                         "reps": n, "cells": len(cell), "cell_min": min(r["coverage"] for r in cell),
                         "cell_max": max(r["coverage"] for r in cell),
                         "mean_width": sum(r["mean_width"] * r["reps"] for r in cell) / n})
    cells = [{k: r.get(k, 0) for k in ("instance", "rule", "seed_offset", "history_steps", "coverage", "coverage_se",
                                       "reps", "miss_overstated", "miss_understated", "mean_width")} for r in rows]
    SHIP.parent.mkdir(parents=True, exist_ok=True)
    SHIP.write_text(json.dumps({"level": result.get("level", 0.95), "widening": result.get("widening"),
                                "by_history_steps": by_steps, "cells": cells,
                                "source": command or "benchmarks/bench_is_certificate.py",
                                "result": Path(source).name}, indent=1) + "\n")
    print(f"wrote {SHIP}")


if __name__ == "__main__":
    main()
