"""Report of ``ugrpo plan`` (:mod:`ugrpo.experiments.plan`, :mod:`ugrpo.experiments.lm_plan`; paper Thm 7):
results.json, ``plan.png`` and report.md, with a cost section for a language-model pilot. Reads the results dict
only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ugrpo.runs import RunDir


def reading(results: dict[str, Any]) -> list[str]:
    """Plain-language sentences about a plan result."""
    from ugrpo.report.markdown import fmt

    N, out = results["budget"], []
    lo, hi = results["g_star_ci"]
    G = results["g_star"]
    if G is not None:
        out.append(f"For a budget of N={N} samples per step the planner recommends G={G} (B={N // G}); "
                   f"continuous optimum 1 + sqrt(c3/c1) = {fmt(results['g_star_continuous'])}, 95% bootstrap "
                   f"interval of G* [{fmt(lo)}, {fmt(hi) if hi is not None else 'unbounded'}].")
    else:
        out.append(f"For a budget of N={N} the pilot does not pin G* down: {results.get('message')}.")
    cands = [c for c in results.get("candidates", []) if c.get("predicted_mse") is not None]
    if G is not None and len(cands) > 1:
        best = min(c["predicted_mse"] for c in cands)
        near = [c["G"] for c in cands if c["predicted_mse"] <= 1.05 * best]
        out.append(f"How much the choice matters: the predicted bound is within 5% of its minimum for G in {near}, "
                   f"and {max(c['predicted_mse'] for c in cands) / best:.2f}x the minimum at the worst candidate.")
    ex = results.get("exact")
    if ex:
        parts = []
        for k in ("c1", "c2", "c3"):
            e = results[k]
            inside = e["ci_low"] is not None and e["ci_low"] <= ex[k] <= e["ci_high"]
            parts.append(f"{k} = {fmt(e['estimate'])} vs exact {fmt(ex[k])} ({'inside' if inside else 'outside'} "
                         "the 95% interval)")
        out.append("Pilot estimates vs the exact constants at theta0: " + "; ".join(parts) + ".")
        out.append(f"With the exact constants the planner gives G* = {ex['g_star']} "
                   f"(continuous {fmt(ex['g_star_continuous'])}).")
    return out


def write_plan_outputs(run: RunDir, results: dict[str, Any], argv: Sequence[str] | None = None) -> None:
    """results.json, ``plan.png`` (predicted bound vs G with bootstrap band, G* marked), report.md."""
    from ugrpo.report.markdown import fmt_ci, header, image, md_table
    from ugrpo.report.plots import Marker, Series, line_plot

    run.write_results(results)
    c = results["candidates"]
    xs = [r["G"] for r in c]
    series = [Series("predicted bound (pilot)", xs, [r["predicted_mse"] for r in c],
                     [r.get("band_low") for r in c], [r.get("band_high") for r in c], color="C0")]
    lo, hi = results["g_star_ci"]
    markers = []
    if results["g_star"] is not None:
        markers.append(Marker(results["g_star"], f"G* = {results['g_star']} (pilot)", lo,
                              hi if hi is not None else max(xs), color="C0"))
    ex = results.get("exact")
    exact_at = {r["G"]: r["mse"] for r in (ex or {}).get("curve") or []}
    if ex and ex.get("curve"):
        cur = sorted(ex["curve"], key=lambda r: r["G"])
        series.append(Series("exact bound", [r["G"] for r in cur], [r["mse"] for r in cur], dashed=True, color="C3"))
        markers.append(Marker(ex["g_star"], f"G* = {ex['g_star']} (exact)", color="C3"))
    line_plot(run.file("plan.png"), series, xlabel="group size G", ylabel="predicted MSE  c1 G/N + c2/N + c3/(N(G-1))",
              title=f"Group-size plan for N = {results['budget']}", logx=True, logy=True, markers=markers, xticks=xs)
    rows = [[k, results[k]["estimate"], fmt_ci(results[k]["ci_low"], results[k]["ci_high"]),
             ex[k] if ex else None] for k in ("c1", "c2", "c3")]
    pil = results["pilot"]
    md = [
        header("ugrpo plan: group size for a fixed budget (paper Thm 7, eq. (12))", argv),
        f"Pilot: B0 = {pil['B0']} prompts x G0 = {pil['G0']} samples ({pil['samples']} samples, "
        f"{100 * pil['frac_zero_std']:.0f}% of prompts with all-equal rewards); {results['n_boot']} bootstrap "
        f"replicates over prompts (seed {results['seed']}). Budget N = {results['budget']}.",
        "",
        "## Reading",
        "",
        *[f"- {s}" for s in reading(results)],
        "",
        image("plan.png", "predicted MSE vs G"),
        "",
        "## Constants",
        "",
        md_table(["constant", "pilot estimate", "95% CI", "exact"], rows),
        "",
        "## Candidates",
        "",
        md_table(["G", "B", "predicted MSE", "bootstrap 95% band", "exact"],
                 [[r["G"], r["B"], r["predicted_mse"], fmt_ci(r.get("band_low"), r.get("band_high")),
                   exact_at.get(r["G"])] for r in c]),
        "",
    ]
    run.write_report("\n".join(md))


def write_lm_plan_outputs(run: RunDir, results: dict[str, Any], argv: Sequence[str] | None = None) -> None:
    """The synthetic planner's results.json, plan.png and report.md, plus a cost section."""
    write_plan_outputs(run, results, argv)
    pc, sc = results["pilot_cost"], results["step_cost"]
    lines = ["## Cost", "",
             f"Pilot: {pc['samples']} samples in {pc['seconds']:.1f} s (sampling {pc['seconds_sampling']:.1f}, scoring "
             f"{pc['seconds_scoring']:.1f}, sketch {pc['seconds_sketch']:.1f}); "
             f"{100 * results['pilot_fraction_of_100_steps']:.1f}% of the samples of 100 training steps at N = "
             f"{results['budget']}.",
             f"One training step at N = {results['budget']}: about {sc['seconds']:.2f} s ({sc['how']}).", ""]
    if "current_group" in results:
        cg = results["current_group"]
        lines.insert(0, f"- Group size in use G = {cg['G']}: predicted bound {cg['ratio_to_best']:.3f}x the best "
                        "candidate's.\n")
    text = run.file("report.md").read_text()
    run.write_report(text.rstrip() + "\n\n" + "\n".join(lines))
