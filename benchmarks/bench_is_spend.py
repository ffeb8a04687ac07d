"""ustat-is at exact spend (docs/math.md M88) against M56's expected spend, uniform-is and the best uniform G.

On four instances of benchmarks/bench_allocation.py (the demo, bandit-extreme, linear-extreme, bandit-sat70; their
make-env seeds and knobs fixed there before any result), with true and with predicted moments (the simulated history
and guard of ``ugrpo allocate``, the same seeds): the total MSE of

* ``uniform`` the best single G dividing N (closed form M11);
* ``uniform-is`` and ``ustat-is`` (expected spend): the law's closed form M53 (``ustat-is`` spends N on average only);
* ``ustat-is`` at exact spend: the same law's q, each drawn batch's sizes split exactly N (M88); its MSE is the exact
  between-prompt part plus the mean over DRAWS seeded batches of each batch's exact conditional variance (the TRUE
  moments), with the standard error of that mean.

Ratios to uniform are reported with the exact-spend ratio's 95% interval (1.96 SE; uniform's MSE is exact).

Run: ``.venv/bin/python benchmarks/bench_is_spend.py`` -> benchmarks/results/local/is_spend.json (~20 s).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_allocation import INSTANCES, SEED, _env  # noqa: E402
from common import results_folder, write_result  # noqa: E402

from ugrpo.experiments.allocate import AllocateConfig, _is_g_min, build_lab, predicted_stats  # noqa: E402
from ugrpo.experiments.is_spend import exact_spend_mse  # noqa: E402
from ugrpo.stats.allocation import best_uniform  # noqa: E402
from ugrpo.stats.is_guard import guarded_law  # noqa: E402
from ugrpo.stats.prompt_is import is_law, is_mse  # noqa: E402

NAMES = ("demo", "bandit-extreme", "linear-extreme", "bandit-sat70")
DRAWS = 2000


def _laws(env, cfg: AllocateConfig, lab, B: int) -> dict:
    """{moments: {rule: (law, the moments it was fitted with, g_min, guard choice)}} for true and predicted moments
    (the predicted ones: the simulated history of ``ugrpo allocate`` with its seeds, through the guard)."""
    gen = torch.Generator().manual_seed(cfg.seed)
    _, _, history = predicted_stats(env, cfg, gen)
    out = {"true": {}, "predicted": {}}
    for rule in ("uniform-is", "ustat-is"):
        law = is_law(rule, lab.true, B, cfg.budget, lam=cfg.is_lambda, g_min=cfg.g_min, g_max=cfg.g_max)
        out["true"][rule] = (law, lab.true, cfg.g_min, rule)
        gl = guarded_law(rule, history, B, cfg.budget, lam=cfg.is_lambda, g_min=_is_g_min(cfg), g_max=cfg.g_max,
                         level=cfg.safe_level, tol=cfg.safe_tol, guard=cfg.is_guard)
        out["predicted"][rule] = (gl.law, gl.moments, _is_g_min(cfg), gl.choice)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=DRAWS)
    ap.add_argument("--out", type=results_folder, default=None, help="results folder, default benchmarks/results/local")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = []
    for name, budget, spec in INSTANCES:
        if name not in NAMES:
            continue
        t0 = time.perf_counter()
        env = _env(spec)
        cfg = AllocateConfig(budget=budget, seed=SEED)
        lab = build_lab(env, cfg.seed)
        G_u, mse_u = best_uniform(lab.c1, lab.c2, lab.c3, budget, g_min=cfg.g_min, g_max=cfg.g_max)
        B = budget // G_u
        g2 = float((lab.g_x.mean(0) ** 2).sum())
        rows = []
        for moments, laws in _laws(env, cfg, lab, B).items():
            (law_u, _, _, choice_u), (law, fitted, g_min, choice) = laws["uniform-is"], laws["ustat-is"]
            ex = exact_spend_mse(law, fitted, lab.true, lab.g_x, budget, g_min=g_min, g_max=cfg.g_max,
                                 draws=args.draws, seed=SEED)
            mse_uis = is_mse(law_u.q, law_u.sizes, B, lab.true, g2)
            row = {"moments": moments, "uniform_G": G_u, "B": B, "mse_uniform": mse_u, "mse_uniform_is": mse_uis,
                   "mse_ustat_is_expected": ex["expected_spend_mse"], "mse_ustat_is_exact": ex["mse"],
                   "mse_ustat_is_exact_se": ex["se"], "exact": ex, "guard_choice": choice,
                   "guard_choice_uniform_is": choice_u,
                   "ratio_uniform_is": mse_uis / mse_u, "ratio_ustat_is_expected": ex["expected_spend_mse"] / mse_u,
                   "ratio_ustat_is_exact": ex["mse"] / mse_u,
                   "ratio_ustat_is_exact_ci": [(ex["mse"] - 1.96 * ex["se"]) / mse_u,
                                               (ex["mse"] + 1.96 * ex["se"]) / mse_u],
                   "exact_over_expected": ex["mse"] / ex["expected_spend_mse"]}
            rows.append(row)
            print(f"{name:15s} {moments:9s} G_u={G_u:3d} B={B:3d} guard={choice:10s} / uniform: uniform-is "
                  f"{row['ratio_uniform_is']:.3f}  ustat-is expected {row['ratio_ustat_is_expected']:.3f}  exact "
                  f"{row['ratio_ustat_is_exact']:.3f} [{row['ratio_ustat_is_exact_ci'][0]:.3f}, "
                  f"{row['ratio_ustat_is_exact_ci'][1]:.3f}]  spent {ex['spent_min']}-{ex['spent_max']}", flush=True)
        out.append({"instance": name, "budget": budget, "make_env": spec, "rows": rows,
                    "seconds": time.perf_counter() - t0})
    path = write_result("is_spend", {
        "description": "ustat-is at exact spend (M88) vs M56's expected spend, uniform-is and the best uniform G: "
                       "total exact MSE (exact spend: exact between part + Monte Carlo mean over draws of the batch of "
                       "the exact conditional variance)",
        "seed": SEED, "draws": args.draws, "instances": out}, Path(args.out) if args.out else None)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
