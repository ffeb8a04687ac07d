"""``ugrpo gap``: the limit law of n * gap (paper Thm 8, Cor 9) against Algorithm 1 on an exact policy.

The policy (:func:`singular_env`) is a linear softmax with d = 4 parameters over 3 prompts x 5 actions.
Two coordinates act on the actions (a "centre" action with the best reward and four outer actions, so the
maximiser is finite and interior); the third feature is constant across the actions of a prompt and the
fourth duplicates the first. So J is flat along e3 and e1 - e4: Theta* is a 2-dimensional affine set and
the Hessian has rank r = 2 < d = 4 (paper A7). Everything predicted is exact: theta* (L-BFGS, then Newton
in the identifiable subspace), H (autograd), Q, H*, Gamma = Cov(ghat(theta*)) per estimator (M29) and the
weights w_k (M27), in both conventions: ``corrected`` (beta^2 Q^T Gamma Q, M26) and ``printed`` (the paper's
Q^T Gamma Q, weights / beta^2). Algorithm 1 runs R times per (estimator, G), vectorised over runs; the
statistic is (n + i0) * gap(theta_n) with the exact gap J(theta*) - J(theta_n).

Deviations from the paper, both stated in the report:
* eta_i = beta / (i + i0) with i0 = ``offset`` (default 20; 0 gives the paper's beta / i). The limit is the
  same for any fixed i0 (it is beta / k from k = i0 + 1, hence the n + i0 in the statistic); with i0 = 0 the
  first steps (eta_1 = beta) throw a fraction of runs onto the flat softmax plateaus far from Theta*, where
  they stay for any practical n (measured with --offset 0: 14.5% of grpo and 12.3% of oracle runs had
  (n gap) > 100 E at B = 16, G = 4, n = 1000, R = 400).
* one torch.Generator per (estimator, G) cell for all R runs (seed + cell index), not one per run, and a
  loop of its own instead of ``run_algorithm1_batch`` (whose per-run generators cost ~90 us per run-step).
  With runs = 1 and offset = 0 the loop equals ``run_algorithm1(seed)`` to 1e-12 (tested).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from scipy import stats as sps
from torch import Tensor
from tqdm.auto import tqdm

from ugrpo.stats.advantages import compute_advantages
from ugrpo.stats.asymptotics import (
    GapLimit,
    Subspace,
    estimator_covariance,
    gap_limit,
    identifiable_subspace,
    prompt_covariances,
    weighted_chi2_cdf,
    weighted_chi2_quantile,
)
from ugrpo.stats.estimator import prompt_gradients

__all__ = ["GapConfig", "Optimum", "singular_env", "find_optimum", "predict", "simulate", "goodness_of_fit",
           "corollary9_table", "run_gap", "gap_experiment", "QQ_LEVELS"]

QQ_LEVELS = tuple((k + 0.5) / 50 for k in range(50))
ESTIMATOR_CHOICES = ("vanilla", "grpo", "oracle")


@dataclass(frozen=True)
class GapConfig:
    """Resolved settings of ``ugrpo gap``."""

    groups: tuple[int, ...] = (4, 16)
    """group sizes G (>= 2)"""
    estimators: tuple[str, ...] = ("vanilla", "grpo", "oracle")
    """baselines of Table 1: vanilla (C = 0), grpo (LOO mean), oracle (C = V(x))"""
    runs: int = 400
    """independent runs R per (estimator, G)"""
    steps: int = 1000
    """SGD steps n"""
    beta: float = 3.0
    """eta_i = beta / (i + offset); Theorem 8 needs beta > 1/(2 lambda_min(-H*))"""
    batch: int = 16
    """prompts per step B"""
    offset: int = 20
    """i0 in eta_i = beta / (i + i0); 0 is the paper's beta / i"""
    seed: int = 0
    scale: float = 3.0
    """feature scale of the policy (curvature of J grows like scale^2)"""

    def __post_init__(self) -> None:
        if not self.groups or min(self.groups) < 2:
            raise ValueError(f"--groups {','.join(map(str, self.groups))}: every G must be >= 2 (grpo needs two "
                             "samples)")
        bad = [e for e in self.estimators if e not in ESTIMATOR_CHOICES]
        if bad or not self.estimators:
            raise ValueError(f"--estimators: unknown {', '.join(bad) or '(none given)'}; choose from "
                             f"{', '.join(ESTIMATOR_CHOICES)}")
        for name in ("runs", "steps", "batch"):
            if getattr(self, name) < (8 if name == "runs" else 1):
                raise ValueError(f"--{name} = {getattr(self, name)} is too small (runs >= 8, steps >= 1, batch >= 1)")
        if self.offset < 0:
            raise ValueError(f"--offset must be >= 0, got {self.offset}")
        if not (math.isfinite(self.beta) and self.beta > 0) or not (math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"--beta and --scale must be positive, got {self.beta}, {self.scale}")

    @property
    def checkpoints(self) -> tuple[int, ...]:
        """Steps at which the gap is recorded: n/16, n/8, n/4, n/2, n (distinct, >= 1)."""
        return tuple(sorted({max(1, self.steps // k) for k in (16, 8, 4, 2, 1)}))


ACTIONS = ((0.0, 0.0), (1.2, 0.0), (-1.2, 0.0), (0.0, 1.0), (0.0, -1.0))
REWARDS = ((0.95, 0.45, 0.55, 0.5, 0.35), (0.9, 0.6, 0.35, 0.4, 0.5), (0.98, 0.35, 0.55, 0.6, 0.4))


def singular_env(scale: float = 3.0):
    """The linear-softmax policy with a rank-2 Hessian on a 2-dimensional affine Theta* (see module doc)."""
    from ugrpo.envs import LinearSoftmax

    feats = [[[scale * a, scale * b, 0.5 * (x + 1), scale * a] for a, b in ACTIONS] for x in range(len(REWARDS))]
    return LinearSoftmax([0.3, -0.2, 0.7, 0.4], feats, [list(r) for r in REWARDS], name="singular_hessian",
                         description="3 prompts x 5 actions; phi3 constant across actions, phi4 = phi1")


@dataclass(frozen=True)
class Optimum:
    """theta*, J*, the Hessian and its identifiable subspace (paper A7)."""

    theta_star: Tensor
    J_star: float
    H: Tensor
    sub: Subspace
    grad_norm: float
    null_basis: Tensor


def find_optimum(env, newton_steps: int = 6) -> Optimum:
    """L-BFGS (the env's theta_star) then Newton steps within span(Q); H by autograd on the exact J."""
    theta = env.theta_star()

    def J(t: Tensor) -> Tensor:
        return (env.probs(t) * env.reward_mean).sum(-1).mean()

    for _ in range(newton_steps):
        H = torch.autograd.functional.hessian(J, theta)
        sub = identifiable_subspace(H)
        theta = theta - sub.Q @ torch.linalg.solve(sub.H_star, sub.Q.T @ env.grad_J(theta))
    H = torch.autograd.functional.hessian(J, theta)
    sub = identifiable_subspace(H)
    lam, U = torch.linalg.eigh(H)
    null = U[:, lam.abs() <= sub.tol]
    return Optimum(theta_star=theta, J_star=float(J(theta)), H=H, sub=sub,
                   grad_norm=float(env.grad_J(theta).norm()), null_basis=null)


def predict(env, opt: Optimum, estimator: str, B: int, G: int, beta: float) -> dict[str, GapLimit]:
    """Theorem 8 limits (both conventions) for one estimator from the exact Gamma at theta* (M26-M29)."""
    pc = prompt_covariances(env.probs(opt.theta_star), env.score_table(opt.theta_star), env.reward_mean)
    gamma_q = opt.sub.Q.T @ estimator_covariance(pc, estimator, B, G) @ opt.sub.Q
    return {c: gap_limit(opt.sub.H_star, gamma_q, beta, convention=c) for c in ("corrected", "printed")}


def simulate(env, theta0: Tensor, estimator: str, *, B: int, G: int, beta: float, steps: int, runs: int,
             offset: int, checkpoints: tuple[int, ...], generator: torch.Generator, progress: bool = False,
             desc: str = "") -> tuple[Tensor, Tensor]:
    """R runs of Algorithm 1 at once: theta <- theta + beta/(i + offset) ghat (paper Alg. 1, eq. (5), (8)).

    Returns J(theta_c) at the checkpoints (R, C) and the final parameters (R, d).
    """
    theta = theta0.expand(runs, -1).clone()                               # (R, d)
    J_rec = torch.empty(runs, len(checkpoints), dtype=torch.float64)
    cps = {c: k for k, c in enumerate(checkpoints)}
    for i in tqdm(range(1, steps + 1), desc=desc, disable=not progress, unit="step", leave=False):
        batch = env.sample_many(theta, B, G, generator)
        rewards = batch.rewards.reshape(runs * B, G)                      # (R*B, G)
        values = batch.values.reshape(runs * B) if estimator == "oracle" else None
        adv = compute_advantages(rewards, baseline=estimator, values=values).advantages
        ghat = prompt_gradients(batch.scores.reshape(runs * B, G, -1), adv).reshape(runs, B, -1).mean(1)  # (R, d)
        theta = theta + beta / (i + offset) * ghat
        if i in cps:
            J_rec[:, cps[i]] = env.J(theta)
    return J_rec, theta


def goodness_of_fit(x: np.ndarray, limit: GapLimit) -> dict[str, Any]:
    """Mean with SE and z-score against E = sum w; KS and Cramer-von Mises against the predicted CDF (M30)."""
    x = np.asarray(x, dtype=np.float64)
    u = weighted_chi2_cdf(x, limit.weights)
    ks = sps.kstest(u, "uniform")
    cvm = sps.cramervonmises(u, "uniform")
    se = float(x.std(ddof=1) / math.sqrt(x.size))
    return {"mean": float(x.mean()), "se": se, "predicted_mean": limit.mean,
            "z": (float(x.mean()) - limit.mean) / se, "ratio": float(x.mean()) / limit.mean,
            "predicted_sd": math.sqrt(limit.variance), "sd": float(x.std(ddof=1)),
            "ks_stat": float(ks.statistic), "ks_p": float(ks.pvalue),
            "cvm_stat": float(cvm.statistic), "cvm_p": float(cvm.pvalue)}


def corollary9_table(env, opt: Optimum, B: int, beta: float, groups: tuple[int, ...]) -> list[dict[str, Any]]:
    """Exact w_grpo - w_oracle (and vanilla - oracle) over G (paper Cor 9): G^2 times it tends to a constant."""
    rows = []
    for G in groups:
        w = {e: predict(env, opt, e, B, G, beta)["corrected"].weights for e in ("grpo", "oracle", "vanilla")}
        d = (w["grpo"] - w["oracle"])
        rows.append({"G": G, "w_grpo": w["grpo"].tolist(), "w_oracle": w["oracle"].tolist(),
                     "diff": d.tolist(), "G2_diff": (G**2 * d).tolist(),
                     "vanilla_minus_oracle": (w["vanilla"] - w["oracle"]).tolist()})
    for a, b in zip(rows, rows[1:]):
        if b["G"] == 2 * a["G"]:
            a["ratio_to_2G"] = [x / y for x, y in zip(a["diff"], b["diff"])]
    return rows


def run_gap(cfg: GapConfig, rd, *, progress: bool = True) -> dict[str, Any]:
    """Predict, simulate every (estimator, G) cell, test the fit; metrics rows as cells finish."""
    import time

    env = singular_env(cfg.scale)
    opt = find_optimum(env)
    lam_min = float(torch.linalg.eigvalsh(-opt.sub.H_star)[0])
    if cfg.beta * lam_min <= 0.5:
        raise ValueError(f"--beta {cfg.beta:g} is too small: Theorem 8 needs beta > 1/(2 lambda_min(-H*)) = "
                         f"{1 / (2 * lam_min):.4g} for this policy (lambda_min = {lam_min:.4g}); choose a larger "
                         "--beta")
    # start on Theta* shifted along the flat directions: the iterates must converge to the set, not to theta*
    theta0 = opt.theta_star + opt.null_basis.sum(1) * 0.5
    n_eff = torch.tensor([c + cfg.offset for c in cfg.checkpoints], dtype=torch.float64)
    cells = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for ci, (est, G) in enumerate([(e, g) for e in cfg.estimators for g in cfg.groups]):
            t0 = time.perf_counter()
            lim = predict(env, opt, est, cfg.batch, G, cfg.beta)
            gen = torch.Generator().manual_seed(cfg.seed + ci)
            J_rec, theta_n = simulate(env, theta0, est, B=cfg.batch, G=G, beta=cfg.beta, steps=cfg.steps,
                                      runs=cfg.runs, offset=cfg.offset, checkpoints=cfg.checkpoints,
                                      generator=gen, progress=progress, desc=f"{est} G={G}")
            stat = (opt.J_star - J_rec) * n_eff                            # (R, C): (n + i0) * gap
            final = stat[:, -1].numpy()
            fits = {c: goodness_of_fit(final, lim[c]) for c in lim}
            by_n = [{"step": c, "n_eff": float(n_eff[k]), "mean": float(stat[:, k].mean()),
                     "se": float(stat[:, k].std() / math.sqrt(cfg.runs))} for k, c in enumerate(cfg.checkpoints)]
            qq_emp = np.quantile(final, QQ_LEVELS).tolist()
            cell = {"estimator": est, "G": G, "B": cfg.batch, "seed": cfg.seed + ci,
                    "weights": {c: lim[c].weights.tolist() for c in lim}, "fit": fits, "by_n": by_n,
                    "qq": {"levels": list(QQ_LEVELS), "empirical": qq_emp,
                           "predicted": weighted_chi2_quantile(QQ_LEVELS, lim["corrected"].weights).tolist()},
                    "null_drift": float(((theta_n - theta0) @ opt.null_basis).abs().max()),
                    "frac_above_100E": float((final > 100 * lim["corrected"].mean).mean()),
                    "seconds": time.perf_counter() - t0}
            rd.append_metrics({**cell, "samples": final.tolist()})
            cells.append(cell)
    finally:
        torch.set_num_threads(threads)
    cor9_groups = tuple(sorted(set(cfg.groups) | {2, 4, 8, 16, 32, 64, 128, 256}))
    return {"policy": {"theta_star": opt.theta_star.tolist(), "J_star": opt.J_star, "grad_norm": opt.grad_norm,
                       "hessian_eigenvalues": opt.sub.eigenvalues.tolist(), "rank": opt.sub.rank,
                       "dim": env.dim, "H_star": opt.sub.H_star.tolist(), "lambda_min": lam_min,
                       "beta_min": 1 / (2 * lam_min), "theta0": theta0.tolist()},
            "cells": cells, "corollary9": corollary9_table(env, opt, cfg.batch, cfg.beta, cor9_groups)}


def gap_experiment(cfg: GapConfig, out: str, *, argv: list[str] | None = None, progress: bool = True,
                   on_start=None) -> dict[str, Any]:
    """``ugrpo gap``: simulate ``cfg`` into the run folder ``out`` (fresh: cells are not resumable), write
    results.json, the plots and report.md; return the results. ``on_start()`` is called once the folder is claimed
    and its config.json written (the console's config line: never for a folder that is refused)."""
    import time

    from ugrpo.report.gap import write_report
    from ugrpo.runs import RunDir

    rd = RunDir(out)
    rd.write_config({**asdict(cfg), "checkpoints": cfg.checkpoints, "command": "gap", "argv": argv})
    rd.file("metrics.jsonl").unlink(missing_ok=True)  # a fresh run: cells are not resumable
    if on_start is not None:
        on_start()
    t0 = time.perf_counter()
    results = run_gap(cfg, rd, progress=progress)
    results["seconds"] = time.perf_counter() - t0
    write_report(rd, results, argv)
    return results
