"""Calibration of the group-size planner on random synthetic policies (exact truth; no language model).

For each instance (``ugrpo.envs.generate.random_env``: both kinds, several difficulty and reward-spread
settings, seeds fixed below) the exact constants c1, c2, c3 at theta0 give the exact bound (= GRPO's
exact minibatch MSE with B = N/G), the exact best G and the exact 5% band. Many independent pilots
of B0 x 8 (B0 = 16, 64, 256) are drawn at theta0; each is planned twice from the same bootstrap
replicates:

* before: percentile intervals, and the old point rule (G* = argmin at the point estimates, given
  only when c1's interval excludes 0);
* after: the default intervals (symmetric bootstrap-t, c1's on the log(c1 + s) scale, docs/math.md M39), and
  the band's recommendation (argmin of the expected relative MSE over the bootstrap, docs/math.md M41).

The plain symmetric bootstrap-t (``coverage_studentized``, the previous default) and the equal-tailed
bootstrap-t (``coverage_equal_tailed_t``) intervals of the same replicates are scored too (the same in both
rows), with c1's mean and median width relative to the plain symmetric interval (``c1_width_ratio_*``).

Reported per pilot size and method: coverage of each constant's 95% interval; coverage of the band
(the exact band inside the reported confidence band [g_band_low, g_band_high]); how often the chosen
G is inside the exact band (a pilot with no answer counts as outside, and the answer rate is given);
mean and worst regret (exact MSE at the chosen G / at the exact best G, over pilots with an answer);
how often the stated lower bound on G* is false.

Run: ``python benchmarks/bench_planner_calibration.py [--pilots 150] [--n-boot 400]``
-> benchmarks/results/planner_calibration.json (a few minutes on 2 cores with the defaults).
``--seed-offset K`` adds K to every instance seed (other random policies of the same settings: an
out-of-sample check; write it elsewhere with ``--out``).
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

from common import write_result  # noqa: E402

from ugrpo.envs.generate import random_env  # noqa: E402
from ugrpo.stats.band import near_optimal_band  # noqa: E402
from ugrpo.stats.components import estimate_components  # noqa: E402
from ugrpo.stats.planner import bound, candidate_groups, plan_group_size  # noqa: E402

N = 1024
G0 = 8
SIZES = (16, 64, 256)
TOL = 0.05
AFTER = "studentized-log"
INSTANCES = (  # (name, random_env kwargs); seeds fixed here
    ("bandit-mid", dict(kind="softmax_bandit", n_prompts=64, n_actions=4, reward_spread=1.0, seed=11)),
    ("bandit-hard-flat", dict(kind="softmax_bandit", n_prompts=64, n_actions=4, reward_spread=0.3, difficulty=1.5,
                              seed=12)),
    ("bandit-easy", dict(kind="softmax_bandit", n_prompts=32, n_actions=6, reward_spread=0.6, difficulty=-1.0,
                         seed=13)),
    ("linear-mid", dict(kind="linear_softmax", n_prompts=64, n_actions=4, dim=6, reward_spread=1.0, seed=21)),
    ("linear-flat", dict(kind="linear_softmax", n_prompts=64, n_actions=4, dim=6, reward_spread=0.5, seed=1)),
    ("linear-shared", dict(kind="linear_softmax", n_prompts=64, n_actions=5, dim=8, reward_spread=0.8,
                           prompt_heterogeneity=0.3, difficulty=0.5, seed=23)),
)


def exact_truth(env) -> dict:
    pm = env.exact(sigma=False).policy_moments
    cands = candidate_groups(N)
    mse = {g: bound(pm.c1, pm.c2, pm.c3, N, g) for g in cands}
    best = min(mse, key=mse.get)
    return {"c": (pm.c1, pm.c2, pm.c3), "mse": mse, "g_best": best, "band": near_optimal_band(pm.c1, pm.c2, pm.c3, N,
            cands, TOL), "g_star_continuous": 1 + math.sqrt(pm.c3 / pm.c1) if pm.c1 > 0 else math.inf}


def one_pilot(rewards, scores, truth, n_boot: int, seed: int) -> dict:
    """Both methods on one pilot (same bootstrap replicates: same generator seed); other intervals: coverage only."""
    out, other = {}, {}
    for method in ("studentized-equal-tailed", "studentized"):
        vc = estimate_components(rewards, scores=scores, n_boot=n_boot, method=method,
                                 generator=torch.Generator().manual_seed(seed))
        other[method] = ([e.ci_low <= t <= e.ci_high for e, t in zip((vc.c1, vc.c2, vc.c3), truth["c"])],
                         vc.c1.ci_high - vc.c1.ci_low)
    for method in ("percentile", AFTER):
        vc = estimate_components(rewards, scores=scores, n_boot=n_boot, method=method,
                                 generator=torch.Generator().manual_seed(seed))
        plan = plan_group_size(vc, N, tolerance=TOL)
        cov = [e.ci_low <= t <= e.ci_high for e, t in zip((vc.c1, vc.c2, vc.c3), truth["c"])]
        chosen = plan.g_star if method == "percentile" else plan.g_recommended
        width = vc.c1.ci_high - vc.c1.ci_low
        lb = plan.g_star_lower_bound
        out[method] = {
            "cover": cov, "c1_below": vc.c1.ci_high < truth["c"][0],
            "band_cover": plan.g_band[0] <= min(truth["band"]) and max(truth["band"]) <= plan.g_band[1],
            "chosen": chosen, "in_band": chosen in truth["band"],
            "regret": None if chosen is None else truth["mse"][chosen] / truth["mse"][truth["g_best"]],
            "lb": lb, "lb_false": lb is not None and lb > truth["g_star_continuous"],
            "need": plan.pilot_prompts_needed, "cover_equal_tailed_t": other["studentized-equal-tailed"][0],
            "cover_studentized": other["studentized"][0],
            "c1_width_ratio": width / other["studentized"][1] if other["studentized"][1] > 0 else None,
        }
    return out


def summarise(rows: list[dict]) -> dict:
    def rate(xs):
        return float(np.mean(xs)) if xs else None

    regrets = [r["regret"] for r in rows if r["regret"] is not None]
    ratios = [r["c1_width_ratio"] for r in rows if r["c1_width_ratio"] is not None]
    with_lb = [r for r in rows if r["lb"] is not None]
    return {
        "pilots": len(rows),
        "coverage_c1": rate([r["cover"][0] for r in rows]), "coverage_c2": rate([r["cover"][1] for r in rows]),
        "coverage_c3": rate([r["cover"][2] for r in rows]),
        "coverage_equal_tailed_t": [rate([r["cover_equal_tailed_t"][k] for r in rows]) for k in range(3)],
        "coverage_studentized": [rate([r["cover_studentized"][k] for r in rows]) for k in range(3)],
        "c1_width_ratio_mean": rate(ratios), "c1_width_ratio_median": float(np.median(ratios)) if ratios else None,
        "c1_interval_below_truth": rate([r["c1_below"] for r in rows]),
        "band_coverage": rate([r["band_cover"] for r in rows]),
        "answer_rate": rate([r["chosen"] is not None for r in rows]),
        "chosen_in_exact_band": rate([r["in_band"] for r in rows]),
        "mean_regret": rate(regrets), "worst_regret": max(regrets) if regrets else None,
        "lower_bound_given": rate([r["lb"] is not None for r in rows]),
        "lower_bound_false": rate([r["lb_false"] for r in with_lb]),
    }


def run(pilots: int, n_boot: int, sizes=SIZES, seed_offset: int = 0) -> dict:
    theta_rows = {}
    per_instance, pooled = [], {(B0, m): [] for B0 in sizes for m in ("percentile", AFTER)}
    for k, (name, kw) in enumerate(INSTANCES):
        kw = dict(kw, seed=kw["seed"] + seed_offset)
        env = random_env(**kw)
        truth = exact_truth(env)
        theta = env.theta0 if hasattr(env, "theta0") else None
        inst = {"name": name, "random_env": kw, "c1": truth["c"][0], "c2": truth["c"][1], "c3": truth["c"][2],
                "g_star_continuous": truth["g_star_continuous"], "g_best": truth["g_best"], "band": truth["band"],
                "sizes": {}}
        for B0 in sizes:
            gen = torch.Generator().manual_seed(1000 * k + B0)
            th = env._theta(theta).unsqueeze(0).expand(pilots, -1)
            batch = env.sample_many(th, B0, G0, gen)
            rows = {"percentile": [], AFTER: []}
            for i in range(pilots):
                res = one_pilot(batch.rewards[i].double(), batch.scores[i].double(), truth, n_boot, seed=7 + i)
                for m, r in res.items():
                    rows[m].append(r)
                    pooled[(B0, m)].append(r)
            inst["sizes"][str(B0)] = {m: summarise(v) for m, v in rows.items()}
            needs = [r["need"] for r in rows[AFTER] if r["need"] is not None]
            inst["sizes"][str(B0)][AFTER]["median_pilot_prompts_needed"] = (
                float(np.median(needs)) if needs else None)
            print(f"{name:18s} B0={B0:4d}  " + "  ".join(
                f"{m[:4]}: cov {s['coverage_c1']:.2f}/{s['coverage_c2']:.2f}/{s['coverage_c3']:.2f} "
                f"in-band {s['chosen_in_exact_band']:.2f} regret {s['mean_regret'] or float('nan'):.3f}"
                for m, s in inst["sizes"][str(B0)].items()), flush=True)
        per_instance.append(inst)
        theta_rows[name] = truth["g_best"]
    table = {str(B0): {("before" if m == "percentile" else "after"): summarise(pooled[(B0, m)])
                       for m in ("percentile", AFTER)} for B0 in sizes}
    return {"budget_N": N, "pilot_group_G0": G0, "tolerance": TOL, "pilots_per_instance": pilots, "n_boot": n_boot,
            "seed_offset": seed_offset,
            "before": "percentile intervals + point G* (only when c1's interval excludes 0)",
            "after": "symmetric bootstrap-t intervals (c1's on the log(c1 + s) scale) + band recommendation "
                     "(argmin of the bootstrap expected MSE "
                     "ratio over replicates with c1* > 0)",
            "table": table, "instances": per_instance}


def print_table(res: dict) -> None:
    cols = ["coverage_c1", "coverage_c2", "coverage_c3", "band_coverage", "answer_rate", "chosen_in_exact_band",
            "mean_regret", "worst_regret", "lower_bound_false"]
    print("\nB0 x 8  method  " + "  ".join(c.replace("coverage_", "cov_") for c in cols))
    for B0, d in res["table"].items():
        for m, s in d.items():
            print(f"{B0:>6}  {m:6s}  " + "  ".join("   -  " if s[c] is None else f"{s[c]:6.3f}" for c in cols))
        s = d["after"]
        print(f"{'':>6}  plain symmetric t covers c1 {s['coverage_studentized'][0]:.3f}; c1 width after / plain: "
              f"mean {s['c1_width_ratio_mean']:.3f}, median {s['c1_width_ratio_median']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pilots", type=int, default=150, help="independent pilots per instance and pilot size")
    ap.add_argument("--n-boot", type=int, default=400, help="bootstrap replicates per pilot")
    ap.add_argument("--seed-offset", type=int, default=0, help="added to every instance seed (out-of-sample check)")
    ap.add_argument("--out", default=None, help="results folder (default benchmarks/results)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    res = run(a.pilots, a.n_boot, seed_offset=a.seed_offset)
    res["seconds"] = time.perf_counter() - t0
    print_table(res)
    path = write_result("planner_calibration", res, Path(a.out) if a.out else None)
    print(f"\nwrote {path} ({res['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
