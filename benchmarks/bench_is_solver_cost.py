"""Cost of ``ustat-is``'s law per training step, with the joint solver's inner search and its root finder as first
written and as now (``ugrpo.stats.is_solver._inner`` and ``_newton_log``, docs/math.md M56).

Side by side in one process (alternating calls, ``common.time_alternating``): the guarded ``ustat-is`` law
(``is_guard.guarded_law``, what a step computes: three posteriors and up to three joint solves) on the synthetic
held-out history of ``bench_is_guard_cost.py`` (50 steps of B = 16 prompts x G = 8), with the solver's inner problem
``_inner`` (fused passes; near the root only the prompts whose minimising size differs between the bracket's ends)
against the reference (``tests/stats/_solver_reference.py``: every prompt over every size at each mu), and with the
root finder ``_newton_log`` (a safeguarded Newton step whenever it stays in the bracket and halves the step before)
against the one first written (``newton_reference``, which mostly bisected). Every call starts with the p
population's memo cleared. The inner searches give the same law to the last bit, the root finders the same sizes and
the law to 1e-9 relative (both checked here too).
P = 200, 1000 and 7473 (a GSM8K-sized train set).

Run: ``nice -n 10 python benchmarks/bench_is_solver_cost.py [OUT_DIR]`` -> benchmarks/results/local/
is_solver_cost.json (seconds).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_is_guard_cost import synthetic_history  # noqa: E402
from common import time_alternating, write_result  # noqa: E402

from tests.stats._solver_reference import inner_reference, newton_reference  # noqa: E402
from ugrpo.stats import is_solver  # noqa: E402
from ugrpo.stats.is_guard import guarded_law  # noqa: E402
from ugrpo.stats.prior_p import clear_fit_cache  # noqa: E402

CASES = ((200, 3), (1000, 3), (7473, 3))  # (P, repeats)
B, G = 16, 8


def _law(h, inner, newton=None):
    def call():
        clear_fit_cache()
        saved = is_solver._inner, is_solver._newton_log
        is_solver._inner, is_solver._newton_log = inner, newton or saved[1]
        try:
            return guarded_law("ustat-is", h, B, B * G, lam=0.1, g_min=3, g_max=4 * G)
        finally:
            is_solver._inner, is_solver._newton_log = saved
    return call


def _case(P: int, repeats: int) -> dict:
    h = synthetic_history(P, B, G)
    fast, ref = _law(h, is_solver._inner), _law(h, inner_reference)
    bisecting = _law(h, is_solver._inner, newton_reference)
    a, b, c = fast(), ref(), bisecting()
    same = bool(np.array_equal(a.law.q, b.law.q) and np.array_equal(a.law.sizes, b.law.sizes)
                and a.choice == b.choice)
    close = bool(np.allclose(a.law.q, c.law.q, rtol=1e-9, atol=0) and np.array_equal(a.law.sizes, c.law.sizes)
                 and a.choice == c.choice)
    t = time_alternating({"now": fast, "reference": ref, "reference_newton": bisecting}, repeats=repeats)
    return {"P": P, "B": B, "G": G, "choice": a.choice, "same_law": same, "same_law_newton": close,
            "now_median_s": t["now"]["median_s"], "reference_median_s": t["reference"]["median_s"],
            "reference_newton_median_s": t["reference_newton"]["median_s"],
            "speedup": t["reference"]["median_s"] / t["now"]["median_s"],
            "speedup_newton": t["reference_newton"]["median_s"] / t["now"]["median_s"],
            "load_average": os.getloadavg()[0]}


def main() -> None:
    rows = []
    for P, repeats in CASES:
        rows.append(_case(P, repeats))
        print(rows[-1], flush=True)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    print(f"wrote {write_result('is_solver_cost', {'rows': rows}, out)}")


if __name__ == "__main__":
    main()
