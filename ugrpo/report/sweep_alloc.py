"""Report of ``ugrpo sweep --allocation``'s rules axis (allocation rules against uniform at equal samples), called
by :func:`ugrpo.report.sweep.write_report`:

- an exact env (results with ``versus_uniform``): its whole report, :func:`write_rules_report`:
  ``allocation_sweep.png`` (gap vs samples spent per rule) and each rule against uniform, paired by seed;
- a language model (``--config --allocation``): the allocation section of the sweep's report,
  :func:`allocation_markdown`: held-out accuracy against samples spent per rule (``allocation.png`` /
  ``allocation_pass1.png``), the samples each rule needs to reach uniform's final accuracy, and the verdicts
  (:mod:`ugrpo.experiments.sweep.lm_alloc`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ugrpo.report.markdown import fmt, fmt_ci, header, image, md_table
from ugrpo.report.plots import Panel, Series, line_plot, panel_plot
from ugrpo.runs import RunDir

__all__ = ["write_rules_report", "rules_reading", "comparison_table", "allocation_reading", "allocation_markdown",
           "ALLOCATION_PLOTS"]

ALLOCATION_PLOTS = {"eval_accuracy": "allocation.png", "eval_pass1": "allocation_pass1.png"}
"""a language-model sweep's allocation plot per held-out metric"""


# ----------------------------------------------------------------------------------------------- exact env, rules axis


def rules_reading(results: dict[str, Any]) -> list[str]:
    """The rules axis: one plain sentence per rule against uniform at the last checkpoint."""
    out = []
    for v in results["versus_uniform"]:
        s = (f"`{v['rule']}` at {v['checkpoint']} steps: mean gap {fmt(v['gap'])} vs uniform {fmt(v['gap_uniform'])} "
             f"(ratio {fmt(v['ratio'], 3)}): {v['verdict']}")
        if v["diff_ci_low"] is not None:
            s += f"; difference {fmt(v['diff'])}, 95% interval {fmt_ci(v['diff_ci_low'], v['diff_ci_high'])}"
        need, need_u = v["samples_to_uniform_final"], v.get("uniform_samples_to_reach")
        if need is None:
            s += ". It does not reach uniform's final mean gap within the run."
        elif v["samples_ratio"] is None:
            s += f". It reaches uniform's final mean gap after {need:.0f} samples; uniform's own curve gives no ratio."
        else:
            lo, hi = v.get("samples_ratio_ci_low"), v.get("samples_ratio_ci_high")
            ci = ("" if lo is None and hi is None else
                  f", 95% paired bootstrap interval over seeds {fmt_ci(lo, hi)}")
            s += (f". Samples to reach uniform's final mean gap: {need:.0f} against uniform's own {need_u:.0f} "
                  f"(ratio {v['samples_ratio']:.2f}x{ci}; first crossings of the mean curves, interpolated on the "
                  f"checkpoint grid).")
        out.append(s)
    return out


def write_rules_report(run: RunDir, results: dict[str, Any], argv: Sequence[str] | None) -> Path:
    """results.json, ``allocation_sweep.png`` (gap vs samples spent per rule) and report.md."""
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
           "the run's own history (the one predictor's posterior of each prompt's moments; docs/math.md M46-M49, "
           "M85-M86)")
    md = [
        header("ugrpo sweep --allocation: gap vs samples spent per allocation rule", argv),
        f"Env `{cfg['env']}`; Algorithm 1 (LOO baseline, weights 1/B per prompt) with N = {cfg['budget']} samples "
        f"and B = {results['B']} prompts per step for every rule, {cfg['steps']} steps, lr {cfg['lr']:g} "
        f"({cfg['lr_schedule']}), {cfg['seeds']} seeds per rule. `uniform` gives every prompt "
        f"G = {results['G_uniform']}; the other rules choose {cfg['g_min']} <= G_b <= {cfg['g_max']} from {who}. "
        "Gap = exact J* - J(theta)" + ("" if results["j_star_exact"] else " (J* found numerically)") +
        "; mean with a Student-t 95% interval over seeds, clipped at 0; the difference to uniform is per seed (the "
        "runs are paired by seed) with a paired Student-t 95% interval, and the verdict comes from it: "
        "\"too small to decide\" when it contains 0.",
        "",
        "## Reading",
        "",
        *[f"- {s}" for s in rules_reading(results)],
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
    return run.write_report("\n".join(md))


# ------------------------------------------------------------------------------------ language model, allocation rules


def _ratio_text(c: dict[str, Any]) -> str:
    if c["rule"] == "uniform" and c["ratio"] is not None:
        return "1x (reference)"
    lo, hi = c["ratio_ci_low"], c["ratio_ci_high"]
    ci = ("no interval" if lo is None and hi is None else
          f"[{fmt(lo, 3)}, {'unbounded' if hi is None else fmt(hi, 3)}]")
    if c["samples_to_reach"] is None:
        return "not reached" + ("" if lo is None else f" (95% CI {ci})")
    if c["ratio"] is None:
        return "-"
    return f"{c['ratio']:.2f}x {ci}"


def comparison_table(entry: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """Per rule: final mean with its 95% interval, samples to reach uniform's final mean, the ratio with its
    bootstrap interval, and the verdicts."""
    rows = []
    for c in entry["comparison"]:
        need = "not reached" if c["samples_to_reach"] is None else f"{c['samples_to_reach']:.0f}"
        rows.append([c["rule"], f"{c['final']:.3f}", "-" if c["final_ci_low"] is None else
                     fmt_ci(c["final_ci_low"], c["final_ci_high"], 3), f"{c['samples_final']:.0f}", need,
                     _ratio_text(c), c.get("final_verdict", "-"), c.get("samples_verdict", "-"),
                     c.get("goal_verdict", "-")])
    return ["rule", f"final {entry['metric']}", "95% CI", "samples spent", "samples to reach uniform's final",
            "ratio to uniform [95% CI]", "final vs uniform", "samples vs uniform", "goal (0.6x; IS rules 0.7x)"], rows


def allocation_reading(alloc: dict[str, Any]) -> list[str]:
    """Plain sentences: the target, each rule's ratio and verdict, and where the samples axis came from."""
    out = []
    for e in alloc["cells"]:
        if e["metric"] not in ("eval_accuracy", "eval_pass1") or not e["comparison"]:
            continue
        u = next(c for c in e["comparison"] if c["rule"] == "uniform")
        out.append(f"N={e['budget']}, G={e['G']}: uniform's final mean {e['metric']} is {u['target']:.3f} after "
                   f"{u['samples_final']:.0f} samples; uniform itself first reaches it at "
                   f"{u['uniform_samples_to_reach']:.0f} samples (the ratio's denominator).")
        for c in e["comparison"]:
            if c["rule"] == "uniform":
                continue
            diff = ("" if c.get("final_diff") is None else
                    f", paired difference to uniform {c['final_diff']:+.3f} "
                    f"[{fmt(c['final_diff_ci_low'], 3)}, {fmt(c['final_diff_ci_high'], 3)}]")
            out.append(f"`{c['rule']}`: samples to reach it / uniform's: {_ratio_text(c)}; final {e['metric']} "
                       f"{c['final']:.3f}{diff} ({c['final_verdict']}); {c['samples_verdict']}; goal <= "
                       f"{c.get('goal_ratio', alloc['goal_ratio']):g}x: {c['goal_verdict']}.")
    out.append(f"Samples spent: {alloc['samples']}.")
    return out


def _allocation_plot(run: RunDir, alloc: dict[str, Any], metric: str) -> str | None:
    panels = []
    for e in (e for e in alloc["cells"] if e["metric"] == metric):
        series = []
        for i, (rule, cv) in enumerate(e["curves"].items()):
            series.append(Series(rule, [p["samples"] for p in cv], [p["mean"] for p in cv], [p["ci_low"] for p in cv],
                                 [p["ci_high"] for p in cv], color=f"C{i % 10}"))
        if e["comparison"]:
            t = e["comparison"][0]["target"]
            xs = [p["samples"] for cv in e["curves"].values() for p in cv]
            series.append(Series(f"uniform's final mean ({t:.3f})", [min(xs), max(xs)], [t, t], dashed=True,
                                 color="black"))
        panels.append(Panel(f"N = {e['budget']}, G = {e['G']}", series))
    if not panels:
        return None
    what = "mean over seeds, 95% t-interval" + (" cut to [0, 1]" if "cut" in alloc["interval"] else "")
    path = run.file(ALLOCATION_PLOTS[metric])
    if len(panels) == 1:  # one (N, G): a full-width plot
        line_plot(path, panels[0].series, xlabel="policy samples spent", ylabel=f"held-out {metric}",
                  title=f"{panels[0].title}: {what}")
    else:
        panel_plot(path, panels, xlabel="policy samples spent", ylabel=f"held-out {metric}", suptitle=what)
    return ALLOCATION_PLOTS[metric]


def allocation_markdown(run: RunDir, results: dict[str, Any]) -> list[str]:
    """The report's allocation section (writes its plots); [] when the sweep has no allocation axis."""
    alloc = results.get("allocation")
    if not alloc:
        return []
    md = ["## Allocation rules: held-out accuracy against samples spent", "",
          f"Rules {', '.join(alloc['rules'])}; every rule trains with the same N samples per step (dynamic: N plus its "
          f"resampling rounds, counted) and the same B = N / G prompts. Curves: {alloc['interval']} at each "
          "evaluation, placed at the seeds' mean samples spent. Samples to reach: " + alloc["reach"] + "; 'too small "
          "to decide' when the intervals overlap or contain the bound.", "",
          *[f"- {s}" for s in allocation_reading(alloc)], ""]
    if alloc["fallback_runs"]:
        md += [f"Runs without samples_cum (samples = step x N): {', '.join(alloc['fallback_runs'])}.", ""]
    for metric in ALLOCATION_PLOTS:
        path = _allocation_plot(run, alloc, metric)
        if path is None:
            continue
        md += [image(path, f"{metric} vs samples spent"), ""]
        for e in (e for e in alloc["cells"] if e["metric"] == metric and e["comparison"]):
            md += [f"{metric}, N={e['budget']}, G={e['G']}:", "", md_table(*comparison_table(e)), ""]
    return md
