"""``ugrpo demo``: mse + plan + sweep on ``builtin:demo`` in a few minutes on 2 CPU cores.

Writes ``DIR/mse``, ``DIR/plan``, ``DIR/sweep`` (each a full run folder) and a top-level
``DIR/report.md`` that links them and collects the headline numbers
(:func:`ugrpo.report.composite.write_demo_report`).
"""

from __future__ import annotations

import time
from typing import Any

from ugrpo.runs import RunDir

__all__ = ["DEMO_SETTINGS", "QUICK_SETTINGS", "demo_configs", "run_demo"]

DEMO_SETTINGS: dict[str, dict[str, Any]] = {
    "mse": dict(groups=(2, 4, 8, 16, 32, 64), batch=8, reps=2000),
    "plan": dict(pilot_batch=512, pilot_group=8, budget=512, n_boot=1000),
    # lr = 8 N / 256 as the demo env's description suggests (2 at N=64, 8 at N=256), 300 steps
    "sweep": dict(budgets=(64, 256), groups=(2, 4, 8, 16, 32, 64), steps=300, lr=(2.0, 8.0), seeds=24,
                  checkpoints=(100, 200, 300)),
}
"""Fields of each sub-run's config (besides env and seed); chosen to finish in < 3 min."""

QUICK_SETTINGS: dict[str, dict[str, Any]] = {
    "mse": dict(groups=(4, 8, 32), batch=4, reps=200),
    "plan": dict(pilot_batch=16, pilot_group=4, budget=64, n_boot=100),
    "sweep": dict(budgets=(32,), groups=(4, 8, 32), steps=10, lr=(0.5,), seeds=2, checkpoints=(5, 10)),
}
"""``ugrpo demo --quick``: seconds, for smoke tests (the numbers are noisy)."""


def demo_configs(env: str, seed: int, settings: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The three sub-runs' config objects: ``MSEConfig``, ``PlanConfig``, ``SweepConfig``."""
    from ugrpo.experiments.mse.env import MSEConfig
    from ugrpo.experiments.plan.env import PlanConfig
    from ugrpo.experiments.sweep.env import SweepConfig

    return {"mse": MSEConfig(env=env, seed=seed, **settings["mse"]),
            "plan": PlanConfig(env=env, seed=seed, **settings["plan"]),
            "sweep": SweepConfig(env=env, seed=seed, **settings["sweep"])}


def run_demo(out: str, *, env: str = "builtin:demo", seed: int = 0, progress: bool = True,
             settings: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Run the three sub-runs into ``out/mse``, ``out/plan``, ``out/sweep`` and write the top-level ``out/report.md``
    that links them; return {name: results} plus wall times."""
    from ugrpo.experiments.mse.env import mse_experiment
    from ugrpo.experiments.plan.env import plan_experiment
    from ugrpo.experiments.sweep.env import sweep_experiment
    from ugrpo.report.composite import write_demo_report

    settings = settings or DEMO_SETTINGS
    root = RunDir(out)
    root.claim("demo", {"env": env, "seed": seed, "settings": settings})  # never into another run's folder
    cfgs = demo_configs(env, seed, settings)
    res: dict[str, Any] = {"wall_s": {}}
    for name in ("mse", "plan", "sweep"):
        t0 = time.perf_counter()
        folder = f"{out}/{name}"
        if name == "plan":
            res[name] = plan_experiment(cfgs[name], folder)
        else:
            run = mse_experiment if name == "mse" else sweep_experiment
            res[name] = run(cfgs[name], folder, progress=progress)
        res["wall_s"][name] = time.perf_counter() - t0
        if progress:
            print(f"[demo] {name} done in {res['wall_s'][name]:.1f} s -> {out}/{name}/report.md")
    write_demo_report(root, res)
    return res


