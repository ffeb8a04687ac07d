"""Cost of the prompt-IS guard per training step (ugrpo.stats.is_guard.guarded_law, docs/math.md M78).

Times, side by side in one process (alternating calls) on a synthetic held-out ``PromptHistory`` of 50 steps
(Bernoulli rewards, 16-dim scores), the law a step computes: ``guarded_law(..., guard=False)`` (the posterior and the
rule's law, what the step did before the guard) against ``guard=True`` (also the two fold posteriors and each
candidate's law on each fold, up to the first that passes), for ``uniform-is`` and ``ustat-is``, P train prompts and B
prompts per step. The guard's work depends on how far down the candidates it goes; the rows record the choice.
Every timed call starts with the p population's memo cleared (``prior_p.clear_fit_cache``): the three fits (the
history and the two folds) are all computed, as at a step where both folds changed (in training one fold is
unchanged from the previous step and its fit comes from the memo).

Run: ``python benchmarks/bench_is_guard_cost.py [OUT_DIR]`` -> benchmarks/results/local/is_guard_cost.json (seconds).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import time_alternating, write_result  # noqa: E402

from ugrpo.stats.history import PromptHistory  # noqa: E402
from ugrpo.stats.is_guard import guarded_law  # noqa: E402
from ugrpo.stats.prior_p import clear_fit_cache  # noqa: E402

CASES = ((200, 8, 8), (1000, 16, 8))  # (P, B, G)
REPEATS = 5


def synthetic_history(P: int, B: int, G: int, steps: int = 50) -> PromptHistory:
    """A held-out history of ``steps`` uniform steps: B prompts of P with G Bernoulli rewards each (p ~ Beta(0.3,
    0.5)) and 16-dim scores with a per-prompt log-normal scale."""
    rng = np.random.default_rng(0)
    h = PromptHistory(P, held_out=True)
    p_x, scale = rng.beta(0.3, 0.5, P), np.exp(rng.normal(0.0, 1.0, P))
    for _ in range(steps):
        idx = rng.integers(P, size=B)
        z = (rng.random(B * G) < np.repeat(p_x[idx], G)).astype(float)
        h.update(idx, np.full(B, G), z, rng.standard_normal((B * G, 16)) * np.repeat(scale[idx], G)[:, None])
    return h


def _uncached(fn):
    def call():
        clear_fit_cache()
        return fn()
    return call


def _case(P: int, B: int, G: int, rule: str) -> dict:
    h = synthetic_history(P, B, G)
    kw = dict(lam=0.1, g_min=3, g_max=4 * G)
    choice = guarded_law(rule, h, B, B * G, **kw).choice
    t = time_alternating({"unguarded": _uncached(lambda: guarded_law(rule, h, B, B * G, guard=False, **kw)),
                          "guarded": _uncached(lambda: guarded_law(rule, h, B, B * G, **kw))}, repeats=REPEATS)
    return {"rule": rule, "P": P, "B": B, "G": G, "choice": choice, "unguarded_median_s": t["unguarded"]["median_s"],
            "guarded_median_s": t["guarded"]["median_s"],
            "guarded_over_unguarded": t["guarded"]["median_s"] / t["unguarded"]["median_s"]}


def main() -> None:
    rows = []
    for case in CASES:
        for rule in ("uniform-is", "ustat-is"):
            rows.append(_case(*case, rule))
            print(rows[-1], flush=True)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    print(f"wrote {write_result('is_guard_cost', {'repeats': REPEATS, 'rows': rows}, out)}")


if __name__ == "__main__":
    main()
