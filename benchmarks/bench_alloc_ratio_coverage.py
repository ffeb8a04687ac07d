"""Coverage of the paired ratio interval of ``ugrpo mse --model --allocation`` (docs/lm-mse.md R10), exact truth.

On synthetic policies with exact per-prompt moments, each study draws R repetitions of B prompts, gives each rule's
sizes (from the exact moments) the first G_b samples of a block of Gmax policy samples (common random numbers, as
the LM study does), and forms the ratio rule / uniform of the mean squared errors against the exact g with the
delta-method interval the study prints (``stats.intervals.ratio_interval``). The exact ratio is
E[c1/B + (1/B^2) sum_b f_b(G_b)] for the rule over that for uniform (M33), averaged over 20000 batches.
Reported per instance, rule and R: the share of studies whose interval holds the exact ratio, with its binomial SE.

Run: ``python benchmarks/bench_alloc_ratio_coverage.py [--studies 400]`` -> benchmarks/results/local/
alloc_ratio_coverage.json (a few minutes on 2 cores).
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
from ugrpo.stats.allocation import PromptStats, allocate, predicted_mse  # noqa: E402
from ugrpo.stats.intervals import ratio_interval  # noqa: E402
from ugrpo.stats.mc_mse import ragged_block_errors  # noqa: E402

INSTANCES = (  # (name, random_env kwargs, B, G, Gmax)
    ("bandit-4", dict(kind="softmax_bandit", n_prompts=4, n_actions=3, logit_scale=1.5, extreme_fraction=0.5,
                      seed=7), 4, 4, 16),
    ("bandit-32", dict(kind="softmax_bandit", n_prompts=32, n_actions=4, logit_scale=1.5, extreme_fraction=0.6,
                       seed=8), 8, 8, 32),
)


def _study_ratios(env, B: int, G: int, Gmax: int, R: int, studies: int, rules: tuple[str, ...], seed: int) -> dict:
    ex = env.exact(env.theta0)
    true, c1, g = PromptStats.from_moments(ex.prompt_moments), ex.policy_moments.c1, ex.g_x.mean(0).double()
    probs, W, r_mean = env.probs(env.theta0), env.score_table(env.theta0), env.reward_mean
    P = env.n_prompts

    def sizes(rule: str, i: np.ndarray) -> np.ndarray:
        return np.full(B, G) if rule == "uniform" else allocate(rule, true.take(i), B * G, g_max=Gmax).sizes

    bat = np.random.default_rng([seed, 1]).integers(P, size=(20000, B))
    exact_mse = {r: float(np.mean([predicted_mse(sizes(r, i), true.take(i), c1=c1) for i in bat]))
                 for r in ("uniform", *rules)}
    gen = torch.Generator().manual_seed(seed)
    cover = {r: 0 for r in rules}
    for _ in range(studies):
        idx = torch.randint(P, (R, B), generator=gen)
        a = torch.multinomial(probs[idx.reshape(-1)], Gmax, replacement=True, generator=gen)   # (R*B, Gmax)
        pr = idx.reshape(-1, 1)
        s = W[pr, a].view(R, B, Gmax, -1).double()
        z = torch.bernoulli(r_mean[pr, a], generator=gen).view(R, B, Gmax).double()
        err = {r: ragged_block_errors(s, z, torch.as_tensor(np.stack([sizes(r, i) for i in idx.numpy()])), g)
               for r in ("uniform", *rules)}
        for r in rules:
            ci = ratio_interval(err[r], err["uniform"])
            cover[r] += ci.ci_low <= exact_mse[r] / exact_mse["uniform"] <= ci.ci_high
    return {r: {"exact_ratio": exact_mse[r] / exact_mse["uniform"], "coverage": cover[r] / studies,
                "coverage_se": math.sqrt(cover[r] / studies * (1 - cover[r] / studies) / studies)} for r in rules}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=400)
    ap.add_argument("--reps", default="60,200")
    ap.add_argument("--out", type=results_folder, default=None, help="results folder, default benchmarks/results/local")
    a = ap.parse_args()
    t0 = time.perf_counter()
    rows = []
    for name, kw, B, G, Gmax in INSTANCES:
        env = random_env(**kw)
        for R in (int(v) for v in a.reps.split(",")):
            res = _study_ratios(env, B, G, Gmax, R, a.studies, ("ustat", "knapsack"), seed=R)
            for rule, v in res.items():
                rows.append({"instance": name, "B": B, "G": G, "block": Gmax, "R": R, "rule": rule, **v})
                print(rows[-1], flush=True)
    path = write_result("alloc_ratio_coverage", {"studies": a.studies, "level": 0.95, "rows": rows,
                                                 "seconds": time.perf_counter() - t0},
                        Path(a.out) if a.out else None)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
