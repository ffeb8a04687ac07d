"""How well the output projection's score stands in for the full score in ``ustat``'s decisions (issue 19 item 4).

``allocation.scores: output`` (the default) measures W over the output projection only (docs/allocation.md A3c,
docs/math.md M70-M74); the MSE the allocation should cut is that of the whole gradient. At a frozen policy
(``tiny:instruct`` on the arithmetic task it was warmed up on) this draws P prompts x M samples and computes, per
prompt, the exact within-prompt Gram matrices of both scores: the full score over all parameters (autograd, one
backward per sample) and the output projection's (read off a forward, :mod:`ugrpo.lm.output_scores`). Then:

1. agreement: per-sample Spearman correlation of ||W||^2, the output share of ||W||^2, and per-prompt Spearman of
   the unbiased c2, c3 (M14-M16) of both, over prompts with mixed rewards; the same for the score with the prompt's
   activations held fixed (what a backward through a shared prompt separates per sample, docs/math.md M73);
2. known moments: batches of B prompts at N = B G; ``ustat``'s plug-in sizes from the full score's c2, c3, from the
   output score's, from the prompt-frozen score's, and ``vip``'s, each scored by the FULL score's M33 error over
   uniform G's;
3. predicted moments (what a trainer has): histories of V visits x h samples per prompt drawn from the first M/2
   samples, fed to :class:`~ugrpo.stats.history.PromptHistory` with either score (exact Gram factors), ``ustat``
   through the safe rule (M50), ``vip``; truth = the full score's c2, c3 from the other M/2 samples. Per history
   draw the mean over batches; mean and 95% t interval over history draws of each rule's ratio and of the paired
   difference output - full.

Written to ``benchmarks/results/local/score_fidelity.json``.
Run: ``.venv/bin/python benchmarks/bench_score_fidelity.py`` (about 10 minutes on 2 shared cores at load 6).
"""

from __future__ import annotations

import argparse
import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import environment, write_result  # noqa: E402

MODEL, TASK, OPTIONS = "tiny:instruct", "arithmetic", {"prompt_style": "compact", "difficulty": "easy"}


def _grams(model, ro, P: int, M: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(P, M, M) within-prompt Gram matrices of the full score (all parameters) and of the output projection's."""
    from ugrpo.lm.logprobs import completion_logprobs
    from ugrpo.lm.output_scores import row_scores
    from ugrpo.lm.scores import per_sample_scores

    full, out = [], []
    for b in range(P):
        rows = slice(b * M, (b + 1) * M)
        t = tuple(getattr(ro, a)[rows] for a in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask"))
        w = per_sample_scores(model, t).double()
        full.append(w @ w.T)
        vec = []
        with torch.no_grad():
            completion_logprobs(model, *t, share_prompts=True, on_logits=lambda sl, h, lp, t=t, vec=vec: vec.append(
                row_scores(h.double(), lp, t[2][sl], t[3][sl], temperature=1.0)))
        v = torch.cat(vec).double()
        out.append(v @ v.T)
    return torch.stack(full), torch.stack(out)


def _prompt_frozen_grams(model, ro, P: int, M: int) -> torch.Tensor:
    """(P, M, M) Gram matrices of the score with the prompt's activations held fixed: what a backward through a
    shared prompt can separate per sample (the completion positions' uses of every parameter; the first token,
    predicted at the prompt's last position, contributes nothing). One backward per sample, the prompt's key/value
    cache computed without gradient."""
    import copy

    from transformers import DynamicCache

    from ugrpo.lm.scores import select_parameters

    params = list(select_parameters(model).params)
    D = sum(p.numel() for p in params)
    out = []
    for b in range(P):
        r0 = b * M
        keep = int(ro.prompt_mask[r0].sum())
        pid, pmask = ro.prompt_ids[r0, -keep:][None], ro.prompt_mask[r0, -keep:][None].long()
        with torch.no_grad():
            cache = DynamicCache(config=model.config)
            model(input_ids=pid, attention_mask=pmask, position_ids=torch.arange(keep)[None], cache=cache,
                  use_cache=True)
        ws = []
        for i in range(M):
            c, T = ro.completion_ids[r0 + i], int(ro.completion_mask[r0 + i].sum())
            if T <= 1:
                ws.append(torch.zeros(D, dtype=torch.float64))
                continue
            o = model(input_ids=c[None, :T - 1], attention_mask=torch.ones(1, keep + T - 1, dtype=torch.long),
                      position_ids=(keep + torch.arange(T - 1))[None], cache=copy.deepcopy(cache), use_cache=True)
            lp = torch.log_softmax(o.logits[0].float(), -1).gather(-1, c[1:T, None]).sum()
            g = torch.autograd.grad(lp, params, allow_unused=True)
            ws.append(torch.cat([(torch.zeros(p.numel()) if x is None else x.reshape(-1)) for x, p in
                                 zip(g, params)]).double())
        w = torch.stack(ws)
        out.append(w @ w.T)
    return torch.stack(out)


def _terms(K: torch.Tensor, z: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt unbiased c2, c3 (M14-M16) from Gram matrices (P, m, m) and rewards (P, m)."""
    from ugrpo.stats.components import prompt_terms

    diag = torch.diagonal(K, dim1=-2, dim2=-1)
    m = z.shape[1]
    zKz = torch.einsum("bi,bij,bj->b", z, K, z)
    t0, t1, t2 = prompt_terms(z, diag, torch.diag(zKz / m**2))
    return (t1 - t0).clamp(min=0).numpy(), (t2 + t0).numpy()


def _factor(K: torch.Tensor) -> torch.Tensor:
    """Rows with Gram K (score vectors up to a rotation: all the history reads are inner products)."""
    e, V = torch.linalg.eigh(K)
    return V * e.clamp(min=0).sqrt()


def _t(x: np.ndarray) -> dict:
    from scipy.stats import t as student_t

    n = len(x)
    m, se = float(np.mean(x)), float(np.std(x, ddof=1)) / math.sqrt(n)
    q = float(student_t.ppf(0.975, n - 1))
    return {"mean": m, "ci_low": m - q * se, "ci_high": m + q * se, "n": n}


def main() -> None:
    from scipy.stats import spearmanr

    from ugrpo.experiments.plan.lm import load_lm_task
    from ugrpo.lm.loading import load_policy
    from ugrpo.lm.sampling import sample_groups
    from ugrpo.stats.allocation import PromptStats, allocate, predicted_mse
    from ugrpo.stats.history import PromptHistory
    from ugrpo.stats.safe import choose_sizes
    from ugrpo.tasks.base import score

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--samples", type=int, default=32, help="M per prompt: half history pool, half truth")
    ap.add_argument("--visits", type=int, default=4)
    ap.add_argument("--per-visit", type=int, default=4)
    ap.add_argument("--histories", type=int, default=30)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8, help="B prompts per batch, N = B G")
    ap.add_argument("--group", type=int, default=8, help="G")
    ap.add_argument("--name", default="score_fidelity")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("UGRPO_THREADS", "1")))
    P, M, B, G = args.prompts, args.samples, args.batch, args.group
    N, half = B * G, args.samples // 2
    task, _ = load_lm_task(MODEL, TASK, OPTIONS)
    problems = task.train_problems()[:P]
    pol = load_policy(MODEL, seed=0)
    model = pol.model.eval()
    ro = sample_groups(model, pol.tokenizer, [p.prompt for p in problems], M, seeds=list(range(P)), temperature=1.0,
                       top_p=1.0, max_new_tokens=6)
    z = torch.tensor(score(task, ro.texts, [problems[i] for i in ro.prompt_index.tolist()]).rewards,
                     dtype=torch.float64).view(P, M)
    Kf, Ko = _grams(model, ro, P, M)
    Kc = _prompt_frozen_grams(model, ro, P, M)

    # 1. agreement
    df, do = torch.diagonal(Kf, dim1=-2, dim2=-1), torch.diagonal(Ko, dim1=-2, dim2=-1)
    mixed = ((z.mean(1) > 0) & (z.mean(1) < 1)).numpy()
    c2f, c3f = _terms(Kf, z)
    c2o, c3o = _terms(Ko, z)
    share = (do / df).flatten().numpy()
    dc = torch.diagonal(Kc, dim1=-2, dim2=-1)
    c2c, c3c = _terms(Kc, z)
    agreement = {"spearman_sample_w2": float(spearmanr(df.flatten(), do.flatten())[0]),
                 "prompt_frozen_spearman_sample_w2": float(spearmanr(df.flatten(), dc.flatten())[0]),
                 "prompt_frozen_share_of_w2_median": float(np.median((dc / df).flatten().numpy())),
                 "prompt_frozen_spearman_prompt_c2": float(spearmanr(c2f[mixed], c2c[mixed])[0]),
                 "output_share_of_w2_quantiles_10_50_90": np.quantile(share, [0.1, 0.5, 0.9]).tolist(),
                 "spearman_prompt_c2": float(spearmanr(c2f[mixed], c2o[mixed])[0]),
                 "spearman_prompt_c3": float(spearmanr(c3f[mixed], c3o[mixed])[0]),
                 "prompts_mixed": int(mixed.sum()), "accuracy": float(z.mean())}

    # 2. known moments (all M samples), scored by the full score's error
    rng = np.random.default_rng(0)
    p_all = z.mean(1).numpy()
    known = {"ustat_full": [], "ustat_output": [], "ustat_prompt_frozen": [], "vip": []}
    for _ in range(2000):
        idx = rng.choice(P, B, replace=False)
        truth = PromptStats(value=p_all[idx], c2=c2f[idx], c3=c3f[idx])
        u = predicted_mse(np.full(B, G), truth)
        if u <= 0:
            continue
        out = PromptStats(value=p_all[idx], c2=c2o[idx], c3=c3o[idx])
        frozen = PromptStats(value=p_all[idx], c2=c2c[idx], c3=c3c[idx])
        for name, st, rule in (("ustat_full", truth, "ustat"), ("ustat_output", out, "ustat"),
                               ("ustat_prompt_frozen", frozen, "ustat"), ("vip", truth, "vip")):
            known[name].append(predicted_mse(allocate(rule, st, N, g_min=2, g_max=4 * G).sizes, truth) / u)
    known_moments = {k: float(np.mean(v)) for k, v in known.items()}

    # 3. predicted moments: histories from the first half, truth from the second
    c2t, c3t = _terms(Kf[:, half:, half:], z[:, half:])
    pt = z[:, half:].mean(1).numpy()
    Ff = torch.stack([_factor(Kf[b, :half, :half]) for b in range(P)])
    Fo = torch.stack([_factor(Ko[b, :half, :half]) for b in range(P)])
    per = {k: [] for k in ("ustat_full", "ustat_output", "vip")}
    for rep in range(args.histories):
        hist = {"full": PromptHistory(P), "output": PromptHistory(P)}
        for _ in range(args.visits):
            pick = np.stack([rng.choice(half, args.per_visit, replace=False) for _ in range(P)])
            zz = torch.stack([z[b, pick[b]] for b in range(P)]).reshape(-1).numpy()
            for name, F in (("full", Ff), ("output", Fo)):
                hist[name].update(np.arange(P), np.full(P, args.per_visit), zz,
                                  torch.cat([F[b, pick[b]] for b in range(P)]).numpy())
        acc = {k: [] for k in per}
        for bt in range(args.batches):
            idx = rng.choice(P, B, replace=False)
            truth = PromptStats(value=pt[idx], c2=c2t[idx], c3=c3t[idx])
            u = predicted_mse(np.full(B, G), truth)
            if u <= 0:
                continue
            for name in ("full", "output"):
                s, _ = choose_sizes("ustat", hist[name].posterior(idx, scores=True), N, G, g_min=2, g_max=4 * G,
                                    rng=np.random.default_rng([rep, bt]))
                acc[f"ustat_{name}"].append(predicted_mse(s, truth) / u)
            s, _ = choose_sizes("vip", hist["full"].posterior(idx, scores=False), N, G, g_min=2, g_max=4 * G)
            acc["vip"].append(predicted_mse(s, truth) / u)
        for k in per:
            per[k].append(float(np.mean(acc[k])))
    predicted = {k: _t(np.array(v)) for k, v in per.items()}
    predicted["output_minus_full"] = _t(np.array(per["ustat_output"]) - np.array(per["ustat_full"]))
    predicted["vip_minus_full"] = _t(np.array(per["vip"]) - np.array(per["ustat_full"]))
    payload = {"settings": {**vars(args), "model": MODEL, "task": TASK, "N": N,
                            "truth": "the full score's unbiased per-prompt c2, c3 (M14-M16)",
                            "ratios": "M33 within-batch error of the sizes over uniform G's"},
               "agreement": agreement, "known_moments_mean_ratio": known_moments,
               "predicted_moments_ratio": predicted, "environment": environment(),
               "load_average": os.getloadavg()}
    print(payload["agreement"], payload["known_moments_mean_ratio"],
          {k: round(v["mean"], 4) for k, v in predicted.items()}, flush=True)
    print(write_result(args.name, payload))


if __name__ == "__main__":
    main()
