"""Calibration of the group-size planner on random synthetic policies (exact truth; no language model).

Instance families (settings fixed below before any result; 3 seeds each, seeds 4000 and up, apart from the
tests'): where the exact 5% band at N = 1024 is a single G (4 or 8), where it excludes 8 (16-32, and the
small-c1 families whose band reaches 64-128), mixed prompt difficulty, a spread of per-prompt score scales, and
rare hard prompts with large score norms. The last two are softmax bandits built here from
:class:`~ugrpo.envs.policies.LinearSoftmax` with one-hot features scaled per prompt (``scaled_bandit``: the
policy of a bandit, scores W = s_x (e_a - pi) with a per-prompt scale s_x).

For each instance the exact constants c1, c2, c3 at theta0 give the exact bound (= GRPO's exact minibatch MSE
with B = N/G), the exact best G and the exact 5% band. Independent pilots of B0 x 8 (B0 = 16, 64, 256) are
drawn at theta0; each is estimated twice from the same bootstrap resamples (the default intervals, symmetric
bootstrap-t with c1's on the log(c1 + s) scale, docs/math.md M39), with c1's terms on the raw rewards
(``c1_baseline="none"``, M17) and centred within each prompt (the default, M67), and planned four times:

* before: the recommendation before issue 22 (argmin of the bootstrap expected MSE ratio over the
  replicates with c1* > 0; minimax over c1 in [0, max(c1_hi, 2 se)] when fewer than 5% have c1* > 0),
  re-implemented here from its definition, on the raw estimate;
* raw: the planner (:func:`ugrpo.stats.planner.plan_group_size`, docs/math.md M41, M80) on the raw estimate;
* joint: M41 as it was before M80, re-implemented here from its definition, on the centred estimate: the expected
  ratio over the joint draws of (c1, c2, c3) (each clipped at 0), among the G that decide when there are some;
* after: the planner on the centred estimate (the default: M67's c1, M80's c2 and c3 at their estimates).

Reported per pilot size, pooled and per family: coverage of each constant's 95% interval; coverage of the band
(the exact band inside [g_band_low, g_band_high]); how often the chosen G is inside the exact band; mean and
worst regret (exact MSE at the chosen G / at the exact best G); how often the planner says the pilot cannot
tell (``undecided``; it still names a G, which is what is scored) and the in-band rate of the pilots it
decides; how often the stated lower bound on G* is false.

Run: ``python benchmarks/bench_planner_calibration.py [--pilots 100] [--n-boot 400]``
-> benchmarks/results/local/planner_calibration.json. ``--seed-offset K`` adds K to every instance seed (other
random policies of the same settings: the rule's settings were chosen on such seeds, never on these; write it
elsewhere with ``--out``). ``--families a,b`` runs some families only; ``--sizes 64`` some pilot sizes only;
``--interval-methods`` also scores c1's plain and equal-tailed bootstrap-t intervals (docs/math.md M39);
``--pilot-group 16 --sizes 32`` pilots of another shape (here the 512 samples of 64 x 8 on half the prompts, M90),
written as planner_calibration_g16.json.
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

from common import results_folder, write_result  # noqa: E402

from ugrpo.envs.generate import random_env  # noqa: E402
from ugrpo.envs.policies import LinearSoftmax  # noqa: E402
from ugrpo.stats.band import bound_table, near_optimal_band, ratio_table  # noqa: E402
from ugrpo.stats.components import estimate_components  # noqa: E402
from ugrpo.stats.planner import bound, candidate_groups, plan_group_size  # noqa: E402

N = 1024
G0 = 8
SIZES = (16, 64, 256)
TOL = 0.05
METHOD = "studentized-log"
SEEDS_PER_FAMILY = 3
_B, _L = dict(kind="softmax_bandit", n_prompts=64, n_actions=4), dict(kind="linear_softmax", n_prompts=64,
                                                                       n_actions=4, dim=6)
FAMILIES = (  # (family, builder, settings, first seed); the exact bands at these seeds are in the results
    ("bandit-steep", "random_env", dict(_B, reward_spread=2.0), 4000),                     # band {4}
    ("linear-steep", "random_env", dict(_L, reward_spread=2.0), 4010),                     # band {4}
    ("bandit-mid", "random_env", dict(_B, reward_spread=1.0), 4020),                       # band {4, 8}
    ("linear-corr", "random_env", dict(_L, reward_spread=0.6, score_reward_corr=-0.6, logit_scale=1.0), 4030),  # {8}
    ("linear-mixed", "random_env", dict(_L, reward_spread=0.8, extreme_fraction=0.5, extreme_shift=3.0), 4040),
    ("bandit-easy", "random_env", dict(_B, n_prompts=32, n_actions=6, reward_spread=0.6, difficulty=-1.0), 4050),
    ("bandit-flat", "random_env", dict(_B, reward_spread=0.2), 4060),                      # band 8/16-32/64
    ("linear-flat", "random_env", dict(_L, reward_spread=0.25, prompt_heterogeneity=0.5), 4070),  # {16, 32}(, 64)
    ("bandit-small-c1", "random_env", dict(_B, reward_spread=0.1), 4080),                  # band 16-128
    ("linear-small-c1", "random_env", dict(_L, reward_spread=0.15, prompt_heterogeneity=0.3), 4090),  # 16-128
    ("bandit-scale-spread", "scaled_bandit", dict(reward_spread=0.6, scale_sd=0.7), 4100),  # band {8}(, 16)
    ("bandit-rare-hard", "scaled_bandit", dict(reward_spread=0.6, rare_fraction=0.05, rare_scale=5.0,
                                               rare_shift=3.0), 4110),                     # band {8}(, 16)
)


def scaled_bandit(*, reward_spread: float, seed: int, n_prompts: int = 64, n_actions: int = 4,
                  logit_scale: float = 0.5, difficulty: float = 0.0, scale_sd: float = 0.0,
                  rare_fraction: float = 0.0, rare_scale: float = 1.0, rare_shift: float = 0.0) -> LinearSoftmax:
    """A softmax bandit whose prompt x has its scores scaled by s_x: features s_x e_(x, a), theta0 = logits / s_x
    (the same policy as the bandit with those logits). s_x = exp(scale_sd z_x), z_x ~ N(0, 1); a share
    ``rare_fraction`` of the prompts (at random) gets s_x times ``rare_scale`` and reward logits shifted down by
    ``rare_shift`` (rare hard prompts with large score norms). Reward means sigmoid(-difficulty + reward_spread e
    - shift), logits logit_scale t, e, t iid N(0, 1)."""
    gen = torch.Generator().manual_seed(int(seed))
    P, K, dt = n_prompts, n_actions, torch.float64
    noise, logits = torch.randn(P, K, generator=gen, dtype=dt), logit_scale * torch.randn(P, K, generator=gen, dtype=dt)
    scale = torch.exp(scale_sd * torch.randn(P, generator=gen, dtype=dt))
    shift = torch.zeros(P, dtype=dt)
    rare = torch.randperm(P, generator=gen)[: int(round(rare_fraction * P))]
    scale[rare], shift[rare] = scale[rare] * rare_scale, rare_shift
    reward = torch.sigmoid(-difficulty + reward_spread * noise - shift[:, None])
    feats, theta = torch.zeros(P, K, P * K, dtype=dt), torch.zeros(P * K, dtype=dt)
    for x in range(P):
        feats[x, torch.arange(K), x * K + torch.arange(K)] = scale[x]
        theta[x * K:(x + 1) * K] = logits[x] / scale[x]
    return LinearSoftmax(theta.tolist(), feats.tolist(), reward.tolist(), j_star_starts=0)


def instances(seed_offset: int = 0, families: set[str] | None = None) -> list[tuple[str, str, dict]]:
    """(family, instance name, builder settings with seed) for every instance."""
    out = []
    for fam, builder, kw, first in FAMILIES:
        if families is None or fam in families:
            for k in range(SEEDS_PER_FAMILY):
                out.append((fam, f"{fam}-{k}", dict(kw, seed=first + k + seed_offset, builder=builder)))
    return out


def build(settings: dict):
    kw = dict(settings)
    builder = kw.pop("builder")
    return random_env(**kw) if builder == "random_env" else scaled_bandit(**kw)


def exact_truth(env) -> dict:
    pm = env.exact(sigma=False).policy_moments
    cands = candidate_groups(N)
    mse = {g: bound(pm.c1, pm.c2, pm.c3, N, g) for g in cands}
    best = min(mse, key=mse.get)
    return {"c": (pm.c1, pm.c2, pm.c3), "mse": mse, "g_best": best, "band": near_optimal_band(pm.c1, pm.c2, pm.c3, N,
            cands, TOL), "g_star_continuous": 1 + math.sqrt(pm.c3 / pm.c1) if pm.c1 > 0 else math.inf}


def before_rule(vc, cands: list[int]) -> int:
    """The previous recommendation (M41 before this change): argmin of the expected ratio over the replicates with
    c1* > 0, or the minimax G over c1 in [0, max(c1_hi, 2 se)] (c2, c3 at the estimates) when fewer than 5% of
    the replicates have c1* > 0."""
    reps = vc.replicates.numpy()
    reps = reps[np.isfinite(reps).all(axis=1)]
    pos = reps[reps[:, 0] > 0]
    if pos.shape[0] >= max(2, 0.05 * reps.shape[0]):
        rows = pos
    else:
        c1_up = max(vc.c1.ci_high, 2 * vc.c1.se) if math.isfinite(vc.c1.se) else vc.c1.ci_high
        if not c1_up > 0:
            rows = reps
        else:
            grid = np.column_stack([np.linspace(0.0, c1_up, 201), np.full(201, max(vc.c2.estimate, 0.0)),
                                    np.full(201, max(vc.c3.estimate, 0.0))])
            tab = bound_table(grid, N, cands)
            return cands[int(np.argmin((tab / tab.min(axis=1, keepdims=True)).max(axis=0)))]
    tab = bound_table(rows, N, cands)
    best = tab.min(axis=1, keepdims=True)
    ratio = np.where(best > 0, tab / np.where(best > 0, best, 1.0), 1.0)
    return cands[int(np.argmin(ratio.mean(axis=0)))]


def joint_rule(vc, plan) -> int:
    """M41 before M80: among the G that decide (worst ratio over c1's range within the tolerance), else all, the G
    with the smallest mean ratio over the joint confidence draws of (c1, c2, c3), each clipped at 0."""
    draws = vc.confidence_draws()
    rows = np.clip(draws[~np.isnan(draws).any(axis=1)], 0.0, None)
    rows = np.minimum(rows, np.where(np.isfinite(rows), rows, 0.0).max(initial=1.0) * 1e6)
    expected = ratio_table(rows, N, [g for g, _, _ in plan.candidates]).mean(axis=0)
    worst = np.asarray(plan.worst_case)
    pool = np.flatnonzero(worst <= 1 + TOL)
    pool = pool if pool.size else np.arange(len(worst))
    return plan.candidates[int(pool[np.argmin(expected[pool])])][0]


def _scored(chosen: int | None, truth: dict) -> dict:
    return {"chosen": chosen, "in_band": chosen in truth["band"],
            "regret": None if chosen is None else truth["mse"][chosen] / truth["mse"][truth["g_best"]]}


def _common(vc, plan, truth) -> dict:
    """Interval coverage, band coverage and the lower bound of one pilot's estimate and plan."""
    cov = [e.ci_low <= t <= e.ci_high for e, t in zip((vc.c1, vc.c2, vc.c3), truth["c"])]
    lb = plan.g_star_lower_bound
    return {"cover": cov, "c1_below": vc.c1.ci_high < truth["c"][0], "c1_estimate": vc.c1.estimate,
            "band_cover": plan.g_band[0] <= min(truth["band"]) and max(truth["band"]) <= plan.g_band[1],
            "lb": lb, "lb_false": lb is not None and lb > truth["g_star_continuous"], "need": plan.pilot_prompts_needed}


def one_pilot(rewards, scores, truth, n_boot: int, seed: int, interval_methods: bool = False,
              rare_seen: bool | None = None) -> dict:
    """The four rules on one pilot (the same bootstrap resamples): before and raw on the raw c1 terms, joint and
    after on the reward-centred ones (docs/math.md M67, M80). ``rare_seen``: whether the pilot holds a success of a
    rare hard prompt (None for the families without them), recorded for M69's coverage split."""
    vc_raw = estimate_components(rewards, scores=scores, n_boot=n_boot, method=METHOD,
                                 generator=torch.Generator().manual_seed(seed), c1_baseline="none")
    vc = estimate_components(rewards, scores=scores, n_boot=n_boot, method=METHOD,
                             generator=torch.Generator().manual_seed(seed))
    plan_raw, plan = plan_group_size(vc_raw, N, tolerance=TOL), plan_group_size(vc, N, tolerance=TOL)
    cands = [g for g, _, _ in plan.candidates]
    common_raw, common = _common(vc_raw, plan_raw, truth), _common(vc, plan, truth)
    common_raw["rare_seen"] = common["rare_seen"] = rare_seen
    if interval_methods:
        for method in ("studentized", "studentized-equal-tailed"):
            other = estimate_components(rewards, scores=scores, n_boot=n_boot, method=method,
                                        generator=torch.Generator().manual_seed(seed))
            common[f"cover_{method}"] = [e.ci_low <= t <= e.ci_high
                                         for e, t in zip((other.c1, other.c2, other.c3), truth["c"])]
    return {"before": {**common_raw, **_scored(before_rule(vc_raw, cands), truth), "decided": True},
            "raw": {**common_raw, **_scored(plan_raw.g_recommended, truth), "decided": bool(plan_raw.decided)},
            "joint": {**common, **_scored(joint_rule(vc, plan), truth), "decided": bool(plan.decided)},
            "after": {**common, **_scored(plan.g_recommended, truth), "decided": bool(plan.decided)}}


def summarise(rows: list[dict]) -> dict:
    def rate(xs):
        return float(np.mean(xs)) if len(xs) else None

    regrets = [r["regret"] for r in rows if r["regret"] is not None]
    with_lb = [r for r in rows if r["lb"] is not None]
    decided = [r for r in rows if r["decided"]]
    out = {
        "pilots": len(rows),
        "coverage_c1": rate([r["cover"][0] for r in rows]), "coverage_c2": rate([r["cover"][1] for r in rows]),
        "coverage_c3": rate([r["cover"][2] for r in rows]),
        "c1_interval_below_truth": rate([r["c1_below"] for r in rows]),
        "band_coverage": rate([r["band_cover"] for r in rows]),
        "chosen_in_exact_band": rate([r["in_band"] for r in rows]),
        "mean_regret": rate(regrets), "worst_regret": max(regrets) if regrets else None,
        "undecided": rate([not r["decided"] for r in rows]),
        "in_band_when_decided": rate([r["in_band"] for r in decided]),
        "in_band_when_undecided": rate([r["in_band"] for r in rows if not r["decided"]]),
        "lower_bound_given": rate([r["lb"] is not None for r in rows]),
        "lower_bound_false": rate([r["lb_false"] for r in with_lb]),
    }
    est = [r["c1_estimate"] for r in rows]
    out["c1_estimate_sd"] = float(np.std(est, ddof=1)) if len(est) > 1 else None
    for seen in (True, False):
        sub = [r for r in rows if r.get("rare_seen") is seen]
        if sub:
            out[f"coverage_rare_{'seen' if seen else 'unseen'}"] = {
                "pilots": len(sub), "c1": rate([r["cover"][0] for r in sub]), "c2": rate([r["cover"][1] for r in sub]),
                "c3": rate([r["cover"][2] for r in sub])}
    for method in ("studentized", "studentized-equal-tailed"):
        if rows and f"cover_{method}" in rows[0]:
            out[f"coverage_{method}"] = [rate([r[f"cover_{method}"][k] for r in rows]) for k in range(3)]
    return out


def _pilots(env, B0: int, pilots: int, gen: torch.Generator, chunk: int = 25, g0: int = G0):
    """(rewards, scores, prompts) of ``pilots`` independent B0 x g0 pilots at theta0, sampled in chunks (memory)."""
    for start in range(0, pilots, chunk):
        n = min(chunk, pilots - start)
        batch = env.sample_many(env.theta0.unsqueeze(0).expand(n, -1), B0, g0, gen)
        for i in range(n):
            yield batch.rewards[i].double(), batch.scores[i].double(), batch.prompts[i]


def rare_prompts(env, settings: dict) -> torch.Tensor | None:
    """(P,) bool: the rare hard prompts of a ``scaled_bandit`` built with ``rare_fraction`` (None otherwise). Its
    families have no other spread of score scales, so the rare prompts are exactly those with s_x > 1."""
    if not settings.get("rare_fraction") or settings.get("scale_sd", 0.0):
        return None
    return env.features.abs().amax(dim=(1, 2)) > 1.0


def run(pilots: int, n_boot: int, sizes=SIZES, seed_offset: int = 0, families: set[str] | None = None,
        interval_methods: bool = False, g0: int = G0) -> dict:
    keys = ("before", "raw", "joint", "after")
    per_instance = []
    pooled = {(B0, m): [] for B0 in sizes for m in keys}
    per_family: dict = {}
    for k, (fam, name, kw) in enumerate(instances(seed_offset, families)):
        truth = exact_truth(build(kw))
        env = build(kw)
        inst = {"family": fam, "name": name, "settings": kw, "c1": truth["c"][0], "c2": truth["c"][1],
                "c3": truth["c"][2], "g_star_continuous": truth["g_star_continuous"], "g_best": truth["g_best"],
                "band": truth["band"], "sizes": {}}
        for B0 in sizes:
            gen = torch.Generator().manual_seed(1000 * k + B0 + 17 * seed_offset + (0 if g0 == G0 else 7919 * g0))
            rows = {m: [] for m in keys}
            rare = rare_prompts(env, kw)
            for i, (rw, sc, pr) in enumerate(_pilots(env, B0, pilots, gen, g0=g0)):
                seen = None if rare is None else bool(((rw > 0) & rare[pr].unsqueeze(1)).any())
                res = one_pilot(rw, sc, truth, n_boot, seed=7 + i, interval_methods=interval_methods, rare_seen=seen)
                for m in keys:
                    rows[m].append(res[m])
                    pooled[(B0, m)].append(res[m])
                    per_family.setdefault((fam, B0, m), []).append(res[m])
            inst["sizes"][str(B0)] = {m: summarise(v) for m, v in rows.items()}
            needs = [r["need"] for r in rows["after"] if r["need"] is not None]
            inst["sizes"][str(B0)]["after"]["median_pilot_prompts_needed"] = float(np.median(needs)) if needs else None
            s = inst["sizes"][str(B0)]
            print(f"{name:22s} band {str(truth['band']):18s} B0={B0:4d}  cov {s['after']['coverage_c1']:.2f}/"
                  f"{s['after']['coverage_c2']:.2f}/{s['after']['coverage_c3']:.2f}  in-band before "
                  f"{s['before']['chosen_in_exact_band']:.2f} raw {s['raw']['chosen_in_exact_band']:.2f} joint "
                  f"{s['joint']['chosen_in_exact_band']:.2f} after {s['after']['chosen_in_exact_band']:.2f}  regret "
                  f"{s['before']['mean_regret']:.3f} / {s['raw']['mean_regret']:.3f} / {s['joint']['mean_regret']:.3f}"
                  f" / {s['after']['mean_regret']:.3f}  undecided "
                  f"{s['after']['undecided']:.2f}", flush=True)
        per_instance.append(inst)
    table = {str(B0): {m: summarise(pooled[(B0, m)]) for m in keys} for B0 in sizes}
    fams = {fam: {str(B0): {m: summarise(per_family[(fam, B0, m)]) for m in keys} for B0 in sizes}
            for fam in dict.fromkeys(f for f, _, _ in instances(seed_offset, families))}
    return {"budget_N": N, "pilot_group_G0": g0, "tolerance": TOL, "pilots_per_instance": pilots, "n_boot": n_boot,
            "seed_offset": seed_offset, "interval_method": METHOD,
            "before": "the recommendation before issue 22: expected MSE ratio over the replicates with c1* > 0 "
                      "(minimax fallback), on the raw c1 terms",
            "raw": "plan_group_size's g_recommended (docs/math.md M41) on the raw c1 terms (c1_baseline='none')",
            "joint": "M41 before M80: the expected ratio over the joint draws of (c1, c2, c3), on the reward-centred "
                     "c1 terms (M67)",
            "after": "plan_group_size's g_recommended (docs/math.md M41, M80: c2, c3 at their estimates) on the "
                     "reward-centred c1 terms (M67)",
            "table": table, "families": fams, "instances": per_instance}


def print_table(res: dict) -> None:
    cols = ["coverage_c1", "coverage_c2", "coverage_c3", "band_coverage", "chosen_in_exact_band", "mean_regret",
            "worst_regret", "undecided", "in_band_when_decided", "lower_bound_false"]
    g0 = res["pilot_group_G0"]
    print(f"\nB0 x {g0}  rule    " + "  ".join(c.replace("coverage_", "cov_") for c in cols))
    for B0, d in res["table"].items():
        for m, s in d.items():
            print(f"{B0:>6}  {m:6s}  " + "  ".join("   -  " if s[c] is None else f"{s[c]:6.3f}" for c in cols))
    print("\nper family: G in the exact 5% band, before / raw / joint / after (mean regret joint -> after; worst)")
    for fam, d in res["families"].items():
        print(f"{fam:22s} " + "  ".join(
            f"{B0}x{g0} {s['before']['chosen_in_exact_band']:.2f}/{s['raw']['chosen_in_exact_band']:.2f}/"
            f"{s['joint']['chosen_in_exact_band']:.2f}/{s['after']['chosen_in_exact_band']:.2f} "
            f"({s['joint']['mean_regret']:.3f} -> {s['after']['mean_regret']:.3f}; {s['joint']['worst_regret']:.2f}"
            f" -> {s['after']['worst_regret']:.2f})"
            for B0, s in d.items()))


def family_option(ap: argparse.ArgumentParser, value: str | None) -> set[str] | None:
    """The ``--families`` option of the planner benchmarks: a set of names of FAMILIES (None: all); unknown names are
    an argparse error listing the families."""
    names = {f for f, _, _, _ in FAMILIES}
    fams = None if value is None else set(value.split(","))
    if fams is not None and not fams <= names:
        ap.error(f"--families: unknown {sorted(fams - names)}; the families are {sorted(names)}")
    return fams


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pilots", type=int, default=100, help="independent pilots per instance and pilot size")
    ap.add_argument("--n-boot", type=int, default=400, help="bootstrap replicates per pilot")
    ap.add_argument("--seed-offset", type=int, default=0, help="added to every instance seed (out-of-sample check)")
    ap.add_argument("--families", default=None, help="comma-separated family names (default: all)")
    ap.add_argument("--sizes", default=None, help="comma-separated pilot sizes B0 (default: 16,64,256)")
    ap.add_argument("--interval-methods", action="store_true", help="also score the plain and equal-tailed "
                    "bootstrap-t intervals of the same replicates")
    ap.add_argument("--pilot-group", type=int, default=G0, help=f"samples per pilot prompt G0 (default {G0}; another "
                    "G0 writes planner_calibration_g<G0>.json)")
    ap.add_argument("--out", type=results_folder, default=None, help="results folder, default benchmarks/results/local")
    a = ap.parse_args()
    if a.pilot_group < 4:
        ap.error(f"--pilot-group {a.pilot_group}: the c2 and c3 estimators need G0 >= 4")
    torch.set_num_threads(1)
    fams = family_option(ap, a.families)
    sizes = SIZES if a.sizes is None else tuple(int(s) for s in a.sizes.split(","))
    t0 = time.perf_counter()
    res = run(a.pilots, a.n_boot, sizes=sizes, seed_offset=a.seed_offset, families=fams,
              interval_methods=a.interval_methods, g0=a.pilot_group)
    res["seconds"] = time.perf_counter() - t0
    print_table(res)
    name = "planner_calibration" + ("" if a.pilot_group == G0 else f"_g{a.pilot_group}")
    path = write_result(name, res, Path(a.out) if a.out else None)
    print(f"\nwrote {path} ({res['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
