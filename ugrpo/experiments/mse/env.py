"""Monte-Carlo gradient MSE per estimator and group size at a frozen policy (paper Fig. 4).

For each G: R independent minibatches of B prompts x G samples; the *same* samples feed all
four estimators in a repetition (common random numbers). The squared error ||ghat - g||^2
against the exact g gives a mean with a Student-t 95% interval (mean +- t_{0.975, R-1} SE, SE from the R
squared errors: at a handful of repetitions 1.96 SE is far too short, e.g. t_{0.975, 2} = 4.30), printed next to
the exact value of paper Prop. 3 / docs/math.md (``env.exact(theta).mse``).

The Hoeffding split of GRPO's MSE (paper eq. (2), (9)):
``MSE_grpo = [c1/B + c2/(BG)] + c3/(BG(G-1))``, the oracle part plus the degenerate residual.
The residual is also measured directly by Monte Carlo as ||ghat_grpo - ghat_oracle||^2, which
is orthogonal to the oracle error (docs/paper.md section 3), so MC and exact can be compared.

Deviation from the paper: the paper estimates g and V(x) by Monte Carlo on an LLM; here the
env gives them exactly, so the only Monte-Carlo error is the one reported.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from ugrpo.runs import RunDir
from ugrpo.stats.advantages import compute_advantages
from ugrpo.stats.estimators import ESTIMATORS
from ugrpo.stats.exact_mse import hoeffding_split
from ugrpo.stats.intervals import t_interval
from ugrpo.stats.seeds import derive_seed  # re-exported; the split lives in stats

__all__ = ["ESTIMATORS", "MSEConfig", "squared_errors", "run_mse", "mse_experiment", "hoeffding_split"]


@dataclass(frozen=True)
class MSEConfig:
    """Resolved settings of ``ugrpo mse``."""

    env: str
    """env spec: a JSON path or builtin:NAME"""
    groups: tuple[int, ...]
    """group sizes G (each >= 2)"""
    batch: int
    """prompts per minibatch B"""
    reps: int
    """independent minibatches R per G (>= 2, for a standard error)"""
    seed: int
    theta: tuple[float, ...] | None = None
    """parameters; None = the env's theta0"""
    max_chunk_floats: int = 4_000_000
    """memory cap: reps x B x G x D floats sampled at once"""

    def __post_init__(self) -> None:
        if not self.groups:
            raise ValueError("--groups is empty")
        bad = [G for G in self.groups if G < 2]
        if bad:
            raise ValueError(f"--groups: G = {bad[0]} < 2; grpo needs at least 2 samples per prompt")
        if self.batch < 1:
            raise ValueError(f"--batch must be >= 1, got {self.batch}")
        if self.reps < 2:
            raise ValueError(f"--reps must be >= 2 to give a standard error, got {self.reps}")


def squared_errors(batch, g_true: torch.Tensor, B: int) -> dict[str, torch.Tensor]:
    """Squared errors ||ghat - g||^2 of each estimator on R stacked minibatches.

    Parameters
    ----------
    batch : SampledBatch with rewards (R*B, G), scores (R*B, G, D), values (R*B,)
    g_true : (D,) exact policy gradient, paper eq. (8)
    B : prompts per minibatch; the R*B prompts are split into R consecutive minibatches

    Returns
    -------
    dict estimator -> (R,) squared errors, plus ``"residual"``: ||ghat_grpo - ghat_oracle||^2,
    the degenerate Hoeffding term of paper eq. (2).
    """
    rewards, scores = batch.rewards.double(), batch.scores.double()
    RB, G, D = scores.shape
    R = RB // B
    adv = torch.stack([compute_advantages(rewards, baseline=est, values=batch.values.double() if est == "oracle"
                                          else None).advantages for est in ESTIMATORS], dim=-1)  # (R*B, G, E)
    # all estimators in one batched matmul over the shared scores (common random numbers):
    # per-prompt estimates 1/G sum_g W A, paper eq. (5) (= ugrpo.stats.estimator.prompt_gradients)
    pg = torch.bmm(adv.transpose(1, 2), scores) / G  # (R*B, E, D)
    mb = pg.view(R, B, len(ESTIMATORS), D).mean(dim=1)  # (R, E, D), minibatch estimates eq. (8)
    ghats = {est: mb[:, i] for i, est in enumerate(ESTIMATORS)}
    out = {est: ((gh - g_true) ** 2).sum(dim=1) for est, gh in ghats.items()}
    out["residual"] = ((ghats["grpo"] - ghats["oracle"]) ** 2).sum(dim=1)
    return out


def _stats(x: torch.Tensor) -> dict[str, float]:
    """Mean squared error over the repetitions with its Student-t 95% interval, cut at 0 (a squared error is never
    negative)."""
    return t_interval(x.tolist()).clip(hi=math.inf).to_dict("mse", "se", "ci_low", "ci_high")


def run_mse(env, theta: torch.Tensor, cfg: MSEConfig, run: RunDir, *, progress: bool = True) -> dict[str, Any]:
    """Run the Monte-Carlo MSE study; append one metrics row per (G, estimator) as it finishes.

    Returns the ``results.json`` object (see docs and ``ugrpo mse --help``).
    """
    exact = env.exact(theta)
    g_true = torch.as_tensor(exact.g, dtype=torch.float64)
    D = g_true.numel()
    pm = exact.policy_moments
    rows: list[dict[str, Any]] = []
    split: list[dict[str, Any]] = []
    B, R = cfg.batch, cfg.reps
    total = len(cfg.groups) * R
    bar = tqdm(total=total, desc="mse reps", unit="rep", disable=not progress, dynamic_ncols=True)
    try:
        for G in cfg.groups:
            gen = torch.Generator().manual_seed(derive_seed(cfg.seed, G))  # one stream per G
            chunk = max(1, min(R, cfg.max_chunk_floats // max(1, B * G * D)))
            errs: dict[str, list[torch.Tensor]] = {}
            done = 0
            while done < R:
                r = min(chunk, R - done)
                batch = env.sample(theta, r * B, G, gen)
                for k, v in squared_errors(batch, g_true, B).items():
                    errs.setdefault(k, []).append(v)
                done += r
                bar.update(r)
            cat = {k: torch.cat(v) for k, v in errs.items()}
            for est in ESTIMATORS:
                row = {"estimator": est, "G": G, "B": B, **_stats(cat[est]), "exact": float(exact.mse(est, B, G)),
                       "reps": R}
                rows.append(row)
                run.append_metrics(row)
            sp = hoeffding_split(pm.c1, pm.c2, pm.c3, B, G)
            res = _stats(cat["residual"])
            sp.update({"residual_mc": res["mse"], "residual_mc_ci": [res["ci_low"], res["ci_high"]]})
            split.append(sp)
    finally:
        bar.close()
    return {
        "rows": rows,
        "hoeffding_grpo": split,
        "env": {"spec": cfg.env, "kind": getattr(env, "kind", type(env).__name__), "name": getattr(env, "name", ""),
                "prompts": getattr(env, "n_prompts", None), "D": D, "J": float(exact.J)},
        "exact_components": {k: float(getattr(pm, k)) for k in ("c1", "c2", "c3", "c2_vanilla")},
        "theta": theta.tolist(),
        "D": D,
        "config": asdict(cfg),
    }


def mse_experiment(cfg: MSEConfig, out: str, *, argv: Sequence[str] | None = None,
                   progress: bool = True) -> dict[str, Any]:
    """``ugrpo mse --env``: measure ``cfg`` into the run folder ``out`` (a fresh measurement, not a resume),
    write results.json, mse.png and report.md; return the results."""
    from ugrpo.experiments.common import resolve_env, resolve_theta
    from ugrpo.report.mse import write_report

    env = resolve_env(cfg.env)
    theta = resolve_theta(env, cfg.theta)
    rd = RunDir(out)
    rd.write_config({**asdict(cfg), "command": "mse", "argv": None if argv is None else list(argv)})
    rd.file("metrics.jsonl").unlink(missing_ok=True)  # a fresh measurement, not a resume
    try:
        results = run_mse(env, theta, cfg, rd, progress=progress)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"interrupted: the rows finished so far are in {rd.file('metrics.jsonl')}") from None
    write_report(rd, results, argv)
    return results


