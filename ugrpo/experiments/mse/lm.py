"""Gradient MSE per estimator and group size on a language model (paper Fig. 4), in sketch space.

``ugrpo mse --model PATH --task NAME``: at a frozen policy pi_theta,

* the prompt distribution f is **uniform over a fixed set of P prompts**: the first P training
  problems of the task (deterministic per task options), so g = (1/P) sum_p g(x_p) (paper eq. 8);
* **pool**: the R x B prompt draws of all repetitions are made first (iid uniform over the P prompts,
  seeded); prompt p is then sampled once, M reference samples plus one disjoint block of Gmax samples
  per draw of p, and every sample is scored and **sketched once** (``ugrpo.lm.sketch``, one fixed
  seeded projection S, k x D, E[S^T S] = I). Repetitions use disjoint samples, so their squared errors
  are i.i.d.; every G and every estimator reads the same blocks (common random numbers): a block of
  Gmax samples gives floor(Gmax/G) disjoint groups of size G, whose squared errors are averaged;
* **reference**: g_ref = (1/P) sum_p (1/M) sum_j Z_pj S W_pj and V_ref(x_p) = mean_j Z_pj from the M
  reference samples, independent of the estimation samples;
* **corrections** (docs/lm-mse.md): E||ghat - g_ref||^2 = MSE + E||g_ref - g||^2 for every estimator
  but the oracle, and E||g_ref - g||^2 = (1/P^2) sum_p tr Cov(WZ|x_p)/M is estimated unbiasedly and
  subtracted; the oracle with V_ref gains (1/(BGM)) E_X[E||W||^2 Var(Z|X)] more (estimated by the T2
  U-statistic of docs/math.md M16 on the reference samples), which is subtracted too, from the oracle
  row and from the directly measured Hoeffding residual ||ghat_grpo - ghat_oracle||^2.

Why sketch space and not exact scores on a parameter subset: E||S v||^2 = ||v||^2 for every v, so
every squared error above stays unbiased for the MSE of the *full* gradient (all selected parameters),
whereas a subset changes the quantity measured. S is shared by all estimators and all G, so their
comparison is not blurred by the projection; its own error is a relative O(sqrt(2/(k r_eff)))
(r_eff the effective rank of the error covariance), stated in docs/lm-mse.md.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from ugrpo.console import logs_above_bar
from ugrpo.experiments.mse.env import ESTIMATORS
from ugrpo.experiments.plan.lm import FrozenPolicy, check_backend, check_lm_run, load_frozen, sample_sketched
from ugrpo.runs import RunDir, to_jsonable
from ugrpo.stats.exact_mse import hoeffding_split
from ugrpo.stats.intervals import MEAN_KEYS, RATIO_KEYS, paired_t_interval, ratio_interval
from ugrpo.stats.mc_mse import DT, block_squared_errors, corrected_row, reference_moments
from ugrpo.stats.seeds import derive_seed

__all__ = ["LMMSEConfig", "run_lm_mse", "lm_mse_experiment"]


@dataclass(frozen=True)
class LMMSEConfig:
    """Resolved settings of ``ugrpo mse --model``."""

    model: str
    task: str
    task_options: dict = field(default_factory=dict)
    groups: tuple[int, ...] = (4, 8, 16, 32, 64)
    batch: int = 8
    """prompts per minibatch B"""
    reps: int = 30
    """independent minibatches R"""
    ref_samples: int = 256
    """reference samples M per prompt"""
    prompts: int = 32
    """size P of the fixed prompt set (f = uniform over it)"""
    sketch_dim: int = 256
    seed: int = 0
    temperature: float = 1.0
    max_new_tokens: int = 8
    chat: bool = False
    chunk_size: int = 512
    allocation: tuple[str, ...] = ()
    """allocation rules to compare at equal samples (docs/lm-mse.md R8-R10); empty: no allocation study"""
    g_min: int = 2
    g_max: int | None = None
    """largest G_b of a rule; default and upper bound: the block size max(groups)"""
    history_visits: int = 2
    """simulated history of the ``predicted`` moments: visits per prompt"""
    history_group: int = 4
    """samples per history visit"""
    is_lambda: float = 0.1
    """uniform-is/ustat-is: the defensive floor q(x) >= is_lambda / P (docs/math.md M55)"""
    is_guard: bool = True
    """uniform-is/ustat-is with the predicted moments: the held-out guard picks the law (docs/math.md M78)"""
    sampling_backend: str = "hf"
    """who draws every sample (reference, blocks, history): hf (Hugging Face generate) or vllm (one vLLM engine for
    the whole run; docs/vllm.md)"""

    def __post_init__(self) -> None:
        if not self.groups or min(self.groups) < 2:
            raise ValueError(f"--groups {list(self.groups)}: every G must be >= 2 (grpo needs 2 samples per prompt)")
        for name, lo in (("batch", 1), ("reps", 2), ("ref_samples", 3), ("prompts", 2), ("sketch_dim", 1),
                         ("max_new_tokens", 1), ("chunk_size", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                why = {"reps": " (a standard error needs 2 repetitions)", "ref_samples": " (the oracle correction "
                       "is a U-statistic of order 3)", "prompts": " (c1 compares distinct prompts)"}.get(name, "")
                raise ValueError(f"--{name.replace('_', '-')} = {v!r} must be an integer >= {lo}{why}")
        if self.seed < 0:
            raise ValueError(f"--seed = {self.seed} must be >= 0")
        if not self.temperature > 0:
            raise ValueError(f"--temperature = {self.temperature} must be > 0")
        check_backend(self.sampling_backend)
        if self.allocation:
            self._check_allocation()

    def _check_allocation(self) -> None:
        """Every allocation error before any sampling (unknown rule, bounds, budget N = B G < B g_min)."""
        from ugrpo.experiments.mse.lm_alloc import allocation_groups
        from ugrpo.stats.allocation import RULES

        bad = [r for r in self.allocation if r not in RULES]
        if bad:
            raise ValueError(f"--allocation: unknown rule(s) {bad}; choose among {list(RULES)}")
        block = max(self.groups)
        g_max = block if self.g_max is None else self.g_max
        for name, v, lo in (("g-min", self.g_min, 2), ("g-max", g_max, 2), ("history-visits", self.history_visits, 1),
                            ("history-group", self.history_group, 3)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                why = " (the per-visit ||g(x)||^2 estimate needs pairs, M14)" if name == "history-group" else ""
                raise ValueError(f"--{name} = {v!r} must be an integer >= {lo}{why}")
        if g_max > block:
            raise ValueError(f"--g-max = {g_max} exceeds the block size max(--groups) = {block}: a rule can read "
                             f"at most the {block} samples of a block; add {g_max} to --groups or lower --g-max")
        if g_max < self.g_min:
            raise ValueError(f"--g-max = {g_max} is below --g-min = {self.g_min}; raise --g-max or lower --g-min")
        from ugrpo.stats.prompt_is import check_lambda

        check_lambda(self.is_lambda, "--is-lambda")
        from ugrpo.stats.allocation import IS_RULES

        thin = [G for G in allocation_groups(self.groups, g_max) if G < 3]
        if self.is_guard and thin and any(r in IS_RULES for r in self.allocation):
            raise ValueError(f"--allocation uniform-is/ustat-is with --is-guard true needs G >= 3 (the guard's "
                             f"held-out U-statistics), but --groups has G = {thin[0]}; drop it or pass --is-guard "
                             "false")
        low = [G for G in self.groups if G < self.g_min]
        if low:
            raise ValueError(f"budget N = B x G = {self.batch} x {low[0]} = {self.batch * low[0]} is below "
                             f"B x g_min = {self.batch * self.g_min} (every prompt needs --g-min {self.g_min} "
                             f"samples); drop G = {low[0]} from --groups or lower --g-min")
        if not allocation_groups(self.groups, g_max):
            raise ValueError(f"--allocation needs a uniform G in --groups below g_max = {g_max} (at G = g_max every "
                             f"rule must give every prompt g_max samples); e.g. --groups 8,{max(32, 2 * block)}")


# the pure math (reference moments, squared errors, corrected rows) is ugrpo.stats.mc_mse


# ---------------------------------------------------------------------------------------------
# sampling (the sample -> score -> sketch pass is shared with the plan: lm_plan.sample_sketched)


def _sample_pool(policy, task, problems, idx: Tensor, cfg: LMMSEConfig, progress: bool, sampler=None):
    """Reference (P, M, k) and estimation blocks (R, B, Gmax, k), each prompt sampled once (one request of
    M + uses x Gmax samples); ``sampler``: :func:`ugrpo.lm.vllm_engine.frozen_sampler`'s (None: HF)."""
    P, M, Gmax = len(problems), cfg.ref_samples, max(cfg.groups)
    R, B = idx.shape
    flat = idx.reshape(-1).tolist()
    uses = [flat.count(p) for p in range(P)]
    ref_s = torch.empty(P, M, cfg.sketch_dim, dtype=DT)
    ref_z = torch.empty(P, M, dtype=DT)
    blocks_s: dict[int, Tensor] = {}
    blocks_z: dict[int, Tensor] = {}
    cost = {"sampling": 0.0, "scoring": 0.0, "sketch": 0.0}
    n_unscorable, tokens = 0, 0
    with logs_above_bar(), tqdm(total=P * M + R * B * Gmax, desc="mse pool (sample+sketch)", unit="sample",
                                disable=not progress, dynamic_ncols=True) as bar:  # a scoring warning: above it
        for p in range(P):
            n = M + uses[p] * Gmax
            seed = derive_seed(cfg.seed, p, stride=7_919, offset=17)  # one stream per prompt
            ss = sample_sketched(policy, task, [problems[p]], n, [seed], k=cfg.sketch_dim,
                                 sketch_seed=cfg.seed, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens,
                                 chat=cfg.chat, chunk_size=cfg.chunk_size, sampler=sampler)
            for key, v in ss.seconds.items():
                cost[key] += v
            n_unscorable += ss.n_unscorable
            tokens += int(ss.lengths.sum())
            ref_s[p], ref_z[p] = ss.scores[0, :M], ss.rewards[0, :M]
            blocks_s[p] = ss.scores[0, M:].view(uses[p], Gmax, cfg.sketch_dim)
            blocks_z[p] = ss.rewards[0, M:].view(uses[p], Gmax)
            bar.update(n)
    hist = _sample_history(policy, task, problems, cfg, cost, sampler) if cfg.allocation else None
    est_s = torch.empty(R * B, Gmax, cfg.sketch_dim, dtype=DT)
    est_z = torch.empty(R * B, Gmax, dtype=DT)
    seen = [0] * P
    for i, p in enumerate(flat):  # occurrence j of prompt p uses block j of p
        est_s[i], est_z[i] = blocks_s[p][seen[p]], blocks_z[p][seen[p]]
        seen[p] += 1
    n_hist = 0 if hist is None else hist[1].numel()
    cost.update(samples=P * M + R * B * Gmax + n_hist, samples_reference=P * M, samples_estimation=R * B * Gmax,
                samples_history=n_hist, tokens=tokens + cost.pop("tokens_history", 0),
                sampling_backend=cfg.sampling_backend,
                n_unscorable=n_unscorable + cost.pop("n_unscorable_history", 0))
    return ref_s, ref_z, est_s.view(R, B, Gmax, -1), est_z.view(R, B, Gmax), hist, cost


def _sample_history(policy, task, problems, cfg: LMMSEConfig, cost: dict, sampler=None) -> tuple[Tensor, Tensor]:
    """History scores (P, V, h, k) and rewards (P, V, h) for the ``predicted`` moments: V visits of h samples per
    prompt from the prompt's own stream (a seed family apart from the reference and the blocks, docs/lm-mse.md R9)."""
    V, h, P = cfg.history_visits, cfg.history_group, len(problems)
    seeds = [derive_seed(cfg.seed, p, stride=7_919, offset=3_989) for p in range(P)]
    ss = sample_sketched(policy, task, problems, V * h, seeds, k=cfg.sketch_dim, sketch_seed=cfg.seed,
                         temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, chat=cfg.chat,
                         chunk_size=cfg.chunk_size, sampler=sampler)
    for key, v in ss.seconds.items():
        cost[key] += v
    cost["tokens_history"], cost["n_unscorable_history"] = int(ss.lengths.sum()), ss.n_unscorable
    return ss.scores.view(P, V, h, cfg.sketch_dim), ss.rewards.view(P, V, h)


# ---------------------------------------------------------------------------------------------
# the study


def _components(ref_s: Tensor, ref_z: Tensor, n_boot: int, seed: int) -> dict[str, Any]:
    """c1, c2, c3 (+ c2_vanilla, E||g(X)||^2, ||g||^2) of the uniform-over-P distribution from the reference pool."""
    from ugrpo.stats.components import estimate_components

    P, M, _ = ref_s.shape
    vc = estimate_components(ref_z, scores=ref_s, n_boot=n_boot, generator=torch.Generator().manual_seed(seed))
    fpc = (P - 1) / P  # the P prompts ARE the population: E[c1 estimate] = P/(P-1) c1 (docs/lm-mse.md R6)
    wz = ref_s * ref_z[..., None]
    gsum = wz.sum(1)                                                       # (P, k)
    t0 = ((gsum**2).sum(-1) - (wz**2).sum(-1).sum(1)) / (M * (M - 1))       # (P,) unbiased ||g(x_p)||^2, M14
    e_wz2 = (wz**2).sum(-1).mean(1)                                         # (P,) E||WZ||^2
    gbar = gsum / M
    cross = float((gbar.sum(0) ** 2).sum() - (gbar**2).sum())               # sum_{p != p'} <gbar_p, gbar_p'>
    g_norm2 = (cross + float(t0.sum())) / P**2
    out = {k: {"estimate": getattr(vc, k).estimate * (fpc if k == "c1" else 1), "ci_low": getattr(vc, k).ci_low *
               (fpc if k == "c1" else 1), "ci_high": getattr(vc, k).ci_high * (fpc if k == "c1" else 1)}
           for k in ("c1", "c2", "c3")}
    out.update(c2_vanilla=float((e_wz2 - t0).mean()), mean_g_norm2=float(t0.mean()), g_norm2=g_norm2,
               frac_zero_std=vc.frac_zero_std, source=f"reference pool: P={P} prompts x M={M} samples")
    return out


def _diagnostics(ref_s: Tensor, ref_z: Tensor) -> dict[str, float]:
    """Score norms of right and wrong samples: the V(x) baseline helps only when ||W||^2 and Z are
    (nearly) uncorrelated given x (the paper's assumption A2); a negative E_X Cov(||W||^2, Z | X) can make
    vanilla beat the oracle and GRPO (c2 > c2_vanilla)."""
    n2 = (ref_s**2).sum(-1)                                                  # (P, M) ||S W||^2
    right, wrong = ref_z > 0.5, ref_z <= 0.5
    cov = ((n2 - n2.mean(1, keepdim=True)) * (ref_z - ref_z.mean(1, keepdim=True))).sum(1) / (ref_z.shape[1] - 1)
    return {"mean_w2_reward1": float(n2[right].mean()) if right.any() else None,
            "mean_w2_reward0": float(n2[wrong].mean()) if wrong.any() else None,
            "mean_cov_w2_z": float(cov.mean()), "max_w2": float(n2.max())}


def _predicted(comp: dict[str, Any], est: str, B: int, G: int) -> float:
    from ugrpo.stats.exact_mse import PolicyMoments, minibatch_mse

    pm = PolicyMoments(c1=comp["c1"]["estimate"], c2=comp["c2"]["estimate"], c3=comp["c3"]["estimate"],
                       c2_vanilla=comp["c2_vanilla"], mean_g_norm2=comp["mean_g_norm2"], g_norm2=comp["g_norm2"])
    return minibatch_mse(pm, est, B, G)


def run_lm_mse(cfg: LMMSEConfig, run: RunDir, *, progress: bool = True, n_boot: int = 500,
               frozen: FrozenPolicy | None = None) -> dict[str, Any]:
    """Sample the pool, sketch, and measure every estimator's MSE per G; returns the results.json object.
    ``frozen``: the first P problems and the policy, loaded and checked already (None: loaded here)."""
    t_start = time.perf_counter()
    from ugrpo.lm.vllm_engine import frozen_sampler

    frozen = frozen or load_frozen(cfg.model, cfg.task, cfg.task_options, seed=cfg.seed, backend=cfg.sampling_backend,
                                   max_new_tokens=cfg.max_new_tokens, chat=cfg.chat, prompts=cfg.prompts)
    task, opts, problems, policy, longest = frozen.task, frozen.options, frozen.problems, frozen.policy, frozen.longest
    idx = torch.randint(0, cfg.prompts, (cfg.reps, cfg.batch), generator=torch.Generator().manual_seed(cfg.seed))
    with frozen_sampler(policy.model, policy.tokenizer, cfg.sampling_backend, max_model_len=longest) as sampler:
        ref_s, ref_z, est_s, est_z, hist, cost = _sample_pool(policy, task, problems, idx, cfg, progress, sampler)
    ref = reference_moments(ref_s, ref_z)
    values = ref.v_ref[idx]                                                  # (R, B)
    comp = _components(ref_s, ref_z, n_boot, cfg.seed)
    B = cfg.batch
    rows, split, comps = [], [], []
    sd_ref = ref.spread()  # sd of the realised ||g_ref - g||^2 around ref_err (docs/lm-mse.md R5)
    w_ref = float(ref.within_ref_err(idx).mean())  # reference error of the within-prompt target (R7)
    sd_w = ref.spread(idx)
    sd_bias = 2 * ref.spread(direction=ref.g_ref)  # grpo_mean: 2 <bias, g - g_ref>, bias = -g/G (divided by G below)
    for G in sorted(cfg.groups):
        err = block_squared_errors(est_s, est_z, values, ref.g_ref, G, g_draws=ref.g_x[idx])
        extra = ref.oracle_extra(B, G)
        for e in ESTIMATORS:
            sub = ref.ref_err + (extra if e == "oracle" else 0.0)
            sd = math.hypot(sd_ref, math.sqrt(2) * extra) if e == "oracle" else sd_ref
            if e == "grpo_mean":  # cross term 2 <bias, g - g_ref>, bias = -g/G (docs/lm-mse.md R5)
                sd = math.hypot(sd, sd_bias / G)
            row = {"estimator": e, "G": G, "B": B, **corrected_row(err[e], sub, sd), "exact": None, "reps": cfg.reps,
                   "groups_per_rep": max(cfg.groups) // G, "predicted": _predicted(comp, e, B, G)}
            wsub = w_ref + (extra if e == "oracle" else 0.0)
            wsd = math.hypot(sd_w, math.sqrt(2) * extra if e == "oracle" else 0.0)
            w = corrected_row(err[f"within_{e}"], wsub, wsd)
            row["within_prompts"] = {"mse": w["mse"], "ci_low": w["ci_low"], "ci_high": w["ci_high"], "se": w["se"]}
            rows.append(row)
            run.append_metrics(row)
        res = corrected_row(err["residual"], extra, math.sqrt(2) * extra)
        orc = next(r for r in rows if r["estimator"] == "oracle" and r["G"] == G)
        grp = next(r for r in rows if r["estimator"] == "grpo" and r["G"] == G)
        split.append({"G": G, "oracle_part": orc["mse"], "residual": res["mse"], "residual_ci": [res["ci_low"],
                                                                                                 res["ci_high"]],
                      "total": grp["mse"], "residual_share": res["mse"] / grp["mse"] if grp["mse"] > 0 else None,
                      "predicted_oracle_part": _predicted(comp, "oracle", B, G),
                      "predicted_residual": hoeffding_split(0.0, 0.0, comp["c3"]["estimate"], B, G)["residual"]})
        diff = paired_t_interval(err["vanilla"].tolist(), err["grpo"].tolist())  # paired by repetition
        comps.append({"G": G, "vanilla_minus_grpo": diff.to_dict(*MEAN_KEYS),
                      "grpo_over_oracle": ratio_interval(err["grpo"], err["oracle"], ref.ref_err, ref.ref_err + extra,
                                                    common_sd=sd_ref).to_dict(*RATIO_KEYS),
                      "residual_over_oracle": ratio_interval(err["residual"], err["oracle"], extra, ref.ref_err + extra,
                                                        b_sd=sd_ref).to_dict(*RATIO_KEYS)})
    alloc = None
    if cfg.allocation:
        from ugrpo.experiments.mse.lm_alloc import run_allocation_study

        alloc = run_allocation_study(cfg, ref_s, ref_z, est_s, est_z, idx, *hist, ref, sd_ref, comp)
        for row in alloc["rows"]:
            run.append_metrics({"section": "allocation", **row})
    n_params = sum(p.numel() for p in policy.model.parameters() if p.requires_grad)
    cost["seconds_total"] = time.perf_counter() - t_start
    return to_jsonable({
        "rows": rows, "allocation": alloc, "hoeffding_grpo": split, "comparisons": comps, "components": comp,
        "reference": {"M": ref.M, "P": cfg.prompts, "ref_err": ref.ref_err, "ref_err_sd": sd_ref,
                      "within_ref_err": w_ref, "within_ref_err_sd": sd_w, "oracle_vref_wvar": ref.wvar,
                      "oracle_vref_err": {str(G): ref.oracle_extra(B, G) for G in sorted(cfg.groups)},
                      "g_ref_norm2": float((ref.g_ref**2).sum())},
        "diagnostics": _diagnostics(ref_s, ref_z),
        "policy": {"model": cfg.model, "task": cfg.task, "task_options": opts, "accuracy": float(ref_z.mean()),
                   "accuracy_se": float(ref_z.mean(1).std(correction=1)) / math.sqrt(cfg.prompts),
                   "prompts": [p.id for p in problems]},
        "sketch": {"dim": cfg.sketch_dim, "seed": cfg.seed, "params": "trainable", "D": n_params},
        "cost": cost, "D": cfg.sketch_dim, "config": asdict(cfg),
    })


def lm_mse_experiment(cfg: LMMSEConfig, out: str, *, argv: list[str] | None = None,
                      progress: bool = True) -> dict[str, Any]:
    """``ugrpo mse --model``: measure ``cfg`` into the run folder ``out`` (fresh), write its outputs, return results."""
    from ugrpo.report.mse import write_report

    config = {**asdict(cfg), "command": "mse", "argv": argv}
    frozen = check_lm_run(cfg, out, config, prompts=cfg.prompts)  # every input error before the folder
    rd = RunDir(out)
    rd.write_config(config)
    rd.file("metrics.jsonl").unlink(missing_ok=True)
    results = run_lm_mse(cfg, rd, progress=progress, frozen=frozen)
    write_report(rd, results, argv)
    return results
