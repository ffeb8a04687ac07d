"""Report of ``ugrpo mse`` (:mod:`ugrpo.experiments.mse`): results.json, ``mse.png`` (paper Fig. 4 layout) and
report.md; :func:`write_report` writes it from the results dict alone, for either source:

- an exact env (:mod:`ugrpo.experiments.mse.env`): Monte Carlo against the exact values, the Hoeffding split,
  and the sentences and table rows the demo reuses (:func:`reading`, :func:`table_rows`);
- a language model (:mod:`ugrpo.experiments.mse.lm`; its results carry ``policy``): the values predicted from
  c1, c2, c3 dashed, ``mse_within.png``, a plain-language reading of the two checks (vanilla vs grpo, grpo vs
  oracle at G = 32) and the Hoeffding split (:func:`lm_reading`); with ``--allocation`` also ``allocation.png``
  and the allocation table (realised vs predicted ratio per rule, :func:`allocation_table`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ugrpo.fileio import atomic_save
from ugrpo.report.markdown import fmt, fmt_ci, fmt_values, header, image, md_table
from ugrpo.report.plots import estimator_series, line_plot
from ugrpo.runs import RunDir
from ugrpo.stats.estimators import ESTIMATORS

__all__ = ["write_report", "reading", "table_rows", "lm_reading", "allocation_table", "allocation_section",
           "skipped_note"]


def write_report(run: RunDir, results: dict[str, Any], argv: Sequence[str] | None = None) -> Path:
    """results.json, ``mse.png`` and report.md (and, for a language model, ``mse_within.png`` and with an allocation
    study ``allocation.png``) into ``run``; returns the report's path."""
    if "policy" in results:
        return _write_lm(run, results, argv)
    return _write_env(run, results, argv)


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
    noise = " (the Monte-Carlo difference is within its noise: the two 95% intervals overlap)" if _overlap(g, o) \
        else ""
    out.append(
        f"At G={Gmax}, GRPO's exact MSE is {rel_ex:+.2f}% relative to the oracle's, the O(1/G^2) residual of "
        f"Theorem 2; Monte Carlo gives {rel:+.1f}%{noise}."
    )
    above = [G for G in groups if by[("vanilla", G)]["mse"] > by[("grpo", G)]["mse"]]
    unsure = [G for G in above if _overlap(by[("vanilla", G)], by[("grpo", G)])]
    said = (f" (by the Monte-Carlo means; at {fmt_values(unsure)} their 95% intervals overlap, so these repetitions "
            "alone cannot order them there)" if unsure else "")
    if len(above) == len(groups):
        out.append(f"Vanilla (no baseline) is above GRPO at every G, as Corollary 5 predicts{said}.")
    else:
        out.append(_vanilla_below_grpo(by, groups, above)[:-1] + f"{said}.")
    if ("grpo_mean", Gmin := groups[0]) in by and by[("grpo_mean", Gmin)]["mse"] < by[("oracle", Gmin)]["mse"]:
        out.append(
            f"grpo_mean (the full-mean baseline most trainers use) is below the oracle at G={Gmin}: it is "
            "biased, shrinking the gradient by (G-1)/G (docs/math.md M3), which cuts variance more than the "
            "bias costs in squared error. It is not an unbiased estimator of g, so Corollary 5 does not cover it."
        )
    z = [(r["mse"] - r["exact"]) / r["se"] for r in rows if r["se"] and r["se"] > 0]
    if z:
        zmax = max(abs(v) for v in z)
        inside = sum(r["ci_low"] <= r["exact"] <= r["ci_high"] for r in rows if r["se"] and r["se"] > 0)
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


def _overlap(a: dict, b: dict) -> bool:
    """Whether two rows' 95% intervals overlap (rows without an interval: no)."""
    if None in (a.get("ci_low"), a.get("ci_high"), b.get("ci_low"), b.get("ci_high")):
        return False
    return a["ci_low"] <= b["ci_high"] and b["ci_low"] <= a["ci_high"]


def _vanilla_below_grpo(by: dict, groups: Sequence[int], above: Sequence[int]) -> str:
    """The sentence for the G where vanilla's Monte-Carlo MSE is not above GRPO's, with what the exact values say
    there: a tie (within 1%), GRPO's residual outweighing its baseline's saving, or Monte-Carlo noise."""
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


def _write_env(run: RunDir, results: dict[str, Any], argv: Sequence[str] | None) -> Path:
    """results.json, ``mse.png`` (Fig. 4 style: log-log MSE vs G, CI bands, exact dashed), report.md."""
    run.write_results(results)
    rows = results["rows"]
    groups = sorted({r["G"] for r in rows})
    series = estimator_series(rows, ESTIMATORS, label="{est} (MC, 95% CI)", reference="exact",
                              reference_label="{est} (exact)")
    B = rows[0]["B"]
    line_plot(run.file("mse.png"), series, xlabel="group size G", ylabel="MSE  E||ghat - g||^2",
              title=f"Gradient MSE vs G (B={B}, R={rows[0]['reps']})", logx=True, logy=True, xticks=groups)
    comp = results["exact_components"]
    split = results["hoeffding_grpo"]
    md = [
        header("ugrpo mse: gradient MSE per estimator and group size (paper Fig. 4)", argv),
        f"Env `{results['config']['env']}` at theta (D = {results['D']}); B = {B} prompts per minibatch, "
        f"R = {rows[0]['reps']} independent minibatches per G, the same samples for all four estimators. "
        "MC = mean squared error with a 95% Student-t interval (mean +- t_{0.975, R-1} SE over the R repetitions, "
        "its lower end cut at 0 where it would go below: an MSE is >= 0); "
        "exact = paper Prop. 3 / docs/math.md.",
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
    return run.write_report("\n".join(md))


# ---------------------------------------------------------------------------------------------
# a language model (ugrpo mse --model)


def _vanilla_vs_grpo(groups: list[int], above: list[int], below: list[int]) -> str:
    """One sentence on where vanilla's MSE is above / below GRPO's, each G of ``groups`` named once.

    >>> print(_vanilla_vs_grpo([4], [4], []))
    Vanilla's MSE is above GRPO's at every measured G (G = 4): each 95% interval of the paired difference is above 0.
    >>> print(_vanilla_vs_grpo([4, 8, 16], [16], [4]).split(": ")[1])
    above it at G = 16 (the 95% interval of the paired difference above 0), below it at G = 4 (the interval below 0), \
neither at G = 8 (the interval covers 0).
    """
    for side, gs in (("above", above), ("below", below)):
        if gs == groups:
            return (f"Vanilla's MSE is {side} GRPO's at every measured G ({fmt_values(groups)}): each 95% interval of "
                    f"the paired difference is {side} 0.")
    rest = [G for G in groups if G not in above and G not in below]
    parts = [f"above it at {fmt_values(above)} (the 95% interval of the paired difference above 0)" if above else "",
             f"below it at {fmt_values(below)} (the interval below 0)" if below else "",
             f"neither at {fmt_values(rest)} (the interval covers 0)" if rest else ""]
    return f"Vanilla's MSE against GRPO's, at the measured {fmt_values(groups)}: {', '.join(p for p in parts if p)}."


def lm_reading(results: dict[str, Any]) -> list[str]:
    """Plain-language sentences about a language model's results: the two checks, with intervals, and the Hoeffding
    split."""
    comps = {c["G"]: c for c in results["comparisons"]}
    groups = sorted(comps)
    out = []
    above = [G for G in groups if comps[G]["vanilla_minus_grpo"]["ci_low"] > 0]
    below = [G for G in groups if comps[G]["vanilla_minus_grpo"]["ci_high"] < 0]
    out.append(_vanilla_vs_grpo(groups, above, below))
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


def _write_lm(run: RunDir, results: dict[str, Any], argv: Sequence[str] | None) -> Path:
    """results.json, ``mse.png`` (Fig. 4 style, predicted-from-c's dashed), ``mse_within.png``, report.md."""
    run.write_results(results)
    rows = results["rows"]
    groups = sorted({r["G"] for r in rows})
    series = estimator_series(rows, ESTIMATORS, label="{est} (MC, 95% CI)", reference="predicted",
                              reference_label="{est} (predicted from c's)")
    wseries = estimator_series(rows, ESTIMATORS, label="{est} (MC, 95% CI)", cell=lambda r: r["within_prompts"])
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
        "", "## Reading", "", *[f"- {s}" for s in lm_reading(results)], "", image("mse.png", "MSE vs G"), "",
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
        f"{cost['sampling']:.1f} ({'vLLM' if cost.get('sampling_backend') == 'vllm' else 'Hugging Face generate'}), "
        f"scoring {cost['scoring']:.1f}, sketch {cost['sketch']:.1f}, total "
        f"{cost['seconds_total']:.1f}.", "",
    ]
    if results.get("allocation"):
        md += allocation_section(run, results)
    return run.write_report("\n".join(md))


# ---------------------------------------------------------------------------------------------
# a language model's allocation study (docs/lm-mse.md R8-R10)


def allocation_table(alloc: dict[str, Any], part: str = "total") -> tuple[list[str], list[list[Any]]]:
    """(headers, rows) of the allocation study: realised MSE and ratio with 95% intervals, and the predictions;
    ``part`` = ``total`` (E||ghat - g||^2) or ``within`` (against the drawn prompts' gradients, no c1/B)."""
    headers = ["G", "moments", "rule", "G_b range", "MSE", "95% CI", "predicted", "ratio", "95% CI",
               "predicted ratio", "inside", "pred. ratio, true moments"]
    out = []
    for r in alloc["rows"]:
        c = r if part == "total" else r["within_prompts"]
        verdict = ("= uniform" if r["same_as_uniform"] and r["rule"] != "uniform" else
                   "-" if c["predicted_inside"] is None else ("yes" if c["predicted_inside"] else "no"))
        out.append([r["G"], r["moments"], r["rule"], f"{r['sizes']['min']}-{r['sizes']['max']}", c["mse"],
                    fmt_ci(c["ci_low"], c["ci_high"]), c["predicted"], c["ratio"], fmt_ci(*c["ratio_ci"]),
                    c["predicted_ratio"], verdict, c["predicted_ratio_true_moments"]])
    return headers, out


def is_table(alloc: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """(headers, rows) of the prompt importance-sampling rows (docs/lm-mse.md R11): the law the guard chose (predicted
    moments, docs/math.md M78; ``-``: the true moments, unguarded), realised total MSE and the paired ratio to uniform
    with 95% intervals, next to the predicted ratio and, with predicted moments, the trainer's certificate of the law
    (docs/math.md M89) and whether it holds the realised ratio."""
    headers = ["G", "moments", "rule", "law (guard)", "G_x range", "expected N", "max weight", "MSE", "95% CI",
               "uniform MSE", "ratio", "95% CI", "predicted ratio", "inside", "pred. ratio, true moments",
               "certificate", "holds ratio"]
    out = [[r["G"], r["moments"], r["rule"], r.get("guard_choice") or "-", f"{r['sizes']['min']}-{r['sizes']['max']}",
            r["expected_samples"],
            r["weight_max"], r["mse"], fmt_ci(r["ci_low"], r["ci_high"]), r["uniform_mse"], r["ratio"],
            fmt_ci(*r["ratio_ci"]), r["predicted_ratio"],
            "-" if r["predicted_inside"] is None else ("yes" if r["predicted_inside"] else "no"),
            r["predicted_ratio_true_moments"],
            fmt_ci(*r["certificate"]) if r.get("certificate") else "-",
            "-" if r.get("certificate_covers") is None else ("yes" if r["certificate_covers"] else "no")]
           for r in alloc.get("is_rows") or []]
    return headers, out


def _allocation_plot(path, alloc: dict[str, Any], title: str) -> None:
    """Realised ratio rule / uniform with its 95% interval (points with bars) and the predicted ratio (crosses);
    left: total MSE, right: within the drawn prompts."""
    import matplotlib.pyplot as plt

    rows = [r for r in alloc["rows"] if r["rule"] != "uniform" and r["ratio"] is not None]
    order = ("vip", "knapsack", "ustat")
    keys = sorted({(r["G"], r["rule"]) for r in rows}, key=lambda k: (k[0], order.index(k[1])))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.4), dpi=110, sharey=False)
    try:
        for ax, part in zip(axes, ("total", "within")):
            for j, (moments, color) in enumerate((("true", "C2"), ("predicted", "C0"))):
                sel = {(r["G"], r["rule"]): (r if part == "total" else r["within_prompts"]) for r in rows
                       if r["moments"] == moments}
                xs = [i + (j - 0.5) * 0.25 for i, k in enumerate(keys) if k in sel]
                cs = [sel[k] for k in keys if k in sel]
                if not cs:
                    continue
                y = [c["ratio"] for c in cs]
                err = [[c["ratio"] - c["ratio_ci"][0] for c in cs], [c["ratio_ci"][1] - c["ratio"] for c in cs]]
                ax.errorbar(xs, y, yerr=err, fmt="o", color=color, capsize=3,
                            label=f"realised, {moments} moments (95% CI)")
                ax.plot(xs, [c["predicted_ratio"] for c in cs], "x", color=color, markersize=9,
                        label=f"predicted, {moments} moments")
            ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
            ax.set_xticks(range(len(keys)))
            ax.set_xticklabels([f"{rule}\nG={G}" for G, rule in keys])
            ax.set_ylabel("MSE ratio rule / uniform (equal samples)")
            ax.set_title("total E||ghat - g||^2" if part == "total" else "within the drawn prompts (no c1/B)")
            ax.grid(True, axis="y", alpha=0.3)
            if rows:
                ax.legend(fontsize=7)
        fig.suptitle(title)
        fig.tight_layout()
        atomic_save(path, lambda f: fig.savefig(f, format=Path(path).suffix[1:]))  # a full disk names the file
    finally:
        plt.close(fig)


def _verdict(verdicts: list[dict[str, Any]], key: str, what: str) -> str:
    """One line: per moment source, how many predicted ratios lie inside the realised ratio's interval."""
    inside = [v for v in verdicts if v[key] is not None]
    if not inside:
        return f"**{what}: no rule differed from uniform G in any repetition, nothing to check.**"
    parts = []
    for m in ("true", "predicted"):
        vs = [v for v in inside if v["moments"] == m]
        if vs:
            parts.append(f"{m} moments {sum(v[key] for v in vs)} of {len(vs)}")
    miss = ", ".join(f"{v['rule']} ({v['moments']}, G={v['G']})" for v in inside if not v[key]) or "none"
    return f"**{what}: predicted ratio inside the realised ratio's 95% interval: {'; '.join(parts)}** (misses: {miss})."


def skipped_note(alloc: dict[str, Any]) -> str:
    """The sentence on the G of ``--groups`` left out of the allocation study (G >= g_max: no room), or ""."""
    skipped = alloc.get("skipped_groups") or []
    if not skipped:
        return ""
    return (f"Skipped {fmt_values(skipped)} of --groups: at G >= g_max = {alloc['g_max']} the sum G_b = N = B G with "
            f"every G_b <= g_max leaves each prompt exactly G, so no rule can differ from uniform (raise --g-max "
            f"above G to study it).")


def allocation_section(run: RunDir, results: dict[str, Any]) -> list[str]:
    """report.md lines of the allocation study, and ``allocation.png``."""
    alloc = results["allocation"]
    _allocation_plot(run.file("allocation.png"), alloc, f"{results['policy']['model']}: realised vs predicted ratio")
    hist, pq = alloc["history"], alloc["prediction_quality"] or {}
    checks = "; ".join(f"G={c['G']}: {fmt(c['grpo_first_group_mse'])}" for c in alloc["uniform_checks"])
    return [
        "## Per-prompt group sizes at equal samples (docs/lm-mse.md section 9, R8-R10)", "",
        f"Budget N = B x G samples per minibatch; rules choose {alloc['g_min']} <= G_b <= {alloc['g_max']} and read "
        f"the first G_b samples of the same blocks of {alloc['block']} (common random numbers). Moments: `true` = "
        "per-prompt p, c2(x), c3(x) from the reference samples (the ceiling); `predicted` = a history of "
        f"{hist['visits']} visits x {hist['group']} samples per prompt ({hist['samples']} samples, {hist['source']}) "
        "through the one fitted predictor (docs/math.md M46-M49; `ustat` with its safe rule, M50). MSE corrected "
        "for the reference error as above; "
        "ratio = paired ratio to uniform over the repetitions; predicted = c1/B + (1/B^2) sum_b f_b(G_b) (M33) with "
        "the rule's own moments and c1 of the reference pool (within the drawn prompts: without c1/B); the last "
        "column prices the same sizes with the `true` moments (for `predicted` rows: is a miss the history's or "
        "the formula's?). Rules that chose uniform G in every repetition get no verdict."
        + (f" {skipped_note(alloc)}" if skipped_note(alloc) else ""), "",
        _verdict(alloc["verdicts"], "inside", "Total MSE"), "",
        _verdict(alloc["verdicts"], "inside_within_prompts", "Within the drawn prompts"), "",
        image("allocation.png", "realised vs predicted MSE ratio per rule"), "",
        "Total MSE E||ghat - g||^2:", "", md_table(*allocation_table(alloc)), "",
        "Within the drawn prompts, E||ghat - (1/B) sum_b g(x_b)||^2 (the part an allocation can change; c1/B is the "
        "same for every rule):", "", md_table(*allocation_table(alloc, "within")), "",
        f"The uniform rows are the grpo estimator on the first G samples of each block (checked: {checks}); the "
        "estimator table's grpo row at the same G averages all floor(block/G) groups of the block (same "
        "expectation, smaller spread).",
        *([] if not alloc.get("is_rows") else [
            "Prompt importance sampling (`uniform-is`, `ustat-is`; docs/lm-mse.md R11, docs/math.md M52-M57): the law "
            "q over the pool from the rule's moments, B draws from it at N = B G samples in expectation. Its MSE is "
            "estimated on the same uniformly drawn blocks, each weighted by P q(x) (the draws of a step are iid, so "
            "this is the MSE of B draws from q), against uniform's single-draw error on the same blocks (the ratio "
            "is paired; `uniform MSE` is that denominator, which has the expectation of the uniform row above). "
            "The prediction is (S(q, G) - ||g||^2) / (S_u - ||g||^2) (M53) with ||g||^2 = ||g_ref||^2 - ref_err, at "
            "the moments the law was fitted with. With the predicted moments the law is the trainer's: the rule's "
            "law from the history's posterior, judged on held-out visits and replaced when they refute it "
            "(`law (guard)`: the candidate used, `own` = the history's own per-prompt estimates, docs/math.md M78).",
            "", md_table(*is_table(alloc)), ""]),
        f"History predictions against the reference moments: Spearman of f_x(4) {fmt(pq.get('spearman_f4'))}, "
        f"median |log(predicted / reference)| {fmt(pq.get('median_abs_log_ratio_f4'))}; "
        f"{100 * alloc['true_moments']['frac_p_0_or_1']:.0f}% of the prompts have a reference p of exactly 0 or 1.",
        "",
    ]
