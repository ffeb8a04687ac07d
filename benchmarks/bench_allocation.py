"""Benchmark of per-prompt rollout allocation at equal budget (docs/math.md M32-M38), exact synthetic lab.

For each instance (the demo plus heterogeneous make-env instances whose seeds and knobs are fixed below, chosen
before any result was seen), `ugrpo.experiments.allocate.run_allocate` gives the exact MSE of every rule at equal
N samples per step, averaged over drawn batches; this file records the ratios ustat / best uniform G,
ustat / vip and ustat / knapsack (paired over batches, 95% delta-method intervals), with true and with predicted
per-prompt moments, for samples and for tokens as the unit. Goal (issue 12): <= 0.7 against the best uniform G
and below both anchors on every instance.

Run: ``.venv/bin/python benchmarks/bench_allocation.py`` -> benchmarks/results/allocation.json (about a minute).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result  # noqa: E402

from ugrpo.envs import builtin_env, random_env  # noqa: E402
from ugrpo.experiments.allocate import AllocateConfig, run_allocate  # noqa: E402

# (name, budget N, make-env arguments or None for builtin:demo); fixed before looking at any result
INSTANCES = [
    ("demo", 256, None),
    ("bandit-extreme", 256, dict(kind="softmax_bandit", n_prompts=64, n_actions=6, logit_scale=1.5,
                                 reward_spread=1.0, extreme_fraction=0.75, extreme_shift=5.0,
                                 score_reward_corr=-0.8, seed=101)),
    ("linear-extreme", 256, dict(kind="linear_softmax", n_prompts=64, n_actions=6, dim=8, logit_scale=1.0,
                                 reward_spread=1.0, extreme_fraction=0.75, extreme_shift=5.0,
                                 score_reward_corr=-0.6, seed=202)),
    ("bandit-mixed", 512, dict(kind="softmax_bandit", n_prompts=100, n_actions=8, logit_scale=2.0,
                               reward_spread=2.0, difficulty=1.0, extreme_fraction=0.5, extreme_shift=4.0,
                               score_reward_corr=-0.5, seed=303)),
    ("linear-hard", 256, dict(kind="linear_softmax", n_prompts=80, n_actions=5, dim=6, logit_scale=1.5,
                              reward_spread=1.5, difficulty=2.0, extreme_fraction=0.6, extreme_shift=5.0,
                              score_reward_corr=0.0, seed=404)),
]
SEED, BATCHES, TOKEN_BATCHES = 0, 2000, 100


def _env(spec):
    if spec is None:
        return builtin_env("demo")
    kw = dict(spec)
    return random_env(kw.pop("kind"), **kw)


def main() -> None:
    torch.set_num_threads(1)
    out = []
    for name, budget, spec in INSTANCES:
        t0 = time.perf_counter()
        res = run_allocate(_env(spec), AllocateConfig(budget=budget, seed=SEED, batches=BATCHES,
                                                      token_batches=TOKEN_BATCHES))
        ratios = {f"{r['unit']}/{r['moments']}/ustat_over_{r['denominator']}":
                  {k: r[k] for k in ("ratio", "ci_low", "ci_high")} for r in res["ratios"]}
        samples = [r for r in res["ratios"] if r["unit"] == "samples"]
        goal = {m: all((r["ratio"] <= 0.7) if r["denominator"] == "uniform" else (r["ci_high"] < 1.0)
                       for r in samples if r["moments"] == m) for m in ("true", "predicted")}
        inst = res["instance"]
        mse_u = next(r["mse"] for r in res["rows"] if r["rule"] == "uniform")
        # any allocation over the same B keeps c1/B: the ratio to uniform cannot go below this share
        floor = inst["c1"] / inst["B"] / mse_u
        out.append({"instance": name, "budget": budget, "make_env": spec, **inst, "ratios": ratios,
                    "c1_share_of_uniform_mse": floor,
                    "goal_met_samples": goal, "rows": res["rows"], "token_rows": res["token_rows"],
                    "prediction_quality": res["prediction_quality"], "seconds": time.perf_counter() - t0})
        print(f"{name:15s} G_u={inst['best_uniform_G']:3d} B={inst['B']:3d} c1/B share {floor:.2f} " + "  ".join(
            f"{r['unit'][0]}/{r['moments'][:4]}/{r['denominator'][:4]} {r['ratio']:.3f}" for r in res["ratios"]),
            flush=True)
    path = write_result("allocation", {
        "description": "exact MSE ratios of per-prompt allocation rules at equal budget (ugrpo allocate)",
        "goal": "ustat / best uniform G <= 0.7 and ustat below vip and knapsack (95% interval below 1) on every "
                "instance, samples as the unit",
        "seed": SEED, "batches": BATCHES, "token_batches": TOKEN_BATCHES, "instances": out})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
