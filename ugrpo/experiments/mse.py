"""Monte-Carlo gradient MSE per estimator and group size at a frozen policy (paper Fig. 4).

For each G: R independent minibatches of B prompts x G samples; the *same* samples feed all
four estimators in a repetition (common random numbers). The squared error ||ghat - g||^2
against the exact g gives a mean with a normal 95% interval (mean +- 1.96 SE, SE from the R
squared errors), printed next to the exact value of paper Prop. 3 / docs/math.md
(``env.exact(theta).mse``).

The Hoeffding split of GRPO's MSE (paper eq. (2), (9)):
``MSE_grpo = [c1/B + c2/(BG)] + c3/(BG(G-1))``, the oracle part plus the degenerate residual.
The residual is also measured directly by Monte Carlo as ||ghat_grpo - ghat_oracle||^2, which
is orthogonal to the oracle error (NOTES.md section 3), so MC and exact can be compared.

Deviation from the paper: the paper estimates g and V(x) by Monte Carlo on an LLM; here the
env gives them exactly, so the only Monte-Carlo error is the one reported.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import torch
from tqdm.auto import tqdm

from ugrpo.runs import RunDir
from ugrpo.stats.advantages import compute_advantages
from ugrpo.stats.exact_mse import hoeffding_split  # re-exported; the split lives in stats

__all__ = ["ESTIMATORS", "MSEConfig", "squared_errors", "run_mse", "mse_experiment", "hoeffding_split"]

ESTIMATORS: tuple[str, ...] = ("vanilla", "grpo", "grpo_mean", "oracle")


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
    m = float(x.mean())
    se = float(x.std(correction=1)) / math.sqrt(x.numel())
    return {"mse": m, "se": se, "ci_low": m - 1.96 * se, "ci_high": m + 1.96 * se}


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
            gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + G)  # one stream per G
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
                row = {"estimator": est, "G": G, "B": B, **_stats(cat[est]), "exact": float(exact.mse(est, B, G)), "reps": R}
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

    env = resolve_env(cfg.env)
    theta = resolve_theta(env, cfg.theta)
    rd = RunDir(out)
    rd.file("metrics.jsonl").unlink(missing_ok=True)
    rd.write_config({**asdict(cfg), "command": "mse", "argv": None if argv is None else list(argv)})
    try:
        results = run_mse(env, theta, cfg, rd, progress=progress)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"interrupted: the rows finished so far are in {rd.file('metrics.jsonl')}") from None
    write_mse_outputs(rd, results, argv)
    return results


def reading(results: dict[str, Any]) -> list[str]:
    """Plain-language sentences about an ``ugrpo mse`` result (for report.md)."""
    rows = results["rows"]
    by = {(r["estimator"], r["G"]): r for r in rows}
    groups = sorted({r["G"] for r in rows})
    out = []
    Gmax = groups[-1]
    g, o = by[("grpo", Gmax)], by[("oracle", Gmax)]
    rel = 100 * (g["mse"] / o["mse"] - 1) if o["mse"] > 0 else float("nan")
    rel_ex = 100 * (g["exact"] / o["exact"] - 1) if o["exact"] > 0 else float("nan")
    out.append(
        f"At G={Gmax}, GRPO's Monte-Carlo MSE is {rel:+.1f}% relative to the oracle's "
        f"(exact: {rel_ex:+.2f}%); the gap is the O(1/G^2) residual of Theorem 2."
    )
    above = [G for G in groups if by[("vanilla", G)]["mse"] > by[("grpo", G)]["mse"]]
    if len(above) == len(groups):
        out.append("Vanilla (no baseline) is above GRPO at every G, as Corollary 5 predicts.")
    else:
        below = sorted(set(groups) - set(above))
        exact_below = [G for G in below if by[("vanilla", G)]["exact"] <= by[("grpo", G)]["exact"]]
        why = (f"the exact values agree at G in {exact_below}: there GRPO's O(1/G^2) residual outweighs "
               "what its baseline saves" if exact_below else "the exact values do not: Monte-Carlo noise")
        out.append(f"Vanilla is above GRPO at G in {above} but not at G in {below}; {why}.")
    if ("grpo_mean", Gmin := groups[0]) in by and by[("grpo_mean", Gmin)]["mse"] < by[("oracle", Gmin)]["mse"]:
        out.append(
            f"grpo_mean (the full-mean baseline most trainers use) is below the oracle at G={Gmin}: it is "
            "biased, shrinking the gradient by (G-1)/G (docs/math.md M3), which cuts variance more than the "
            "bias costs in squared error. It is not an unbiased estimator of g, so Corollary 5 does not cover it."
        )
    z = [(r["mse"] - r["exact"]) / r["se"] for r in rows if r["se"] and r["se"] > 0]
    if z:
        zmax = max(abs(v) for v in z)
        inside = sum(abs(v) <= 1.96 for v in z)
        out.append(
            f"Monte Carlo vs exact: {inside} of {len(z)} estimates have the exact value inside their 95% interval; "
            f"the largest deviation is {zmax:.2f} standard errors."
        )
    sp = {s["G"]: s for s in results["hoeffding_grpo"]}
    Gmin = groups[0]
    out.append(
        f"Hoeffding split of GRPO's MSE: the residual c3/(BG(G-1)) is {100 * (sp[Gmin]['residual_share'] or 0):.1f}% "
        f"of the total at G={Gmin} and {100 * (sp[Gmax]['residual_share'] or 0):.2f}% at G={Gmax}."
    )
    return out


def table_rows(results: dict[str, Any], groups: Sequence[int] | None = None) -> list[list[Any]]:
    """Rows [G, estimator, MC mse, 95% CI, exact] for stdout / markdown tables."""
    out = []
    for r in results["rows"]:
        if groups is None or r["G"] in groups:
            out.append([r["G"], r["estimator"], r["mse"], f"[{r['ci_low']:.4g}, {r['ci_high']:.4g}]", r["exact"]])
    return out


def write_mse_outputs(run: RunDir, results: dict[str, Any], argv: Sequence[str] | None = None) -> None:
    """results.json, ``mse.png`` (Fig. 4 style: log-log MSE vs G, CI bands, exact dashed), report.md."""
    from ugrpo.report.markdown import header, image, md_table
    from ugrpo.report.plots import estimator_series, line_plot

    run.write_results(results)
    rows = results["rows"]
    groups = sorted({r["G"] for r in rows})
    series = estimator_series(rows, ESTIMATORS, label="{est} (MC)", reference="exact", reference_label="{est} (exact)")
    B = rows[0]["B"]
    line_plot(run.file("mse.png"), series, xlabel="group size G", ylabel="MSE  E||ghat - g||^2",
              title=f"Gradient MSE vs G (B={B}, R={rows[0]['reps']})", logx=True, logy=True, xticks=groups)
    comp = results["exact_components"]
    split = results["hoeffding_grpo"]
    md = [
        header("ugrpo mse: gradient MSE per estimator and group size (paper Fig. 4)", argv),
        f"Env `{results['config']['env']}` at theta (D = {results['D']}); B = {B} prompts per minibatch, "
        f"R = {rows[0]['reps']} independent minibatches per G, the same samples for all four estimators. "
        "MC = mean squared error with a 95% interval (mean +- 1.96 SE); exact = paper Prop. 3 / docs/math.md.",
        "",
        "## Reading",
        "",
        *[f"- {s}" for s in reading(results)],
        "",
        image("mse.png", "MSE vs G"),
        "",
        "## Table",
        "",
        md_table(["G", "estimator", "MC MSE", "95% CI", "SE", "exact"],
                 [[r["G"], r["estimator"], r["mse"], f"[{r['ci_low']:.4g}, {r['ci_high']:.4g}]", r["se"], r["exact"]]
                  for r in rows]),
        "",
        "## Hoeffding split of GRPO's MSE (exact; residual also by MC)",
        "",
        f"Exact constants at theta: c1 = {comp['c1']:.6g}, c2 = {comp['c2']:.6g}, c3 = {comp['c3']:.6g}.",
        "",
        md_table(["G", "oracle part c1/B + c2/(BG)", "residual c3/(BG(G-1))", "residual share", "residual (MC)", "MC 95% CI"],
                 [[s["G"], s["oracle_part"], s["residual"], s["residual_share"], s["residual_mc"],
                   f"[{s['residual_mc_ci'][0]:.4g}, {s['residual_mc_ci'][1]:.4g}]"] for s in split]),
        "",
    ]
    run.write_report("\n".join(md))
