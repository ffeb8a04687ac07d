"""Why the planner's G misses where it misses, and what other decision rules would do (docs/math.md M80-M82).

Development seeds only: the instances of ``bench_planner_calibration.py`` with every seed + ``--seed-offset``
(default 5000; 0, the benchmark's own seeds, is refused), pilots drawn as that benchmark draws them, 100 per instance.

Part 1 (rules): on the same pilots and bootstrap resamples, the G in the exact 5% band, mean and worst regret of

* ``m80``: the planner (M41 with c2, c3 at their estimates, M80; the default);
* ``joint``: M41 before M80 (the expected ratio over the joint draws of c1, c2, c3);
* ``minimax``: the G with the smallest worst ratio over c1's range (c2, c3 at the estimates);
* ``mix-<e>``: (1 - e) expected + e worst ratio (robust Bayes, e-contamination of c1's confidence distribution by any
  law on its range);
* ``shift<d>``: c1's draws moved by d bootstrap SEs before the expected ratio (a prior leaning to small / large c1);
* ``unfloored``: c1's draws without M41's floor (an estimate below 0 kept where it is);
* ``probability``: the G most often in the draws' bands.

Every rule picks among the G that decide when there are some (M41 (ii)), as the planner does.

Part 2 (``--c1-noise``): where the spread of c1's estimate comes from, at 64 x 8 on the families given: its sd over
pilots (in units of the exact c1) as estimated; with the exact g(x_b) in both terms (the spread from sampling prompts
alone); with each prompt's exact value V(x_b) as the baseline of T0 (the best a per-prompt baseline could do); with
the exact reward means r(x_b, a) in place of the 0/1 rewards (no reward noise); and the share of the variance of T0
left after the best pooled control variates of mean 0 (sum K_ij and sum (Z_j - m_ij) K_ij over pairs).

Run: ``python benchmarks/bench_planner_rules.py [--sizes 16,64,256] [--c1-noise]``
-> benchmarks/results/local/planner_rules.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_planner_calibration import (  # noqa: E402
    G0,
    METHOD,
    TOL,
    N,
    _pilots,
    build,
    exact_truth,
    family_option,
    instances,
    joint_rule,
)
from common import results_folder, write_result  # noqa: E402

from ugrpo.stats.band import ratio_table  # noqa: E402
from ugrpo.stats.components import centred_c1_terms, estimate_components  # noqa: E402
from ugrpo.stats.planner import plan_group_size  # noqa: E402

RULES = ("m80", "joint", "minimax", "mix-0.05", "mix-0.2", "shift-0.4", "shift+0.2", "unfloored", "probability")


def _pick(plan, score: np.ndarray) -> int:
    """The G with the smallest ``score`` among those that decide (worst ratio within the tolerance), else all."""
    worst = np.asarray(plan.worst_case)
    pool = np.flatnonzero(worst <= 1 + TOL)
    pool = pool if pool.size else np.arange(len(worst))
    return plan.candidates[int(pool[np.argmin(score[pool])])][0]


def _unfloored_c1(vc) -> np.ndarray:
    """c1's studentised-log draws (M39, M41) with the estimate where it is (no floor at 0)."""
    pt, s, se = vc.c1.estimate, vc.c1_shift, vc.sample_se[0]
    reps, rse = vc.replicates[:, 0].numpy(), vc.replicate_se[:, 0].numpy()
    keep = np.isfinite(reps) & np.isfinite(rse) & (rse > 0)
    reps, rse = reps[keep], rse[keep]
    x, xs = pt + s, reps + s
    if x > 0:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            tu = np.where(xs > 0, xs * (np.log(np.where(xs > 0, xs, 1.0)) - np.log(x)) / rse, -np.inf)
            if np.quantile(np.abs(tu), vc.level) * se / x <= 1.0:  # M39's half-width guard
                return x * np.exp(np.concatenate([-tu, tu]) * se / x) - s
    t = (reps - pt) / rse
    return np.concatenate([pt - t * se, pt + t * se])


def _expected(plan, c1_draws: np.ndarray) -> np.ndarray:
    c1_draws = np.clip(c1_draws[~np.isnan(c1_draws)], 0.0, 1e6 * max(abs(plan.c1), 1e-12) + 1.0)
    rows = np.column_stack([c1_draws, np.full(c1_draws.size, max(plan.c2, 0.0)), np.full(c1_draws.size,
                                                                                         max(plan.c3, 0.0))])
    return ratio_table(rows, N, [g for g, _, _ in plan.candidates]).mean(axis=0)


def choices(vc, plan) -> dict[str, int]:
    """Every rule's G on one pilot."""
    draws = vc.confidence_draws()[:, 0]
    worst, expected = np.asarray(plan.worst_case), np.asarray(plan.expected_ratio)
    out = {"m80": plan.g_recommended, "joint": joint_rule(vc, plan), "minimax": _pick(plan, worst),
           "unfloored": _pick(plan, _expected(plan, _unfloored_c1(vc))),
           "probability": _pick(plan, -np.asarray(plan.band_probability))}
    for e in (0.05, 0.2):
        out[f"mix-{e:g}"] = _pick(plan, (1 - e) * expected + e * worst)
    for d in (-0.4, 0.2):
        out[f"shift{d:+g}"] = _pick(plan, _expected(plan, draws + d * vc.c1.se))
    return out


def _summary(rows: list[tuple[bool, float]]) -> dict:
    inb, reg = zip(*rows)
    return {"pilots": len(rows), "in_band": float(np.mean(inb)), "mean_regret": float(np.mean(reg)),
            "worst_regret": float(np.max(reg))}


def run_rules(pilots: int, n_boot: int, sizes, seed_offset: int, families) -> dict:
    per: dict = {}
    for k, (fam, name, kw) in enumerate(instances(seed_offset, None)):
        if families is not None and fam not in families:
            continue
        env = build(kw)
        truth = exact_truth(env)
        best = truth["mse"][truth["g_best"]]
        for B0 in sizes:  # the calibration benchmark's generator seeds, at this offset
            gen = torch.Generator().manual_seed(1000 * k + B0 + 17 * seed_offset)
            for i, (rw, sc, _) in enumerate(_pilots(env, B0, pilots, gen)):
                vc = estimate_components(rw, scores=sc, n_boot=n_boot, method=METHOD,
                                         generator=torch.Generator().manual_seed(7 + i))
                for rule, g in choices(vc, plan_group_size(vc, N, tolerance=TOL)).items():
                    row = (g in truth["band"], truth["mse"][g] / best)
                    per.setdefault((B0, rule, fam), []).append(row)
                    per.setdefault((B0, rule, "pooled"), []).append(row)
        print(f"{name:22s} band {str(truth['band']):18s} done", flush=True)
    return {str(B0): {rule: {f: _summary(v) for (b, r, f), v in per.items() if b == B0 and r == rule}
                      for rule in RULES} for B0 in sizes}


def c1_noise(pilots: int, seed_offset: int, families, B0: int = 64) -> dict:
    """Part 2: the spread of c1's estimate and what an exact quantity in its place would leave (module docstring)."""
    out = {}
    for k, (fam, name, kw) in enumerate(instances(seed_offset, None)):
        if families is not None and fam not in families:
            continue
        env = build(kw)
        c1 = env.exact(sigma=False).policy_moments.c1
        th = env.theta0
        W, p, r = env.score_table(th), env.probs(th), env.reward_mean          # (P, K, D), (P, K), (P, K)
        V = (p * r).sum(-1)
        gx = torch.einsum("pk,pkd->pd", p * (r - V[:, None]), W)                 # g(x) = E[(r - V) W | x]
        gen = torch.Generator().manual_seed(1000 * k + B0 + 17 * seed_offset)
        est, between, oracle_v, no_noise, t0s, cvs = [], [], [], [], [], []
        batch = env.sample_many(th.unsqueeze(0).expand(pilots, -1), B0, G0, gen)
        for i in range(pilots):
            z, sc, pr, ac = batch.rewards[i].double(), batch.scores[i].double(), batch.prompts[i], batch.actions[i]
            t0, M = centred_c1_terms(z, sc, None)
            est.append(_c1(t0, M))
            g = gx[pr]
            Mg = g @ g.T
            between.append(_c1(torch.diagonal(Mg), Mg))
            K = sc @ sc.transpose(-1, -2)
            oracle_v.append(float(_pairs(z - V[pr][:, None], K).mean()))
            no_noise.append(float(_pairs(r[pr.unsqueeze(-1), ac] - V[pr][:, None], K).mean()))
            tot = z.sum(-1)[:, None, None]
            m = (tot - z[:, :, None] - z[:, None, :]) / (G0 - 2)
            off = 1.0 - torch.eye(G0, dtype=K.dtype)
            t0s.append(t0.numpy())
            cvs.append(np.stack([((K * off).sum((-1, -2))).numpy(), (((z[:, None, :] - m) * K * off).sum((-1, -2))
                                                                     ).numpy()], axis=1))
        t0a, X = np.concatenate(t0s), np.concatenate(cvs)
        X = X - X.mean(0)
        beta = np.linalg.lstsq(X, t0a - t0a.mean(), rcond=None)[0]
        t0_sd = float(np.std([t.mean() for t in t0s]))
        out[name] = {"c1": c1, "sd_estimate": float(np.std(est)) / c1,
                     "sd_exact_prompt_gradients": float(np.std(between)) / c1, "sd_T0_mean": t0_sd / c1,
                     "sd_T0_mean_exact_V": float(np.std(oracle_v)) / c1,
                     "sd_T0_mean_exact_reward_means": float(np.std(no_noise)) / c1,
                     "T0_variance_left_by_control_variates": float(np.var(t0a - X @ beta) / np.var(t0a))}
        o = out[name]
        print(f"{name:22s} sd/c1: estimate {o['sd_estimate']:.2f}, exact g(x_b) {o['sd_exact_prompt_gradients']:.2f}; "
              f"mean T0' {o['sd_T0_mean']:.2f}, exact V {o['sd_T0_mean_exact_V']:.2f}, exact r(x, a) "
              f"{o['sd_T0_mean_exact_reward_means']:.2f}; control variates leave "
              f"{o['T0_variance_left_by_control_variates']:.3f} of T0's variance", flush=True)
    return out


def _pairs(e: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """Per prompt 1/(G(G-1)) sum_{i != j} e_i e_j K_ij (T0 with the rewards' baseline already taken off)."""
    G = e.shape[-1]
    off = 1.0 - torch.eye(G, dtype=K.dtype)
    return (e[:, :, None] * e[:, None, :] * K * off).sum((-1, -2)) / (G * (G - 1))


def _c1(t0: torch.Tensor, M: torch.Tensor) -> float:
    B = t0.shape[0]
    return float(t0.mean() - (M.sum() - torch.diagonal(M).sum()) / (B * (B - 1)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pilots", type=int, default=100, help="independent pilots per instance and pilot size")
    ap.add_argument("--n-boot", type=int, default=400, help="bootstrap replicates per pilot")
    ap.add_argument("--seed-offset", type=int, default=5000, help="added to every instance seed (not 0: the "
                    "calibration benchmark's own seeds are for its final run only)")
    ap.add_argument("--sizes", default="64", help="comma-separated pilot sizes B0 (default 64)")
    ap.add_argument("--families", default=None, help="comma-separated family names (default: all)")
    ap.add_argument("--c1-noise", action="store_true", help="also part 2: where the spread of c1's estimate comes from")
    ap.add_argument("--out", type=results_folder, default=None, help="results folder, default benchmarks/results/local")
    a = ap.parse_args()
    if a.seed_offset == 0:
        ap.error("--seed-offset 0 is the calibration benchmark's own seeds; develop on others (e.g. 5000)")
    torch.set_num_threads(1)
    fams = family_option(ap, a.families)
    sizes = tuple(int(s) for s in a.sizes.split(","))
    t0 = time.perf_counter()
    res = {"budget_N": N, "pilot_group_G0": G0, "tolerance": TOL, "seed_offset": a.seed_offset, "pilots_per_instance":
           a.pilots, "n_boot": a.n_boot, "rules": run_rules(a.pilots, a.n_boot, sizes, a.seed_offset, fams)}
    if a.c1_noise:
        res["c1_noise"] = c1_noise(a.pilots, a.seed_offset, fams)
    res["seconds"] = time.perf_counter() - t0
    for B0, d in res["rules"].items():
        fam_names = [f for f in d["m80"] if f != "pooled"] + ["pooled"]
        print(f"\n{B0} x 8: G in the exact band / mean regret / worst regret")
        print(f"{'rule':12s} " + " ".join(f"{f[:14]:>14s}" for f in fam_names))
        for rule, s in d.items():
            cells = [f"{s[f]['in_band']:5.2f} {s[f]['mean_regret']:.3f}" for f in fam_names[:-1]]
            p = s["pooled"]
            pooled = f"{p['in_band']:.3f} {p['mean_regret']:.4f} {p['worst_regret']:.2f}"
            print(f"{rule:12s} " + " ".join(cells) + " " + pooled)
    path = write_result("planner_rules", res, Path(a.out) if a.out else None)
    print(f"\nwrote {path} ({res['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
