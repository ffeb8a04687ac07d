"""The same LM sweep on the three executors of ``ugrpo sweep --config`` (issue 5): in-process, the local
process pool and a local Ray, side by side in one run.

What is timed: ``ugrpo.experiments.sweep.lm.sweep_lm`` end to end (validation, every training run, the
aggregation and the report) into a fresh folder, for ``--workers 1`` (in-process), ``--workers W``
(spawn pool) and ``--ray --workers W`` (a local Ray started and shut down inside the call, as the CLI
does). The sweep: a random tiny model built in code (no download, no pre-training), the compact
arithmetic task, budget N, the given groups and seeds, a few steps each with evaluations. Backends
alternate over the repeats (A B C A B C), so load changes on a shared machine hit all of them.

Also checked (not timed): every backend gives the same held-out accuracy and pass@1 per run and step.

Written to ``benchmarks/results/local/sweep_backends.json`` (reference: ``benchmarks/results/``):
per backend the median wall time, runs per
minute, and the ratios ``pool_speedup`` (in-process / pool) and ``ray_over_pool`` (Ray / pool: the
price of Ray's start-up and task dispatch on one machine).

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_sweep_backends.py`` (about 3 minutes on 2
cores; ``--help`` for the sizes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import yaml  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import results_folder, write_result  # noqa: E402

from ugrpo.experiments.sweep.executors import RayOptions  # noqa: E402
from ugrpo.experiments.sweep.lm import LMSweepConfig, sweep_lm  # noqa: E402
from ugrpo.lm.tiny import build_tiny_model  # noqa: E402
from ugrpo.lm.tokenizer import build_char_tokenizer  # noqa: E402


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", type=int, default=32, help="N = B*G")
    p.add_argument("--groups", default="4,8,16", help="group sizes, comma-separated")
    p.add_argument("--seeds", type=int, default=2, help="runs per G")
    p.add_argument("--steps", type=int, default=40, help="training steps per run")
    p.add_argument("--workers", type=int, default=2, help="pool workers and local Ray CPUs")
    p.add_argument("--repeats", type=int, default=2, help="timed sweeps per backend (alternating)")
    p.add_argument("--out", type=results_folder, default=None, help="results folder, default benchmarks/results/local")
    return p.parse_args(argv)


def _config(folder: Path, steps: int) -> Path:
    tok = build_char_tokenizer()
    build_tiny_model(tok, seed=0, max_position_embeddings=64).save_pretrained(folder / "model")
    tok.save_pretrained(folder / "model")
    cfg = {"model": {"name": str(folder / "model")},
           "task": {"name": "arithmetic", "options": {"prompt_style": "compact", "difficulty": "easy", "n_train": 64,
                                                      "n_eval": 16}},
           "budget": {"samples_per_step": 8, "group_size": 4}, "sampling": {"max_new_tokens": 6}, "steps": steps,
           "optim": {"name": "adamw", "lr": 1e-3}, "eval": {"every": max(1, steps // 2), "n_problems": 16,
                                                             "pass1_samples": 2},
           "checkpoint_every": steps, "seed": 0}
    path = folder / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _evals(out: Path) -> dict:
    got = {}
    for run in sorted((out / "runs").iterdir()):
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
        got[run.name] = {r["step"]: (r["eval_accuracy"], r["eval_pass1"]) for r in rows if "eval_accuracy" in r}
    return got


def main(argv: list[str] | None = None) -> dict:
    a = _args(argv)
    groups = tuple(int(g) for g in a.groups.split(","))
    backends = {"in_process": dict(workers=1, ray=None), "pool": dict(workers=a.workers, ray=None),
                "ray": dict(workers=a.workers, ray=RayOptions())}
    times: dict[str, list[float]] = {k: [] for k in backends}
    evals: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as d:
        cfg_path = _config(Path(d), a.steps)
        for rep in range(a.repeats):
            for name, kw in backends.items():
                out = Path(d) / f"{name}-{rep}"
                sc = LMSweepConfig(config=str(cfg_path), budgets=(a.budget,), groups=groups, seeds=a.seeds, **kw)
                t0 = time.perf_counter()
                sweep_lm(sc, str(out), progress=False)
                times[name].append(time.perf_counter() - t0)
                evals.setdefault(name, _evals(out))
                print(f"{name:>10} repeat {rep}: {times[name][-1]:.1f} s", flush=True)
    n_runs = len(groups) * a.seeds
    med = {k: statistics.median(v) for k, v in times.items()}
    same = all(evals[k] == evals["in_process"] for k in evals)
    payload = {
        "sizes": {"budget": a.budget, "groups": list(groups), "seeds": a.seeds, "runs": n_runs, "steps": a.steps,
                  "workers": a.workers, "repeats": a.repeats},
        "times_s": times, "median_s": med, "runs_per_min": {k: 60 * n_runs / v for k, v in med.items()},
        "pool_speedup": med["in_process"] / med["pool"], "ray_over_pool": med["ray"] / med["pool"],
        "ray_speedup": med["in_process"] / med["ray"], "same_results": same,
        "load_average": os.getloadavg(),
        "note": "wall time of the whole sweep_lm call; Ray includes starting and stopping a local Ray each call",
    }
    path = write_result("sweep_backends", payload, a.out)
    print(json.dumps({k: payload[k] for k in ("median_s", "pool_speedup", "ray_over_pool", "same_results")}, indent=1))
    print(f"wrote {path}")
    if not same:
        raise SystemExit("backends disagree on the held-out metrics: see the JSON")
    return payload


if __name__ == "__main__":
    main()
