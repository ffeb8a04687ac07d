"""What no rule can do from a pilot: Le Cam bounds for the planner calibration benchmark's instances (docs/math.md
M64-M66; exact likelihoods, no language model).

For each instance of ``bench_planner_calibration.py`` (the same families and seeds 4000+, imported from it) and each
pilot size B0 x 8 (B0 = 16, 64, 256), it builds reward twins: policies with the same pi, the same scores and the
same prompt values V(x), whose exact 5% band at N = 1024 is disjoint from the instance's
(:mod:`ugrpo.envs.likelihood`):

* contrast twins: the mixture over random sign patterns of the action contrasts (amplitude t in the logits), c1 up;
* the shrink twin: r' = V + lam (r - V), c1 down (the largest lam whose band is disjoint).

For any rule that reads the pilot (randomised or not), in-band rate on the instance + average in-band rate on the
twins <= 1 + TV(P, Q) + P(a twin's band meets the instance's) (M66), so min(rate instance, rate twins) <= (1 + TV +
outside) / 2 =: ``bound``; and the mean excess regret (regret - 1) over the pair >= m (1 - TV - outside_m) / 2 with m
the smallest summed excess of one G over the instance and a twin (``regret_bound``). TV is estimated by seeded
Monte Carlo of the exact likelihood ratio (pilots drawn under the instance, SE stated); ``outside`` from random
twins, with its 95% upper Clopper-Pearson bound used in ``bound``. The amplitude t (and lam) is chosen on one set of
seeds and re-estimated on fresh ones.

What it does not show: that no rule can meet the targets on the benchmark's own instances. No bound can: distinct
instances have different score tables, so their pilots never coincide (TV = 1) and a rule that stores the 36 score
tables and looks up the pilot's first score vector is in the exact band on every pilot (M64).

Run: ``python benchmarks/bench_planner_limits.py [--pilots 4000] [--sizes 16,64,256] [--families a,b]``
-> benchmarks/results/local/planner_limits.json (``--quick``: fewer pilots and twins, a coarser grid).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_planner_calibration import TOL, N, build, family_option, instances, rare_prompts  # noqa: E402
from common import results_folder, write_result  # noqa: E402
from scipy.stats import beta  # noqa: E402

from ugrpo.envs.likelihood import (  # noqa: E402
    cell_counts,
    contrast_twins,
    exact_constants,
    mixture_log_ratio,
    reward_log_ratio,
    sample_cells,
    shrink_twin,
    total_variation,
)
from ugrpo.stats.band import ratio_table  # noqa: E402
from ugrpo.stats.planner import candidate_groups  # noqa: E402

G0 = 8
SIZES = (16, 64, 256)
T_GRID = tuple(round(0.1 * i, 1) for i in range(1, 21))
LAM_GRID = tuple(round(1 - 0.02 * i, 2) for i in range(1, 50))
M_QUANTILES = (0.0, 0.05, 0.1, 0.2)
SELECT_SEED, FINAL_SEED = 1, 2


def _excess(consts: np.ndarray) -> np.ndarray:
    """regret - 1 of every candidate G for rows of exact constants: (M, n_candidates)."""
    return ratio_table(consts, N, candidate_groups(N)) - 1.0


def _upper(k: int, n: int) -> float:
    """95% upper Clopper-Pearson bound of a proportion k / n."""
    return 1.0 if k >= n else float(beta.ppf(0.95, k + 1, n - k))


def _twin_draws(env, t: float, M: int, gen: torch.Generator) -> np.ndarray:
    """Exact constants (M, 3) of M contrast twins (a random pattern per prompt)."""
    tw = contrast_twins(env, t)  # (S, P, K)
    idx = torch.randint(tw.shape[0], (M, tw.shape[1]), generator=gen)
    return exact_constants(env, tw[idx, torch.arange(tw.shape[1])])


def _side(excess0: np.ndarray, ex: np.ndarray) -> dict:
    """Disjointness and the summed excess m of twins (rows of ``ex``) against the instance (``excess0``)."""
    band0 = excess0 <= TOL
    disjoint = ~((ex <= TOL) & band0).any(axis=1)
    m = (ex + excess0).min(axis=1)
    return {"disjoint": disjoint, "m": m}


def _regret(m_all: np.ndarray, tv: float) -> tuple[float, float, float]:
    """max over quantile levels of m_q (1 - TV - P(m < m_q)) / 2: (bound, m_q, outside)."""
    best = (0.0, 0.0, 1.0)
    for q in M_QUANTILES:
        mq = float(np.quantile(m_all, q))
        out = float((m_all < mq).mean())
        b = mq * max(0.0, 1 - tv - out) / 2
        best = max(best, (b, mq, out))
    return best


def _contrast(env, r, excess0, B0, grid_draws, pilots, select):
    """Choose t on the selection seeds, re-estimate TV and outside at it on the final seeds."""
    gen = torch.Generator().manual_seed(SELECT_SEED * 1_000_003 + B0)
    pr, a, z = sample_cells(env, B0, G0, select, gen)
    n, k = cell_counts(env.n_prompts, env.max_actions, pr, a, z)
    best = None
    for t, side in grid_draws.items():
        out = 1.0 - side["disjoint"].mean()
        tv, _ = total_variation(mixture_log_ratio(n, k, r, contrast_twins(env, t)))
        b = (1 + tv + out) / 2
        if best is None or b < best[0]:
            best = (b, t)
    t = best[1]
    gen = torch.Generator().manual_seed(FINAL_SEED * 1_000_003 + B0)
    ex = _excess(_twin_draws(env, t, 4 * len(next(iter(grid_draws.values()))["m"]), gen))
    side = _side(excess0, ex)
    pr, a, z = sample_cells(env, B0, G0, pilots, gen)
    n, k = cell_counts(env.n_prompts, env.max_actions, pr, a, z)
    tv, se = total_variation(mixture_log_ratio(n, k, r, contrast_twins(env, t)))
    k_out = int((~side["disjoint"]).sum())
    out_up = _upper(k_out, side["disjoint"].size)
    reg, mq, mout = _regret(side["m"], tv)
    return {"t": t, "tv": tv, "tv_se": se, "outside": k_out / side["disjoint"].size, "outside_upper": out_up,
            "bound": min(1.0, (1 + tv + out_up) / 2), "bound_se": se / 2, "regret_bound": reg, "regret_m": mq,
            "regret_outside": mout, "twins": int(side["disjoint"].size)}


def _shrink(env, r, excess0, B0, pilots):
    """The closest shrink twin with a disjoint band (deterministic), and its TV."""
    lam = next((lam for lam in LAM_GRID if _side(excess0, _excess(exact_constants(env, shrink_twin(env, lam)[None])))
                ["disjoint"][0]), None)
    if lam is None:
        return None
    r2 = shrink_twin(env, lam)
    ex = _excess(exact_constants(env, r2[None]))
    gen = torch.Generator().manual_seed(FINAL_SEED * 1_000_003 + 7 * B0)
    pr, a, z = sample_cells(env, B0, G0, pilots, gen)
    n, k = cell_counts(env.n_prompts, env.max_actions, pr, a, z)
    tv, se = total_variation(reward_log_ratio(n, k, r, r2))
    m = float((ex[0] + excess0).min())
    return {"lam": lam, "band": [g for g, e in zip(candidate_groups(N), ex[0]) if e <= TOL], "tv": tv, "tv_se": se,
            "bound": (1 + tv) / 2, "bound_se": se / 2, "regret_bound": m * (1 - tv) / 2, "regret_m": m}


def rare_section(env, kw: dict, sizes) -> dict | None:
    """Rare hard prompts (docs/math.md M69): theta0 = the instance with the rare prompts' rewards set to 0. Its pilots
    are the instance's pilots without a rare success, so TV = P(a pilot sees a rare success) = 1 - (1 - q)^B0 with
    q = (1/P) sum_{x rare} (1 - (1 - V(x))^G0) exactly; any interval for c2 (c3) that covers at level L on both has
    P_theta0(it holds c2(instance) and c2(theta0)) >= 2 L - 1 - TV."""
    rare = rare_prompts(env, kw)
    if rare is None:
        return None
    V = (env.probs() * env.reward_mean).sum(-1)
    q = float((1 - (1 - V[rare]) ** G0).sum()) / env.n_prompts
    r0 = env.reward_mean.clone()
    r0[rare] = 0.0
    c, c0 = exact_constants(env, env.reward_mean[None])[0], exact_constants(env, r0[None])[0]
    seen = {str(B0): 1 - (1 - q) ** B0 for B0 in sizes}
    return {"rare_prompts": int(rare.sum()), "rare_values": V[rare].tolist(), "q_group": q, "tv": seen,
            "c2": float(c[1]), "c2_without": float(c0[1]), "c3": float(c[2]), "c3_without": float(c0[2]),
            "both_held_at_094": {B0: 2 * 0.94 - 1 - tv for B0, tv in seen.items()}}


def run(pilots: int, select: int, twins: int, sizes, families, t_grid) -> dict:
    torch.set_num_threads(1)
    out = []
    for fam, name, kw in instances(0, families):
        t0 = time.perf_counter()
        env = build(kw)
        r = env.reward_mean.clone()
        c0 = exact_constants(env, r[None])
        excess0 = _excess(c0)[0]
        band0 = [g for g, e in zip(candidate_groups(N), excess0) if e <= TOL]
        gen = torch.Generator().manual_seed(SELECT_SEED)
        grid = {}
        for t in t_grid:
            consts = _twin_draws(env, t, twins, gen)
            grid[t] = _side(excess0, _excess(consts)) | {"c1_median": float(np.median(consts[:, 0]))}
        inst = {"family": fam, "name": name, "band": band0, "c1": float(c0[0, 0]), "sizes": {},
                "rare": rare_section(env, kw, sizes)}
        for B0 in sizes:
            con = _contrast(env, r, excess0, B0, grid, pilots, select)
            con["twin_c1_median"] = grid[con["t"]]["c1_median"]
            shr = _shrink(env, r, excess0, B0, pilots)
            best = min([x for x in (con, shr) if x is not None], key=lambda x: x["bound"])
            inst["sizes"][str(B0)] = {"contrast": con, "shrink": shr, "bound": best["bound"],
                                      "bound_se": best["bound_se"],
                                      "regret_bound": max(x["regret_bound"] for x in (con, shr) if x is not None)}
            print(f"{name:22s} band {str(band0):18s} B0={B0:4d}  contrast t={con['t']:.1f} TV {con['tv']:.3f} "
                  f"out {con['outside_upper']:.3f} -> {con['bound']:.3f};  shrink "
                  + ("-" if shr is None else f"lam={shr['lam']:.2f} TV {shr['tv']:.3f} -> {shr['bound']:.3f}")
                  + f";  excess regret >= {inst['sizes'][str(B0)]['regret_bound']:.4f}", flush=True)
        inst["seconds"] = time.perf_counter() - t0
        out.append(inst)
    fams = {}
    for fam in dict.fromkeys(x["family"] for x in out):
        rows = [x for x in out if x["family"] == fam]
        fams[fam] = {str(B0): {"bound": float(np.mean([x["sizes"][str(B0)]["bound"] for x in rows])),
                               "regret_bound": float(np.mean([x["sizes"][str(B0)]["regret_bound"] for x in rows]))}
                     for B0 in sizes}
    pooled = {str(B0): {"bound": float(np.mean([x["sizes"][str(B0)]["bound"] for x in out])),
                        "regret_bound": float(np.mean([x["sizes"][str(B0)]["regret_bound"] for x in out]))}
              for B0 in sizes}
    return {"budget_N": N, "pilot_group_G0": G0, "tolerance": TOL, "pilots": pilots, "select_pilots": select,
            "twins": twins, "t_grid": list(t_grid), "lam_grid": list(LAM_GRID), "instances": out, "families": fams,
            "pooled": pooled,
            "bound": "min(in-band rate on the instance, mean in-band rate on its twins) <= bound, for any rule",
            "regret_bound": "mean over the instance and its twins of E[regret - 1] >= regret_bound, for any rule"}


def print_table(res: dict, calibration: Path | None) -> None:
    measured = json.loads(calibration.read_text()) if calibration is not None and calibration.is_file() else None
    sizes = list(res["pooled"])
    print("\nfamily                  " + "  ".join(f"{B0}x8 bound (planner)" for B0 in sizes))
    for fam, d in res["families"].items():
        cells = []
        for B0 in sizes:
            got = measured["families"].get(fam, {}).get(B0, {}).get("after", {}) if measured else {}
            rate = got.get("chosen_in_exact_band")
            cells.append(f"{d[B0]['bound']:.3f} ({'-' if rate is None else f'{rate:.3f}'})")
        print(f"{fam:22s}  " + "      ".join(cells))
    print("pooled                  " + "      ".join(f"{res['pooled'][B0]['bound']:.3f}" for B0 in sizes))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pilots", type=int, default=4000, help="pilots for the final TV estimate")
    ap.add_argument("--select-pilots", type=int, default=1000, help="pilots per grid point to choose t")
    ap.add_argument("--twins", type=int, default=250, help="random twins per grid point (4x that at the chosen t)")
    ap.add_argument("--sizes", default=None, help="comma-separated pilot sizes B0 (default 16,64,256)")
    ap.add_argument("--families", default=None, help="comma-separated family names (default: all)")
    ap.add_argument("--quick", action="store_true", help="500 pilots, 200 to select, 100 twins, t in 0.2..2.0 by 0.2")
    ap.add_argument("--out", type=results_folder, default=None, help="results folder, default benchmarks/results/local")
    a = ap.parse_args()
    fams = family_option(ap, a.families)
    sizes = SIZES if a.sizes is None else tuple(int(s) for s in a.sizes.split(","))
    pilots, select, twins, grid = a.pilots, a.select_pilots, a.twins, T_GRID
    if a.quick:
        pilots, select, twins, grid = 500, 200, 100, T_GRID[1::2]
    t0 = time.perf_counter()
    res = run(pilots, select, twins, sizes, fams, grid)
    res["seconds"] = time.perf_counter() - t0
    print_table(res, Path(__file__).resolve().parent / "results" / "planner_calibration.json")
    path = write_result("planner_limits", res, Path(a.out) if a.out else None)
    print(f"\nwrote {path} ({res['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
