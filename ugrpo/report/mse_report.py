"""Report of ``ugrpo mse --env`` (:mod:`ugrpo.experiments.mse`): results.json, ``mse.png`` (paper Fig. 4 style)
and report.md, plus the sentences and table rows the demo reuses. Reads the results dict only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ugrpo.runs import RunDir
from ugrpo.stats.estimators import ESTIMATORS
from ugrpo.stats.intervals import Z95


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
        out.append(_vanilla_below_grpo(by, groups, above))
    if ("grpo_mean", Gmin := groups[0]) in by and by[("grpo_mean", Gmin)]["mse"] < by[("oracle", Gmin)]["mse"]:
        out.append(
            f"grpo_mean (the full-mean baseline most trainers use) is below the oracle at G={Gmin}: it is "
            "biased, shrinking the gradient by (G-1)/G (docs/math.md M3), which cuts variance more than the "
            "bias costs in squared error. It is not an unbiased estimator of g, so Corollary 5 does not cover it."
        )
    z = [(r["mse"] - r["exact"]) / r["se"] for r in rows if r["se"] and r["se"] > 0]
    if z:
        zmax = max(abs(v) for v in z)
        inside = sum(abs(v) <= Z95 for v in z)
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


def _vanilla_below_grpo(by: dict, groups: Sequence[int], above: Sequence[int]) -> str:
    """The sentence for the G where vanilla's Monte-Carlo MSE is not above GRPO's, with what the exact values say
    there: a tie (within 1%), GRPO's residual outweighing its baseline's saving, or Monte-Carlo noise."""
    from ugrpo.report.markdown import fmt_values

    below = [G for G in groups if G not in above]
    exact = {G: (by[("vanilla", G)]["exact"], by[("grpo", G)]["exact"]) for G in below}
    tie = [G for G in below if abs(exact[G][0] - exact[G][1]) <= 0.01 * max(exact[G])]
    residual = [G for G in below if G not in tie and exact[G][0] < exact[G][1]]
    noise = [G for G in below if G not in tie and G not in residual]
    why = []
    if tie:
        why.append(f"at {fmt_values(tie)} the exact MSEs are within 1% of each other (GRPO's O(1/G^2) residual "
                   "about cancels what its baseline saves)")
    if residual:
        why.append(f"at {fmt_values(residual)} the exact values agree: GRPO's O(1/G^2) residual outweighs what its "
                   "baseline saves")
    if noise:
        why.append(f"at {fmt_values(noise)} the exact values do not: Monte-Carlo noise")
    where = f"above GRPO at {fmt_values(above)} but not at {fmt_values(below)}" if above else "not above GRPO at any G"
    return f"Vanilla is {where}; " + "; ".join(why) + "."


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
        md_table(["G", "oracle part c1/B + "
                  "c2/(BG)", "residual c3/(BG(G-1))", "residual share", "residual (MC)", "MC 95% CI"],
                 [[s["G"], s["oracle_part"], s["residual"], s["residual_share"], s["residual_mc"],
                   f"[{s['residual_mc_ci'][0]:.4g}, {s['residual_mc_ci'][1]:.4g}]"] for s in split]),
        "",
    ]
    run.write_report("\n".join(md))
