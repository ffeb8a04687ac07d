"""``ugrpo sweep --config FILE --allocation RULES``: held-out accuracy against samples spent, per allocation rule.

The sweep trains one run per (N, G, rule, seed) (:mod:`ugrpo.experiments.sweep.lm`, ``allocation.rule`` set in the
config); this module turns the runs' ``metrics.jsonl`` into the comparison, with pure functions only:

- **samples spent** at each evaluation: the row's ``samples_cum`` (policy samples drawn up to that step, DAPO-dynamic's
  extra rounds included); a run logged by a trainer without that key falls back to ``step * N``, exact for a rule that
  spends N samples every step (:func:`eval_points`; the report says which runs fell back). ``dynamic`` spends a
  variable number per step, so it has no fallback.
- **curves**: per (N, G, rule) and evaluation step, the mean over seeds of the samples spent and of the held-out
  metric, with a 95% Student-t interval over seeds cut to [0, 1] (an accuracy's range; cutting keeps the coverage,
  :meth:`ugrpo.stats.intervals.Interval.clip`). Rules that spend a variable number of samples are placed at their
  seeds' mean spend (the spread is kept as ``samples_min`` / ``samples_max``).
- **samples to reach uniform's final accuracy**: the target is uniform's final mean accuracy; each rule's
  mean curve is read as piecewise linear in samples and the first crossing of the target is taken
  (:func:`first_reach`); the ratio divides by uniform's own first crossing of the same target (uniform may reach its
  final mean before its last evaluation when its curve peaks earlier). The interval is a paired percentile
  bootstrap over seeds (:func:`bootstrap_ratio`): seed indices resampled jointly for every rule, target and both
  crossings recomputed per resample; a resample in which the rule never reaches the target counts as an infinite
  ratio, so the upper end is unbounded (None) when more than 2.5% of resamples do not reach it.
- **verdicts** against uniform, as ``ugrpo reproduce`` words them: the final accuracy from a paired test by seed
  (the 95% paired Student-t interval of the per-seed differences; 'too small to decide' when it contains 0), the
  samples and the goal from the ratio's paired bootstrap interval ('too small to decide' when it contains 1x or the
  goal), never an ordering the intervals do not support.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ugrpo.experiments.sweep.reach import BOOTSTRAP_REPS, bootstrap_ratio, first_reach, reach_ratio
from ugrpo.stats.allocation import RULES
from ugrpo.stats.intervals import MEAN_KEYS, TOO_SMALL, paired_t_interval, paired_verdict, t_interval
from ugrpo.train.config import ALLOCATION_RULES

__all__ = ["LM_RULES", "FALLBACK", "GOAL_RATIO", "GOAL_RATIOS", "check_rules", "eval_points", "curve", "first_reach",
           "reach_ratio", "bootstrap_ratio", "compare_rules", "allocation_section"]

LM_RULES = ALLOCATION_RULES
"""rules of ``ugrpo train --allocation.rule`` (docs/math.md M33-M36; ``dynamic`` is DAPO's resample-until-full)"""
FIXED_SPEND = tuple(r for r in RULES if r != "ustat-is")
"""rules that spend exactly N samples every step (so ``step * N`` is their samples spent); ``ustat-is`` spends N in
expectation only (docs/math.md M53)"""
FALLBACK = "step x N"
"""``samples_source`` of a run whose metrics.jsonl has no ``samples_cum`` (a trainer before per-step sample counts)"""
GOAL_RATIO = 0.6
"""issue 12's goal: ustat reaches uniform's final accuracy with at most 0.6x uniform's samples"""
GOAL_RATIOS = {"uniform-is": 0.7, "ustat-is": 0.7}
"""per-rule goals where they differ from :data:`GOAL_RATIO` (issue 20: the prompt-IS rules, at most 0.7x)"""


def check_rules(rules: Sequence[str]) -> None:
    """Unknown or repeated rule names: an error naming them and the choices."""
    bad = [r for r in rules if r not in LM_RULES]
    if bad or not rules:
        raise ValueError(f"--allocation {','.join(rules)}: unknown rule(s) {bad}; choose among {','.join(LM_RULES)}")
    if len(set(rules)) != len(rules):
        raise ValueError(f"--allocation lists a rule twice: {','.join(rules)}")


def eval_points(rows: Sequence[Mapping[str, Any]], N: int, metrics: Sequence[str], *,
                rule: str | None = None) -> tuple[dict[int, dict[str, Any]], str]:
    """The evaluations of one run: ({step: {metric: value, 'samples': samples spent}}, samples source).

    ``samples`` is the row's ``samples_cum``; without it, 0 at step 0 and ``step * N`` after (source
    :data:`FALLBACK`), exact only for a rule that spends N samples per step, so a ``dynamic`` run without it is an
    error.

    >>> pts, src = eval_points([{"step": 0, "eval_accuracy": 0.4}, {"step": 1, "loss": 0.1},
    ...                         {"step": 2, "eval_accuracy": 0.5}], 8, ["eval_accuracy"])
    >>> pts, src
    ({0: {'eval_accuracy': 0.4, 'samples': 0}, 2: {'eval_accuracy': 0.5, 'samples': 16}}, 'step x N')
    """
    out: dict[int, dict[str, Any]] = {}
    fell_back = False
    for r in rows:
        if not any(m in r for m in metrics):
            continue
        step = int(r["step"])
        if r.get("samples_cum") is not None:
            spent = r["samples_cum"]
        else:
            fell_back = fell_back or step > 0
            spent = step * N
        out[step] = {**{m: r.get(m) for m in metrics}, "samples": spent}
    if fell_back and rule is not None and rule not in FIXED_SPEND:
        raise ValueError(f"rule {rule}: the run's metrics.jsonl has no samples_cum, and {rule} spends a variable "
                         "number of samples per step, so step * N would be wrong; train it with a trainer that logs "
                         "samples_cum")
    return out, FALLBACK if fell_back else "samples_cum"


def curve(acc: np.ndarray, samples: np.ndarray, checkpoints: Sequence[int], *,
          bounds: tuple[float, float] | None = (0.0, 1.0)) -> list[dict[str, Any]]:
    """Per checkpoint: mean over seeds of samples spent and of the metric, with a 95% t-interval cut to ``bounds``.

    Parameters
    ----------
    acc, samples : (S, C) arrays, seeds x checkpoints
    checkpoints : the C evaluation steps
    bounds : the metric's range (an accuracy: [0, 1]); None = a custom reward, not cut
    """
    out = []
    for j, c in enumerate(checkpoints):
        st = t_interval([float(v) for v in acc[:, j]])
        cut = st if bounds is None else st.clip(*bounds)
        out.append({"checkpoint": int(c), "samples": float(samples[:, j].mean()),
                    "samples_min": float(samples[:, j].min()), "samples_max": float(samples[:, j].max()),
                    "mean": st.estimate, "se": st.se, "ci_low": cut.ci_low, "ci_high": cut.ci_high, "seeds": st.n})
    return out


def _not_reached(ratio: float | None) -> str:
    return "; the mean curve does not reach it within the run" if ratio is None else ""


def _samples_verdict(ratio: float | None, boot: Mapping[str, Any]) -> str:
    """Fewer or more samples than uniform to reach its final accuracy, from the ratio's bootstrap interval (a mean
    curve that does not reach the target decides nothing unless almost every resample does not reach it either)."""
    lo, hi = boot["ci_low"], boot["ci_high"]
    if lo is None and hi is None:
        if boot.get("seeds", 2) < 2:  # every resample of one seed is that seed: no evidence either way
            return f"{TOO_SMALL} (one seed: no interval){_not_reached(ratio)}"
        if boot["not_reached"] > 0.975:
            return "more samples than uniform: it does not reach uniform's final accuracy (nor in 97.5% of resamples)"
        return f"{TOO_SMALL} (no interval){_not_reached(ratio)}"
    if hi is not None and hi < 1:
        return "fewer samples than uniform (95% interval below 1x)"
    if lo is not None and lo > 1:
        return f"more samples than uniform (95% interval above 1x){_not_reached(ratio)}"
    return f"{TOO_SMALL} (the 95% interval contains 1x){_not_reached(ratio)}"


def _goal_verdict(ratio: float | None, boot: Mapping[str, Any], goal: float = GOAL_RATIO) -> str:
    """The goal 'at most ``goal`` x uniform's samples': met only when the whole 95% interval is at or below it."""
    lo, hi = boot["ci_low"], boot["ci_high"]
    if lo is None and hi is None:
        if boot.get("seeds", 2) < 2:  # every resample of one seed is that seed: no evidence either way
            return f"{TOO_SMALL} (one seed: no interval){_not_reached(ratio)}"
        if boot["not_reached"] > 0.975:
            return "not met: it does not reach uniform's final accuracy (nor in 97.5% of resamples)"
        return f"{TOO_SMALL} (no interval){_not_reached(ratio)}"
    if ratio is not None and hi is not None and hi <= goal:
        return f"met (95% interval at or below {goal:g}x)"
    if lo is not None and lo > goal:
        return f"not met (95% interval above {goal:g}x){_not_reached(ratio)}"
    return f"{TOO_SMALL} (the 95% interval contains {goal:g}x){_not_reached(ratio)}"


def compare_rules(curves: Mapping[str, Sequence[Mapping[str, Any]]], reach: Mapping[str, Mapping[str, Any]],
                  boot: Mapping[str, Mapping[str, Any]], finals: Mapping[str, Sequence[float]]) -> list[dict[str, Any]]:
    """One entry per rule: final mean with its interval, samples to reach uniform's final accuracy, the ratio with its
    bootstrap interval, and the verdicts against uniform (final accuracy, fewer samples than uniform, the rule's goal:
    0.6x, or :data:`GOAL_RATIOS`).

    ``finals``: per rule, the final metric of each seed, the seeds in the same order for every rule: the final-accuracy
    verdict is a paired test by seed (the mean of the per-seed differences with a 95% paired Student-t interval),
    not the overlap of the two marginal intervals (a test at well under the 5% level).
    """
    out = []
    for rule, cv in curves.items():
        last, r, b = cv[-1], reach[rule], boot[rule]
        row = {"rule": rule, "checkpoint": last["checkpoint"], "samples_final": last["samples"],
               "final": last["mean"], "final_ci_low": last["ci_low"], "final_ci_high": last["ci_high"],
               "seeds": last["seeds"], "target": r["target"], "samples_to_reach": r["samples_to_reach"],
               "uniform_samples_to_reach": r["uniform_samples_to_reach"], "ratio": r["ratio"],
               "ratio_ci_low": b["ci_low"], "ratio_ci_high": b["ci_high"],
               "bootstrap_not_reached": b["not_reached"], "bootstrap_undefined": b["undefined"]}
        if rule != "uniform":
            diff = paired_t_interval(finals[rule], finals["uniform"])
            row["final_diff"], row["final_diff_ci_low"], row["final_diff_ci_high"] = diff.to_dict(*MEAN_KEYS).values()
            row["final_verdict"] = paired_verdict(diff, "lower than uniform", "higher than uniform")
            row["samples_verdict"] = _samples_verdict(r["ratio"], b)
            row["goal_ratio"] = GOAL_RATIOS.get(rule, GOAL_RATIO)
            row["goal_verdict"] = _goal_verdict(r["ratio"], b, row["goal_ratio"])
        if not r["uniform_samples_to_reach"]:
            row["samples_verdict"] = row["goal_verdict"] = (
                "no ratio: uniform's final accuracy is not above its initial one (it 'reaches' it at 0 samples)")
        out.append(row)
    return out


def _matrix(runs: Sequence[Mapping[str, Any]], checkpoints: Sequence[int], key: str) -> np.ndarray:
    return np.array([[float(r["evals"][c][key]) for c in checkpoints] for r in runs], dtype=np.float64)


def allocation_section(runs: Sequence[Mapping[str, Any]], checkpoints: Sequence[int], metrics: Sequence[str],
                       *, bounds: tuple[float, float] | None = (0.0, 1.0), reps: int = BOOTSTRAP_REPS,
                       seed: int = 0) -> dict[str, Any]:
    """The ``allocation`` section of the sweep's results.json, per (N, G) cell and metric.

    ``runs``: one dict per run with ``budget``, ``G``, ``rule``, ``seed``, ``samples_source`` and ``evals``
    ({step: {metric: value, 'samples': spent}}); ``checkpoints``: the evaluation steps every run has.
    """
    cells: dict[tuple[int, int], dict[str, list]] = {}
    for r in sorted(runs, key=lambda r: r["seed"]):
        cells.setdefault((r["budget"], r["G"]), {}).setdefault(r["rule"], []).append(r)
    out = []
    for (N, G), by_rule in sorted(cells.items()):
        for m in metrics:
            have = {rule: rs for rule, rs in by_rule.items() if all(r["evals"][c].get(m) is not None
                                                                   for r in rs for c in checkpoints)}
            if not have:
                continue
            acc = {rule: _matrix(rs, checkpoints, m) for rule, rs in have.items()}
            samples = {rule: _matrix(rs, checkpoints, "samples") for rule, rs in have.items()}
            curves = {rule: curve(acc[rule], samples[rule], checkpoints, bounds=bounds) for rule in have}
            entry = {"budget": N, "G": G, "metric": m, "curves": curves, "comparison": None}
            if "uniform" in have:
                reach = reach_ratio(acc, samples)
                boot = bootstrap_ratio(acc, samples, reps=reps, seed=seed)
                entry["comparison"] = compare_rules(curves, reach, boot, {k: v[:, -1].tolist() for k, v in acc.items()})
            out.append(entry)
    fell_back = sorted(r["name"] for r in runs if r["samples_source"] == FALLBACK)
    return {"cells": out, "rules": list(dict.fromkeys(r["rule"] for r in runs)), "fallback_runs": fell_back,
            "samples": ("samples_cum from each run's metrics.jsonl" if not fell_back else
                        f"samples_cum from metrics.jsonl; {len(fell_back)} of {len(runs)} runs have none (a trainer "
                        "without per-step sample counts) and use step x N, exact for a rule that spends N per step"),
            "interval": "95% Student-t interval over seeds" + ("" if bounds is None else
                                                              f", cut to [{bounds[0]:g}, {bounds[1]:g}]"),
            "reach": "first crossing of uniform's final mean accuracy by the mean curve, linear between evaluations; "
                     "ratio to uniform's own first crossing; 95% paired percentile bootstrap over seeds "
                     f"({reps} resamples)",
            "goal_ratio": GOAL_RATIO}
