"""``ugrpo plan`` from an exact env or a pilot file: pilot -> c1, c2, c3 -> the group size G for a budget N
(paper Thm 7); :func:`run_plan` is the planner every pilot source calls (``--model``: :mod:`.lm`, ``--trl-config``:
:mod:`.trl`).

:class:`PlanConfig` holds the settings of a plan from an exact env or a saved pilot; :func:`plan_experiment`
samples (or loads) the pilot, plans and writes the run folder. The pilot comes from an exact env (sampled at
theta0, optionally saved with ``--save-pilot``) or from a pilot file (docs/pilot-format.md). The constants are
estimated by :func:`ugrpo.stats.components.estimate_components` (unbiased, bootstrap intervals over prompts)
and the group size by :func:`ugrpo.stats.planner.plan_group_size`, which minimises the bound
c1 G/N + c2/N + c3/(N(G-1)) of paper eq. (11)-(12) over the divisors G of N.

For an env the exact constants at theta0 give the exact G*, so the pilot's answer can be
checked; the bound with exact constants equals GRPO's exact minibatch MSE with B = N/G.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ugrpo.experiments.plan.pilot_io import MIN_PILOT_GROUP, Pilot
from ugrpo.runs import RunDir, to_jsonable
from ugrpo.stats.band import check_n_boot
from ugrpo.stats.budget import check_divides
from ugrpo.stats.exact_mse import uniform_mse
from ugrpo.stats.intervals import ESTIMATE_KEYS

__all__ = ["PlanConfig", "plan_experiment", "sample_pilot", "exact_planner", "run_plan"]


def sample_pilot(env, theta: torch.Tensor, B0: int, G0: int, generator: torch.Generator, meta: dict) -> Pilot:
    """One pilot batch of B0 prompts x G0 samples from the env at ``theta`` (exact scores)."""
    batch = env.sample(theta, B0, G0, generator)
    return Pilot(rewards=batch.rewards.double(), scores=batch.scores.double(), meta=meta)


def _plan(components, budget: int, groups: Sequence[int] | None = None, tolerance: float = 0.05):
    """``plan_group_size`` (Thm 7): exact constants (c1, c2, c3) or VarianceComponents."""
    from ugrpo.stats.planner import plan_group_size

    return plan_group_size(components, budget, candidates=groups, tolerance=tolerance)


def band_block(p, vc=None) -> dict[str, Any]:
    """The results.json ``band`` object of a plan (docs/math.md M40-M42)."""
    cands = [g for g, _, _ in p.candidates]
    status = None
    if vc is not None:
        status = ("negative" if vc.c1.estimate < 0 else "interval_contains_zero" if not vc.c1.ci_low > 0
                  else "positive")
    low, high = p.g_band if p.g_band is not None else (None, None)
    rec = p.g_recommended
    return {"tolerance": p.tolerance, "G": list(p.band), "low": low, "high": high, "open_ended": p.band_open_ended,
            "probability": dict(zip(cands, p.band_probability)), "recommended": rec, "decided": p.decided,
            "cannot_tell": p.cannot_tell, "g_range": list(p.g_range) if p.g_range else None,
            "c1_range": list(p.c1_range) if p.c1_range else None,
            "recommended_worst_ratio": p.worst_case[cands.index(rec)] if rec is not None and p.worst_case else None,
            "worst": {"G": p.worst[0], "ratio": p.worst[1]} if p.worst else None,
            "pilot_prompts_needed": p.pilot_prompts_needed, "c1_status": status}


def group_answer(results: dict[str, Any], G: int) -> dict[str, Any]:
    """``--group G``: G's MSE over the best G's at the estimates, with its range over c1's interval (M41), and the
    sentence, worded as the plan's band is (within the tolerance for every / some / no c1 in the interval)."""
    from ugrpo.stats.band import ratio_range

    cand = {c["G"]: c for c in results["candidates"]}
    if G not in cand:
        raise ValueError(f"--group G = {G} does not divide --budget N = {results.get('budget')} (or is < 2); "
                         f"candidates: {sorted(cand)}")
    band = results.get("band") or {}
    best = min(c["predicted_mse"] for c in cand.values())
    out = {"G": G, "B": cand[G].get("B"), "predicted_mse": cand[G]["predicted_mse"],
           "ratio_to_best": cand[G]["predicted_mse"] / best if best > 0 else 1.0, "ratio_range": None}
    if band.get("cannot_tell"):
        return {**out, "ratio_to_best": None,
                "message": f"the pilot cannot tell how G = {G} compares with other G: {band['cannot_tell']}"}
    tol, rec = 100 * band.get("tolerance", 0.05), band.get("recommended") or results.get("g_star")
    msg = f"your G = {G}"
    if band.get("c1_range"):
        point = [results[k]["estimate"] for k in ("c1", "c2", "c3")]
        r = ratio_range(point, tuple(band["c1_range"]), results["budget"], sorted(cand), G)
        out["ratio_to_best"], out["ratio_range"] = r.estimate, [r.ci_low, r.ci_high]
        pct = f"{100 * (r.estimate - 1):.0f}% more gradient error than the best G at the estimates"
        if r.ci_high <= 1 + tol / 100:
            msg += f" is within {tol:g}% of the best G for every c1 in its interval ({pct})"
        elif r.ci_low <= 1 + tol / 100:
            msg += (f" is within {tol:g}% of the best G for some c1 in its interval but not all: {pct}, up to "
                    f"{100 * (r.ci_high - 1):.0f}% more over c1's interval")
        else:
            msg += (f" is not within {tol:g}% of the best G for any c1 in its interval: {pct}, "
                    f"{100 * (r.ci_low - 1):.0f}% to {100 * (r.ci_high - 1):.0f}% more over c1's interval")
    else:
        msg += f" costs {100 * (out['ratio_to_best'] - 1):.0f}% more gradient error than the best G at this budget"
    if rec is not None and rec != G:
        msg += f"; the planner recommends G = {rec}"
    return {**out, "message": msg}


def exact_planner(pm, budgets: Sequence[int], groups: Sequence[int] | None = None) -> dict[str, Any]:
    """The planner's G* from exact constants (``PolicyMoments``) for each budget."""
    per = []
    for N in budgets:
        p = _plan((pm.c1, pm.c2, pm.c3), N, groups)
        per.append({"budget": N, "g_star": p.g_star, "g_star_continuous": p.g_star_continuous,
                    "g_star_paper": p.g_star_paper})
    return {"g_star": per[0]["g_star"], "g_star_continuous": per[0]["g_star_continuous"],
            "g_star_paper": per[0]["g_star_paper"], "per_budget": per,
            "constants": {"c1": pm.c1, "c2": pm.c2, "c3": pm.c3}}


def run_plan(pilot: Pilot, budget: int, *, n_boot: int, seed: int, run: RunDir,
             exact_pm=None, exact_curve: list[dict[str, float]] | None = None, method: str = "studentized-log",
             group: int | None = None, tolerance: float = 0.05) -> dict[str, Any]:
    """Estimate c1, c2, c3 from the pilot, plan G for ``budget``; returns the results.json object.

    Parameters
    ----------
    pilot : the pilot batch
    budget : samples per step N
    n_boot : bootstrap replicates for the intervals
    seed : seeds the bootstrap generator (same seed -> same intervals)
    run : run folder; one metrics row (the component estimates) is appended
    exact_pm : PolicyMoments at the pilot's policy when known (env), for the ``exact`` block
    exact_curve : [{G, mse}]: exact GRPO minibatch MSE with B = N/G, when known
    method : bootstrap interval method, "studentized-log" (default), "studentized", ... (docs/math.md M39)
    group : the group size in use (optional): ``current_group`` says how much worse it is than the best
    tolerance : the band's tolerance (M40)
    """
    from ugrpo.stats.components import estimate_components

    if budget < 2:
        raise ValueError(f"--budget N = {budget} must be >= 2 (GRPO needs G >= 2 samples per prompt)")
    if budget > 1_000_000:
        raise ValueError(f"--budget N = {budget} is unreasonably large (the candidate table lists every divisor)")
    gen = torch.Generator().manual_seed(seed)
    kw = {"scores": pilot.scores} if pilot.scores is not None else {"gram": pilot.gram}
    vc = estimate_components(pilot.rewards, n_boot=n_boot, generator=gen, method=method, **kw)
    est = {k: getattr(vc, k).to_dict(*ESTIMATE_KEYS) for k in ("c1", "c2", "c3")}  # the bootstrap Intervals' JSON
    run.append_metrics({"kind": "components", **est,
                        "frac_zero_std": vc.frac_zero_std, "n_boot_degenerate": vc.n_boot_degenerate})
    p = _plan(vc, budget, tolerance=tolerance)
    if p.cannot_tell:  # a pilot that says nothing: its bootstrap intervals are not 95% intervals of anything
        for k in ("c1", "c2", "c3"):
            est[k].update(ci_low=None, ci_high=None)
    cands = [{"G": G, "B": B, "predicted_mse": v} for G, B, v in p.candidates]
    band = (_bootstrap_band(vc.replicates, budget, [c["G"] for c in cands]) if not p.cannot_tell
            else [(None, None)] * len(cands))
    for c, (lo, hi) in zip(cands, band):
        c["band_low"], c["band_high"] = lo, hi
    for c, prob, er, wr in zip(cands, p.band_probability, p.expected_ratio, p.worst_case):
        c["band_probability"], c["expected_ratio"], c["worst_ratio"] = prob, er, wr
    ci = list(p.g_star_ci) if p.g_star_ci is not None else [None, None]
    if not p.c1_distinguishable_from_zero:  # the bootstrap argmin then piles up at the largest candidate
        ci = [p.g_star_lower_bound if p.g_star_lower_bound is not None and math.isfinite(p.g_star_lower_bound)
              else None, None]
    results: dict[str, Any] = {
        **est,
        "g_star_continuous": p.g_star_continuous, "g_star_paper": p.g_star_paper, "g_star": p.g_star,
        "g_star_ci": [None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v for v in ci],
        "g_star_continuous_ci": p.g_star_continuous_ci, "g_star_lower_bound": p.g_star_lower_bound,
        "c1_distinguishable_from_zero": p.c1_distinguishable_from_zero,
        "g_recommended": p.g_recommended, "band": band_block(p, vc), "interval_method": vc.method,
        "candidates": cands, "message": p.message, "budget": budget,
        "pilot": {"B0": pilot.B0, "G0": pilot.G0, "samples": pilot.samples, "meta": pilot.meta,
                  "frac_zero_std": vc.frac_zero_std, "has_scores": pilot.scores is not None},
        "n_boot": n_boot, "seed": seed,
    }
    if group is not None:
        results["current_group"] = group_answer(results, group)
    if exact_pm is not None:
        ex = _plan((exact_pm.c1, exact_pm.c2, exact_pm.c3), budget, tolerance=tolerance)
        results["exact"] = {"c1": exact_pm.c1, "c2": exact_pm.c2, "c3": exact_pm.c3,
                            "g_star_continuous": ex.g_star_continuous, "g_star": ex.g_star,
                            "g_star_paper": ex.g_star_paper, "curve": exact_curve, "band": list(ex.band)}
    return to_jsonable(results)  # what results.json holds (inf -> null), so reports read the same thing


def _bootstrap_band(replicates: torch.Tensor, N: int, groups: Sequence[int]) -> list[tuple[float | None, float | None]]:
    """2.5% / 97.5% quantiles of the bound over bootstrap replicates clipped at 0, per G (NaN-c1 rows dropped)."""
    reps = replicates[torch.isfinite(replicates).all(dim=1)].clamp_min(0)  # the constants' range, as the bound
    if reps.shape[0] < 2:
        return [(None, None)] * len(groups)
    out = []
    for G in groups:
        vals = uniform_mse(reps[:, 0], reps[:, 1], reps[:, 2], N, G)
        q = torch.quantile(vals, torch.tensor([0.025, 0.975], dtype=vals.dtype))
        out.append((float(q[0]), float(q[1])))
    return out


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
    from ugrpo.experiments.plan.pilot_io import load_pilot, save_pilot
    from ugrpo.report.plan import write_report

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
    write_report(rd, results, argv)
    return results
