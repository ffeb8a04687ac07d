"""Cost of the allocation certificate per training step (ugrpo.stats.certificate, docs/allocation.md A6).

Times, side by side in one process on a synthetic ``PromptHistory`` of 50 steps (Bernoulli rewards, 16-dim
sketched scores), what ``ugrpo train``'s Allocator does per ``ustat`` step (ugrpo/train/alloc.py): the predictor's
posterior (``history.posterior``: the fitted population of p, M46, and the score moments, M47-M49), the safe rule
(``safe.choose_sizes``, M50), the plug-in ratio (two ``predicted_mse``) and the certificate: the draws of the
population model (``population.population_posteriors``, M60) and the certificate over them (1000 draws, the widening
of M61 and the G* part, M45), for P train prompts and B prompts per step; side by side, the certificate on the one
posterior as before M60 (``certificate_single``). The step times it is compared with are ``ustat``'s and
``uniform``'s median ``s_per_step`` in benchmarks/results/train_allocation.json (the tiny arithmetic model on this
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

from ugrpo.stats.allocation import predicted_mse  # noqa: E402
from ugrpo.stats.certificate import certificate, widening  # noqa: E402
from ugrpo.stats.history import PromptHistory  # noqa: E402
from ugrpo.stats.population import population_posteriors  # noqa: E402
from ugrpo.stats.predict import posterior_means  # noqa: E402
from ugrpo.stats.prior_p import clear_fit_cache  # noqa: E402
from ugrpo.stats.safe import choose_sizes  # noqa: E402

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
    post = h.posterior(idx, scores=True)
    st = posterior_means(post)
    sizes, _ = choose_sizes("ustat", post, B * G, G, g_max=4 * G, rng=np.random.default_rng(1))

    def predictor() -> None:
        clear_fit_cache()  # the history changes every step: its p population is refitted, not remembered
        posterior_means(h.posterior(idx, scores=True))

    def safe_rule() -> None:
        choose_sizes("ustat", post, B * G, G, g_max=4 * G, rng=np.random.default_rng(1))

    def plugin() -> None:
        predicted_mse(sizes, st) / predicted_mse(np.full(B, G), st)

    sums = h.sums_for_prediction()
    posts = population_posteriors(sums, idx, post.hyper, rng=np.random.default_rng(2))

    def population() -> None:
        population_posteriors(sums, idx, post.hyper, rng=np.random.default_rng(2))

    def cert() -> None:
        certificate(posts, sizes, G, st.c2, st.c3, c1=(0.01, 0.005, 0.02), g_min=2, g_max=4 * G, seed=1,
                    widen=widening(sums))

    def cert_single() -> None:
        certificate(post, sizes, G, st.c2, st.c3, c1=(0.01, 0.005, 0.02), g_min=2, g_max=4 * G, seed=1)

    out = {}
    for name, fn in (("predictor", predictor), ("safe_rule", safe_rule), ("plugin", plugin),
                     ("population", population), ("certificate", cert), ("certificate_single", cert_single)):
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
    step = uni = None
    ta = REFERENCE_DIR / "train_allocation.json"
    if ta.exists():
        rules = json.loads(ta.read_text())["rules"]
        step, uni = rules["ustat"]["median_s_per_step"], rules["uniform"]["median_s_per_step"]
    for r in rows:
        if step:
            cert = r["population_median_s"] + r["certificate_median_s"]
            r.update(ustat_step_s=step, uniform_step_s=uni, certificate_over_step=cert / step,
                     certificate_over_uniform_step=cert / uni,
                     certificate_single_over_step=r["certificate_single_median_s"] / step,
                     allocator_over_step=(r["predictor_median_s"] + r["safe_rule_median_s"] + r["plugin_median_s"]
                                          + cert) / step)
        print(r, flush=True)
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    print(f"wrote {write_result('certificate_cost', {'repeats': REPEATS, 'rows': rows}, out)}")


if __name__ == "__main__":
    main()
