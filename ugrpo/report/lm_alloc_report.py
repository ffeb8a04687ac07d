"""The allocation part of the ``ugrpo sweep --config --allocation`` report: held-out accuracy against samples spent
per rule (``allocation.png`` / ``allocation_pass1.png``), the samples each rule needs to reach uniform's final
accuracy, and the verdicts (:mod:`ugrpo.experiments.lm_sweep_alloc`).
"""

from __future__ import annotations

from typing import Any

from ugrpo.report.markdown import fmt, fmt_ci, image, md_table
from ugrpo.report.plots import Panel, Series, line_plot, panel_plot
from ugrpo.runs import RunDir

__all__ = ["comparison_table", "allocation_reading", "allocation_markdown", "PLOTS"]

PLOTS = {"eval_accuracy": "allocation.png", "eval_pass1": "allocation_pass1.png"}


def _ratio(c: dict[str, Any]) -> str:
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
                     fmt_ci(c["final_ci_low"], c["final_ci_high"], 3), f"{c['samples_final']:.0f}", need, _ratio(c),
                     c.get("final_verdict", "-"), c.get("samples_verdict", "-"), c.get("goal_verdict", "-")])
    return ["rule", f"final {entry['metric']}", "95% CI", "samples spent", "samples to reach uniform's final",
            "ratio to uniform [95% CI]", "final vs uniform", "samples vs uniform", "goal <= 0.6x"], rows


def allocation_reading(alloc: dict[str, Any]) -> list[str]:
    """Plain sentences: the target, each rule's ratio and verdict, and where the samples axis came from."""
    out = []
    for e in alloc["cells"]:
        if e["metric"] != "eval_accuracy" or not e["comparison"]:
            continue
        u = next(c for c in e["comparison"] if c["rule"] == "uniform")
        out.append(f"N={e['budget']}, G={e['G']}: uniform's final mean {e['metric']} is {u['target']:.3f} after "
                   f"{u['samples_final']:.0f} samples; uniform itself first reaches it at "
                   f"{u['uniform_samples_to_reach']:.0f} samples (the ratio's denominator).")
        for c in e["comparison"]:
            if c["rule"] == "uniform":
                continue
            out.append(f"`{c['rule']}`: samples to reach it / uniform's: {_ratio(c)}; final {e['metric']} "
                       f"{c['final']:.3f} ({c['final_verdict']}); {c['samples_verdict']}; goal <= "
                       f"{alloc['goal_ratio']:g}x: {c['goal_verdict']}.")
    out.append(f"Samples spent: {alloc['samples']}.")
    return out


def _plot(run: RunDir, alloc: dict[str, Any], metric: str) -> str | None:
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
    if len(panels) == 1:  # one (N, G): a full-width plot
        line_plot(run.file(PLOTS[metric]), panels[0].series, xlabel="policy samples spent",
                  ylabel=f"held-out {metric}", title=f"{panels[0].title}: {what}")
    else:
        panel_plot(run.file(PLOTS[metric]), panels, xlabel="policy samples spent", ylabel=f"held-out {metric}",
                   suptitle=what)
    return PLOTS[metric]


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
    for metric in PLOTS:
        path = _plot(run, alloc, metric)
        if path is None:
            continue
        md += [image(path, f"{metric} vs samples spent"), ""]
        for e in (e for e in alloc["cells"] if e["metric"] == metric and e["comparison"]):
            md += [f"{metric}, N={e['budget']}, G={e['G']}:", "", md_table(*comparison_table(e)), ""]
    return md
