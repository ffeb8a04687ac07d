"""Report of ``ugrpo demo`` (:mod:`ugrpo.experiments.demo`): the summary tables and the top-level report.md
that links the three sub-runs. Reads the results dicts only."""

from __future__ import annotations

import math
from typing import Any

from ugrpo.runs import RunDir


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
    best = [[b["budget"], b["checkpoint"], b["G"],
             star.get(b["budget"])] for b in sw["best_G"] if b["checkpoint"] == last]
    return {"mse": mse_rows, "constants": const, "best": best}


def write_demo_report(out: str, res: dict[str, Any]) -> None:
    """Top-level DIR/report.md linking the three sub-runs, with the headline tables."""
    from ugrpo.report.markdown import header, image, md_table
    from ugrpo.report.mse_report import reading as mse_reading
    from ugrpo.report.plan_report import reading as plan_reading
    from ugrpo.report.sweep_report import reading as sweep_reading

    t = summary_rows(res)
    w = res["wall_s"]
    md = [
        header("ugrpo demo: estimate, measure and choose G on builtin:demo"),
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
        md_table(["budget N", "checkpoint", "empirical best G", "planner G*"], t["best"]),
        "",
        image("sweep/sweep.png", "sweep"),
        "",
    ]
    RunDir(out).write_report("\n".join(md))
