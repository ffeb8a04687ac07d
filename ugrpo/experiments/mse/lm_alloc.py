"""Per-prompt group sizes on a language model: realised gradient MSE per allocation rule at equal samples.

``ugrpo mse --model PATH --task NAME --allocation uniform,vip,knapsack,ustat [--g-min 2] [--g-max Gmax]``
adds one allocation study per uniform group size G of ``--groups`` with G < g_max (docs/lm-mse.md R8-R10):

* budget N = B G samples per minibatch; rule ``uniform`` gives every prompt G, the others choose
  g_min <= G_b <= g_max with sum_b G_b = N (:func:`ugrpo.stats.allocation.allocate`) from what they know about
  the B drawn prompts **before** the block is drawn;
* every rule reads the first G_b samples of the same (r, b) block of Gmax = max(--groups) samples (common random
  numbers), and its squared error against g_ref gets the same correction as the uniform rows (R8);
* moments: ``true`` = per-prompt p, c2(x), c3(x) from the M reference samples (the ceiling of the gain);
  ``predicted`` = a simulated history of V visits x h samples per prompt, drawn from its own sample stream
  (independent of the reference and the blocks), through the one predictor (:mod:`ugrpo.stats.predict`, docs/math.md
  M46-M49); ``ustat`` then uses the trainer's safe rule (M50), the other rules the posterior means;
* per rule: the corrected MSE with its 95% interval, the predicted MSE (M33 with the rule's moments and c1 of the
  reference pool), the realised ratio rule / uniform with a paired 95% interval, and the predicted ratio; all of it
  again within the drawn prompts (against (1/B) sum_b g_ref(x_b), no c1/B: the part an allocation can change).

The prompt importance-sampling rules (``uniform-is``, ``ustat-is``; docs/math.md M52-M57) draw prompts from a law q
over the pool rather than uniformly, so they get their own rows (``is_rows``, docs/lm-mse.md R11): the law from the
pool's moments (``true`` or ``predicted``), and its realised single-draw error estimated from the SAME uniformly
drawn blocks, each weighted by the likelihood ratio P q(x) (:func:`ugrpo.stats.mc_mse.is_block_errors`), against
uniform's single-draw error on the same blocks (paired ratio), next to the predicted ratio (M53).

Deviation from training: the history visits every prompt V times at the same theta (no policy drift), and the
uniform row reads one group of G per block (the estimator rows of the same G average floor(Gmax/G) groups).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ugrpo.stats.allocation import IS_RULES, PromptStats, predicted_mse, prediction_quality
from ugrpo.stats.history import PromptHistory
from ugrpo.stats.intervals import Interval, ratio_interval
from ugrpo.stats.is_certificate import history_certificate
from ugrpo.stats.is_guard import GUARD_G_MIN, guarded_law
from ugrpo.stats.mc_mse import (
    ReferenceMoments,
    block_squared_errors,
    corrected_row,
    is_block_errors,
    ragged_block_errors,
    sample_prompt_stats,
    visit_history,
)
from ugrpo.stats.predict import Posterior, posterior, posterior_means
from ugrpo.stats.prompt_is import is_law, second_moment
from ugrpo.stats.safe import choose_sizes
from ugrpo.stats.seeds import stream_seed

__all__ = ["allocation_groups", "rule_sizes", "run_allocation_study"]


def allocation_groups(groups: tuple[int, ...], g_max: int) -> list[int]:
    """The uniform G of ``--groups`` that leave the rules room to differ from uniform (G < g_max); the others are
    skipped, and the results (``skipped_groups``), the console and the report say so."""
    return sorted(G for G in groups if G < g_max)


def rule_sizes(rule: str, known: PromptStats | Posterior, idx: Tensor, G: int, g_min: int, g_max: int,
               seed: int = 0) -> np.ndarray:
    """(R, B) group sizes of ``rule`` for every repetition's drawn prompts ``idx`` (R, B) at budget N = B G, as the
    trainer chooses them (:func:`ugrpo.stats.safe.choose_sizes`; the guard's draws seeded by (seed, r))."""
    R, B = idx.shape
    if rule == "uniform":
        return np.full((R, B), G, dtype=np.int64)
    return np.stack([choose_sizes(rule, known.take(row), B * G, G, g_min=g_min, g_max=g_max,
                                  rng=np.random.default_rng([seed, r]))[0] for r, row in enumerate(idx.numpy())])


@dataclass(frozen=True, eq=False)
class _Target:
    """What the squared errors are measured against: g_ref (total MSE; c1 = the pool's c1) or the drawn prompts'
    (1/B) sum_b g_ref(x_b) per repetition (within the drawn prompts, R7; c1 = 0), with the reference correction
    ``sub`` and its spread ``sd`` (R2, R5, R7)."""

    vec: Tensor  # (k,) or (R, k)
    sub: float
    sd: float
    c1: float


def _ratio(a: Tensor, b: Tensor, t: _Target) -> Interval:
    """Corrected mean(a) / mean(b) over paired repetitions (same blocks, same reference: the shift is common, R10)."""
    if torch.equal(a, b):
        return Interval(1.0, 1.0, 1.0, kind="identical errors", n=a.numel())
    return ratio_interval(a, b, t.sub, t.sub, common_sd=t.sd)  # cut at 0: a ratio of MSEs


def _cells(errs: dict[str, Tensor], preds: dict[str, float], t: _Target) -> dict[str, dict[str, Any]]:
    """Per rule: corrected MSE with its interval, the paired ratio to uniform, the prediction and the verdict."""
    out = {}
    for rule, e in errs.items():
        row = corrected_row(e, t.sub, t.sd)
        r = _ratio(e, errs["uniform"], t)
        pr = preds[rule] / preds["uniform"] if preds["uniform"] > 0 else None
        same = torch.equal(e, errs["uniform"])
        # no verdict for uniform itself, nor for a rule that chose uniform G everywhere (ratio 1 [1, 1] trivially)
        ok = None not in (r.ci_low, pr) and not same
        out[rule] = {**row, "predicted": preds[rule], "ratio": r.estimate,
                     "ratio_ci": [r.ci_low, r.ci_high], "predicted_ratio": pr,
                     "predicted_inside": (r.ci_low <= pr <= r.ci_high) if ok else None}
    return out


def _study(G: int, moments: str, known: PromptStats | Posterior, true: PromptStats, rules: tuple[str, ...],
           est_s: Tensor, est_z: Tensor, idx: Tensor, total: _Target, within: _Target, g_min: int,
           g_max: int) -> list[dict[str, Any]]:
    """The rows of one (G, moments) study: every rule at N = B G on the same blocks."""
    R, B = idx.shape
    means = posterior_means(known) if isinstance(known, Posterior) else known
    errs = {"total": {}, "within": {}}
    preds = {"total": {}, "within": {}, "true": {}, "true_within": {}}
    info = {}
    for rule in ("uniform", *[r for r in rules if r not in ("uniform",) + IS_RULES]):  # the ratios are to uniform
        sizes = rule_sizes(rule, known, idx, G, g_min, g_max)                       # (R, B)
        for key, t in (("total", total), ("within", within)):
            errs[key][rule] = ragged_block_errors(est_s, est_z, torch.as_tensor(sizes), t.vec)
            preds[key][rule] = float(np.mean([predicted_mse(a, means.take(i), c1=t.c1)
                                              for a, i in zip(sizes, idx.numpy())]))
        for key, t in (("true", total), ("true_within", within)):  # the same sizes priced with the true moments
            preds[key][rule] = float(np.mean([predicted_mse(a, true.take(i), c1=t.c1)
                                              for a, i in zip(sizes, idx.numpy())]))
        info[rule] = {"same_as_uniform": bool((sizes == G).all()),  # the rule chose G in every repetition
                      "sizes": {"mean": float(sizes.mean()), "min": int(sizes.min()), "max": int(sizes.max()),
                                "frac_at_g_min": float((sizes == g_min).mean())}}
    tot, win = _cells(errs["total"], preds["total"], total), _cells(errs["within"], preds["within"], within)
    rows = []
    for rule in errs["total"]:
        w = {k: win[rule][k] for k in ("mse", "se", "ci_low", "ci_high", "ratio", "ratio_ci", "predicted",
                                       "predicted_ratio", "predicted_inside")}
        w["predicted_true_moments"] = preds["true_within"][rule]
        w["predicted_ratio_true_moments"] = _safe_ratio(preds["true_within"][rule], preds["true_within"]["uniform"])
        rows.append({"rule": rule, "moments": moments, "budget": B * G, "G": G, "B": B, "reps": R, **tot[rule],
                     "predicted_true_moments": preds["true"][rule],
                     "predicted_ratio_true_moments": _safe_ratio(preds["true"][rule], preds["true"]["uniform"]),
                     **info[rule], "within_prompts": w})
    return rows


def _is_study(G: int, moments: str, known: PromptStats | PromptHistory, true: PromptStats, rules: tuple[str, ...],
              est_s: Tensor, est_z: Tensor, idx: Tensor, total: _Target, g_min: int, g_max: int,
              gamma: float, cfg) -> list[dict[str, Any]]:
    """The prompt-IS rows of one (G, moments) study (docs/lm-mse.md R11): per rule, its law from the pool's moments
    (``true``) or from the history through the trainer's guard (``predicted``: :func:`ugrpo.stats.is_guard.guarded_law`,
    M78), the corrected MSE of B iid draws from it, estimated on the uniformly drawn blocks reweighted by P q(x), and
    the paired ratio to uniform's single-draw error on the same blocks; the predicted ratio (S - gamma)/(S_u - gamma)
    with the moments the law was chosen with and with the true moments (M53; gamma the estimate of ||g||^2); with the
    history, also the trainer's certificate of the law (M59-M60, widened as calibrated, M89: ``certificate``, its
    median and whether the realised ratio lies inside)."""
    R, B = idx.shape
    uni = is_block_errors(est_s, est_z, torch.full((R, B), G), torch.ones(R, B), torch.ones(R, B), total.vec)
    u_row = corrected_row(uni, total.sub, total.sd)
    rows = []
    for rule in rules:
        guard = {}
        if isinstance(known, PromptHistory):
            gl = guarded_law(rule, known, B, B * G, lam=cfg.is_lambda, g_min=max(g_min, GUARD_G_MIN)
                             if cfg.is_guard else g_min, g_max=g_max, guard=cfg.is_guard)
            law, means = gl.law, gl.moments
            guard = {"guard": cfg.is_guard, "guard_choice": gl.choice, "guard_checks": [asdict(c) for c in gl.checks]}
            seed = stream_seed(cfg.seed, G, 0x636572)
            cert = history_certificate(gl.posterior, law, G, known.sums_for_prediction(), seed)
            guard["certificate"], guard["certificate_median"] = [cert.ratio_low, cert.ratio_high], cert.ratio
        else:
            law, means = is_law(rule, known, B, B * G, lam=cfg.is_lambda, g_min=g_min, g_max=g_max), known
        P = law.P
        i = idx.numpy()
        w, lr = torch.as_tensor(law.weights(i)), torch.as_tensor(P * law.q[i])
        e = is_block_errors(est_s, est_z, torch.as_tensor(law.sizes[i]), w, lr, total.vec)
        row = corrected_row(e, total.sub, total.sd)
        r = _ratio(e, uni, total)
        pr = _is_ratio(law, means, G, gamma)
        rows.append({"rule": rule, "moments": moments, "G": G, "B": B, "reps": R,
                     "expected_samples": law.expected_samples, "weight_max": float(1.0 / (P * law.q.min())),
                     "sizes": {"min": int(law.sizes.min()), "max": int(law.sizes.max())},
                     **{k: row[k] / B for k in ("mse", "se", "ci_low", "ci_high")},
                     "uniform_mse": u_row["mse"] / B, "ratio": r.estimate, "ratio_ci": [r.ci_low, r.ci_high],
                     "predicted_ratio": pr, "predicted_ratio_true_moments": _is_ratio(law, true, G, gamma),
                     "predicted_inside": None if None in (pr, r.ci_low, r.ci_high) else r.ci_low <= pr <= r.ci_high,
                     **guard})
        if "certificate" in guard:
            lo, hi = guard["certificate"]
            rows[-1]["certificate_covers"] = bool(lo <= r.estimate <= hi)
    return rows


def _is_ratio(law, st: PromptStats, G: int, gamma: float) -> float | None:
    """(S(q, G_x) - gamma) / (S(1/P, G) - gamma) at the moments ``st`` (M53; gamma = ||g||^2)."""
    P = law.P
    s_u = second_moment(np.full(P, 1.0 / P), np.full(P, G), st)
    return _safe_ratio(second_moment(law.q, law.sizes, st) - gamma, s_u - gamma)


def _safe_ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def run_allocation_study(cfg, ref_s: Tensor, ref_z: Tensor, est_s: Tensor, est_z: Tensor, idx: Tensor,
                         hist_s: Tensor, hist_z: Tensor, ref: ReferenceMoments, sd_ref: float,
                         comp: dict[str, Any]) -> dict[str, Any]:
    """The ``allocation`` section of results.json (module docstring); cfg is an ``LMMSEConfig``."""
    Gmax = est_s.shape[2]
    g_max = cfg.g_max if cfg.g_max is not None else Gmax
    true = sample_prompt_stats(ref_s, ref_z)
    is_rules = tuple(r for r in cfg.allocation if r in IS_RULES)
    history = visit_history(hist_s, hist_z, held_out=bool(is_rules) and cfg.is_guard)
    pred = posterior(history.sums)
    c1 = float(comp["c1"]["estimate"])
    total = _Target(ref.g_ref, ref.ref_err, sd_ref, c1)
    within = _Target(ref.g_x[idx].mean(1), float(ref.within_ref_err(idx).mean()), ref.spread(idx), 0.0)
    gamma = max(float((ref.g_ref.double() ** 2).sum()) - ref.ref_err, 0.0)  # ||g||^2: E||g_ref||^2 - E||g_ref - g||^2
    rows, is_rows, checks = [], [], []
    for G in allocation_groups(cfg.groups, g_max):
        for moments, known in (("true", true), ("predicted", pred)):
            rows += _study(G, moments, known, true, cfg.allocation, est_s, est_z, idx, total, within, cfg.g_min,
                           g_max)
            if is_rules:
                is_rows += _is_study(G, moments, history if moments == "predicted" else known, true, is_rules,
                                     est_s, est_z, idx, total, cfg.g_min, g_max, gamma, cfg)
        # the uniform rule is the grpo estimator on the first G samples of each block (block_squared_errors, m = 1)
        dense = block_squared_errors(est_s[:, :, :G], est_z[:, :, :G], ref.v_ref[idx], ref.g_ref, G)["grpo"]
        checks.append({"G": G, "grpo_first_group_mse": corrected_row(dense, ref.ref_err, sd_ref)["mse"],
                       "grpo_row_groups_per_block": Gmax // G})
    verdicts = [{"G": r["G"], "moments": r["moments"], "rule": r["rule"], "inside": r["predicted_inside"],
                 "inside_within_prompts": r["within_prompts"]["predicted_inside"]}
                for r in rows if r["predicted_inside"] is not None]
    return {"rows": rows, "is_rows": is_rows, "uniform_checks": checks, "verdicts": verdicts,
            "all_inside": all(v["inside"] for v in verdicts) if verdicts else None,
            "g_min": cfg.g_min, "g_max": g_max, "block": Gmax, "c1": c1,
            "skipped_groups": sorted(G for G in cfg.groups if G not in allocation_groups(cfg.groups, g_max)),
            "history": {"visits": cfg.history_visits, "group": cfg.history_group,
                        "samples": int(hist_z.numel()), "source": "own sample stream per prompt (independent of "
                        "the reference and the estimation blocks)"},
            "prediction_quality": prediction_quality(posterior_means(pred), true) if len(true) > 2 else None,
            "true_moments": {"mean_p": float(true.value.mean()), "frac_p_0_or_1": float(
                ((true.value == 0) | (true.value == 1)).mean())}}
