"""Report of ``ugrpo sweep --config`` (:mod:`ugrpo.experiments.lm_sweep`): ``results.json``, ``sweep.png`` /
``sweep_pass1.png`` (paper Fig. 5: held-out metric vs G, one line per checkpoint, the planner's G* marked) and
``report.md`` with a plain-language reading, the paper's Table 2 (budget x G, best per row in bold) and the
empirical best G per checkpoint with the G that cannot be told apart from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ugrpo.report.markdown import count, fmt_ci, fmt_values, header, image, md_table
from ugrpo.report.plots import Marker, Panel, Series, panel_plot
from ugrpo.runs import RunDir

__all__ = ["reading", "table2", "best_g_table", "write_lm_sweep_outputs", "uniform_rows"]


def uniform_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of the G comparison (Table 2, best G, Fig. 5): all of them, or with an allocation axis the uniform
    rule's (another rule's G only sets its B = N / G prompts per step)."""
    return [r for r in rows if r.get("rule", "uniform") == "uniform"]


def best_g_table(results: dict[str, Any], metric: str) -> tuple[list[str], list[list[Any]]]:
    """Per (budget, checkpoint): the empirical best G with its mean and 95% interval, the G that cannot be told
    apart from it, and the planner's G* among the swept G (the same at every N: eq. (11) scales with 1/N)."""
    pl = results.get("planner") or {}
    star = pl.get("g_star_swept")
    rows = []
    for b in results["best_G"]:
        if b["metric"] != metric or b["checkpoint"] == 0:  # step 0: every run is the initial model
            continue
        same = ("-" if b["overlapping"] is None else ", ".join(map(str, b["overlapping"])) or "none")
        rows.append([b["budget"], b["checkpoint"], b["G"], b["mean"],
                     "-" if b["ci_low"] is None else fmt_ci(b["ci_low"], b["ci_high"]), same,
                     "-" if not pl else (star if star is not None else f"{pl.get('g_star') or 'none'} (c1 ~ 0)")])
    return ["budget N", "step", "best G", f"mean {metric}", "95% CI", "G not distinguishable (overlapping CI)",
            "planner G*"], rows


def reading(results: dict[str, Any]) -> list[str]:
    """Plain-language sentences: best G at the last checkpoint per budget and metric, and the planner."""
    out = []
    last = max(results["checkpoints"])
    for b in results["best_G"]:
        if b["checkpoint"] != last:
            continue
        s = f"N={b['budget']}, step {last}, {b['metric']}: the largest mean is at G={b['G']} ({b['mean']:.3f})"
        if b["tied"]:
            s += f", tied with {fmt_values(b['tied'])}"
        if b["overlapping"] is None:
            s += "; with a single seed there is no interval, so this ordering is not evidence of anything."
        else:
            s += (f"; {fmt_values(b['overlapping'])} have overlapping 95% intervals, not distinguishable with "
                  f"{b['seeds']} seeds." if b["overlapping"] else "; its 95% interval does not overlap any other G's.")
        out.append(s)
    pl = results.get("planner")
    if pl:
        out.append(f"Planner (Theorem 7, sketched pilot B0={pl['pilot'][0]} x G0={pl['pilot'][1]} at the initial "
                   f"model): {pl['message']}; among the swept G: {swept_g_star(pl)}.")
    return out


def _plot(run: RunDir, results: dict[str, Any], metric: str, path: str) -> None:
    rows = [r for r in uniform_rows(results["rows"]) if r["metric"] == metric]
    pl = results.get("planner") or {}
    star = pl.get("g_star_swept") or pl.get("g_star")
    panels = []
    for N in sorted({r["budget"] for r in rows}):
        series = []
        for i, c in enumerate(results["checkpoints"]):
            rs = sorted((r for r in rows if r["budget"] == N and r["checkpoint"] == c), key=lambda r: r["G"])
            series.append(Series(f"step {c}", [r["G"] for r in rs], [r["mean"] for r in rs],
                                 [r["ci_low"] for r in rs], [r["ci_high"] for r in rs], color=f"C{i % 10}"))
        ci = pl.get("g_star_ci") or [None, None]
        mark = Marker(star, f"planner G*={star}" + (f", 95% CI [{ci[0]}, {ci[1]}]" if ci[0] is not None else ""),
                      low=ci[0], high=ci[1])
        panels.append(Panel(f"N = {N}", series, [mark] if star else []))
    panel_plot(run.file(path), panels, xlabel="group size G", ylabel=f"held-out {metric}", logx=True,
               suptitle=f"LM sweep: mean, {results.get('interval', '95% t-interval over seeds')}",
               xticks=results["config"]["groups"])


def table2(results: dict[str, Any], metric: str, *, intervals: bool = False) -> tuple[list[str], list[list[Any]]]:
    """Table 2 of the paper: budget x G at the last checkpoint, the best per row marked with ** (with
    ``intervals``: each cell also shows its 95% t-interval over seeds)."""
    last, groups = max(results["checkpoints"]), results["config"]["groups"]
    rows = []
    for N in results["config"]["budgets"]:
        cell = {r["G"]: r for r in uniform_rows(results["rows"])
                if (r["budget"], r["checkpoint"], r["metric"]) == (N, last, metric)}
        if not cell:
            continue
        top = max(r["mean"] for r in cell.values())

        def show(r, top=top):
            v = f"**{r['mean']:.3f}**" if r["mean"] == top else f"{r['mean']:.3f}"
            return v + (f" [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" if intervals and r["ci_low"] is not None else "")
        rows.append([N] + [show(cell[G]) if G in cell else "-" for G in groups])
    return ["budget N"] + [f"G={G}" for G in groups], rows


def write_lm_sweep_outputs(run: RunDir, results: dict[str, Any], argv: Sequence[str] | None = None) -> None:
    """results.json, ``sweep.png`` / ``sweep_pass1.png`` (Fig. 5) and report.md with Table 2."""
    from ugrpo.report.lm_alloc_report import allocation_markdown

    run.write_results(results)
    rules = results["config"].get("rules") or []
    show_g = not rules or len(results["config"]["groups"]) > 1  # one G and a rule axis: no G comparison
    urows = uniform_rows(results["rows"]) if show_g else []
    metrics = [m for m in METRICS if any(r["metric"] == m for r in urows)]
    plots = {m: ("sweep.png" if m == "eval_accuracy" else "sweep_pass1.png") for m in metrics}
    for m, p in plots.items():
        _plot(run, results, m, p)
    cfg = results["config"]
    title = ("ugrpo sweep --config --allocation: held-out accuracy vs samples spent per allocation rule" if rules else
             "ugrpo sweep --config: held-out accuracy vs group size at a fixed budget (paper Fig. 5, Table 2)")
    md = [header(title, argv),
          f"Config `{cfg['config']}`, {results['steps']} steps per run, {count(cfg['seeds'], 'seed')} per "
          f"{'(N, G, rule)' if rules else '(N, G)'}, groups "
          f"{fmt_values(cfg['groups'], prefix='')}; checkpoints at "
          f"{fmt_values(results['checkpoints'], prefix='steps ')}; mean over seeds with a "
          + results.get("interval", "95% t-interval over seeds")
          + (" (one seed: no interval)." if cfg["seeds"] == 1 else "."), ""]
    if show_g:
        md += ["## Reading", "", *[f"- {s}" for s in reading(results)], ""]
    md += allocation_markdown(run, results)
    if rules and show_g:
        md += ["The G comparison below uses the uniform rule's runs only.", ""]
    for m in metrics:
        h, rows = table2(results, m)
        md += [f"## Table 2 ({m} at step {max(results['checkpoints'])}, best per budget in bold)", "",
               md_table(h, rows), "", image(plots[m], f"{m} vs G"), ""]
    if metrics:
        md += ["## Empirical best G per checkpoint", ""]
    for m in metrics:
        md += [f"{m}:", "", md_table(*best_g_table(results, m)), ""]
    rule_col = ["rule"] if rules else []
    md += ["## All cells", "",
           md_table(["N", "G", "B", *rule_col, "checkpoint", "metric", "mean", "95% CI", "seeds"],
                    [[r["budget"], r["G"], r["B"], *([r.get("rule")] if rules else []), r["checkpoint"], r["metric"],
                      r["mean"], "-" if r["ci_low"] is None else fmt_ci(r["ci_low"], r["ci_high"]), r["seeds"]]
                     for r in results["rows"]]), ""]
    run.write_report("\n".join(md))


METRICS = ("eval_accuracy", "eval_pass1")
"""held-out metrics aggregated (greedy accuracy, sampled pass@1), as logged by the trainer"""


def swept_g_star(planner: dict[str, Any]) -> str:
    """The planner's G* among the swept G as text: 'G* = 4', or why there is none (c1 ~ 0 in the pilot)."""
    if planner.get("g_star_swept") is None:
        return "no G* (c1 is not distinguishable from 0 in the pilot: the bound only says larger G is not worse)"
    return f"G* = {planner['g_star_swept']}"
