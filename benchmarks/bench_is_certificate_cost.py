"""Cost of the prompt-IS certificate per training step, before and after its calibration (docs/math.md M59, M89).

Side by side in one process (alternating calls, ``common.time_alternating``), on a simulated history of 20 uniform
steps (N = 512, 4 samples per prompt: ``ugrpo.experiments.allocate.simulated_history``) of a linear-softmax lab
instance with P prompts: the guarded law (``is_guard.guarded_law``, what the step computes anyway), the certificate
as first built (``m59``: 1000 draws from the one posterior of every pool prompt) and the calibrated one the trainer
now computes (``m88``: ``population.population_posteriors`` of every pool prompt, M60, then the certificate over
them with the history's widening, M89), each also with the code as it was before the certfast branch
(``*_reference``: tests/stats/_draw_reference.py, a Python searchsorted per prompt, a (D, n_unseen, K) cumulative
sum per call, every posterior row computed; the new code gives the same certificate to the last bit, checked here
too). P = 1000 (arith-tiny-like) and 7473 (a GSM8K-sized train set; most of its prompts never visited). Also the
peak memory numpy allocates in one call of each certificate (tracemalloc), the peak resident memory of the process
after each case (it only grows: after the reference's calls) and the load average.

Run: ``nice -n 10 python benchmarks/bench_is_certificate_cost.py [OUT_DIR]`` -> benchmarks/results/local/
is_certificate_cost.json (seconds).
"""

from __future__ import annotations

import os
import resource
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import time_alternating, write_result  # noqa: E402

from tests.stats._draw_reference import reference_code  # noqa: E402
from ugrpo.envs.generate import random_env  # noqa: E402
from ugrpo.experiments.allocate import AllocateConfig, simulated_history  # noqa: E402
from ugrpo.stats.certificate import widening  # noqa: E402
from ugrpo.stats.is_certificate import IS_WIDEN, is_certificate  # noqa: E402
from ugrpo.stats.is_guard import guarded_law  # noqa: E402
from ugrpo.stats.population import population_posteriors  # noqa: E402

CASES = (1000, 7473)
N, B, G = 512, 64, 8
REPEATS = 3


def _case(P: int) -> dict:
    env = random_env("linear_softmax", n_prompts=P, n_actions=6, dim=8, logit_scale=1.0, extreme_fraction=0.5, seed=3)
    h = simulated_history(env, AllocateConfig(budget=N, history_steps=20, rules=("uniform-is",)),
                          torch.Generator().manual_seed(0))
    sums = h.sums_for_prediction()

    def law():
        return guarded_law("uniform-is", h, B, N, lam=0.1, g_min=3)

    gl = law()

    def m59():
        return is_certificate(gl.posterior, gl.law, G, seed=1)

    def m88():
        pops = population_posteriors(sums, np.arange(P), gl.posterior.hyper, rng=np.random.default_rng(2))
        return is_certificate(gl.posterior, gl.law, G, population=pops, seed=1, widen=widening(sums, IS_WIDEN))

    def reference(fn):
        def run():
            with reference_code():
                return fn()
        return run

    fns = {"law": law, "m59": m59, "m88": m88, "law_reference": reference(law), "m59_reference": reference(m59),
           "m88_reference": reference(m88)}
    identical = m59() == fns["m59_reference"]() and m88() == fns["m88_reference"]()
    peak = {}
    for k in ("m59", "m59_reference", "m88", "m88_reference"):
        tracemalloc.start()
        fns[k]()
        peak[f"{k}_peak_alloc_gb"] = tracemalloc.get_traced_memory()[1] / 1e9
        tracemalloc.stop()
    t = time_alternating(fns, repeats=REPEATS)
    out = {"P": P, "visited": int((sums["visits"] > 0).sum()), "law_choice": gl.choice, "identical": identical,
           **{f"{k}_median_s": v["median_s"] for k, v in t.items()}, **peak,
           "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
           "load_average": list(os.getloadavg())}
    for k in ("law", "m59", "m88"):
        out[f"{k}_reference_over_new"] = out[f"{k}_reference_median_s"] / out[f"{k}_median_s"]
    out["m88_over_m59"] = out["m88_median_s"] / out["m59_median_s"]
    out["m88_over_law"] = out["m88_median_s"] / out["law_median_s"]
    out["m88_reference_over_law"] = out["m88_reference_median_s"] / out["law_median_s"]
    return out


def main() -> None:
    torch.set_num_threads(1)
    rows = []
    for P in CASES:
        rows.append(_case(P))
        print(rows[-1], flush=True)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    print(f"wrote {write_result('is_certificate_cost', {'repeats': REPEATS, 'rows': rows}, out)}")


if __name__ == "__main__":
    main()
