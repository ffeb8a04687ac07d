"""Is a training setting limited by gradient noise? The positive control of the prompt-IS training study.

A rule whose total gradient MSE is r times uniform's at N samples per step acts on the noise like uniform at N / r
samples per step (docs/math.md M33: c1, c2 and c3 all scale with 1/N at a fixed G). Uniform at 2N is therefore the
best case for any rule with r = 1/2, at no change of objective or of the prompts drawn. This script reads a finished
``ugrpo sweep --config ... --budget N1,N2,... --groups G --allocation uniform`` and reports, per budget against the
smallest (runs paired by seed):

* the paired difference of the held-out accuracy (greedy and pass@1) at the last checkpoint, equal STEPS, with a 95%
  paired t-interval (``stats.intervals.paired_t_interval``);
* the same at equal SAMPLES (the larger budget at the checkpoint where it has spent what the smallest spends in the
  whole run), when the run has such a checkpoint;
* the steps the larger budget needs to reach the smallest budget's final mean accuracy, as a ratio to the smallest
  budget's own steps, with the paired bootstrap over seeds of ``experiments.sweep.lm_alloc.bootstrap_ratio``.

Nothing is run here; the numbers are the sweep's.

    python benchmarks/summarize_noise_control.py --run runs/posctl --name noise_control \
        --command "ugrpo sweep ..." --design "docs/lm-sweep.md ..." --machine "2 shared cores, load ..."
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import results_folder, write_result  # noqa: E402

from ugrpo.experiments.sweep.lm_alloc import bootstrap_ratio, reach_ratio  # noqa: E402
from ugrpo.stats.intervals import paired_t_interval  # noqa: E402

METRICS = {"greedy": "eval_accuracy", "pass1": "eval_pass1"}
RUN_NAME = re.compile(r"N(\d+)-G(\d+)-uniform-s(\d+)$")


def _curves(run: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(steps, {metric: values}) of one run's evaluations, the step-0 evaluation included."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rows = [r for r in rows if "eval_accuracy" in r]
    return (np.array([r["step"] for r in rows], float),
            {m: np.array([r[k] for r in rows], float) for m, k in METRICS.items()})


def load(study: Path) -> dict[int, dict]:
    """{N: {'seeds': [...], 'steps': (C,), metric: (S, C)}} from the sweep's run folders, seeds sorted."""
    by_n: dict[int, dict[int, tuple]] = {}
    for run in sorted((study / "runs").iterdir()):
        m = RUN_NAME.match(run.name)
        if m and (run / "metrics.jsonl").exists():
            by_n.setdefault(int(m.group(1)), {})[int(m.group(3))] = _curves(run)
    out = {}
    for n, runs in by_n.items():
        seeds = sorted(runs)
        steps = runs[seeds[0]][0]
        if any(not np.array_equal(runs[s][0], steps) for s in seeds):
            raise ValueError(f"N = {n}: the runs were evaluated at different steps; re-run them with one --eval.every")
        out[n] = {"seeds": seeds, "steps": steps, **{m: np.stack([runs[s][1][m] for s in seeds]) for m in METRICS}}
    return out


def _iv(iv) -> dict:
    return {"mean": round(iv.estimate, 4), "ci_low": round(iv.ci_low, 4), "ci_high": round(iv.ci_high, 4),
            "seeds": iv.n}


def compare(data: dict[int, dict]) -> dict:
    """Every budget against the smallest, paired by seed (the seeds both hold)."""
    base_n = min(data)
    base = data[base_n]
    out = {"base_budget": base_n, "budgets": {}}
    for n in sorted(data):
        d = data[n]
        seeds = sorted(set(d["seeds"]) & set(base["seeds"]))
        ib = [base["seeds"].index(s) for s in seeds]
        io = [d["seeds"].index(s) for s in seeds]
        row: dict = {"seeds": seeds, "final": {}, "equal_samples": {}, "steps_to_reach": {}}
        # the checkpoint of budget n that has spent what the base spends in its whole run
        spent = base["steps"][-1] * base_n
        j_eq = np.flatnonzero(np.isclose(d["steps"] * n, spent))
        for m in METRICS:
            a, b = d[m][io], base[m][ib]
            row["final"][m] = {"mean": round(float(a[:, -1].mean()), 4),
                               "diff": _iv(paired_t_interval(a[:, -1].tolist(), b[:, -1].tolist()))}
            if j_eq.size:
                row["equal_samples"][m] = {"step": int(d["steps"][j_eq[0]]),
                                           "diff": _iv(paired_t_interval(a[:, j_eq[0]].tolist(),
                                                                         b[:, -1].tolist()))}
            if n != base_n:
                acc = {"uniform": b, "larger": a}
                k = len(seeds)
                xs = {"uniform": np.tile(base["steps"], (k, 1)), "larger": np.tile(d["steps"], (k, 1))}
                point = reach_ratio(acc, xs)["larger"]
                boot = bootstrap_ratio(acc, xs)["larger"]
                row["steps_to_reach"][m] = {"target": round(point["target"], 4), "steps": point["samples_to_reach"],
                                            "base_steps": point["uniform_samples_to_reach"], "ratio": point["ratio"],
                                            "ci_low": boot["ci_low"], "ci_high": boot["ci_high"],
                                            "not_reached": boot["not_reached"], "undefined": boot["undefined"]}
        out["budgets"][str(n)] = row
    return out


def plot(data: dict[int, dict], path: Path) -> None:
    """Mean held-out pass@1 and greedy accuracy over seeds per budget, against steps and against samples spent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharey="row")
    for i, (m, label) in enumerate((("pass1", "held-out pass@1 (16 samples)"), ("greedy", "held-out greedy accuracy"))):
        for n in sorted(data):
            d = data[n]
            mean = d[m].mean(axis=0)
            se = d[m].std(axis=0, ddof=1) / np.sqrt(d[m].shape[0])
            for ax, x in ((axes[i][0], d["steps"]), (axes[i][1], d["steps"] * n)):
                ax.plot(x, mean, marker="o", ms=3, label=f"uniform N = {n}")
                ax.fill_between(x, mean - se, mean + se, alpha=0.15)
        axes[i][0].set_ylabel(label + "\n(mean over seeds, +-1 SE)")
    axes[1][0].set_xlabel("steps")
    axes[1][1].set_xlabel("samples spent")
    axes[0][0].legend()
    fig.suptitle("Positive control: does less gradient noise per step (larger N) help? (paired seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="the sweep's --out folder")
    ap.add_argument("--name", default="noise_control")
    ap.add_argument("--command", default="")
    ap.add_argument("--design", default="")
    ap.add_argument("--machine", default="")
    ap.add_argument("--out", type=results_folder, default=None, help="results folder, default benchmarks/results/local")
    ap.add_argument("--plot", type=Path, default=None, help="also write the curves to this PNG")
    args = ap.parse_args(argv)
    data = load(args.run)
    res = compare(data)
    if args.plot:
        plot(data, args.plot)
    res.update(command=args.command, design=args.design, machine=args.machine)
    print(json.dumps(res, indent=1))
    print("wrote", write_result(args.name, res, args.out))


if __name__ == "__main__":
    main()
