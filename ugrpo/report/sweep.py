"""Report of ``ugrpo sweep`` (:mod:`ugrpo.experiments.sweep`): results.json, the plots and report.md, written by
:func:`write_report` from the results dict alone for every mode:

- an exact env, G axis (:class:`~ugrpo.experiments.sweep.env.SweepConfig`): ``sweep.png`` (paper Fig. 5 style: the
  gap vs G per checkpoint, one panel per budget), the empirical best G and the planner's G*;
- an exact env, rules axis (``--allocation``; results with ``versus_uniform``): ``allocation_sweep.png`` (gap vs
  samples spent per rule) and each rule against uniform;
- a language model (``--config``; results with ``checkpoints``): ``sweep.png`` / ``sweep_pass1.png`` (held-out
  metric vs G, one line per checkpoint, the planner's G* marked), a plain-language reading, the paper's Table 2
  (budget x G, best per row in bold) and the empirical best G per checkpoint with the G that cannot be told apart
  from it; with ``--allocation`` the allocation section: held-out accuracy against samples spent per rule
  (``allocation.png`` / ``allocation_pass1.png``), the samples each rule needs to reach uniform's final accuracy,
  and the verdicts (:mod:`ugrpo.experiments.sweep.lm_alloc`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ugrpo.report.markdown import count, fmt, fmt_ci, fmt_values, header, image, md_table, task_text
from ugrpo.report.plots import Marker, Panel, Series, line_plot, panel_plot
from ugrpo.runs import RunDir

__all__ = ["write_report", "reading", "rules_reading", "lm_reading", "table2", "best_g_table", "uniform_rows",
           "swept_g_star", "METRICS", "comparison_table", "allocation_reading", "allocation_markdown",
           "ALLOCATION_PLOTS", "scoring_errors_text"]

METRICS = ("eval_accuracy", "eval_pass1")
"""held-out metrics of a language-model sweep (greedy accuracy, sampled pass@1), as logged by the trainer"""
ALLOCATION_PLOTS = {"eval_accuracy": "allocation.png", "eval_pass1": "allocation_pass1.png"}


def write_report(run: RunDir, results: dict[str, Any], argv: Sequence[str] | None = None) -> Path:
    """results.json, the mode's plots and report.md into ``run``; returns the report's path."""
    if "versus_uniform" in results:
        return _write_rules(run, results, argv)
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
    return run.write_report("\n".join(md))


# ----------------------------------------------------------------------------------------------- exact env, rules axis


def rules_reading(results: dict[str, Any]) -> list[str]:
    """The rules axis: one plain sentence per rule against uniform at the last checkpoint."""
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


def _write_rules(run: RunDir, results: dict[str, Any], argv: Sequence[str] | None) -> Path:
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
           "the run's own history (Beta posterior on p, shrunk score moments; docs/math.md M38)")
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
        return "no G* (c1 is not distinguishable from 0 in the pilot: the bound only says larger G is not worse)"
    return f"G* = {planner['g_star_swept']}"


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
