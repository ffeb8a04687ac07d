"""``ugrpo plan`` as one call: a resolved config in, a run folder out (env, pilot file or language model).

:class:`PlanConfig` holds the settings of a plan from an exact env or a saved pilot;
:func:`plan_experiment` samples (or loads) the pilot, estimates c1, c2, c3, plans G for the budget
(paper Thm 7, eq. (11)-(12); docs/paper.md) and writes the run folder. :func:`lm_plan_experiment` does
the same from a language model (:class:`ugrpo.experiments.lm_plan.LMPlanConfig`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from ugrpo.experiments.pilot_io import MIN_PILOT_GROUP
from ugrpo.runs import RunDir
from ugrpo.stats.band import check_n_boot
from ugrpo.stats.budget import check_divides

__all__ = ["PlanConfig", "plan_experiment", "lm_plan_experiment"]


@dataclass(frozen=True)
class PlanConfig:
    """Resolved settings of ``ugrpo plan`` from an env or a pilot file."""

    budget: int
    """samples per step N = B*G"""
    seed: int
    """seeds the pilot sampling and the bootstrap"""
    n_boot: int
    """bootstrap replicates for the intervals"""
    env: str | None = None
    """env JSON or builtin:NAME: sample a pilot (exactly one of env and pilot)"""
    pilot: str | None = None
    """a saved pilot .npz (docs/pilot-format.md)"""
    pilot_batch: int | None = None
    """pilot prompts B0 (with env)"""
    pilot_group: int | None = None
    """pilot samples per prompt G0 (with env)"""
    save_pilot: str | None = None
    """write the sampled pilot to this .npz (with env)"""
    theta: tuple[float, ...] | None = None
    """the pilot's parameters (with env); None = theta0"""
    group: int | None = None
    """the group size in use (must divide the budget): the results say how much more gradient error it costs than
    the best G"""
    ci_method: str = "studentized-log"
    """bootstrap intervals of c1, c2, c3: studentized-log, studentized, studentized-equal-tailed or percentile
    (docs/math.md M39)"""

    def __post_init__(self) -> None:
        if (self.env is None) == (self.pilot is None):
            raise ValueError("give exactly one of --env (sample a pilot), --pilot FILE (a saved pilot) or --model PATH "
                             "(sample a pilot from a language model)")
        if self.env is not None and (self.pilot_batch is None or self.pilot_group is None):
            raise ValueError("--env needs --pilot-batch B0 and --pilot-group G0 (e.g. 64 and 8)")
        if self.pilot is not None and self.save_pilot is not None:
            raise ValueError("--save-pilot only applies to --env (the pilot is already a file)")
        if self.pilot is not None and self.theta is not None:
            raise ValueError("--theta only applies to --env (a pilot file was sampled at its own theta)")
        if self.budget < 2:
            raise ValueError(f"--budget N = {self.budget} must be >= 2 (GRPO needs G >= 2 samples per prompt)")
        if self.env is not None and (self.pilot_group < MIN_PILOT_GROUP or self.pilot_batch < 2):
            raise ValueError(f"--pilot-group G0 = {self.pilot_group} and --pilot-batch B0 = {self.pilot_batch}: "
                             f"need G0 >= {MIN_PILOT_GROUP} (the unbiased c3 estimate) and B0 >= 2 (c1)")
        check_n_boot(self.n_boot)
        if self.group is not None:
            check_divides(self.budget, self.group)


def plan_experiment(cfg: PlanConfig, out: str, *, argv: list[str] | None = None) -> dict[str, Any]:
    """Pilot (sampled from ``cfg.env`` at ``cfg.theta``, or read from ``cfg.pilot``) -> plan; writes the run
    folder ``out`` (results.json, plan.png, report.md) and returns the results."""
    from ugrpo.experiments.common import resolve_env, resolve_theta
    from ugrpo.experiments.pilot_io import load_pilot, save_pilot
    from ugrpo.experiments.plan import run_plan, sample_pilot
    from ugrpo.report.plan_report import write_plan_outputs

    exact_pm = curve = None
    if cfg.env is not None:
        env = resolve_env(cfg.env)
        theta = resolve_theta(env, cfg.theta)
        gen = torch.Generator().manual_seed(cfg.seed)
        pilot = sample_pilot(env, theta, cfg.pilot_batch, cfg.pilot_group, gen,
                             meta={"env": cfg.env, "theta": theta.tolist(), "seed": cfg.seed})
        if cfg.save_pilot:
            save_pilot(cfg.save_pilot, pilot)
        ex = env.exact(theta, sigma=False)
        exact_pm = ex.policy_moments
        curve = [{"G": G, "mse": ex.mse("grpo", cfg.budget // G, G)}
                 for G in range(2, cfg.budget + 1) if cfg.budget % G == 0]
    else:
        pilot = load_pilot(cfg.pilot)
    rd = RunDir(out)
    rd.write_config({**asdict(cfg), "command": "plan", "argv": argv})
    rd.file("metrics.jsonl").unlink(missing_ok=True)
    results = run_plan(pilot, cfg.budget, n_boot=cfg.n_boot, seed=cfg.seed, run=rd, exact_pm=exact_pm,
                       exact_curve=curve, method=cfg.ci_method, group=cfg.group)
    write_plan_outputs(rd, results, argv)
    return results


def lm_plan_experiment(cfg, out: str, *, argv: list[str] | None = None) -> dict[str, Any]:
    """``ugrpo plan --model``: an :class:`~ugrpo.experiments.lm_plan.LMPlanConfig` -> the run folder ``out``
    (pilot.npz, results.json, plan.png, report.md with the costs); returns the results."""
    from ugrpo.experiments.lm_plan import run_lm_plan
    from ugrpo.report.plan_report import write_lm_plan_outputs

    rd = RunDir(out)
    rd.write_config({**asdict(cfg), "command": "plan", "argv": argv})
    rd.file("metrics.jsonl").unlink(missing_ok=True)
    results = run_lm_plan(cfg, rd)
    write_lm_plan_outputs(rd, results, argv)
    return results
