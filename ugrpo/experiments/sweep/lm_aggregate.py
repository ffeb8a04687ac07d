"""Aggregation of a language-model G sweep (:mod:`ugrpo.experiments.sweep.lm`): pure functions over the runs' rows
of :func:`~ugrpo.experiments.sweep.lm.collect_evals`: the scoring faults per run and over the sweep, the mean and 95%
t-interval per (N, G[, rule], checkpoint, metric), and the empirical best G per (N, checkpoint, metric).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ugrpo.report.sweep import METRICS
from ugrpo.stats.intervals import t_interval

__all__ = ["SCORING_FAULTS", "scoring_fault_counts", "scoring_fault_summary", "BINARY_TASKS", "aggregate_lm",
           "best_lm_groups"]


SCORING_FAULTS = ("n_errors", "n_timeouts", "eval_n_errors")
"""The metrics.jsonl keys that count completions a run's scorer failed on (it raised or timed out; at evaluations
both in ``eval_n_errors``): a fault of the reward function or verifier. A completion with no answer in it
(``n_parse_failures``, part of ``eval_n_unscorable``) is the model's doing, routine for a small model, and not one."""


def scoring_fault_counts(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    """A run's scoring faults by kind (:data:`SCORING_FAULTS`), summed over its metrics.jsonl rows; only the kinds
    that occurred ({} for none).

    >>> scoring_fault_counts([{"step": 0, "eval_n_errors": 2}, {"step": 1, "n_errors": 8, "n_parse_failures": 3}])
    {'n_errors': 8, 'eval_n_errors': 2}
    """
    totals = {k: sum(int(r.get(k) or 0) for r in rows) for k in SCORING_FAULTS}
    return {k: n for k, n in totals.items() if n}


def scoring_fault_summary(runs: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """{runs: the names of the runs whose scorer failed on some completions, of: how many runs, counts: the totals by
    kind} over :func:`~ugrpo.experiments.sweep.lm.collect_evals`' rows; None when no run had any."""
    hit = [r for r in runs if r["scoring_errors"]]
    if not hit:
        return None
    return {"runs": [r["name"] for r in hit], "of": len(runs),
            "counts": {k: n for k in SCORING_FAULTS if (n := sum(r["scoring_errors"].get(k, 0) for r in hit))}}


BINARY_TASKS = ("arithmetic", "gsm8k", "math")
"""Tasks whose verifier returns 0 or 1: their accuracy and pass@1 lie in [0, 1] (a custom reward may not)."""


def aggregate_lm(runs: Sequence[dict[str, Any]], *,
                 bounds: tuple[float, float] | None = None) -> tuple[list[int], list[dict[str, Any]]]:
    """(checkpoints common to all runs, rows per (N, G[, rule], checkpoint, metric) with mean and 95% t-interval;
    a row has ``rule`` when its runs do).

    ``bounds``: the range the metrics can take (``(0, 1)`` for a binary task); each interval is cut to it
    (:meth:`ugrpo.stats.intervals.Interval.clip`: the coverage is unchanged) and the row says ``clipped``.
    """
    common = set.intersection(*(set(r["evals"]) for r in runs)) if runs else set()
    cps = sorted(common)
    cells: dict[tuple[int, int, str], list[dict]] = {}
    for r in runs:
        cells.setdefault((r["budget"], r["G"], r.get("rule") or ""), []).append(r)
    rows = []
    for (N, G, rule), rs in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1], _rule_order(kv[0][2]))):
        for c in cps:
            for m in METRICS:
                vals = [r["evals"][c][m] for r in rs]
                if any(v is None for v in vals):
                    continue
                st = t_interval(vals)
                cut = st if bounds is None else st.clip(*bounds)
                rows.append({"budget": N, "G": G, "B": N // G, "checkpoint": c, "metric": m, "mean": st.estimate,
                             "se": st.se, "ci_low": cut.ci_low, "ci_high": cut.ci_high, "seeds": st.n,
                             "clipped": (cut.ci_low, cut.ci_high) != (st.ci_low, st.ci_high)}
                            | ({"rule": rule} if rule else {}))
    return cps, rows


def _rule_order(rule: str) -> int:
    from ugrpo.experiments.sweep.lm_alloc import LM_RULES

    return LM_RULES.index(rule) if rule in LM_RULES else -1


def best_lm_groups(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The empirical best G (largest mean) per (budget, checkpoint, metric); ties go to the smaller G.

    Each entry carries the best cell's 95% interval and ``overlapping``: the other G whose interval
    overlaps it (not distinguishable from the best at this many seeds; None with one seed: no intervals).
    """
    best: dict[tuple[int, int, str], dict] = {}
    for r in sorted(rows, key=lambda r: r["G"]):
        k = (r["budget"], r["checkpoint"], r["metric"])
        if k not in best or r["mean"] > best[k]["mean"]:
            best[k] = r
    out = []
    for (N, c, m), r in sorted(best.items()):
        cell = [q for q in rows if (q["budget"], q["checkpoint"], q["metric"]) == (N, c, m) and q["G"] != r["G"]]
        overlap = (None if r["ci_low"] is None else
                   [q["G"] for q in cell if q["ci_high"] >= r["ci_low"] and q["ci_low"] <= r["ci_high"]])
        out.append({"budget": N, "checkpoint": c, "metric": m, "G": r["G"], "mean": r["mean"],
                    "ci_low": r["ci_low"], "ci_high": r["ci_high"], "seeds": r["seeds"],
                    "tied": [q["G"] for q in cell if q["mean"] == r["mean"]], "overlapping": overlap})
    return out
