"""``ugrpo pretrain-tiny``: warm up the built-in tiny model on compact arithmetic.

Examples
--------
``ugrpo pretrain-tiny --out runs/tiny-instruct``                     (default strength: instruct)
``ugrpo pretrain-tiny --out runs/tiny-base --strength base --seed 1``
``ugrpo pretrain-tiny --cache --strength fewshot``                   (fill the cache of tiny:fewshot)
``ugrpo pretrain-tiny --all``                                         (fill the cache of every tiny:<name>)

The cache folder is ``$UGRPO_CACHE`` (default ``~/.cache/ugrpo``); see :mod:`ugrpo.lm.tiny_cache`.
"""

from __future__ import annotations

import argparse

from ugrpo.lm.tiny import STRENGTHS


def configure(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", help="folder to write the model (HF format: model.safetensors, tokenizer, "
                       "ugrpo_tiny.json)")
    where.add_argument("--cache", action="store_true",
                       help="build the cached model that 'tiny:<strength>' resolves to ($UGRPO_CACHE or "
                       "~/.cache/ugrpo)")
    where.add_argument("--all", action="store_true",
                       help="build every cached tiny model (tiny:random, base, instruct, fewshot; about 12 min on 2 "
                            "CPU cores, once) into $UGRPO_CACHE (default ~/.cache/ugrpo)")
    parser.add_argument("--strength", choices=list(STRENGTHS), default="instruct",
                        help="stop at sampled accuracy " + ", ".join(f"{k}={v}" for k, v in STRENGTHS.items())
                        + " (default: instruct)")
    parser.add_argument("--target-accuracy", type=float, default=None, help="explicit sampled-accuracy target "
                        "(overrides --strength)")
    parser.add_argument("--steps", type=int, default=3000, help="step cap (default: 3000)")
    parser.add_argument("--batch-size", type=int, default=128, help="problems per step (default: 128)")
    parser.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default: 1e-3)")
    parser.add_argument("--size", choices=["1m", "4m"], default="1m", help="model size (default: 1m)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights, data and evaluation samples (default: 0)")
    parser.add_argument("--eval-every", type=int, default=25, help="steps between evaluations (default: 25)")


def main(args: argparse.Namespace) -> int:
    if args.cache or args.all:
        if args.target_accuracy is not None or args.size != "1m" or args.steps != 3000 or args.seed != 0:
            raise ValueError("--cache/--all build the standard models (seed 0, defaults); "
                             "drop --target-accuracy/--size/--steps/--seed or write elsewhere with --out")
        from ugrpo.lm.tiny_cache import build_all, tiny_model_path

        paths = build_all() if args.all else {args.strength: tiny_model_path(args.strength)}
        for name, path in paths.items():
            print(f"tiny:{name} -> {path}")
        if not args.all:
            print((paths[args.strength] / "ugrpo_tiny.json").read_text())
        return 0
    from ugrpo.lm.pretrain import pretrain_tiny
    from ugrpo.runlock import claim

    claim(args.out, "pretrain-tiny", {k: v for k, v in vars(args).items() if k not in ("out", "cache")})
    r = pretrain_tiny(
        args.out, strength=args.strength, target_accuracy=args.target_accuracy, steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr, seed=args.seed, size=args.size, eval_every=args.eval_every, progress=True,
    )
    status = "reached" if r.reached_target else "NOT reached (step cap)"
    print(f"strength={r.strength} target={r.target_accuracy:.2f} {status} after {r.steps} steps in "
          f"{r.seconds / 60:.1f} min")
    print(f"held-out sampled accuracy (T=1) = {r.sampled_accuracy:.3f} +- {r.sampled_accuracy_se:.3f} (SE), greedy "
          f"accuracy = {r.greedy_accuracy:.3f}")
    print(f"saved to {r.out_dir}")
    return 0
