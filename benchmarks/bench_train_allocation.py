"""``ugrpo train --allocation RULE`` side by side at equal N: time per step and where the samples went (issue 12).

Runs :func:`ugrpo.train.loop.train` on one config (default ``examples/arith-tiny.yaml``) for ``--steps`` steps
per rule, in one process, rules round-robin for ``--rounds`` rounds (each round repeats the same deterministic
runs, so only the timings differ; interleaving spreads the machine's load drift over the rules), and reads each
run's metrics.jsonl. Timings: medians over all steps of all rounds; everything else from round 1.
Per rule: median and mean ``s_per_step`` and their ratio to ``uniform``, the mean
``s_alloc_sketch`` (``ustat``'s score sketch), the share of samples on groups whose rewards were all equal
(``samples_zero_std / samples``), samples spent, the mean certificate ``alloc_predicted_ratio`` (a prediction,
docs/allocation.md A4), mean predicted vs realised reward variance and the final held-out accuracy (one seed:
no accuracy claim can be made from it). Timings on the shared 2-core machine are noisy (``load_average``).

Written to ``benchmarks/results/local/train_allocation.json``.
Run: ``.venv/bin/python benchmarks/bench_train_allocation.py --steps 50 --rules uniform,ustat,vip,knapsack,dynamic``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from ugrpo.train.config import load_config  # noqa: E402
from ugrpo.train.loop import train  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _summary(rows: list[dict]) -> dict:
    tr = [r for r in rows if r["step"] > 0]
    sps = [r["s_per_step"] for r in tr]
    out = {"median_s_per_step": statistics.median(sps), "mean_s_per_step": statistics.mean(sps),
           "samples": sum(r["samples"] for r in tr),
           "frac_samples_zero_std": sum(r["samples_zero_std"] for r in tr) / sum(r["samples"] for r in tr),
           "final_eval_accuracy": next((r["eval_accuracy"] for r in reversed(rows) if r.get("eval_accuracy")
                                        is not None), None)}
    for key in ("s_alloc_sketch", "alloc_predicted_ratio", "reward_var_predicted", "reward_var_realised",
                "dynamic_rounds"):
        vals = [r[key] for r in tr if r.get(key) is not None]
        if vals:
            out[f"mean_{key}"] = statistics.mean(vals)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "examples/arith-tiny.yaml"))
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--rules", default="uniform,ustat,vip,knapsack,dynamic")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/local/train_allocation.json"))
    args = ap.parse_args()
    results, times = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            for rule in args.rules.split(","):
                cfg = load_config(args.config, ["--steps", str(args.steps), "--allocation.rule", rule,
                                                "--eval.every", str(args.steps)])
                out = Path(tmp) / f"{rule}-{k}"
                train(cfg, out)
                rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
                results.setdefault(rule, _summary(rows))
                times.setdefault(rule, []).extend(r["s_per_step"] for r in rows if r["step"] > 0)
    for rule, t in times.items():
        results[rule].update(median_s_per_step=statistics.median(t), mean_s_per_step=statistics.mean(t))
    base = results.get("uniform")
    if base:
        for r in results.values():
            r["s_per_step_ratio_vs_uniform"] = r["median_s_per_step"] / base["median_s_per_step"]
    out = {"config": args.config, "steps": args.steps, "rounds": args.rounds, "rules": results,
           "load_average": os.getloadavg(),
           "note": "one seed per rule; timings on a shared machine; alloc_predicted_ratio is a prediction"}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
