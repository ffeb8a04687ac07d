"""Summarise a finished ``ugrpo sweep --allocation`` training study into one JSON beside the reference results.

The sweep's own ``results.json`` holds the accuracy curves and the paired comparisons (final accuracy, samples to
reach uniform's final accuracy); this adds the per-rule step metrics read from every run's ``metrics.jsonl``: samples
per step, the share of samples in all-equal groups, the prompt-IS weights (max, ESS), q's entropy, the predicted
ratio and, with the guard, which law it chose how often. Nothing is run here; the numbers are the study's.

    python benchmarks/summarize_training_study.py --run runs/is-study --name is_training_study \
        --command "ugrpo sweep ..." --design "docs/lm-sweep.md, ..." --machine "2 shared cores, load ..."
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path

from common import write_result

STEP_MEANS = ("frac_reward_zero_std", "is_ess", "is_weight_max", "is_q_entropy", "is_predicted_ratio",
              "is_predicted_ratio_plugin")


def _rows(run: Path) -> list[dict]:
    """The run's training-step rows (the step-0 evaluation row is not one)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if "s_per_step" in r]


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def rule_metrics(runs: list[Path]) -> dict:
    """Step metrics of one rule's runs, pooled over runs and steps."""
    rows = [r for run in runs for r in _rows(run)]
    out: dict = {"runs": len(runs), "steps": len(rows), "mean_samples": _mean([r["samples"] for r in rows])}
    zero = [r["samples_zero_std"] / r["samples"] for r in rows if r.get("samples") and "samples_zero_std" in r]
    out["frac_samples_zero_std"] = _mean(zero)
    for key in STEP_MEANS:
        out[key] = _mean([r[key] for r in rows if isinstance(r.get(key), (int, float))])
    choices = Counter(r["is_guard_choice"] for r in rows if r.get("is_guard_choice"))
    out["is_guard_choice"] = dict(choices) or None
    out["median_s_per_step"] = round(statistics.median(r["s_per_step"] for r in rows), 4) if rows else None
    out["total_samples_per_run"] = [_rows(run)[-1].get("samples_cum") for run in runs]
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, required=True, help="the sweep's run folder (finished: it has results.json)")
    p.add_argument("--name", required=True, help="the JSON's name under benchmarks/results/local/")
    p.add_argument("--command", required=True, help="the sweep command that made the folder")
    p.add_argument("--design", default="", help="where the study's design was written down before the results")
    p.add_argument("--machine", default="", help="cores, load, wall time")
    p.add_argument("--trainer", default="", help="the commit the runs used and settings that matter")
    args = p.parse_args(argv)
    results = args.run / "results.json"
    if not results.is_file() or (args.run / "UNFINISHED").exists():
        raise SystemExit(f"error: {args.run} is not a finished sweep (no results.json, or UNFINISHED is there)")
    allocation = json.loads(results.read_text())["allocation"]
    by_rule: dict[str, list[Path]] = {}
    for run in sorted((args.run / "runs").iterdir()):
        cfg = json.loads((run / "config.json").read_text())
        by_rule.setdefault(cfg["allocation"]["rule"], []).append(run)
    payload = {"command": args.command, "design": args.design, "machine": args.machine, "trainer": args.trainer,
               "allocation": allocation, "per_rule_step_metrics": {k: rule_metrics(v) for k, v in by_rule.items()}}
    print(write_result(args.name, payload))


if __name__ == "__main__":
    main()
