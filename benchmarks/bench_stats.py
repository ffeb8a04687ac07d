"""Benchmark of ugrpo.stats against naive Python-loop implementations (runs in < 60 s on 2 cores).

1. GRPO (LOO, paper eq. (4)) advantages on a 1024 x 64 reward batch vs a literal
   leave-one-out loop.
2. c1, c2, c3 (docs/math.md M14-M17) on 64 x 16 and 64 x 32 pilots with D = 10^4 scores vs literal
   loops over ordered pairs and triples of samples (per-prompt Gram blocks by torch).

Run: ``.venv/bin/python benchmarks/bench_stats.py`` -> benchmarks/results/local/bench_stats.json
(reference: benchmarks/results/bench_stats.json)
Timings use one torch thread (see ``main``); medians of alternated repeats.
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import time_alternating, write_result  # noqa: E402

from ugrpo.stats.advantages import compute_advantages  # noqa: E402
from ugrpo.stats.components import estimate_components, point_estimates  # noqa: E402


def naive_loo(rows: list[list[float]]) -> list[list[float]]:
    """Z_g minus the mean of the other G-1 rewards, summed afresh for every g."""
    out = []
    for row in rows:
        G = len(row)
        out.append([row[g] - sum(row[k] for k in range(G) if k != g) / (G - 1) for g in range(G)])
    return out


def naive_components(rewards: torch.Tensor, scores: torch.Tensor) -> list[float]:
    """Literal definitions: ordered pairs for T0, ordered triples for T1, T2, prompt pairs for c1; c1 as the library
    estimates it by default, with the rewards centred within each prompt (docs/math.md M67: the pair term centred by
    the mean of the other G - 2 rewards, the prompts' leave-one-out mean gradients in the cross term)."""
    B, G, _ = scores.shape
    t0s, c2, c3, gh = [], 0.0, 0.0, []
    trip = list(itertools.permutations(range(G), 3))
    for b in range(B):
        Z, W = rewards[b].tolist(), scores[b]
        K = (W @ W.T).tolist()
        t0 = sum(Z[i] * Z[j] * K[i][j] for i in range(G) for j in range(G) if i != j) / (G * (G - 1))
        t1 = sum(K[i][i] * (Z[i] - Z[j]) * (Z[i] - Z[k]) for i, j, k in trip) / len(trip)
        t2 = sum(K[i][i] * 0.5 * (Z[j] - Z[k]) ** 2 for i, j, k in trip) / len(trip)
        total, pairs = sum(Z), 0.0
        for i in range(G):
            for j in range(G):
                if i != j:
                    m = (total - Z[i] - Z[j]) / (G - 2)  # the other G - 2 rewards' mean
                    pairs += (Z[i] - m) * (Z[j] - m) * K[i][j]
        t0s.append(pairs / (G * (G - 1)))
        c2 += (t1 - t0) / B
        c3 += (t2 + t0) / B
        zbar = sum(Z) / G
        gh.append(sum((Z[i] - zbar) * W[i] for i in range(G)) / (G - 1))
    cross = sum(float(gh[b] @ gh[c]) for b in range(B) for c in range(B) if b != c) / (B * (B - 1))
    return [sum(t0s) / B - cross, c2, c3]


def _bench_components(B0: int, G0: int, D: int, gen: torch.Generator) -> dict:
    rewards = (torch.rand(B0, G0, generator=gen) < 0.4).double()
    scores = torch.randn(B0, G0, D, generator=gen, dtype=torch.float64) * 0.01
    ours = point_estimates(rewards, scores=scores)
    naive = torch.tensor(naive_components(rewards, scores), dtype=torch.float64)  # also the warm-up
    rel_diff = float(((ours - naive).abs() / naive.abs().clamp_min(1e-300)).max())
    t = time_alternating({
        "point_estimates": lambda: point_estimates(rewards, scores=scores),
        "estimate_components_n_boot_1000": lambda: estimate_components(
            rewards, scores=scores, n_boot=1000, generator=torch.Generator().manual_seed(1)),
        "naive_loops": lambda: naive_components(rewards, scores),
    }, repeats=3, warmup=0)
    med = lambda k: t[k]["median_s"]  # noqa: E731
    return {
        "size": {"B0": B0, "G0": G0, "D": D, "n_boot": 1000}, "timings": t, "max_rel_diff_vs_naive": rel_diff,
        "speedup_point": med("naive_loops") / med("point_estimates"),
        "speedup_with_bootstrap": med("naive_loops") / med("estimate_components_n_boot_1000"),
    }


def main() -> None:
    # One thread: the project's machines have 2 shared cores, and oversubscribed thread pools
    # make small-tensor timings erratic. The naive loops are single-threaded Python anyway.
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    gen = torch.Generator().manual_seed(0)

    # 1. advantages ---------------------------------------------------------------------------
    B, G = 1024, 64
    rewards = (torch.rand(B, G, generator=gen) < 0.3).double()
    rows = rewards.tolist()
    fast = compute_advantages(rewards, baseline="grpo").advantages
    max_diff = float((fast - torch.tensor(naive_loo(rows), dtype=torch.float64)).abs().max())
    t_adv = time_alternating({
        "vectorised": lambda: compute_advantages(rewards, baseline="grpo"),
        "naive_loop": lambda: naive_loo(rows),
    }, repeats=5, warmup=0)  # the correctness check above was the warm-up

    # 2. variance components ---------------------------------------------------------------------
    components = [_bench_components(B0, G0, 10_000, gen) for B0, G0 in ((64, 16), (64, 32))]

    med = lambda d, k: d[k]["median_s"]  # noqa: E731
    payload = {
        "advantages": {
            "size": {"B": B, "G": G}, "timings": t_adv, "max_abs_diff_vs_naive": max_diff,
            "speedup": med(t_adv, "naive_loop") / med(t_adv, "vectorised"),
        },
        "variance_components": components,
        "total_wall_s": time.perf_counter() - t_start,
    }
    path = write_result("bench_stats", payload)
    a = payload["advantages"]
    print(f"advantages {B}x{G}: vectorised {med(t_adv, 'vectorised') * 1e3:.2f} ms, naive loop "
          f"{med(t_adv, 'naive_loop'):.2f} s, speedup {a['speedup']:.0f}x (max |diff| {max_diff:.1e})")
    for v in components:
        t, sz = v["timings"], v["size"]
        print(f"components {sz['B0']}x{sz['G0']}, D={sz['D']}: point {med(t, 'point_estimates') * 1e3:.1f} ms, "
              f"with 1000 bootstraps {med(t, 'estimate_components_n_boot_1000') * 1e3:.1f} ms, naive loops "
              f"{med(t, 'naive_loops'):.2f} s; speedup {v['speedup_point']:.0f}x (point), "
              f"{v['speedup_with_bootstrap']:.0f}x (with bootstrap); max rel diff {v['max_rel_diff_vs_naive']:.1e}")
    print(f"total {payload['total_wall_s']:.1f} s -> {path}")


if __name__ == "__main__":
    main()
