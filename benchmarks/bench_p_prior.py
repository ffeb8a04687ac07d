"""Cost of fitting the p population (ugrpo.stats.prior_p.fit_p_prior, docs/math.md M46): the batched EM against the
one it replaced, side by side in one process.

The reference is the unbatched fit (tests/stats/_em_reference.py: one EM per start in turn, a Python loop over the
components for the densities and the M-step, a scalar Newton per component with scipy's ``polygamma``). Inputs:
the three fits a guarded prompt-IS step makes (the whole history and its two step-parity folds,
ugrpo/stats/is_guard.py) on the synthetic held-out histories of ``bench_is_guard_cost.py`` (50 steps of B prompts
with G samples, P train prompts), and seeded pools of P prompts with 4-40 samples each (p ~ Beta(0.3, 0.5); ``rare``:
a bulk at Beta(4, 4) and 5% of prompts at p = 0.01; ``frac``: fractional counts). Per input: U (distinct
(s, n) pairs), the median time of the reference and of the new fit with its memo cleared (alternating calls), the
new fit answered from its memo, the Beta start (``fit_beta_prior``, part of both), and the largest difference of the
two fitted populations (max |w - w_ref| and total variation; 0 means bit for bit). ``step`` rows: the three fits of
one guarded step after the previous step's were made (the unchanged fold's fit comes from the memo) against the
reference's three.

Run: ``python benchmarks/bench_p_prior.py [OUT_DIR]`` -> benchmarks/results/local/p_prior.json (seconds).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_is_guard_cost import synthetic_history  # noqa: E402
from common import time_alternating, write_result  # noqa: E402

from tests.stats._em_reference import fit_p_prior_reference  # noqa: E402
from ugrpo.stats.prior_p import clear_fit_cache, fit_beta_prior, fit_p_prior  # noqa: E402

HISTORIES = ((200, 8, 8), (1000, 16, 8))  # (P, B, G) as in bench_is_guard_cost.py
POOLS = ((200, "one"), (200, "rare"), (1000, "one"), (200, "frac"))
REPEATS = 5


def _pool(P: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(P)
    n = rng.integers(4, 41, P).astype(float)
    p = np.where(rng.random(P) < 0.05, 0.01, rng.beta(4, 4, P)) if kind == "rare" else rng.beta(0.3, 0.5, P)
    s = rng.binomial(n.astype(int), p).astype(float)
    if kind == "frac":
        u = rng.uniform(0.3, 1.0, P)
        s, n = s * u, n * u
    return s, n


def _fits(h) -> list[tuple[np.ndarray, np.ndarray]]:
    """(successes, samples) of the three fits of a guarded step: the whole history, fold 0, fold 1."""
    sums = [h.sums_for_prediction(), *h.folds]
    return [(np.array(d["successes"]), np.array(d["samples"])) for d in sums]


def _uncached(s: np.ndarray, n: np.ndarray) -> np.ndarray:
    clear_fit_cache()
    return fit_p_prior(s, n)


def _row(name: str, s: np.ndarray, n: np.ndarray) -> dict:
    seen = n > 0
    U = len(np.unique(np.stack([s[seen], n[seen]], 1), axis=0))
    ref, new = fit_p_prior_reference(s, n), _uncached(s, n)
    fit_p_prior(s, n)
    t = time_alternating({"reference": lambda: fit_p_prior_reference(s, n), "new": lambda: _uncached(s, n),
                          "memo": lambda: fit_p_prior(s, n), "beta_start": lambda: fit_beta_prior(s, n)},
                         repeats=REPEATS)
    med = {k: v["median_s"] for k, v in t.items()}
    return {"input": name, "prompts": int(seen.sum()), "U": U, "reference_median_s": med["reference"],
            "new_median_s": med["new"], "memo_median_s": med["memo"], "beta_start_median_s": med["beta_start"],
            "reference_over_new": med["reference"] / med["new"], "max_abs_diff": float(np.abs(new - ref).max()),
            "total_variation": float(0.5 * np.abs(new - ref).sum()), "bit_for_bit": bool(np.array_equal(new, ref))}


def _step_row(P: int, B: int, G: int) -> dict:
    """One guarded step's three fits, after the previous step's (its unchanged fold is a memo hit)."""
    h = synthetic_history(P, B, G, steps=49)
    before = _fits(h)
    h2 = synthetic_history(P, B, G, steps=50)
    after = _fits(h2)
    unchanged = [i for i in (1, 2) if np.array_equal(before[i][0], after[i][0])
                 and np.array_equal(before[i][1], after[i][1])]

    ref_t, new_t = [], []
    for _ in range(REPEATS + 1):  # alternating; the first round is a warm-up
        t0 = time.perf_counter()
        for s, n in after:
            fit_p_prior_reference(s, n)
        ref_t.append(time.perf_counter() - t0)
        clear_fit_cache()
        for s, n in before:  # the previous step's fits, untimed
            fit_p_prior(s, n)
        t0 = time.perf_counter()
        for s, n in after:
            fit_p_prior(s, n)
        new_t.append(time.perf_counter() - t0)
    ref, step = statistics.median(ref_t[1:]), statistics.median(new_t[1:])
    return {"input": f"guarded step P={P} B={B} G={G}", "unchanged_folds": len(unchanged),
            "reference_three_fits_median_s": ref, "new_three_fits_median_s": step, "reference_over_new": ref / step}


def main() -> None:
    load = os.getloadavg()
    rows = []
    for P, B, G in HISTORIES:
        for name, (s, n) in zip(("history", "fold 0", "fold 1"), _fits(synthetic_history(P, B, G))):
            rows.append(_row(f"{name} P={P} B={B} G={G}", s, n))
            print(rows[-1], flush=True)
    for P, kind in POOLS:
        rows.append(_row(f"pool {kind} P={P}", *_pool(P, kind)))
        print(rows[-1], flush=True)
    steps = [_step_row(*c) for c in HISTORIES]
    for r in steps:
        print(r, flush=True)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    payload = {"repeats": REPEATS, "load_average_start": load, "load_average_end": os.getloadavg(), "rows": rows,
               "steps": steps}
    print(f"wrote {write_result('p_prior', payload, out)}")


if __name__ == "__main__":
    main()
