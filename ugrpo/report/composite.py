"""Reports of the two commands built from other commands' run folders: ``ugrpo demo`` (a top-level ``report.md``
that links its mse, plan and sweep runs, :func:`write_demo_report`) and ``ugrpo reproduce`` (one self-contained
``report.html``, figures inline as PNG, :func:`write_reproduce_report`).

The reproduce page's order: the Claims table (supports / contradicts / cannot tell, with the numbers), then Fig. 4,
Fig. 5 (with the empirical best G per checkpoint and the planner's G*), Table 2 (this run with 95% intervals beside
the paper's published accuracies) and Theorem 8 (fit of n * gap and Corollary 9). It reads only the parts'
``results.json`` files (:func:`read_parts`) and the results of :func:`ugrpo.experiments.reproduce.run.run_reproduce`.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ugrpo.report.markdown import count, fmt
from ugrpo.runs import RunDir, finished_results

__all__ = ["write_demo_report", "summary_rows", "write_reproduce_report", "read_part", "read_parts", "html_table",
           "inline_png"]

STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:collapse;margin:6px 0}"
         "td,th{border:1px solid #bbb;padding:2px 6px}td.supports{background:#dfd}td.contradicts{background:#fdd}"
         "td.cannot{background:#eee}")


# ----------------------------------------------------------------------------------------------- ugrpo demo


def summary_rows(res: dict[str, Any]) -> dict[str, list[list[Any]]]:
    """The demo's three summary tables: MSE at G=4 and G=32, constants and G*, best G per budget."""
    from ugrpo.report.markdown import fmt_ci

    mse_rows = [[r["G"], r["estimator"], r["mse"], r["exact"]] for r in res["mse"]["rows"] if r["G"] in (4, 32)]
    p = res["plan"]
    ex = p.get("exact") or {}
    const = [[k, p[k]["estimate"], fmt_ci(p[k]["ci_low"], p[k]["ci_high"]), ex.get(k)] for k in ("c1", "c2", "c3")]
    lo, hi = p["g_star_ci"]
    const.append(["G*", p["g_star"], fmt_ci(lo, hi if hi is not None else math.inf), ex.get("g_star")])
    sw = res["sweep"]
    last = max(r["checkpoint"] for r in sw["rows"])
    star = {q["budget"]: q["g_star"] for q in sw["planner"]["per_budget"]}
    best = [[b["budget"], b["checkpoint"], b["G"], ", ".join(map(str, b.get("not_distinguishable") or ())) or "-",
             star.get(b["budget"])] for b in sw["best_G"] if b["checkpoint"] == last]
    return {"mse": mse_rows, "constants": const, "best": best}


def write_demo_report(run: RunDir, res: dict[str, Any], argv: Sequence[str] | None = None) -> Path:
    """Top-level DIR/report.md of ``ugrpo demo`` linking the three sub-runs, with the headline tables (``res``:
    the three sub-runs' results and ``wall_s``); returns its path."""
    from ugrpo.report.markdown import header, image, md_table
    from ugrpo.report.mse import reading as mse_reading
    from ugrpo.report.plan import reading as plan_reading
    from ugrpo.report.sweep import reading as sweep_reading

    t = summary_rows(res)
    w = res["wall_s"]
    md = [
        header("ugrpo demo: estimate, measure and choose G on builtin:demo", argv),
        f"Three runs on the built-in exact synthetic policy (total {sum(w.values()):.0f} s: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in w.items()) + ").",
        "",
        "## 1. Gradient MSE per estimator ([mse/report.md](mse/report.md))",
        "",
        *[f"- {s}" for s in mse_reading(res["mse"])],
        "",
        md_table(["G", "estimator", "MC MSE", "exact"], t["mse"]),
        "",
        image("mse/mse.png", "MSE vs G"),
        "",
        "## 2. Group-size plan from a pilot ([plan/report.md](plan/report.md))",
        "",
        *[f"- {s}" for s in plan_reading(res["plan"])],
        "",
        md_table(["", "pilot", "95% CI", "exact"], t["constants"]),
        "",
        image("plan/plan.png", "plan"),
        "",
        "## 3. Fixed-budget sweep with Algorithm 1 ([sweep/report.md](sweep/report.md))",
        "",
        *[f"- {s}" for s in sweep_reading(res["sweep"])],
        "",
        md_table(["budget N", "checkpoint", "empirical best G", "G not told apart (paired, by seed)", "planner G*"],
                 t["best"]),
        "",
        image("sweep/sweep.png", "sweep"),
        "",
    ]
    return run.write_report("\n".join(md))


# ------------------------------------------------------------------------------------------ ugrpo reproduce


def inline_png(path: Path, alt: str) -> str:
    """A <figure> with the PNG embedded as base64 (a note when the file is missing)."""
    if not path.is_file():
        return f"<p><em>{html.escape(alt)}: {html.escape(str(path.name))} missing</em></p>"
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}" style="max-width:100%">'
            f"<figcaption>{html.escape(alt)}</figcaption></figure>")


def html_table(headers, rows, *, bold: bool = True) -> str:
    """Escaped HTML table; numbers through :func:`fmt`; ``**x**`` cells (markdown bold) become <b>x</b>."""
    def cell(c: Any) -> str:
        t = html.escape(c if isinstance(c, str) else fmt(c))
        return t.replace("**", "<b>", 1).replace("**", "</b>", 1) if bold and t.count("**") >= 2 else t

    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _claims(claims) -> str:
    rows = "".join(f"<tr><td>{html.escape(c['claim'])}</td><td class='{c['verdict'].split()[0]}'><b>"
                   f"{html.escape(c['verdict'])}</b></td><td>{html.escape(c['evidence'])}</td></tr>" for c in claims)
    return ("<h2>Claims</h2><table><tr><th>paper claim</th><th>this run</th><th>numbers (95% intervals)</th></tr>"
            f"{rows}</table>")


def _fig4(out: Path, summ: dict) -> list[str]:
    h = ["<h2>Fig. 4: LM gradient MSE vs G</h2><p>The paper gives no numbers for Fig. 4 in its text "
         "(docs/paper.md 8.1): "
         "only the ordering vanilla &gt; grpo &gt; oracle, grpo ~ oracle at G = 32/64, MSE falling with G and with "
         "model strength.</p>"]
    if "fig4" not in summ:
        return h + ["<p>not run</p>"]
    for lab, s in summ["fig4"].items():
        h.append(f"<h3>{html.escape(lab)} (mean reward {fmt(s['accuracy'])})</h3>")
        h.append(inline_png(out / "fig4" / lab / "mse.png", f"Fig. 4 analogue, {lab}"))
        h.append(html_table(["estimator", "G", "MSE", "95% CI"],
                            [[r["estimator"], r["G"], r["mse"], f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]"]
                             for r in s["rows"]]))
    return h


def _planner(pl: dict | None) -> str:
    if not pl:
        return "<p>Planner: not run for this part.</p>"
    from ugrpo.report.sweep import swept_g_star

    same = " (the same at every budget: the bound (11) scales with 1/N)" if pl["g_star_swept"] is not None else ""
    return (f"<p>Planner (Theorem 7, eq. (12), from a B0 x G0 = {pl['pilot'][0]} x {pl['pilot'][1]} pilot at the "
            f"initial model): {html.escape(pl['message'])}. Among the swept G: <b>{swept_g_star(pl)}</b>{same}.</p>")


def _best_per_checkpoint(r: dict) -> list[str]:
    from ugrpo.report.sweep import METRICS, best_g_table

    h = []
    for m in METRICS:
        hd, rows = best_g_table(r, m)
        if rows:
            n_seeds = count(r["config"]["seeds"], "seed")
            h.append(f"<p>Empirical best G per checkpoint ({html.escape(m)}; mean over {n_seeds}, "
                     f"{html.escape(r.get('interval', '95% t-interval'))}):</p>" + html_table(hd, rows))
    return h


def _fig5(out: Path, parts: dict) -> list[str]:
    h = ["<h2>Fig. 5: held-out accuracy vs G at a fixed budget, over checkpoints</h2><p>The paper gives no numbers "
         "for Fig. 5 in its text (docs/paper.md 8.2); it reports G* = 32 at every checkpoint after n = 200 for "
         "Qwen2.5-1.5B-Instruct on GSM8K at N = 1024.</p>"]
    r = parts.get("fig5")
    if not r:
        return h + ["<p>not run</p>"]
    h.append(_planner(r.get("planner")))
    h.append(inline_png(out / "fig5" / "sweep.png", "Fig. 5 analogue: greedy held-out accuracy vs G, one line per "
                                                     "checkpoint; planner G* as a vertical line"))
    h.append(inline_png(out / "fig5" / "sweep_pass1.png", "the same for sampled pass@1"))
    return h + _best_per_checkpoint(r)


def _table2(out: Path, parts: dict, paper: Mapping[int, Mapping[int, float]]) -> list[str]:
    from ugrpo.report.sweep import table2

    h = ["<h2>Table 2: accuracy at the last step, budget x G</h2>"]
    r = parts.get("table2")
    if r:
        h.append(_planner(r.get("planner")))
        hd, rows = table2(r, "eval_accuracy", intervals=True)
        h.append(f"<p>This run (greedy held-out accuracy at step {max(r['checkpoints'])}, mean over "
                 f"{count(r['config']['seeds'], 'seed')} [{html.escape(r.get('interval', '95% t-interval'))}]; "
                 "best per row in "
                 "bold):</p>" + html_table(hd, rows))
        h.append(inline_png(out / "table2" / "sweep.png", "Table 2 analogue: accuracy vs G per budget"))
        h += _best_per_checkpoint(r)
    else:
        h.append("<p>not run</p>")
    pg = sorted({g for row in paper.values() for g in row})
    h.append("<p>The paper (Qwen2.5-Math-7B on MATH, one run each; docs/paper.md 8.3; best per row in bold):</p>"
             + html_table(["budget N"] + [f"G={g}" for g in pg],
                          [[N] + [(f"**{row[g]:.4f}**" if row[g] == max(row.values()) else f"{row[g]:.4f}")
                                  for g in pg] for N, row in paper.items()]))
    return h


def _thm8(out: Path, summ: dict, parts: dict) -> list[str]:
    h = ["<h2>Theorem 8: n*gap against the weighted chi-square</h2><p>Algorithm 1 with eta_i = beta/(i + offset) on "
         "a synthetic policy whose optimum is a set (singular Hessian); n * gap at the last step over many runs "
         "against the predicted mixture sum_k w_k chi2_1, with the weights from the Lyapunov equation with the "
         "beta^2 factor (docs/math.md) and as printed in the paper.</p>"]
    if "thm8" not in summ:
        return h + ["<p>not run</p>"]
    cells = {(c["estimator"], c["G"]): c for c in (parts.get("thm8") or {}).get("cells", [])}
    h.append(html_table(
        ["estimator", "G", "mean n*gap", "SE", "E (beta^2)", "KS stat", "KS p", "CvM p", "E (printed)", "KS p printed"],
        [[c["estimator"], c["G"], c["mean"], c["se"], c["E_beta2"],
          cells.get((c["estimator"], c["G"]), {}).get("fit", {}).get("corrected", {}).get("ks_stat"), c["ks_p_beta2"],
          cells.get((c["estimator"], c["G"]), {}).get("fit", {}).get("corrected", {}).get("cvm_p"), c["E_printed"],
          c["ks_p_printed"]] for c in summ["thm8"]]))
    h.append(inline_png(out / "thm8" / "qq.png", "QQ plots against Theorem 8 (beta^2 corrected)"))
    c9 = (parts.get("thm8") or {}).get("corollary9") or []
    if c9:
        h.append("<p>Corollary 9: the two largest weights of grpo minus oracle, and their ratio between G and 2G "
                 "(4 = shrinking like G^-2):</p>" + html_table(
                     ["G", "w_grpo - w_oracle", "G^2 (w_grpo - w_oracle)", "ratio to 2G"],
                     [[r["G"], ", ".join(fmt(x) for x in r["diff"]), ", ".join(fmt(x) for x in r["G2_diff"]),
                       ", ".join(fmt(x) for x in r["ratio_to_2G"]) if r.get("ratio_to_2G") else "-"] for r in c9]))
    return h


def read_part(folder: Path) -> dict | None:
    """A part's results.json, or None when it has not finished (:func:`ugrpo.runs.finished_results`; no folder is
    created)."""
    return finished_results(folder)


def read_parts(out: Path, fig4_labels: Sequence[str]) -> dict[str, Any]:
    """The parts' results.json contents under ``out`` ({part: results, or None when it has not finished}; Fig. 4:
    {strength: results}, None unless every strength has finished)."""
    fig4 = {lab: read_part(out / "fig4" / lab) for lab in fig4_labels}
    return {"fig4": fig4 if all(v is not None for v in fig4.values()) else None,
            **{part: read_part(out / part) for part in ("fig5", "table2", "thm8")}}


def write_reproduce_report(root: RunDir, results: dict, argv: Sequence[str] | None = None) -> Path:
    """Write ``report.html`` of ``ugrpo reproduce`` into ``root`` from its results and its parts' folders (the
    strengths of Fig. 4 are ``results["models"]["fig4"]``'s keys, the paper's Table 2 ``results["paper"]``'s);
    returns its path."""
    parts = read_parts(root.path, list(results["models"]["fig4"]))
    paper_table2 = results["paper"]["table2"]
    out, summ = root.path, results["summary"]
    h = ["<!doctype html><html><head><meta charset='utf-8'><title>ugrpo reproduce</title>"
         f"<style>{STYLE}</style></head><body>",
         f"<h1>ugrpo reproduce --scale {html.escape(results['scale'])}</h1>",
         "<p>Parts: " + html.escape("; ".join(f"{k}: {v}" for k, v in results["actions"].items())) + "</p>",
         _claims(results["claims"])]
    h += _fig4(out, summ) + _fig5(out, parts) + _table2(out, parts, paper_table2) + _thm8(out, summ, parts)
    secs = {k: round(v, 1) for k, v in results["seconds"].items()}
    h.append(f"<p>Seconds per part this call: {html.escape(str(secs))}</p></body></html>")
    return root.write_report("\n".join(h) + "\n", name="report.html")  # the last file: the folder is finished
