"""The Claims of ``ugrpo reproduce``: for each of the paper's claims a verdict ('supports', 'contradicts',
'cannot tell' or 'too small to decide') with the numbers and 95% intervals it rests on, and the summary tables of
the report.

'too small to decide' comes before any other verdict when the run lacks the power to reach one (the
``MIN_*`` constants below and ``ugrpo.report.gap.THM8_PRECISION``): a verdict from such a run would say
more than its data do.

Pure functions of the parts' ``results.json`` contents (Fig. 4 per strength, the two sweeps, Theorem 8);
the rules are listed in docs/reproduce.md ("Claims: the rules").
"""

from __future__ import annotations

from typing import Any

from ugrpo.report.gap import THM8_PRECISION, fit_ok
from ugrpo.report.markdown import fmt
from ugrpo.stats.intervals import TOO_SMALL, Z95

__all__ = ["STRENGTHS", "claims", "summary"]

STRENGTHS = ("base", "instruct", "fewshot")
"""Fig. 4's model strengths, weakest first"""

MIN_REPS = 10
"""Fig. 4's intervals are normal ones (mean +- 1.96 SE over ``reps`` repetitions per G). At 10 repetitions the t
quantile they stand for is 15% above 1.96 (t_{0.975, 9} = 2.26), and more below (4.30 at the smoke scale's 3), so
they under-cover: no Fig. 4 verdict from fewer than 10."""

ORACLE_TOLERANCE = 0.10
"""'GRPO ~ oracle' means MSE_grpo / MSE_oracle within 10% of 1; an interval wider than that on either side (half-width
> 0.10) cannot resolve the effect it must detect."""



def summary(parts: dict) -> dict:
    """The numbers the report's tables show, extracted from each part's results.json."""
    out: dict[str, Any] = {}
    if parts.get("fig4"):
        out["fig4"] = {lab: {"accuracy": r["policy"]["accuracy"],
                             "rows": [{k: x[k] for k in ("estimator", "G", "mse", "ci_low",
                                                         "ci_high")} for x in r["rows"]]}
                       for lab, r in parts["fig4"].items()}
    for part in ("fig5", "table2"):
        r = parts.get(part)
        if r:
            last = max(r["checkpoints"])
            out[part] = {"last_step": last, "planner": r.get("planner") and {k: r["planner"][k] for k in (
                         "g_star", "g_star_ci", "g_star_swept")},
                         "best_G": [b for b in r["best_G"] if b["metric"] == "eval_accuracy"],
                         "final": {f"{x['budget']}/{x['G']}": x["mean"] for x in r["rows"]
                                   if x["metric"] == "eval_accuracy" and x["checkpoint"] == last}}
    if parts.get("thm8"):
        out["thm8"] = [{"estimator": c["estimator"], "G": c["G"], "mean": c["fit"]["corrected"]["mean"],
                        "se": c["fit"]["corrected"]["se"], "E_beta2": c["fit"]["corrected"]["predicted_mean"],
                        "ks_p_beta2": c["fit"]["corrected"]["ks_p"], "E_printed": c["fit"]["printed"]["predicted_mean"],
                        "ks_p_printed": c["fit"]["printed"]["ks_p"]} for c in parts["thm8"]["cells"]]
    return out


def _claim(name: str, verdict: str, evidence: str) -> dict:
    return {"claim": name, "verdict": verdict, "evidence": evidence}


def _f(v: Any) -> str:
    return fmt(v)


def claims(parts: dict) -> list[dict]:
    """For each paper claim: 'supports', 'contradicts', 'cannot tell' or 'too small to decide', with the numbers and
    95% intervals (the rules: docs/reproduce.md)."""
    out = []
    f4 = parts.get("fig4")
    names = ("vanilla MSE > GRPO MSE (Cor. 5(ii), Fig. 4)", "GRPO ~ oracle at G = 32 (Cor. 4, Fig. 4)",
             "MSE falls with model strength (Fig. 4)")
    reps = min((r.get("config", {}).get("reps", MIN_REPS) for r in (f4 or {}).values()), default=MIN_REPS)
    if not f4:
        out += [_claim(n, "cannot tell", "Fig. 4 was not run") for n in names]
    elif reps < MIN_REPS:
        out += [_claim(n, TOO_SMALL, f"{reps} repetitions per G: fewer than {MIN_REPS}, the normal 95% intervals "
                                     "of the MSE under-cover (docs/reproduce.md, the rules)") for n in names]
    else:
        diffs = [(lab, c["G"], c["vanilla_minus_grpo"]) for lab, r in f4.items() for c in r["comparisons"]]
        ev = "; ".join(f"{lab} G={G}: {_f(d['mean'])} [{_f(d['ci_low'])}, "
                       f"{_f(d['ci_high'])}]" for lab, G, d in diffs)
        v = ("supports" if all(d["ci_low"] > 0 for *_, d in diffs) else
             "contradicts" if any(d["ci_high"] < 0 for *_, d in diffs) else "cannot tell")
        out.append(_claim(names[0], v, "MSE_vanilla - MSE_grpo (95% CI): " + ev))
        rats = []
        for lab, r in f4.items():
            comp = min(r["comparisons"], key=lambda c: abs(c["G"] - 32))
            rats.append((lab, comp["G"], comp["grpo_over_oracle"]))
        ok = [q for *_, q in rats if q["ratio"] is not None]
        wide = [q for q in ok if (q["ci_high"] - q["ci_low"]) / 2 > ORACLE_TOLERANCE]
        v = ("cannot tell" if len(ok) < len(rats) else TOO_SMALL if wide else
             "supports" if all(q["ci_high"] <= 1 + ORACLE_TOLERANCE for q in ok) else
             "contradicts" if any(q["ci_low"] > 1 + ORACLE_TOLERANCE for q in ok) else "cannot tell")
        text = "; ".join(f"{lab} G={G}: {_f(q['ratio'])} [{_f(q['ci_low'])}, {_f(q['ci_high'])}]"
                         for lab, G, q in rats)
        out.append(_claim(names[1], v, f"MSE_grpo / MSE_oracle at the G nearest 32 (within 10% = supports): {text}"
                          + ("; an interval is wider than +-10%: it cannot resolve the tolerance" if wide else "")))
        rows = {}
        for lab in STRENGTHS:
            if lab in f4:
                Gm = max(x["G"] for x in f4[lab]["rows"])
                rows[lab] = next(x for x in f4[lab]["rows"] if x["estimator"] == "grpo" and x["G"] == Gm)
        labs = [s for s in STRENGTHS if s in rows]
        pairs = list(zip(labs, labs[1:]))
        v = ("supports" if pairs and all(rows[a]["ci_low"] > rows[b]["ci_high"] for a, b in pairs) else
             "contradicts" if any(rows[a]["ci_high"] < rows[b]["ci_low"] for a, b in pairs) else "cannot tell")
        acc = "; ".join(f"{lab} (accuracy {_f(f4[lab]['policy']['accuracy'])}): {_f(rows[lab]['mse'])} "
                        f"[{_f(rows[lab]['ci_low'])}, {_f(rows[lab]['ci_high'])}]" for lab in labs)
        out.append(_claim(names[2], v, f"GRPO MSE at the largest G, weakest to strongest: {acc}"))
    out.append(_best_g_claim(parts.get("table2")))
    out.append(_thm8_claim(parts.get("thm8")))
    return out


def _best_g_claim(r: dict | None) -> dict:
    name = "interior best G at a fixed budget that does not move with N (Thm 7, Table 2)"
    if not r:
        return _claim(name, "cannot tell", "Table 2 was not run")
    last, groups = max(r["checkpoints"]), sorted(r["config"]["groups"])
    rows = [x for x in r["rows"] if x["metric"] == "eval_accuracy" and x["checkpoint"] == last]
    best = [b for b in r["best_G"] if b["metric"] == "eval_accuracy" and b["checkpoint"] == last]
    ev = "; ".join(f"N={b['budget']}: best G={b['G']} (accuracy {_f(b['mean'])})" for b in best)
    if any(x["ci_low"] is None for x in rows):
        return _claim(name, TOO_SMALL, f"{ev}; one seed per (N, G): no intervals, so no ordering is evidence")
    pl = r.get("planner")
    if pl:
        from ugrpo.report.sweep import swept_g_star

        ev += f"; planner (Thm 7) among the swept G: {swept_g_star(pl)} (interval {pl['g_star_ci']})"
    interior = all(groups[0] < b["G"] < groups[-1] for b in best)
    same = len({b["G"] for b in best}) == 1

    def separated(b):  # the best's interval lies above both end points'
        cell = {x["G"]: x for x in rows if x["budget"] == b["budget"]}
        top = cell[b["G"]]
        return all(cell[g]["ci_high"] < top["ci_low"] for g in (groups[0], groups[-1]) if g in cell and g != b["G"])

    def clear_edge(b):  # a best at an end point whose interval lies above every other G's
        cell = [x for x in rows if x["budget"] == b["budget"]]
        top = next(x for x in cell if x["G"] == b["G"])
        return b["G"] in (groups[0], groups[-1]) and all(x["ci_high"] < top["ci_low"] for x in cell if x is not top)

    sep = all(separated(b) for b in best)
    v = ("supports" if interior and same and sep else "contradicts" if any(clear_edge(b) for b in best)
         else "cannot tell")
    return _claim(name, v, f"{ev}; best interior and above both end-point G with non-overlapping 95% intervals at "
                           f"every N: {interior and sep}; same best G at every N: {same}")


def _thm8_claim(r: dict | None) -> dict:
    name = "Theorem 8: n*gap -> weighted chi-square whose weights carry beta^2"
    if not r:
        return _claim(name, "cannot tell", "Theorem 8 was not run")
    cells = r["cells"]

    ev = "; ".join(f"{c['estimator']} G={c['G']}: mean n*gap {_f(c['fit']['corrected']['mean'])} +- "
                   f"{_f(Z95 * c['fit']['corrected']['se'])} vs E = {_f(c['fit']['corrected']['predicted_mean'])} "
                   f"(beta^2, KS p {_f(c['fit']['corrected']['ks_p'])}) and "
                   f"{_f(c['fit']['printed']['predicted_mean'])} "
                   f"(printed, KS p {_f(c['fit']['printed']['ks_p'])})" for c in cells)
    loose = [c for c in cells
             if Z95 * c["fit"]["corrected"]["se"] > THM8_PRECISION * c["fit"]["corrected"]["predicted_mean"]]
    if loose:
        return _claim(name, TOO_SMALL, ev + f"; in {len(loose)} of {len(cells)} cells the 95% interval of mean n*gap "
                      f"is wider than +-{THM8_PRECISION:.0%} of the beta^2 limit's mean (too few runs): a limit that "
                      "far off would fit as well")
    corr = all(fit_ok(c["fit"]["corrected"]) for c in cells)
    printed_rejected = any(not fit_ok(c["fit"]["printed"]) for c in cells)
    none_fit = not any(fit_ok(c["fit"]["corrected"]) for c in cells)
    v = "supports" if corr and printed_rejected else "contradicts" if none_fit else "cannot tell"
    return _claim(name, v, ev + " (consistent = KS and CvM p > 0.01 and |z| < 3)")
