"""Does the joint solver with its shortcuts find the law it found without them? (``ugrpo.stats.is_solver``, M56.)

The shortcuts (the dual over distinct rows, the inner root finder's jump snap, warm start and false position) are
each tested on a few pools to 1e-12 (tests/stats/test_prompt_is.py). This runs ``solve_joint`` with and without
all of them on random pools of 3-400 prompts: 2-30 candidate sizes (consecutive or spread up to 80), saturated
prompts (a_x constant in G, some 0), in half the pools most rows copies of three, floors lambda in {0.01, 0.05, 0.1,
0.3, 0.9}, budgets anywhere between the smallest and the largest size; once with the settings ``prompt_is.is_law``
uses (a proven gap of 1e-3, at most 8 nodes) and once with the solver's defaults (1e-4, 16 nodes). A pool counts as
``same`` when the sizes agree and the law, the objective and the bound agree to 1e-9; ``tie`` when the sizes differ
but the objective agrees to 1e-12 (equal rows trading sizes); else ``worse`` or ``better`` by the objective.

Run: ``python benchmarks/bench_is_solver_agreement.py [OUT_DIR]`` -> benchmarks/results/local/
is_solver_agreement.json (about a minute on one core).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result  # noqa: E402

from ugrpo.stats import is_solver  # noqa: E402

SETTINGS = {"is_law": (dict(rel_tol=1e-3, max_nodes=8), 300), "defaults": (dict(), 600)}  # name: (kwargs, pools)
ON, OFF = (0.8, 4, True, True), (0.0, 0, False, False)  # (_DISTINCT, _SNAP_MAX, _WARM, _SECANT)


def pool(seed: int) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(table, cands, gbar, lower) of one random pool."""
    rng = np.random.default_rng(seed)
    P, K = int(rng.integers(3, 400)), int(rng.integers(2, 30))
    cands = np.arange(2.0, 2.0 + K) if rng.random() < 0.5 else np.unique(rng.integers(2, 80, K)).astype(float)
    p = rng.beta(0.3, 0.5, P)
    m1 = rng.lognormal(0, 1.5, P) * (p * (1 - p) + 1e-3) ** 2
    c2 = rng.lognormal(0, 1, P) * p * (1 - p)
    c3 = c2 * rng.uniform(0, 2, P)
    sat = rng.random(P) < rng.uniform(0, 0.8)
    c2[sat] = c3[sat] = 0.0
    m1[sat & (rng.random(P) < 0.5)] = 0.0
    if rng.random() < 0.5:  # most rows copies of three
        rep = rng.random(P) < rng.uniform(0.3, 0.95)
        src = rng.integers(0, P, 3)[rng.integers(0, 3, P)]
        m1[rep], c2[rep], c3[rep] = m1[src[rep]], c2[src[rep]], c3[src[rep]]
    table = m1[:, None] + c2[:, None] / cands + c3[:, None] / (cands * np.maximum(cands - 1, 1))
    lam = float(rng.choice([0.01, 0.05, 0.1, 0.3, 0.9]))
    return table, cands, float(rng.uniform(cands[0], cands[-1])), lam / P


def solve(flags, table, cands, gbar, lower, kw):
    saved = is_solver._DISTINCT, is_solver._SNAP_MAX, is_solver._WARM, is_solver._SECANT
    is_solver._DISTINCT, is_solver._SNAP_MAX, is_solver._WARM, is_solver._SECANT = flags
    try:
        return is_solver.solve_joint(table, cands, gbar, lower, **kw)
    except ValueError as e:
        return str(e)
    finally:
        is_solver._DISTINCT, is_solver._SNAP_MAX, is_solver._WARM, is_solver._SECANT = saved


def compare(kw: dict, pools: int) -> dict:
    counts = {"same": 0, "tie": 0, "worse": 0, "better": 0, "same_error": 0, "one_failed": 0}
    cases = []
    for seed in range(pools):
        table, cands, gbar, lower = pool(seed)
        a, b = solve(ON, table, cands, gbar, lower, kw), solve(OFF, table, cands, gbar, lower, kw)
        if isinstance(a, str) or isinstance(b, str):
            counts["same_error" if a == b else "one_failed"] += 1
            continue
        rel = a.value / b.value - 1.0
        if (np.array_equal(a.sizes, b.sizes) and np.allclose(a.q, b.q, rtol=1e-9, atol=0) and abs(rel) <= 1e-9
                and abs(a.bound / b.bound - 1.0) <= 1e-9):
            counts["same"] += 1
            continue
        kind = "tie" if abs(rel) <= 1e-12 else ("worse" if rel > 0 else "better")
        counts[kind] += 1
        cases.append({"seed": seed, "P": int(table.shape[0]), "K": int(len(cands)), "kind": kind,
                      "value_rel_diff": rel, "nodes": [a.nodes, b.nodes], "optimal": [a.optimal, b.optimal]})
    return {"settings": kw, "pools": pools, **counts, "cases": cases}


def main() -> None:
    rows = {}
    for name, (kw, pools) in SETTINGS.items():
        rows[name] = compare(kw, pools)
        print(name, {k: v for k, v in rows[name].items() if k != "cases"}, rows[name]["cases"], flush=True)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    print(f"wrote {write_result('is_solver_agreement', rows, out)}")


if __name__ == "__main__":
    main()
