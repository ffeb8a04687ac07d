"""``ugrpo demo``: mse + plan + sweep on ``builtin:demo`` in a few minutes on 2 CPU cores.

Writes ``DIR/mse``, ``DIR/plan``, ``DIR/sweep`` (each a full run folder) and a top-level
``DIR/report.md`` that links them and collects the headline numbers.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any, Callable, Sequence

from ugrpo.runs import RunDir

__all__ = ["DEMO_SETTINGS", "QUICK_SETTINGS", "run_demo", "summary_rows"]

DEMO_SETTINGS: dict[str, list[str]] = {
    "mse": ["--groups", "2,4,8,16,32,64", "--batch", "8", "--reps", "2000"],
    "plan": ["--pilot-batch", "512", "--pilot-group", "8", "--budget", "512", "--n-boot", "1000"],
    # lr = 8 N / 256 as the demo env's description suggests (2 at N=64, 8 at N=256), 300 steps
    "sweep": ["--budget", "64,256", "--groups", "2,4,8,16,32,64", "--steps", "300", "--lr", "2,8",
              "--seeds", "24", "--checkpoints", "100,200,300"],
}
"""Arguments of each sub-run (besides --env, --seed, --out); chosen to finish in < 3 min."""

QUICK_SETTINGS: dict[str, list[str]] = {
    "mse": ["--groups", "4,8,32", "--batch", "4", "--reps", "200"],
    "plan": ["--pilot-batch", "16", "--pilot-group", "4", "--budget", "64", "--n-boot", "100"],
    "sweep": ["--budget", "32", "--groups", "4,8,32", "--steps", "10", "--lr", "0.5", "--seeds", "2",
              "--checkpoints", "5,10"],
}
"""``ugrpo demo --quick``: seconds, for smoke tests (the numbers are noisy)."""


def _args(configure: Callable, argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    configure(p)
    return p.parse_args(list(argv))


def run_demo(out: str, *, env: str = "builtin:demo", seed: int = 0, progress: bool = True,
             settings: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """Run the three sub-commands; return {name: results} plus wall times."""
    from ugrpo.experiments import mse_cmd, plan_cmd, sweep_cmd

    settings = settings or DEMO_SETTINGS
    RunDir(out).claim("demo", {"env": env, "seed": seed, "settings": settings})  # never into another run's folder
    mods = {"mse": mse_cmd, "plan": plan_cmd, "sweep": sweep_cmd}
    res: dict[str, Any] = {"wall_s": {}}
    for name, mod in mods.items():
        argv = ["--env", env, "--seed", str(seed), "--out", f"{out}/{name}", *settings[name]]
        if not progress and name != "plan":
            argv.append("--no-progress")
        t0 = time.perf_counter()
        res[name] = mod.run(_args(mod.configure, argv), ["ugrpo", name, *argv])
        res["wall_s"][name] = time.perf_counter() - t0
        if progress:
            print(f"[demo] {name} done in {res['wall_s'][name]:.1f} s -> {out}/{name}/report.md")
    return res


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
    best = [[b["budget"], b["checkpoint"], b["G"], star.get(b["budget"])] for b in sw["best_G"] if b["checkpoint"] == last]
    return {"mse": mse_rows, "constants": const, "best": best}


def write_demo_report(out: str, res: dict[str, Any]) -> None:
    """Top-level DIR/report.md linking the three sub-runs, with the headline tables."""
    from ugrpo.experiments.mse import reading as mse_reading
    from ugrpo.experiments.plan import reading as plan_reading
    from ugrpo.experiments.sweep import reading as sweep_reading
    from ugrpo.report.markdown import header, image, md_table

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
