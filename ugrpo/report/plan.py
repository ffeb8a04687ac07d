"""Report of ``ugrpo plan`` (:mod:`ugrpo.experiments.plan`; paper Thm 7): results.json, ``plan.png`` and
report.md, with a cost section for a language-model pilot (results with ``pilot_cost``) and the answer in TRL's
terms for ``--trl-config`` (results with ``trl``). Reads the results dict only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ugrpo.runs import RunDir

__all__ = ["write_report", "reading", "band_words"]


def band_words(band: dict[str, Any], name: str = "G") -> str:
    """The confidence band of a results ``band`` object in words (:func:`ugrpo.stats.planner.band_words`; the
    candidates are those of ``band["probability"]``)."""
    from ugrpo.stats.planner import band_words as words

    smallest = min((int(g) for g in band.get("probability") or {}), default=None)
    return words(band["low"], band["high"], open_ended=bool(band.get("open_ended")), smallest=smallest, name=name)


def reading(results: dict[str, Any]) -> list[str]:
    """Plain-language sentences about a plan result: the planner's one answer (the G to use and how sure, the band),
    then the pilot against the exact constants when they are known."""
    from ugrpo.report.markdown import fmt

    out = [f"Planner: {results.get('message')}."]
    if "current_group" in results:
        out.append(results["current_group"]["message"][0].upper() + results["current_group"]["message"][1:] + ".")
    clipped = [k for k in ("c1", "c2", "c3") if results[k]["estimate"] < 0]
    if clipped:
        out.append(f"{', '.join(clipped)}: the unbiased estimate is below 0, the constant's range starts at 0; its "
                   f"interval and the plan take it as 0.")
    ex = results.get("exact")
    if ex:
        parts = []
        for k in ("c1", "c2", "c3"):
            e = results[k]
            if e["ci_low"] is None or e["ci_high"] is None:
                where = "no interval: the pilot cannot tell"
            else:
                where = f"{'inside' if e['ci_low'] <= ex[k] <= e['ci_high'] else 'outside'} the 95% interval"
            parts.append(f"{k} = {fmt(e['estimate'])} vs exact {fmt(ex[k])} ({where})")
        out.append("Pilot estimates vs the exact constants at theta0: " + "; ".join(parts) + ".")
        rec = results.get("g_recommended")
        where = "" if rec is None else (f"; the G to use, {rec}, is " + ("inside" if rec in ex.get("band", [])
                                                                          else "outside") + " the exact band")
        exact_band = ", ".join(str(g) for g in ex.get("band", []))
        out.append(f"With the exact constants the best G is {ex['g_star']} (continuous "
                   f"{fmt(ex['g_star_continuous'])}), exact 5% band {{{exact_band}}}{where}.")
    return out


def write_report(run: RunDir, results: dict[str, Any], argv: Sequence[str] | None = None) -> Path:
    """results.json, ``plan.png`` (predicted bound vs G with bootstrap band, G* marked) and report.md (plus the
    cost section of a language-model pilot, and the TRL section); returns the report's path."""
    from ugrpo.report.markdown import fmt, fmt_ci, header, image, md_table
    from ugrpo.report.plots import Marker, Series, line_plot

    run.write_results(results)
    c = results["candidates"]
    xs = [r["G"] for r in c]
    series = [Series("predicted bound (pilot)", xs, [r["predicted_mse"] for r in c],
                     [r.get("band_low") for r in c], [r.get("band_high") for r in c], color="C0",
                     band_label="95% bootstrap band of the bound")]
    lo, hi = results["g_star_ci"]
    markers = []
    band = results.get("band")
    if band is not None and band.get("recommended") is not None:
        tol = 100 * band.get("tolerance", 0.05)
        markers.append(Marker(band["recommended"], f"G to use = {band['recommended']}", band["low"], band["high"],
                              color="C2", band_label=f"near-optimal G (within {tol:g}% of the best for some c1 in its "
                              f"95% interval): {band_words(band)}"))
    if results["g_star"] is not None:
        top = hi if hi is not None else max(xs)
        markers.append(Marker(results["g_star"], f"G* = {results['g_star']} (pilot)", lo, top, color="C0",
                              band_label=f"95% interval of G*: [{fmt(lo)}, {fmt(hi) if hi is not None else '-'}]"))
    ex = results.get("exact")
    exact_at = {r["G"]: r["mse"] for r in (ex or {}).get("curve") or []}
    if ex and ex.get("curve"):
        cur = sorted(ex["curve"], key=lambda r: r["G"])
        series.append(Series("exact bound", [r["G"] for r in cur], [r["mse"] for r in cur], dashed=True, color="C3"))
        markers.append(Marker(ex["g_star"], f"G* = {ex['g_star']} (exact)", color="C3"))
    line_plot(run.file("plan.png"), series, xlabel="group size G", ylabel="predicted MSE  c1 G/N + c2/N + c3/(N(G-1))",
              title=f"Group-size plan for N = {results['budget']}", logx=True, logy=True, markers=markers, xticks=xs)
    rows = [[k, _shown(results[k]["estimate"]),
             "-" if results[k]["ci_low"] is None else fmt_ci(results[k]["ci_low"], results[k]["ci_high"]),
             ex[k] if ex else None] for k in ("c1", "c2", "c3")]  # an estimate below 0 at 0, as on the console
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
        md_table(["constant", "pilot estimate", f"95% CI ({results.get('interval_method', 'percentile')} bootstrap)",
                  "exact"], rows),
        "",
        "## Candidates",
        "",
        md_table(["G", "B", "predicted MSE", "its bootstrap 95% interval", "ratio to the best: most over c1's interval",
                  "exact"],
                 [[r["G"], r["B"], r["predicted_mse"], fmt_ci(r.get("band_low"), r.get("band_high")),
                   r.get("worst_ratio"), exact_at.get(r["G"])] for r in c]),
        "",
    ]
    text = "\n".join(md)
    if "pilot_cost" in results:
        text = text.rstrip() + "\n\n" + _cost_section(results)
    if "trl" in results:
        text += _trl_section(results["trl"])
    return run.write_report(text)


def _cost_section(results: dict[str, Any]) -> str:
    """A language-model pilot's costs, and the estimated cost of one training step at the budget."""
    pc, sc = results["pilot_cost"], results["step_cost"]
    lines = ["## Cost", "",
             f"Pilot: {pc['samples']} samples in {pc['seconds']:.1f} s (sampling {pc['seconds_sampling']:.1f} with "
             f"{_backend_words(pc)}, scoring "
             f"{pc['seconds_scoring']:.1f}, sketch {pc['seconds_sketch']:.1f}); "
             f"{100 * results['pilot_fraction_of_100_steps']:.1f}% of the samples of 100 training steps at N = "
             f"{results['budget']}.",
             f"One training step at N = {results['budget']}: about {sc['seconds']:.2f} s ({sc['how']}).", ""]
    return "\n".join(lines)


def _backend_words(cost: dict[str, Any]) -> str:
    """Who drew the samples: ``hf`` (pilots from before the option: hf) or ``vllm`` with its engine's start-up."""
    backend = cost.get("sampling_backend", "hf")
    if backend != "vllm":
        return "Hugging Face generate"
    return f"vLLM, after {cost.get('seconds_engine_start', 0.0):.1f} s of engine start and weight push"


def _trl_section(trl: dict) -> str:
    """The plan in GRPOConfig terms (``ugrpo plan --trl-config``): the message and the current / recommended table."""
    c, r = trl["current"], trl["recommended"]
    lines = ["", "## In TRL's terms", "", f"- {trl['message']}.", "",
             "| | num_generations | per_device_train_batch_size | gradient_accumulation_steps | prompts per step | "
             "predicted MSE |",
             "|---|---|---|---|---|---|"]
    for name, d in (("your config", c), ("recommended", r)):
        if d is not None:
            lines.append(f"| {name} | {d['num_generations']} | {d['per_device_train_batch_size']} | "
                         f"{d['gradient_accumulation_steps']} | {d['prompts_per_step']} | {d['predicted_mse']} |")
    return "\n".join(lines) + "\n"


def _shown(estimate: float) -> str:
    """An estimate as the tables show it: at 0 when the unbiased estimate is below 0 (the constant's range), with the
    estimate beside it."""
    from ugrpo.report.markdown import fmt

    return fmt(estimate) if estimate >= 0 else f"0 (unbiased estimate {fmt(estimate)})"
