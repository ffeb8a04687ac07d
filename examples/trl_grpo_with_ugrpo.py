"""A TRL ``GRPOTrainer`` run with ugrpo's advantages and the online group-size monitor (docs/trl.md).

Runs offline on a CPU in about a minute with the built-in tiny model (random weights, so the reward
is a dense toy reward, not accuracy)::

    python examples/trl_grpo_with_ugrpo.py --steps 20 --every 5
    python examples/trl_grpo_with_ugrpo.py --model ./my-model --baseline grpo_mean --scale std

Only the lines marked ``# ugrpo`` differ from a plain TRL script. At the end it prints the monitor's
measurements (c1, c3, G* and its interval at N = completions per step) and its share of the step time.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# TRL 1.x still calls transformers' gradient_checkpointing* names, which transformers 5 deprecates with a
# FutureWarning per call; nothing in this script can act on them, so they are hidden (the warnings ugrpo itself
# gives, about the advantages it replaces and the group size, stay).
warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers(\.|$)")


def digit_reward(prompts, completions, **kwargs):
    """Fraction of completion characters equal to the prompt's first character (dense on a random model)."""
    return [sum(ch == p[0] for ch in c) / len(c) if c else 0.0 for p, c in zip(prompts, completions)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="local model folder (default: the tiny model, built in code)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--every", type=int, default=5, help="monitor every K generation steps")
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--per-device-batch", type=int, default=64, help="completions per device per step (TRL's meaning)")
    p.add_argument("--baseline", default="grpo", choices=["grpo", "grpo_mean", "vanilla"])
    p.add_argument("--scale", default="none", choices=["none", "std"])
    p.add_argument("--sketch-dim", type=int, default=128)
    args = p.parse_args()

    from datasets import Dataset
    from trl import GRPOConfig

    from ugrpo.integrations.trl import AdvantageSpec, GroupSizeMonitor, UGRPOTrainer  # ugrpo

    if args.model is None:
        from ugrpo.lm.tiny import build_tiny_model
        from ugrpo.lm.tokenizer import build_char_tokenizer

        tok = build_char_tokenizer()
        model = build_tiny_model(tok, size="1m", seed=0)
    else:
        from ugrpo.lm.loading import load_policy

        pol = load_policy(args.model)
        model, tok = pol.model, pol.tokenizer
    rng = random.Random(0)
    prompts = [f"{rng.randint(10, 99)}+{rng.randint(10, 99)}=" for _ in range(256)]
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl_ugrpo_"), max_steps=args.steps, learning_rate=1e-4,
        per_device_train_batch_size=args.per_device_batch, num_generations=args.num_generations,
        max_completion_length=8, bf16=False, use_cpu=True, report_to="none", save_strategy="no", logging_steps=1,
    )
    monitor = GroupSizeMonitor(every=args.every, sketch_dim=args.sketch_dim)  # ugrpo
    trainer = UGRPOTrainer(  # ugrpo: was GRPOTrainer
        model=model, reward_funcs=digit_reward, args=config, train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tok,
        advantages=AdvantageSpec(baseline=args.baseline, scale=args.scale),  # ugrpo
        callbacks=[monitor],  # ugrpo
    )
    trainer.train()

    print(f"\nG* monitor at N = {monitor.N} completions per step (num_generations = {args.num_generations}):")
    for r in monitor.history:
        print(f"  step {r.step:3d}: c1 = {r.c1.estimate:.3g} [{r.c1.ci_low:.3g}, {r.c1.ci_high:.3g}], "
              f"c3 = {r.c3.estimate:.3g}; use G = {r.g_recommended}, 95% band of near-optimal G {list(r.g_band)} "
              f"({r.n_batches} batch{'es' if r.n_batches > 1 else ''}, {r.seconds:.2f} s)")
        if not r.c1_decided or r.n_batches > 1:
            print(f"           {r.message}")
    steps = [row["step_time"] for row in trainer.state.log_history if "step_time" in row]
    if steps:
        mean_step = sum(steps) / len(steps)
        mon = sum(monitor.seconds) / len(steps)
        print(f"mean TRL step time {mean_step:.3f} s, of which the monitor {mon:.3f} s per step "
              f"({100 * mon / mean_step:.1f}%; every {args.every} steps)")


if __name__ == "__main__":
    main()
