"""How well the one predictor predicts the tiny language model's per-prompt second moments from a short history.

The setting of ``ugrpo mse --model tiny:instruct --task arithmetic --prompts 32 --sketch-dim 256 --max-new-tokens 6``
(docs/lm-mse.md R11): per seed, the history of 2 visits x 4 samples per prompt (the same sample streams as that
command's history), and reference moments from ``--ref-samples`` samples per prompt (the prompt's own stream; the
reference of the mse command draws its blocks from the same stream, so the numbers are close to, not equal to,
its reference). Against the reference it records, at G = 8:

* ``spearman_a8``, ``sum_ratio_a8``, ``median_abs_log_ratio_a8``: rank correlation, total calibration and typical
  per-prompt factor of the predicted a_x(8) = ||g(x)||^2 + c2/8 + c3/56 (M53: what the prompt-IS laws weigh);
* the same for ||g(x)||^2 alone (``*_g2``) and the within-prompt error f_x(4) (``*_f4``, what ``ustat`` weighs);
* ``eta_mu``, ``eta_tau2``: the fitted eta population (M48, M85);
* ``law_ratio``: the unguarded ``uniform-is`` and ``ustat-is`` laws chosen at the predicted moments, priced with
  the reference moments (M53: (S(q, G_x) - ||g||^2) / (S_u - ||g||^2), B = 8, G = 8, lambda 0.1, ||g||^2 of the
  pool's mean gradient estimated without bias from the reference): what the rule would realise without the
  held-out guard.

The samples are cached under ``--cache`` (one file per seed) so that two versions of the predictor are compared on
the same samples. Run: ``python benchmarks/bench_prediction_lm.py --seeds 0,1`` -> benchmarks/results/local/
prediction_lm.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result  # noqa: E402

from ugrpo.stats.exact_mse import prompt_error  # noqa: E402
from ugrpo.stats.mc_mse import sample_prompt_stats, visit_history  # noqa: E402
from ugrpo.stats.predict import fit_hyper, posterior, posterior_means  # noqa: E402
from ugrpo.stats.prompt_is import is_law, second_moment, second_moments  # noqa: E402

B, G, LAM = 8, 8, 0.1


def _samples(seed: int, args) -> dict:
    """Reference (P, M, k) and history (P, V, h, k) scores and rewards of one seed (cached)."""
    path = Path(args.cache) / f"lm_{seed}_{args.prompts}_{args.ref_samples}.pt"
    if path.exists():
        return torch.load(path)
    from ugrpo.experiments.mse.lm import LMMSEConfig, _sample_history
    from ugrpo.experiments.plan.lm import load_lm_task, sample_sketched
    from ugrpo.lm.loading import load_policy
    from ugrpo.stats.seeds import derive_seed

    cfg = LMMSEConfig(model="tiny:instruct", task="arithmetic", groups=(8, 32), batch=B, reps=2,
                      ref_samples=args.ref_samples, prompts=args.prompts, sketch_dim=256, max_new_tokens=6,
                      allocation=("uniform", "uniform-is"), seed=seed)
    task, _ = load_lm_task(cfg.model, cfg.task, {})
    problems = task.train_problems()[: cfg.prompts]
    policy = load_policy(cfg.model, seed=seed)
    rs, rz = [], []
    for p in range(cfg.prompts):  # the mse command's per-prompt reference stream
        ss = sample_sketched(policy, task, [problems[p]], cfg.ref_samples,
                             [derive_seed(seed, p, stride=7_919, offset=17)], k=cfg.sketch_dim, sketch_seed=seed,
                             temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, chat=cfg.chat,
                             chunk_size=cfg.chunk_size)
        rs.append(ss.scores[0])
        rz.append(ss.rewards[0])
    hs, hz = _sample_history(policy, task, problems, cfg, {"sampling": 0.0, "scoring": 0.0, "sketch": 0.0})
    out = {"ref_s": torch.stack(rs), "ref_z": torch.stack(rz), "hist_s": hs, "hist_z": hz}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(out, path)
    return out


def _quality(fp: np.ndarray, ft: np.ndarray) -> dict:
    rank = lambda v: np.argsort(np.argsort(v)).astype(float)  # noqa: E731
    ok = (fp > 0) & (ft > 0)
    return {"spearman": float(np.corrcoef(rank(fp), rank(ft))[0, 1]), "sum_ratio": float(fp.sum() / ft.sum()),
            "median_abs_log_ratio": float(np.median(np.abs(np.log(fp[ok] / ft[ok])))) if ok.any() else None}


def _one(seed: int, args) -> dict:
    d = _samples(seed, args)
    true = sample_prompt_stats(d["ref_s"], d["ref_z"])
    hist = visit_history(d["hist_s"], d["hist_z"])
    h = fit_hyper(hist.sums)
    st = posterior_means(posterior(hist.sums))
    out = {"eta_mu": h.eta_mu, "eta_tau2": h.eta_tau2}
    for name, fp, ft in (("a8", second_moments(st, np.full(len(st), G)), second_moments(true, np.full(len(st), G))),
                         ("g2", st.g_norm2, true.g_norm2),
                         ("f4", prompt_error(st.c2, st.c3, 4.0), prompt_error(true.c2, true.c3, 4.0))):
        out.update({f"{k}_{name}": v for k, v in _quality(fp, ft).items()})
    P = len(st)
    # ||g||^2 of the pool's mean gradient, unbiased: g(x) = E[Z W] (E W = 0), independent means across prompts
    gx = (d["ref_s"] * d["ref_z"][..., None]).double().mean(1)                                  # (P, k)
    gamma = float((gx.sum(0) ** 2).sum() - (gx**2).sum() + true.g_norm2.sum()) / P**2
    s_u = second_moment(np.full(P, 1.0 / P), np.full(P, G), true)
    for rule in ("uniform-is", "ustat-is"):
        law = is_law(rule, st, B, B * G, lam=LAM)
        out[f"law_ratio_{rule}"] = (second_moment(law.q, law.sizes, true) - gamma) / (s_u - gamma)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--ref-samples", type=int, default=128)
    ap.add_argument("--cache", default="runs/bench_prediction_lm_cache")
    ap.add_argument("--name", default="prediction_lm")
    args = ap.parse_args()
    t0 = time.perf_counter()
    res = {str(s): _one(int(s), args) for s in args.seeds.split(",")}
    for s, r in res.items():
        print(s, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()})
    write_result(args.name, {"description": __doc__.split("\n")[0], "seeds": res,
                             "seconds": time.perf_counter() - t0, "prompts": args.prompts,
                             "ref_samples": args.ref_samples, "load_average": os.getloadavg()})


if __name__ == "__main__":
    main()
