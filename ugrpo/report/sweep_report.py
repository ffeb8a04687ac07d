"""Report of ``ugrpo sweep --env`` (:mod:`ugrpo.experiments.sweep`): results.json, ``sweep.png`` (paper Fig. 5
style) and report.md. Reads the results dict only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ugrpo.runs import RunDir


def reading(results: dict[str, Any]) -> list[str]:
    """Plain-language sentences about a sweep result."""
    from ugrpo.report.markdown import fmt_values

    out = []
    last = max(r["checkpoint"] for r in results["rows"])
    pl = results.get("planner") or {}
    for b in results["best_G"]:
        if b["checkpoint"] != last:
            continue
        N = b["budget"]
        cell = [r for r in results["rows"] if r["budget"] == N and r["checkpoint"] == last]
        best = min(cell, key=lambda r: r["gap_mean"])
        overlap = [r["G"] for r in cell if r["G"] != best["G"] and r["ci_low"] is not None
                   and best["ci_high"] is not None and r["ci_low"] <= best["ci_high"]]
        s = f"Budget N={N}, step {last}: the smallest mean gap is at G={b['G']} ({best['gap_mean']:.4g})"
        if best["ci_high"] is None:
            s += "; with a single seed there is no interval, so this ordering is not evidence of anything."
        elif overlap:
            s += (f"; {fmt_values(overlap)} have overlapping 95% intervals, so they are not distinguishable with "
                  f"{best['seeds']} seeds.")
        else:
            s += "; its 95% interval does not overlap any other G's."
        out.append(s)
    for p in pl.get("per_budget", []):
        out.append(f"Planner (Theorem 7, exact c1, c2, c3 at theta0, among the swept G), N={p['budget']}: "
                   f"G* = {p['g_star']} "
                   f"(continuous {pl.get('g_star_continuous', float('nan')):.3g}).")
    return out


def write_sweep_outputs(run: RunDir, results: dict[str, Any], argv: Sequence[str] | None = None) -> None:
    """results.json, ``sweep.png`` (Fig. 5: gap vs G per checkpoint, one panel per budget), report.md."""
    from ugrpo.report.markdown import header, image, md_table
    from ugrpo.report.plots import Marker, Panel, Series, panel_plot

    run.write_results(results)
    rows = results["rows"]
    budgets = sorted({r["budget"] for r in rows})
    cps = sorted({r["checkpoint"] for r in rows})
    groups = sorted({r["G"] for r in rows})
    star = {p["budget"]: p["g_star"] for p in (results.get("planner") or {}).get("per_budget", [])}
    panels = []
    for N in budgets:
        series = []
        for i, c in enumerate(cps):
            rs = sorted((r for r in rows if r["budget"] == N and r["checkpoint"] == c), key=lambda r: r["G"])
            series.append(Series(f"step {c}", [r["G"] for r in rs], [r["gap_mean"] for r in rs],
                                 [r["ci_low"] for r in rs], [r["ci_high"] for r in rs], color=f"C{i}"))
        markers = [Marker(star[N], f"planner G*={star[N]}")] if star.get(N) else []
        panels.append(Panel(f"N = {N}", series, markers))
    panel_plot(run.file("sweep.png"), panels, xlabel="group size G", ylabel="suboptimality gap J* - J(theta)",
               suptitle="Fixed-budget sweep (Algorithm 1), mean and 95% CI over seeds", logx=True, logy=True,
               xticks=groups)
    cfg = results["config"]
    md = [
        header("ugrpo sweep: suboptimality gap vs group size at a fixed budget (paper Fig. 5)", argv),
        f"Env `{cfg['env']}`; Algorithm 1 with baseline `{cfg['baseline']}`, {cfg['steps']} steps, "
        f"lr {', '.join(f'{v:g} (N={n})' for n, v in zip(cfg['budgets'], cfg['lr']))} ({cfg['lr_schedule']}), "
        f"{cfg['seeds']} seeds per (N, G); "
        "gap = exact J* - J(theta) at each checkpoint, mean with 95% interval over seeds.",
        "",
        "## Reading",
        "",
        *[f"- {s}" for s in reading(results)],
        "",
        image("sweep.png", "gap vs G"),
        "",
        "## Empirical best G",
        "",
        md_table(["budget N", "checkpoint", "best G", "mean gap"],
                 [[b["budget"], b["checkpoint"], b["G"], b["gap_mean"]] for b in results["best_G"]]),
        "",
        "## Table",
        "",
        md_table(["N", "G", "B", "checkpoint", "mean gap", "95% CI", "seeds"],
                 [[r["budget"], r["G"], r["B"], r["checkpoint"], r["gap_mean"],
                   "-" if r["ci_low"] is None else f"[{r['ci_low']:.4g}, {r['ci_high']:.4g}]", r["seeds"]]
                  for r in rows]),
        "",
    ]
    run.write_report("\n".join(md))
