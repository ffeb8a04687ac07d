"""Report of ``ugrpo mse --model`` (:mod:`ugrpo.experiments.lm_mse`): ``results.json``, ``mse.png`` (paper
Fig. 4 layout, the values predicted from c1, c2, c3 dashed), ``mse_within.png`` and ``report.md`` with a
plain-language reading of the two checks (vanilla vs grpo, grpo vs oracle at G = 32) and the Hoeffding split.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ugrpo.report.markdown import fmt, fmt_ci, fmt_values, header, image, md_table
from ugrpo.report.plots import estimator_series, line_plot
from ugrpo.runs import RunDir
from ugrpo.stats.estimators import ESTIMATORS

__all__ = ["reading", "write_lm_mse_outputs"]


def reading(results: dict[str, Any]) -> list[str]:
    """Plain-language sentences: the issue's two checks, with intervals, and the Hoeffding split."""
    comps = {c["G"]: c for c in results["comparisons"]}
    groups = sorted(comps)
    out = []
    above = [G for G in groups if comps[G]["vanilla_minus_grpo"]["ci_low"] > 0]
    below = [G for G in groups if comps[G]["vanilla_minus_grpo"]["ci_high"] < 0]
    out.append(f"Vanilla's MSE is above GRPO's (95% interval of the paired difference above 0) at {fmt_values(above)} "
               f"and below it (interval below 0) at {fmt_values(below)}, of {fmt_values(groups)}.")
    G32 = min(groups, key=lambda G: abs(G - 32))
    r = comps[G32]["grpo_over_oracle"]
    if r["ratio"] is not None:
        within = "within" if r["ci_high"] <= 1.10 else "not shown to be within"
        out.append(f"At G={G32}, MSE_grpo / MSE_oracle = {fmt(r['ratio'])} (95% CI [{fmt(r['ci_low'])}, "
                   f"{fmt(r['ci_high'])}]): GRPO is {within} 10% of the oracle.")
    h = comps[G32]["residual_over_oracle"]
    if h["ratio"] is not None:
        within = "within" if h["ci_high"] <= 0.10 else "not shown to be within"
        out.append("The same through the Hoeffding split (residual measured directly, orthogonal to the oracle "
                   "error): "
                   f"1 + residual / oracle = {fmt(1 + h['ratio'])} (95% CI [{fmt(1 + h['ci_low'])}, "
                   f"{fmt(1 + h['ci_high'])}]), {within} 10%; this form has no cross-term noise.")
    sp = {s["G"]: s for s in results["hoeffding_grpo"]}
    share = ", ".join(f"G={G}: {100 * sp[G]['residual_share']:.1f}%" for G in groups
                      if sp[G]["residual_share"] is not None)
    out.append(f"Hoeffding split: the residual ||ghat_grpo - ghat_oracle||^2 is {share} of GRPO's MSE.")
    dg, comp = results.get("diagnostics"), results["components"]
    if dg and comp["c2"]["estimate"] > comp["c2_vanilla"]:
        out.append(f"Here c2 = {fmt(comp['c2']['estimate'])} > c2_vanilla = {fmt(comp['c2_vanilla'])}: the V(x) "
                   f"baseline adds variance. Right samples have mean ||W||^2 = {fmt(dg['mean_w2_reward1'])}, wrong "
                   "ones "
                   f"{fmt(dg['mean_w2_reward0'])} (E_X Cov(||W||^2, Z|X) = {fmt(dg['mean_cov_w2_z'])}): the paper's "
                   "conditional-uncorrelation assumption (A2) does not hold, so vanilla can beat GRPO and the oracle.")
    ref = results["reference"]
    mse_min = min(r["mse"] for r in results["rows"])
    if mse_min > 0:
        out.append(f"The reference's own error E||g_ref - g||^2 = {fmt(ref['ref_err'])} (subtracted) is "
                   f"{100 * ref['ref_err'] / mse_min:.1f}% of the smallest MSE measured.")
    else:  # e.g. a model that never earns a reward: every gradient estimate is 0
        out.append(f"The smallest MSE measured is {fmt(mse_min)}: some estimator's gradients were all 0 (no reward "
                   f"varied), so there is nothing to compare; the reference's own error is {fmt(ref['ref_err'])}.")
    return out


def write_lm_mse_outputs(run: RunDir, results: dict[str, Any], argv: Sequence[str] | None = None) -> None:
    """results.json, ``mse.png`` (Fig. 4 style, predicted-from-c's dashed), report.md."""
    run.write_results(results)
    rows = results["rows"]
    groups = sorted({r["G"] for r in rows})
    series = estimator_series(rows, ESTIMATORS, reference="predicted", reference_label="{est} (predicted from c's)")
    wseries = estimator_series(rows, ESTIMATORS, cell=lambda r: r["within_prompts"])
    B, pol, cost, ref = rows[0]["B"], results["policy"], results["cost"], results["reference"]
    line_plot(run.file("mse_within.png"), wseries, xlabel="group size G",
              ylabel="E||ghat - (1/B) sum_b g(x_b)||^2", logx=True, logy=True, xticks=groups,
              title=f"{pol['model']}: within the drawn prompts (no c1/B)")
    line_plot(run.file("mse.png"), series, xlabel="group size G", ylabel="MSE  E||ghat - g||^2 (sketch space)",
              title=f"{pol['model']}: gradient MSE vs G (B={B}, R={rows[0]['reps']})", logx=True, logy=True,
              xticks=groups)
    comp = results["components"]
    md = [
        header("ugrpo mse --model: gradient MSE per estimator and group size on a language model (paper Fig. 4)", argv),
        f"Policy `{pol['model']}` on task `{pol['task']}` (options {pol['task_options']}); mean reward "
        f"{pol['accuracy']:.3f} +- {pol['accuracy_se']:.3f}. Prompt distribution: uniform over P = {ref['P']} fixed "
        f"prompts. B = {B}, R = {rows[0]['reps']} independent repetitions; reference: M = {ref['M']} samples per "
        "prompt. "
        f"Squared errors in a k = {results['sketch']['dim']} sketch of the {results['sketch']['D']}-dim gradient "
        "(unbiased). See docs/lm-mse.md.",
        "", "## Reading", "", *[f"- {s}" for s in reading(results)], "", image("mse.png", "MSE vs G"), "",
        "## Table (MSE after the reference corrections; predicted = c1, c2, c3 of the reference pool in Prop. 3)", "",
        md_table(["G", "estimator", "MSE", "95% CI", "raw", "correction", "predicted", "within prompts", "95% CI"],
                 [[r["G"], r["estimator"], r["mse"], fmt_ci(r["ci_low"], r["ci_high"]), r["raw_mse"], r["correction"],
                   r["predicted"], r["within_prompts"]["mse"], fmt_ci(r["within_prompts"]["ci_low"],
                                                                      r["within_prompts"]["ci_high"])] for r in rows]),
        "", "Within prompts = E||ghat - (1/B) sum_b g(x_b)||^2, the MSE without the prompt-sampling term c1/B that "
        "all four estimators share (docs/lm-mse.md R7):", "", image("mse_within.png", "within-prompt error vs G"),
        "", "## Comparisons (paired over repetitions)", "",
        md_table(["G", "vanilla - grpo", "95% CI", "grpo / oracle", "95% CI", "residual / oracle"],
                 [[c["G"], c["vanilla_minus_grpo"]["mean"], fmt_ci(c["vanilla_minus_grpo"]["ci_low"],
                   c["vanilla_minus_grpo"]["ci_high"]), c["grpo_over_oracle"]["ratio"],
                   fmt_ci(c["grpo_over_oracle"]["ci_low"], c["grpo_over_oracle"]["ci_high"]),
                   c["residual_over_oracle"]["ratio"]] for c in results["comparisons"]]),
        "", "## Hoeffding split of GRPO's MSE (measured; predicted from c's)", "",
        md_table(["G", "oracle part", "residual (direct)", "95% CI", "share", "predicted residual c3/(BG(G-1))"],
                 [[s["G"], s["oracle_part"], s["residual"], fmt_ci(*s["residual_ci"]), s["residual_share"],
                   s["predicted_residual"]] for s in results["hoeffding_grpo"]]),
        "", f"Constants from the reference pool: c1 = {fmt(comp['c1']['estimate'])} "
        f"{fmt_ci(comp['c1']['ci_low'], comp['c1']['ci_high'])}, c2 = {fmt(comp['c2']['estimate'])}, "
        f"c3 = {fmt(comp['c3']['estimate'])}, c2_vanilla = {fmt(comp['c2_vanilla'])}.",
        "", "## Reference error and cost", "",
        f"E||g_ref - g||^2 = {fmt(ref['ref_err'])} (subtracted from every row); the oracle with V_ref has "
        "E_X[E||W||^2 Var(Z|X)]/(BGM) more: " + ", ".join(f"G={G}: {fmt(v)}" for G, v in ref["oracle_vref_err"].items())
        + " (subtracted from the oracle and the residual).",
        "", f"Samples: {cost['samples']} ({cost['samples_reference']} reference + {cost['samples_estimation']} "
        "estimation), "
        f"{cost['tokens']} completion tokens, {cost['n_unscorable']} unscorable; seconds: sampling "
        f"{cost['sampling']:.1f}, scoring {cost['scoring']:.1f}, sketch {cost['sketch']:.1f}, total "
        f"{cost['seconds_total']:.1f}.", "",
    ]
    run.write_report("\n".join(md))
