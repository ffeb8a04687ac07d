"""Does a pilot of the projected size decide? The planner's "a pilot of about n prompts would decide" against fresh
pilots of that size (docs/math.md M42, M68; exact synthetic policies).

On the instances of ``bench_planner_calibration.py`` (imported: the same families and seeds 4000+), pilots of
B0 x 8 (B0 = 16, 64) are planned at N = 1024 as ``ugrpo plan`` does; for each pilot that cannot decide, two
projections of the pilot size that would:

* estimate: the interval shrunk by 1/sqrt(f) around the estimate (M42 before this change: "if c1 is as its estimate
  says");
* interval: the largest over c in c1's interval of the size at which an estimate landing on c decides (M68, what the
  planner says now: "wherever c1 lies in that range").

A fresh, independent pilot of each projected size (up to ``--cap`` prompts) is drawn at the same policy and planned;
the share that decides is the projection's hit rate. Sizes above the cap are counted, not drawn.

Run: ``python benchmarks/bench_planner_projection.py [--pilots 20] [--cap 1024]``
-> benchmarks/results/local/planner_projection.json.
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

from bench_planner_calibration import G0, METHOD, TOL, N, build, family_option, instances  # noqa: E402
from common import results_folder, write_result  # noqa: E402

from ugrpo.stats.band import _FACTORS, worst_ratio  # noqa: E402
from ugrpo.stats.components import estimate_components  # noqa: E402
from ugrpo.stats.planner import plan_group_size  # noqa: E402

SIZES = (16, 64)


def estimate_projection(plan, B0: int) -> int | None:
    """M42 as it was: the smallest f B0 at which [c - (c - lo)/sqrt(f), c + (hi - c)/sqrt(f)] decides (c: the
    estimate)."""
    c = max(plan.c1, 0.0)
    lo, hi = min(plan.c1_range[0], c), max(plan.c1_range[1], c)
    cands = [g for g, _, _ in plan.candidates]
    for f in _FACTORS:
        s = 1.0 / math.sqrt(f)
        if worst_ratio((c - (c - lo) * s, c + (hi - c) * s), max(plan.c2, 0.0), max(plan.c3, 0.0), plan.N,
                       cands).min() <= 1 + TOL:
            return int(math.ceil(f * B0))
    return None


def _decides(env, n: int, gen: torch.Generator, n_boot: int, seed: int) -> bool:
    b = env.sample(env.theta0, n, G0, gen)
    vc = estimate_components(b.rewards, scores=b.scores, n_boot=n_boot, method=METHOD,
                             generator=torch.Generator().manual_seed(seed))
    return bool(plan_group_size(vc, N, tolerance=TOL).decided)


def run(pilots: int, cap: int, n_boot: int, families) -> dict:
    torch.set_num_threads(1)
    rows = []
    for k, (fam, name, kw) in enumerate(instances(0, families)):
        env = build(kw)
        for B0 in SIZES:
            gen = torch.Generator().manual_seed(50_000 + 1000 * k + B0)
            for i in range(pilots):
                b = env.sample(env.theta0, B0, G0, gen)
                vc = estimate_components(b.rewards, scores=b.scores, n_boot=n_boot, method=METHOD,
                                         generator=torch.Generator().manual_seed(7 + i))
                plan = plan_group_size(vc, N, tolerance=TOL)
                if plan.decided or plan.cannot_tell:
                    continue
                row = {"family": fam, "name": name, "B0": B0}
                for key, n in (("estimate", estimate_projection(plan, B0)), ("interval", plan.pilot_prompts_needed)):
                    row[key] = n
                    if n is not None and n <= cap:
                        row[f"{key}_decides"] = _decides(env, n, gen, n_boot, 10_000 + i)
                rows.append(row)
        print(f"{name:22s} done ({len(rows)} undecided pilots so far)", flush=True)
    return {"budget_N": N, "pilot_group_G0": G0, "tolerance": TOL, "pilots_per_instance": pilots, "cap": cap,
            "n_boot": n_boot, "rows": rows, "summary": summarise(rows)}


def summarise(rows: list[dict]) -> dict:
    out = {}
    for B0 in SIZES:
        sub = [r for r in rows if r["B0"] == B0]
        d = {"undecided_pilots": len(sub)}
        for key in ("estimate", "interval"):
            sized = [r for r in sub if r[key] is not None]
            drawn = [r[f"{key}_decides"] for r in sub if f"{key}_decides" in r]
            d[key] = {"with_a_size": len(sized) / max(len(sub), 1), "drawn": len(drawn),
                      "above_cap": sum(1 for r in sized if f"{key}_decides" not in r),
                      "median_size": float(np.median([r[key] for r in sized])) if sized else None,
                      "decides": float(np.mean(drawn)) if drawn else None,
                      "decides_se": (float(np.sqrt(np.mean(drawn) * (1 - np.mean(drawn)) / len(drawn))) if drawn
                                     else None)}
        out[str(B0)] = d
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pilots", type=int, default=20, help="pilots per instance and size")
    ap.add_argument("--cap", type=int, default=1024, help="largest fresh pilot drawn (prompts)")
    ap.add_argument("--n-boot", type=int, default=200, help="bootstrap replicates per plan")
    ap.add_argument("--families", default=None, help="comma-separated family names (default: all)")
    ap.add_argument("--out", type=results_folder, default=None, help="results folder, default benchmarks/results/local")
    a = ap.parse_args()
    fams = family_option(ap, a.families)
    t0 = time.perf_counter()
    res = run(a.pilots, a.cap, a.n_boot, fams)
    res["seconds"] = time.perf_counter() - t0
    for B0, d in res["summary"].items():
        for key in ("estimate", "interval"):
            s = d[key]
            print(f"{B0}x8 {key:8s}: {d['undecided_pilots']} undecided, a size for {100 * s['with_a_size']:.0f}% "
                  f"(median {s['median_size']}), {s['drawn']} drawn ({s['above_cap']} above the cap): decides "
                  + ("-" if s["decides"] is None else f"{100 * s['decides']:.0f}% +- {100 * s['decides_se']:.0f}"))
    path = write_result("planner_projection", res, Path(a.out) if a.out else None)
    print(f"\nwrote {path} ({res['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
