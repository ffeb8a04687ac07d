"""Cost of ``ustat-is``'s law per training step, as the joint solver was first written and as it is now
(``ugrpo.stats.is_solver``, docs/math.md M56).

Side by side in one process (alternating calls, ``common.time_alternating``): the guarded ``ustat-is`` law
(``is_guard.guarded_law``, what a step computes: three posteriors and up to three joint solves) on the synthetic
held-out history of ``bench_is_guard_cost.py`` (B = 16 prompts x G = 8 per step), computed

- ``now``: the dual over the pool's distinct rows (never-visited prompts share the prior's row), the inner root
  finder's jump snap and warm start;
- ``no_grouping``: the same over every row (``_DISTINCT = 0``);
- ``previous``: neither grouping, snap nor warm start (the solver of December 5: a safeguarded Newton from the
  bracket's end, which closes on a jump of f by some 30 halvings);
- ``first_written``: as ``previous`` with the inner search and root finder first written (every prompt over every
  size at each mu; a Newton step only after the bracket halved: ``tests/stats/_solver_reference.py``).

Every call starts with the p population's memo cleared. The law of ``now`` is compared with ``previous``'s to the
last bit (``same_law``; the tests check it to 1e-12 on other pools). Cases: P = 200, 1000 and 7473 (a GSM8K-sized
train set) after 50 steps (most prompts never visited at 1000 and 7473), and P = 7473 after 1000 steps (88% of the
prompts visited: little left to group).

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

CASES = ((200, 50, 3), (1000, 50, 3), (7473, 50, 3), (7473, 1000, 3))  # (P, history steps, repeats)
B, G = 16, 8
VARIANTS = {  # name: (_DISTINCT, _SNAP_MAX, _WARM, inner, newton)
    "now": (0.8, 4, True, None, None),
    "no_grouping": (0.0, 4, True, None, None),
    "previous": (0.0, 0, False, None, None),
    "first_written": (0.0, 0, False, inner_reference, newton_reference),
}


def _law(h, variant):
    distinct, snap, warm, inner, newton = VARIANTS[variant]

    def call():
        clear_fit_cache()
        saved = (is_solver._DISTINCT, is_solver._SNAP_MAX, is_solver._WARM, is_solver._inner, is_solver._newton_log)
        is_solver._DISTINCT, is_solver._SNAP_MAX, is_solver._WARM = distinct, snap, warm
        is_solver._inner, is_solver._newton_log = inner or saved[3], newton or saved[4]
        try:
            return guarded_law("ustat-is", h, B, B * G, lam=0.1, g_min=3, g_max=4 * G)
        finally:
            (is_solver._DISTINCT, is_solver._SNAP_MAX, is_solver._WARM, is_solver._inner,
             is_solver._newton_log) = saved
    return call


def _case(P: int, steps: int, repeats: int) -> dict:
    h = synthetic_history(P, B, G, steps=steps)
    calls = {name: _law(h, name) for name in VARIANTS}
    now, prev = calls["now"](), calls["previous"]()
    same = bool(np.array_equal(now.law.q, prev.law.q) and np.array_equal(now.law.sizes, prev.law.sizes)
                and now.choice == prev.choice)
    q_rel = float(np.max(np.abs(now.law.q / prev.law.q - 1.0)))
    t = time_alternating(calls, repeats=repeats)
    med = {name: t[name]["median_s"] for name in VARIANTS}
    return {"P": P, "history_steps": steps, "visited": int((h.sums["visits"] > 0).sum()), "B": B, "G": G,
            "choice": now.choice,
            "same_law": same, "law_max_rel_diff": q_rel,
            **{f"{name}_median_s": med[name] for name in VARIANTS},
            **{f"speedup_over_{name}": med[name] / med["now"] for name in VARIANTS if name != "now"},
            "load_average": os.getloadavg()[0]}


def main() -> None:
    rows = []
    for P, steps, repeats in CASES:
        rows.append(_case(P, steps, repeats))
        print(rows[-1], flush=True)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    print(f"wrote {write_result('is_solver_cost', {'rows': rows}, out)}")


if __name__ == "__main__":
    main()
