"""A TRL ``GRPOTrainer`` run with ugrpo's advantages, per-prompt group sizes or the G* monitor (docs/trl.md).

Runs offline on a CPU in seconds (one torch thread, as the ``ugrpo`` commands) with the shipped tiny model
``tiny:instruct`` (a 1 M-parameter arithmetic model, accuracy about 0.4) on the first 32 prompts of
``examples/data/arith-compact.jsonl`` with the 0/1 reward ``examples/arith_reward.py:correct``::

    python examples/trl_grpo_with_ugrpo.py --allocation ustat --steps 20      # G_b per prompt, sum = N
    python examples/trl_grpo_with_ugrpo.py --allocation uniform --every 5     # every prompt G; the G* monitor
    python examples/trl_grpo_with_ugrpo.py --allocation ustat-is --steps 20   # prompts drawn from q, weighted
    python examples/trl_grpo_with_ugrpo.py --config examples/grpo-trl.yaml    # a TRL YAML with ugrpo's fields
    python examples/trl_grpo_with_ugrpo.py --model ./my-model --baseline grpo_mean --scale std --allocation uniform

Only the lines marked ``# ugrpo`` differ from a plain TRL script. At the end it prints, per step, the group sizes
the rule chose and the certificate (the predicted MSE ratio against uniform G with its nominal-95% interval; for
the prompt-IS rules the second-moment ratio against uniform prompts, M59, and the weights), or
the monitor's measurements (c1, c3, G* at N = completions per step) and its share of the step time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# TRL 1.x still calls transformers' gradient_checkpointing* names, which transformers 5 deprecates with a
# FutureWarning per call; nothing in this script can act on them, so they are hidden (the warnings ugrpo itself
# gives, about the advantages it replaces and the group size, stay).
warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers(\.|$)")
HERE = Path(__file__).resolve().parent


def config_and_script(args):
    """(UGRPOConfig, model, dataset file) from --config (TrlParser, as `trl grpo --config` reads it) or the flags."""
    from ugrpo.integrations.trl import UGRPOConfig  # ugrpo

    out = tempfile.mkdtemp(prefix="trl_ugrpo_")
    if args.config:
        import yaml
        from trl import TrlParser

        cli = ["--config", args.config, "--output_dir", out, "--use_cpu", "true", "--report_to", "none",
               "--save_strategy", "no", "--logging_steps", "1", "--max_steps", str(args.steps)]
        cfg, _ = TrlParser((UGRPOConfig,)).parse_args_and_config(cli, return_remaining_strings=True)  # ugrpo fields too
        script = yaml.safe_load(Path(args.config).read_text())
        return cfg, script.get("model_name_or_path", args.model), script.get("dataset_name", args.data)
    every = args.every if args.every is not None else (5 if args.allocation == "uniform" else 0)
    cfg = UGRPOConfig(
        output_dir=out, max_steps=args.steps, learning_rate=5e-5, per_device_train_batch_size=args.per_device_batch,
        num_generations=args.num_generations, max_completion_length=6, bf16=False, use_cpu=True, report_to="none",
        save_strategy="no", logging_steps=1,
        advantage_baseline=args.baseline, advantage_scale=args.scale,  # ugrpo
        allocation_rule=args.allocation, allocation_g_max=4 * args.num_generations,  # ugrpo
        monitor_every=every, monitor_sketch_dim=args.sketch_dim,  # ugrpo
    )
    return cfg, args.model, args.data


def report(trainer) -> None:
    """What ugrpo measured: the sizes and certificate of each step, or the monitor's G*."""
    alloc, monitor = trainer.ugrpo_allocation, trainer.ugrpo_monitor
    rows = {r["step"]: r for r in trainer.state.log_history if "reward" in r}  # TRL's row of optimizer step k: k + 1
    if alloc is not None:
        print(f"\n{alloc.spec.rule}: G_b per prompt at N = {alloc.N} completions per step (mean G = {alloc.G}):")
        shared = len({a.step for a in alloc.log}) < len(alloc.log)  # several generation batches per optimizer step
        if shared:
            print("  (several generation batches per optimizer step: TRL's metrics below are each step's means)")
        for a in alloc.log:
            r = rows.get(a.step + 1)
            if r is None:
                continue
            hist = {int(g): int((a.sizes == g).sum()) for g in sorted(set(a.sizes.tolist()))}
            key = "is_predicted_ratio" if alloc.spec.rule.endswith("-is") else "alloc_predicted_ratio"  # IS: M59
            cert = (f"predicted {'second-moment' if key.startswith('is') else 'MSE'} ratio vs uniform "
                    f"{r[f'ugrpo/{key}']:.3f} [{r[f'ugrpo/{key}_low']:.3f}, {r[f'ugrpo/{key}_high']:.3f}]"
                    if f"ugrpo/{key}" in r else "no certificate this step (allocation_is_certificate_every)")
            if key.startswith("is"):  # prompt IS: which prompts were drawn is the rule's choice too (M58)
                cert += f", weights max {r['ugrpo/is_weight_max']:.2f}, ESS {r['ugrpo/is_ess']:.2f}"
            label = f"step {a.step:3d}" + (f" batch {a.batch:3d}" if shared else "")
            print(f"  {label}: sizes {hist}  {cert}  reward {r['reward']:.3f}, "
                  f"samples in all-equal groups {int(r['ugrpo/samples_zero_std'])}")
    if monitor is not None:
        print(f"\nG* monitor at N = {monitor.N} completions per step (num_generations = {monitor.num_generations}):")
        for r in monitor.history:
            print(f"  step {r.step:3d}: c1 = {r.c1.estimate:.3g} [{r.c1.ci_low:.3g}, {r.c1.ci_high:.3g}], "
                  f"c3 = {r.c3.estimate:.3g}; use G = {r.g_recommended}, 95% band of near-optimal G "
                  f"{list(r.g_band)} ({r.n_batches} batch{'es' if r.n_batches > 1 else ''}, {r.seconds:.2f} s)")
            if not r.c1_decided or r.n_batches > 1:
                print(f"           {r.message}")
    steps = [row["step_time"] for row in trainer.state.log_history if "step_time" in row]
    if steps:
        mean_step = sum(steps) / len(steps)
        batches = {} if alloc is None else {k: sum(a.step + 1 == k for a in alloc.log) for k in rows}
        extra = (sum(monitor.seconds) / len(steps) if monitor is not None else  # below: a mean over the step's
                 sum(r.get("ugrpo/alloc_score_seconds", 0.0) * batches.get(k, 1)  # generation batches, times their
                     for k, r in rows.items()) / len(steps))  # number
        print(f"mean TRL step time {mean_step:.3f} s, of which ugrpo's score statistics {extra:.3f} s per step "
              f"({100 * extra / mean_step:.1f}%)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=None, help="a TRL GRPO YAML (GRPOConfig and UGRPOConfig fields, script keys)")
    p.add_argument("--model", default="tiny:instruct", help="tiny:<name> or a local model folder")
    p.add_argument("--data", default=str(HERE / "data" / "arith-compact.jsonl"), help="prompts (jsonl: prompt, answer)")
    p.add_argument("--prompts", type=int, default=32, help="train on the first P prompts of --data (a rule learns "
                   "from a prompt's earlier visits: with P = 32 and 8 prompts per step, every 4 steps)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--allocation", default="ustat",
                   choices=["uniform", "vip", "knapsack", "ustat", "uniform-is", "ustat-is"])
    p.add_argument("--every", type=int, default=None, help="G* monitor every K steps (uniform only; default 5 there)")
    p.add_argument("--num-generations", type=int, default=8)
    p.add_argument("--per-device-batch", type=int, default=64, help="completions per device per step (TRL's meaning)")
    p.add_argument("--baseline", default="grpo", choices=["grpo", "grpo_mean", "vanilla", "trl"])
    p.add_argument("--scale", default="none", choices=["none", "std"])
    p.add_argument("--sketch-dim", type=int, default=128)
    args = p.parse_args()

    import torch

    from ugrpo.cli.main import choose_threads  # ugrpo

    threads, why = choose_threads(None)  # ugrpo: on a CPU 1 thread, as the ugrpo commands (torch's default of one
    if threads is not None:  # thread per core is many times slower for this small model on busy cores)
        torch.set_num_threads(threads)
        print(why, file=sys.stderr)

    from datasets import Dataset

    from ugrpo.integrations.trl import UGRPOTrainer  # ugrpo
    from ugrpo.lm.loading import load_policy

    sys.path.insert(0, str(HERE))
    from arith_reward import correct

    cfg, model_name, data = config_and_script(args)
    pol = load_policy(model_name)
    rows = [json.loads(line) for line in Path(data).read_text().splitlines() if line.strip()][:args.prompts]
    trainer = UGRPOTrainer(  # ugrpo: was GRPOTrainer; the advantage, allocation and monitor come from the config
        model=pol.model, reward_funcs=correct, args=cfg, train_dataset=Dataset.from_list(rows),
        processing_class=pol.tokenizer,
    )
    trainer.train()
    report(trainer)


if __name__ == "__main__":
    main()
