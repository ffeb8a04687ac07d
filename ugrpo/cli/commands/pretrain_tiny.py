"""``ugrpo pretrain-tiny``: rebuild (or vary) the built-in tiny model's warm-up on compact arithmetic.

``tiny:base``, ``tiny:instruct`` and ``tiny:fewshot`` ship with the package and are never built at
run time (:mod:`ugrpo.lm.tiny_shipped`); this command rebuilds one into a folder of your own, which
you then use by its path (``model.name: runs/tiny-instruct``). The names ``tiny:<strength>`` always
mean the shipped models. A killed build resumes from its last checkpoint when rerun with the same
command.

Examples
--------
``ugrpo pretrain-tiny --out runs/tiny-instruct``                     (default strength: instruct)
``ugrpo pretrain-tiny --out runs/tiny-base --strength base --seed 1``
``ugrpo pretrain-tiny --all --out runs/tiny``                        (base, instruct, fewshot + MANIFEST.json: the
                                                                      recipe of ugrpo/data/tiny)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ugrpo.lm.tiny import STRENGTHS

DEFAULTS = {"target_accuracy": None, "size": "1m", "steps": 3000, "seed": 0, "batch_size": 128, "lr": 1e-3,
            "eval_every": 25}
"""The shipped models' settings: a build with these is compared with the shipped model of its strength."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="folder to write the model (HF format: model.safetensors, "
                        "tokenizer, ugrpo_tiny.json); with --all, one subfolder per strength")
    parser.add_argument("--all", action="store_true",
                        help="rebuild base, instruct and fewshot with the shipped recipe into OUT/<strength> (about "
                             "20 min on 2 CPU cores) and write OUT/MANIFEST.json")
    parser.add_argument("--cache", action="store_true", help=argparse.SUPPRESS)  # removed: a clear error instead
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
    if args.cache:
        raise ValueError("--cache is gone: tiny:base, tiny:instruct and tiny:fewshot ship with ugrpo and are never "
                         "built; rebuild one with --out DIR and pass DIR as the model name")
    from ugrpo.runlock import claim

    custom = {k: v for k, v in DEFAULTS.items() if getattr(args, k) != v}
    if args.all and custom:
        flags = ", ".join("--" + k.replace("_", "-") for k in custom)
        raise ValueError(f"--all rebuilds the shipped recipe; drop {flags} (or build one model with --out and "
                         "--strength)")
    claim(args.out, "pretrain-tiny", {k: v for k, v in vars(args).items() if k not in ("out", "cache")})
    if args.all:
        return _build_all(Path(args.out))
    r = _build(args.out, args.strength, args)
    if not custom:
        _compare_with_shipped(r, args.strength)
    return 0


def _build(out, strength: str, args: argparse.Namespace):
    from ugrpo.lm.pretrain import pretrain_tiny

    r = pretrain_tiny(
        out, strength=strength, target_accuracy=args.target_accuracy, steps=args.steps, batch_size=args.batch_size,
        lr=args.lr, seed=args.seed, size=args.size, eval_every=args.eval_every, progress=True,
    )
    status = "reached" if r.reached_target else "NOT reached (step cap)"
    print(f"strength={r.strength} target={r.target_accuracy:.2f} {status} after {r.steps} steps in "
          f"{r.seconds / 60:.1f} min")
    print(f"held-out sampled accuracy (T=1) = {r.sampled_accuracy:.3f} +- {r.sampled_accuracy_se:.3f} (SE), greedy "
          f"accuracy = {r.greedy_accuracy:.3f}")
    print(f"saved to {r.out_dir}")
    return r


def _compare_with_shipped(r, strength: str) -> None:
    """Say whether the rebuild equals the shipped ``tiny:<strength>``, and how to use it if it does not."""
    from ugrpo.lm.tiny_shipped import compare_weights, difference_cause, shipped_model_path

    same, diff = compare_weights(r.out_dir, strength)
    if same:
        print(f"identical to the shipped tiny:{strength}, bit for bit")
        return
    shipped = json.loads((shipped_model_path(strength) / "ugrpo_tiny.json").read_text())
    rebuilt = json.loads((Path(r.out_dir) / "ugrpo_tiny.json").read_text())
    print(f"differs from the shipped tiny:{strength} (largest weight difference {diff:.3g}; stopped at step "
          f"{r.steps}, the shipped model at {shipped['steps']}): {difference_cause(rebuilt, shipped)}. "
          f"tiny:{strength} stays the shipped model; use this one with model.name: {r.out_dir}")


def _build_all(root: Path) -> int:
    """Every shipped strength into ``root/<strength>`` (finished ones kept, killed ones resumed), then the manifest."""
    import datetime
    import platform

    import torch
    import transformers

    from ugrpo.lm.pretrain import CHECKPOINT
    from ugrpo.lm.tiny_shipped import SHIPPED_NAMES, write_manifest

    defaults = argparse.Namespace(**DEFAULTS)
    for name in SHIPPED_NAMES:
        meta = root / name / "ugrpo_tiny.json"
        if meta.is_file() and not (root / name / CHECKPOINT).exists() and json.loads(meta.read_text()).get(
                "strength") == name:
            print(f"tiny:{name}: already built in {root / name}")
            continue
        _build(root / name, name, defaults)
    build = {"commands": [f"ugrpo pretrain-tiny --all --out {root}"], "torch": torch.__version__,
             "transformers": transformers.__version__, "python": platform.python_version(),
             "machine": platform.machine(), "torch_threads": torch.get_num_threads(),
             "date": datetime.date.today().isoformat()}
    write_manifest(root, build)
    print(f"wrote {root / 'MANIFEST.json'}")
    return 0
