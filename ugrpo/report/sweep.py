"""Report of ``ugrpo sweep`` (:mod:`ugrpo.experiments.sweep`): results.json, the plots and report.md, written by
:func:`write_report` from the results dict alone for every mode:

- an exact env, G axis (:class:`~ugrpo.experiments.sweep.env.SweepConfig`): ``sweep.png`` (paper Fig. 5 style: the
  gap vs G per checkpoint, one panel per budget), the empirical best G and the planner's G*;
- an exact env, rules axis (``--allocation``; results with ``versus_uniform``): the report of
  :mod:`ugrpo.report.sweep_alloc`;
- a language model (``--config``; results with ``checkpoints``): ``sweep.png`` / ``sweep_pass1.png`` (held-out
  metric vs G, one line per checkpoint, the planner's G* marked), a plain-language reading, the paper's Table 2
  (budget x G, best per row in bold) and the empirical best G per checkpoint with the G that cannot be told apart
  from it; with ``--allocation`` the allocation section of :mod:`ugrpo.report.sweep_alloc`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ugrpo.report.markdown import count, fmt_ci, fmt_values, header, image, md_table, task_text
from ugrpo.report.plots import Marker, Panel, Series, panel_plot
from ugrpo.report.sweep_alloc import allocation_markdown, write_rules_report
from ugrpo.runs import RunDir

__all__ = ["write_report", "reading", "lm_reading", "table2", "best_g_table", "uniform_rows", "swept_g_star",
           "METRICS", "scoring_errors_text"]

METRICS = ("eval_accuracy", "eval_pass1")
"""held-out metrics of a language-model sweep (greedy accuracy, sampled pass@1), as logged by the trainer"""


def write_report(run: RunDir, results: dict[str, Any], argv: Sequence[str] | None = None) -> Path:
    """results.json, the mode's plots and report.md into ``run``; returns the report's path."""
    if "versus_uniform" in results:
        return write_rules_report(run, results, argv)
    if "checkpoints" in results:
        return _write_lm(run, results, argv)
    return _write_env(run, results, argv)


# --------------------------------------------------------------------------------------------------- exact env, G axis


def reading(results: dict[str, Any]) -> list[str]:
    """Plain-language sentences about a sweep on an exact env (the G axis)."""
    out = []
    last = max(r["checkpoint"] for r in results["rows"])
    pl = results.get("planner") or {}
    for b in results["best_G"]:
        if b["checkpoint"] != last:
            continue
        N = b["budget"]
        cell = [r for r in results["rows"] if r["budget"] == N and r["checkpoint"] == last]
        best = min(cell, key=lambda r: r["gap_mean"])
        s = f"Budget N={N}, step {last}: the smallest mean gap is at G={b['G']} ({best['gap_mean']:.4g})"
        if best["ci_high"] is None:
            s += "; with a single seed there is no interval, so this ordering is not evidence of anything."
        elif "not_distinguishable" in b:  # paired by seed
            same = b["not_distinguishable"]
            s += (f"; {fmt_values(same)}: the 95% paired interval over seeds of their gap minus G={b['G']}'s contains "
                  f"0, so they are not distinguishable from it with {best['seeds']} seeds." if same else
                  f"; every other G's gap is above it (95% paired intervals over {best['seeds']} seeds).")
        else:  # a results.json written before the paired test: the marginal intervals
            overlap = [r["G"] for r in cell if r["G"] != best["G"] and r["ci_low"] is not None
                       and r["ci_low"] <= best["ci_high"]]
            s += (f"; {fmt_values(overlap)} have overlapping 95% intervals, so they are not distinguishable with "
                  f"{best['seeds']} seeds." if overlap else "; its 95% interval does not overlap any other G's.")
        out.append(s)
    for p in pl.get("per_budget", []):
        out.append(f"Planner (Theorem 7, exact c1, c2, c3 at theta0, among the swept G), N={p['budget']}: "
                   f"G* = {p['g_star']} "
                   f"(continuous {pl.get('g_star_continuous', float('nan')):.3g}).")
    return out


def _write_env(run: RunDir, results: dict[str, Any], argv: Sequence[str] | None) -> Path:
    """results.json, ``sweep.png`` (Fig. 5: gap vs G per checkpoint, one panel per budget), report.md."""
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
        "gap = exact J* - J(theta) at each checkpoint, mean with a 95% Student-t interval over seeds, its lower end "
        "cut at 0 where it would go below (a gap is >= 0).",
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
    return run.write_report("\n".join(md))


# ------------------------------------------------------------------------------------------------------ language model


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


def lm_reading(results: dict[str, Any]) -> list[str]:
    """Plain-language sentences about a language-model sweep: best G at the last checkpoint per budget and metric,
    and the planner."""
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


def _lm_plot(run: RunDir, results: dict[str, Any], metric: str, path: str) -> None:
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


def _write_lm(run: RunDir, results: dict[str, Any], argv: Sequence[str] | None) -> Path:
    """results.json, ``sweep.png`` / ``sweep_pass1.png`` (Fig. 5) and report.md with Table 2."""
    run.write_results(results)
    rules = results["config"].get("rules") or []
    show_g = not rules or len(results["config"]["groups"]) > 1  # one G and a rule axis: no G comparison
    urows = uniform_rows(results["rows"]) if show_g else []
    metrics = [m for m in METRICS if any(r["metric"] == m for r in urows)]
    plots = {m: ("sweep.png" if m == "eval_accuracy" else "sweep_pass1.png") for m in metrics}
    for m, p in plots.items():
        _lm_plot(run, results, m, p)
    cfg = results["config"]
    title = ("ugrpo sweep --config --allocation: held-out accuracy vs samples spent per allocation rule" if rules else
             "ugrpo sweep --config: held-out accuracy vs group size at a fixed budget (paper Fig. 5, Table 2)")
    md = [header(title, argv),
          f"Config `{cfg['config']}`"
          + (f", model `{results['model']}`, {task_text(results['task'])}" if "task" in results else "")
          + f", {results['steps']} steps per run, {count(cfg['seeds'], 'seed')} per "
          f"{'(N, G, rule)' if rules else '(N, G)'}, groups "
          f"{fmt_values(cfg['groups'], prefix='')}; checkpoints at "
          f"{fmt_values(results['checkpoints'], prefix='steps ')}; mean over seeds with a "
          + results.get("interval", "95% t-interval over seeds")
          + (" (one seed: no interval)." if cfg["seeds"] == 1 else "."), ""]
    if faults := scoring_errors_text(results):
        md += [f"**Warning**: {faults}.", ""]
    if show_g:
        md += ["## Reading", "", *[f"- {s}" for s in lm_reading(results)], ""]
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
    return run.write_report("\n".join(md))


def scoring_errors_text(results: dict[str, Any], runs: str = "runs") -> str | None:
    """One line when the scorer of some runs of an LM sweep failed on completions (their reward function or verifier
    raised or timed out: scored 0, counted in metrics.jsonl): how many runs, the totals by kind, where to read them
    (``runs``: the runs' folder); None when none had any. Completions without an answer are not scoring errors."""
    u = results.get("scoring_errors")
    if not u:
        return None
    names = u["runs"]
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    kinds = ", ".join(f"{k} {n}" for k, n in u["counts"].items())
    return (f"{len(names)} of {count(u['of'], 'run')} had scoring errors (the reward function or verifier raised or "
            f"timed out; those completions scored 0; {kinds} in all): "
            "counted per step in each run's metrics.jsonl (a traceback in first_error; a run's first scoring error "
            f"is also a warning line in its train.log) in {runs}/ ({shown})")


def swept_g_star(planner: dict[str, Any]) -> str:
    """The planner's G* among the swept G as text: 'G* = 4', or why there is none (c1 ~ 0 in the pilot)."""
    if planner.get("g_star_swept") is None:
        why = (planner.get("band") or {}).get("cannot_tell")
        if why:
            return f"no G* (the pilot cannot tell: {why})"
        return "no G* (c1 is not distinguishable from 0 in the pilot: the bound only says larger G is not worse)"
    return f"G* = {planner['g_star_swept']}"
