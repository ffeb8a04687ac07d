"""``ugrpo train --allocation RULE`` side by side at equal N: time per step, where the samples went, and what
``ustat``'s score statistics cost (issues 12, 19).

Part 1 (runs): :func:`ugrpo.train.loop.train` on one config (default ``examples/arith-tiny.yaml``) for ``--steps``
steps per rule, in one process, rules round-robin for ``--rounds`` rounds (each round repeats the same deterministic
runs, so only the timings differ; interleaving spreads the machine's load drift over the rules), and reads each
run's metrics.jsonl. A rule ``ustat@sketch`` is ``ustat`` with ``--allocation.scores sketch`` (the score sketch of
all trainable parameters; plain ``ustat`` reads the output projection's exact scores off the update's forward,
docs/allocation.md A3c). Timings: medians over all steps of all rounds; everything else from round 1. Per rule:
median and mean ``s_per_step`` and their ratio to ``uniform``, the mean ``s_alloc_scores`` (``ustat``'s score
statistics) and its share of uniform's median step, the share of samples on groups whose rewards were all equal
(``samples_zero_std / samples``), samples spent, the mean certificate ``alloc_predicted_ratio`` (a prediction,
docs/allocation.md A4), mean predicted vs realised reward variance and the final held-out accuracy (one seed: no
accuracy claim can be made from it).

Part 2 (score statistics, one step side by side): one batch of the config's N samples from its model (B prompts x
G), then, alternating for ``--reps`` rounds: the step's update alone (``step_updates``, AdamW with lr 0 so the model
stays put), the same update feeding the output-projection statistics (what ``ustat`` adds to a step: its marginal
cost is the per-round paired difference), those statistics from a forward of their own (the TRL adapter's and the
active-dropout path), the score sketch (``scores: sketch``), and a bare forward+backward of the batch with prompts
shared (the trainer's) and not shared (what any exact per-sample score through the prompt costs at least,
docs/math.md M73). Each as a share of uniform's median step of part 1.

Timings on the shared 2-core machine are noisy (``load_average``). Written to
``benchmarks/results/local/train_allocation.json``.
Run: ``.venv/bin/python benchmarks/bench_train_allocation.py --steps 25`` (rules uniform, ustat, ustat@sketch, vip,
knapsack by default).
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

import torch  # noqa: E402
from common import time_alternating  # noqa: E402

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
                                        is not None), None),
           "alloc_g_hist": {}}
    for r in tr:
        for g, c in (r.get("alloc_g_hist") or {}).items():
            out["alloc_g_hist"][g] = out["alloc_g_hist"].get(g, 0) + c
    for key in ("s_alloc_scores", "alloc_predicted_ratio", "reward_var_predicted", "reward_var_realised",
                "dynamic_rounds"):
        vals = [r[key] for r in tr if r.get(key) is not None]
        if vals:
            out[f"mean_{key}"] = statistics.mean(vals)
    return out


def _overrides(rule: str, steps: int) -> list[str]:
    name, _, scores = rule.partition("@")
    extra = ["--allocation.scores", scores] if scores else []
    return ["--steps", str(steps), "--allocation.rule", name, "--eval.every", str(steps), *extra]


def runs_part(args) -> dict:
    results, times = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            for rule in args.rules.split(","):
                cfg = load_config(args.config, _overrides(rule, args.steps))
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
            if "mean_s_alloc_scores" in r:
                r["score_stats_share_of_uniform_step"] = r["mean_s_alloc_scores"] / base["median_s_per_step"]
    return results


def score_stats_part(args, uniform_step: float | None) -> dict:
    """One batch of the config's N samples; the update with and without ustat's statistics, alternating."""
    from ugrpo.experiments.plan.lm import load_lm_task
    from ugrpo.lm.loading import load_policy
    from ugrpo.lm.logprobs import completion_logprobs
    from ugrpo.lm.output_scores import OutputScores, output_score_norms
    from ugrpo.lm.sampling import sample_groups
    from ugrpo.stats.history import ScoreNorms
    from ugrpo.tasks.base import score
    from ugrpo.train.alloc import Allocator, step_advantages
    from ugrpo.train.distributed import DistContext
    from ugrpo.train.update import step_updates

    cfg = load_config(args.config, _overrides("ustat", 1))
    N, G = cfg.budget.samples_per_step, cfg.budget.group_size
    B, T = N // G, cfg.sampling.temperature
    task, _ = load_lm_task(cfg.model.name, cfg.task.name, dict(cfg.task.options))
    problems = task.train_problems()[:B]
    pol = load_policy(cfg.model.name, seed=cfg.seed)
    model, tok = pol.model.train(), pol.tokenizer
    ro = sample_groups(model, tok, [p.prompt for p in problems], G, seeds=list(range(B)), temperature=T,
                       top_p=cfg.sampling.top_p, max_new_tokens=cfg.sampling.max_new_tokens)
    sc = score(task, ro.texts, [problems[i] for i in ro.prompt_index.tolist()])
    z = torch.tensor(sc.rewards, dtype=torch.float64)
    adv, _ = step_advantages(cfg, ro, z, None)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=0.0)  # the step's arithmetic, the model unchanged
    alloc = Allocator(cfg, B)

    def update(on_logits=None):
        step_updates(model, params, opt, ro, torch.arange(B), adv, reference=None, cfg=cfg, ctx=DistContext(),
                     on_logits=on_logits)

    def update_with_output():
        rec = OutputScores(model, ro.completion_ids, ro.completion_mask, ro.prompt_index, z, temperature=T)
        update(rec)
        rec.result()

    def own_forward():
        output_score_norms(model, ro, z, ro.prompt_index, temperature=T, chunk_size=cfg.budget.micro_batch or None)

    def sketch():
        w, _ = alloc.sketch(model, ro)
        ScoreNorms.from_scores(z.numpy(), w.numpy(), ro.group_sizes.numpy())

    def fwd_bwd(share: bool):  # the floor of any exact per-sample score through the prompt: the unshared backward
        lp = completion_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                                 temperature=T, share_prompts=share)
        (lp.sum(1) * adv).sum().backward()
        model.zero_grad(set_to_none=True)

    timed = time_alternating({"update": update, "update_with_output_stats": update_with_output,
                              "output_stats_own_forward": own_forward, "sketch": sketch,
                              "fwd_bwd_shared_prompts": lambda: fwd_bwd(True),
                              "fwd_bwd_unshared_prompts": lambda: fwd_bwd(False)},
                             repeats=args.reps, warmup=2)
    diffs = [a - b for a, b in zip(timed["update_with_output_stats"]["times_s"], timed["update"]["times_s"])]
    out = {name: {"median_s": v["median_s"], "min_s": v["min_s"]} for name, v in timed.items()}
    out["output_stats_marginal"] = {"median_s": statistics.median(diffs),
                                    "note": "per-round paired difference: update with the statistics - update"}
    out["unshared_over_shared_fwd_bwd"] = (out["fwd_bwd_unshared_prompts"]["median_s"]
                                           / out["fwd_bwd_shared_prompts"]["median_s"])
    if uniform_step:
        for name in ("update", "output_stats_marginal", "output_stats_own_forward", "sketch", "fwd_bwd_shared_prompts",
                     "fwd_bwd_unshared_prompts"):
            out[name]["share_of_uniform_step"] = out[name]["median_s"] / uniform_step
    out["batch"] = {"N": N, "B": B, "G": G, "completion_tokens_mean": float(ro.completion_mask.sum(1).double().mean()),
                    "prompt_tokens_mean": float(ro.prompt_mask.sum(1).double().mean()), "reps": args.reps}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "examples/arith-tiny.yaml"))
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--rules", default="uniform,ustat,ustat@sketch,vip,knapsack")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=30, help="part 2: alternating rounds of the one-step timings")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/local/train_allocation.json"))
    args = ap.parse_args()
    load_before = os.getloadavg()
    results = runs_part(args)
    uniform_step = results.get("uniform", {}).get("median_s_per_step")
    stats = score_stats_part(args, uniform_step)
    out = {"config": os.path.relpath(args.config, REPO), "steps": args.steps, "rounds": args.rounds, "rules": results,
           "score_stats_one_step": stats, "load_average_before": load_before, "load_average": os.getloadavg(),
           "command": "benchmarks/bench_train_allocation.py " + " ".join(
               f"--{k} {os.path.relpath(v, REPO) if k == 'config' else v}" for k, v in vars(args).items()
               if k != "out"),
           "note": "one seed per rule; timings on a shared machine; alloc_predicted_ratio is a prediction"}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
