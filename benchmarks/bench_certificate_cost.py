"""Cost of the allocation certificate per training step (ugrpo.stats.certificate, docs/allocation.md A6).

Times, side by side in one process on a synthetic ``PromptHistory`` of 50 steps (Bernoulli rewards, 16-dim
sketched scores): the plug-in ratio alone (``history.stats`` + two ``predicted_mse``: what a step cost before the
interval) and the certificate (``history.posterior`` with the empirical-Bayes Beta fit + ``certificate`` with
1000 draws and the G* part), for P train prompts and B prompts per step. The step time it is compared with is
``ustat``'s median ``s_per_step`` in benchmarks/results/train_allocation.json (the tiny arithmetic model on this
machine; a real model's step is far longer).

Run: ``python benchmarks/bench_certificate_cost.py [OUT_DIR]`` -> benchmarks/results/local/certificate_cost.json
(seconds).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REFERENCE_DIR, write_result  # noqa: E402

from ugrpo.stats.allocation import allocate, predicted_mse  # noqa: E402
from ugrpo.stats.certificate import certificate  # noqa: E402
from ugrpo.stats.history import PromptHistory  # noqa: E402

CASES = ((1000, 16, 8), (7473, 64, 8))  # (P, B, G): arith-tiny-like and a GSM8K-sized train set
REPEATS = 20


def _case(P: int, B: int, G: int) -> dict:
    rng = np.random.default_rng(0)
    h = PromptHistory(P)
    for _ in range(50):
        idx = rng.integers(P, size=B)
        z = (rng.random(B * G) < np.repeat(rng.beta(0.3, 0.5, B), G)).astype(float)
        h.update(idx, np.full(B, G), z, rng.standard_normal((B * G, 16)))
    idx = rng.integers(P, size=B)
    st = h.stats(idx, prior_a=1.0, prior_b=1.0, shrink=4.0, scores=True)
    sizes = allocate("ustat", st, B * G, g_max=4 * G).sizes

    def plugin() -> None:
        s = h.stats(idx, prior_a=1.0, prior_b=1.0, shrink=4.0, scores=True)
        predicted_mse(sizes, s) / predicted_mse(np.full(B, G), s)

    def cert() -> None:
        certificate(h.posterior(idx, scores=True), sizes, G, st.c2, st.c3, c1=(0.01, 0.005, 0.02), g_min=2,
                    g_max=4 * G, seed=1)

    out = {}
    for name, fn in (("plugin", plugin), ("certificate", cert)):
        fn()
        t = []
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
        out[f"{name}_median_s"] = float(np.median(t))
    return {"P": P, "B": B, "G": G, **out}


def main() -> None:
    rows = [_case(*c) for c in CASES]
    step = None
    ta = REFERENCE_DIR / "train_allocation.json"
    if ta.exists():
        step = json.loads(ta.read_text())["rules"]["ustat"]["median_s_per_step"]
    for r in rows:
        if step:
            r["ustat_step_s"] = step
            r["certificate_over_step"] = r["certificate_median_s"] / step
        print(r, flush=True)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    print(f"wrote {write_result('certificate_cost', {'repeats': REPEATS, 'rows': rows}, out)}")


if __name__ == "__main__":
    main()
