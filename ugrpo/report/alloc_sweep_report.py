"""Report of ``ugrpo sweep --allocation``: results.json, allocation_sweep.png (gap vs samples spent), report.md."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ugrpo.report.markdown import fmt, fmt_ci, header, image, md_table
from ugrpo.report.plots import Series, line_plot
from ugrpo.runs import RunDir

__all__ = ["write_alloc_sweep_outputs", "reading"]


def reading(results: dict[str, Any]) -> list[str]:
    """One plain sentence per rule against uniform at the last checkpoint."""
    out = []
    for v in results["versus_uniform"]:
        s = (f"`{v['rule']}` at {v['checkpoint']} steps: mean gap {fmt(v['gap'])} vs uniform {fmt(v['gap_uniform'])} "
             f"(ratio {fmt(v['ratio'], 3)}): {v['verdict']}")
        if v["diff_ci_low"] is not None:
            s += f"; difference {fmt(v['diff'])}, 95% interval {fmt_ci(v['diff_ci_low'], v['diff_ci_high'])}"
        need = v["samples_to_uniform_final"]
        s += (f". Samples to reach uniform's final mean gap: {need:.0f} of {v['samples_uniform_final']} "
              f"({v['samples_ratio']:.2f}x, interpolated on the checkpoint grid)." if need is not None else
              ". It does not reach uniform's final mean gap within the run.")
        out.append(s)
    return out


def write_alloc_sweep_outputs(run: RunDir, results: dict[str, Any], argv: Sequence[str] | None = None) -> None:
    """Write results.json, the plot and report.md into ``run``."""
    run.write_results(results)
    rows, cfg = results["rows"], results["config"]
    series = []
    for i, rule in enumerate(cfg["rules"]):
        rs = [r for r in rows if r["rule"] == rule]
        series.append(Series(rule, [r["samples"] for r in rs], [r["gap_mean"] for r in rs],
                             [r["ci_low"] for r in rs], [r["ci_high"] for r in rs], color=f"C{i}"))
    line_plot(run.file("allocation_sweep.png"), series, xlabel="samples spent", ylabel="gap J* - J(theta)",
              title=f"{results['env_name']}: N={cfg['budget']}, B={results['B']}, mean and 95% CI over seeds",
              logy=True)
    who = ("the exact per-prompt moments at the current theta (the ceiling)" if cfg["moments"] == "exact" else
           "the run's own history (Beta posterior on p, shrunk score moments; docs/math.md M38)")
    md = [
        header("ugrpo sweep --allocation: gap vs samples spent per allocation rule", argv),
        f"Env `{cfg['env']}`; Algorithm 1 (LOO baseline, weights 1/B per prompt) with N = {cfg['budget']} samples "
        f"and B = {results['B']} prompts per step for every rule, {cfg['steps']} steps, lr {cfg['lr']:g} "
        f"({cfg['lr_schedule']}), {cfg['seeds']} seeds per rule. `uniform` gives every prompt "
        f"G = {results['G_uniform']}; the other rules choose {cfg['g_min']} <= G_b <= {cfg['g_max']} from {who}. "
        "Gap = exact J* - J(theta)" + ("" if results["j_star_exact"] else " (J* found numerically)") +
        "; mean with a Student-t 95% interval over seeds, clipped at 0; the difference to uniform has a Welch "
        "; mean with a Student-t 95% interval over seeds, clipped at 0; the difference to uniform has a Welch "
        "95% interval. \"Cannot tell\" means the two rules' intervals overlap.",
        "",
        "## Reading",
        "",
        *[f"- {s}" for s in reading(results)],
        "",
        image("allocation_sweep.png", "gap vs samples"),
        "",
        "## Table",
        "",
        md_table(["rule", "step", "samples", "mean gap", "95% CI", "seeds", "samples on all-equal groups"],
                 [[r["rule"], r["checkpoint"], r["samples"], r["gap_mean"],
                   "-" if r["ci_low"] is None else fmt_ci(r["ci_low"], r["ci_high"]), r["seeds"],
                   f"{100 * r['frac_samples_zero_std']:.1f}%"] for r in rows]),
        "",
    ]
    run.write_report("\n".join(md))
