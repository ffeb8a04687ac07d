"""The warmed-up tiny models that ship with the package: ``tiny:base``, ``tiny:instruct``, ``tiny:fewshot``.

Each is a Hugging Face folder under ``ugrpo/data/tiny/<name>/`` (``model.safetensors`` in float32,
``config.json``, ``generation_config.json``, the character tokenizer's files, and
``ugrpo_tiny.json``: the warm-up's settings, steps and accuracies). They were built once by
:func:`ugrpo.lm.pretrain.pretrain_tiny` (seed 0, defaults, one torch thread); ``MANIFEST.json``
beside them records the sha256 of every file, the build command, the library versions and the
date, and ``README.md`` says the same in words. Loading one runs no build.

Why shipped, not built on first use: a build takes minutes (more under load), and the same code
with the same seed stops at a different step on another CPU (float32 kernels differ), so the
model behind one name would differ between machines.

Rebuilding: ``ugrpo pretrain-tiny --out DIR --strength instruct`` (resumable) writes a folder to
pass as ``model.name: DIR``; ``tiny:instruct`` always means the shipped model, never a rebuilt one.
:func:`compare_weights` tells whether a rebuild equals the shipped model bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

__all__ = ["SHIPPED_NAMES", "SHIPPED_ROOT", "MANIFEST", "shipped_model_path", "file_digests", "write_manifest",
           "check_shipped", "compare_weights", "difference_cause"]

SHIPPED_NAMES: tuple[str, ...] = ("base", "instruct", "fewshot")
"""The ``tiny:<name>`` models in the package (``tiny:random`` is built in seconds instead:
:mod:`ugrpo.lm.tiny_cache`)."""

SHIPPED_ROOT = Path(__file__).resolve().parent.parent / "data" / "tiny"
"""``ugrpo/data/tiny``: one folder per shipped model, ``MANIFEST.json`` and ``README.md``."""

MANIFEST = "MANIFEST.json"

MODEL_FILES: tuple[str, ...] = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                                "tokenizer_config.json", "ugrpo_tiny.json")
"""The files of one shipped model (what ``pretrain_tiny`` writes, less the run folder's lock and manifest)."""


def shipped_model_path(name: str, root: str | os.PathLike | None = None) -> Path:
    """The folder of the shipped ``tiny:<name>``; no build.

    Raises
    ------
    ValueError
        ``name`` is not one of :data:`SHIPPED_NAMES`.
    FileNotFoundError
        The folder lacks a file (a broken install): says how to reinstall or rebuild.
    """
    if name not in SHIPPED_NAMES:
        raise ValueError(f"tiny:{name} is not a shipped tiny model; choose one of {', '.join(SHIPPED_NAMES)}")
    folder = Path(root) / name if root is not None else SHIPPED_ROOT / name
    missing = [f for f in MODEL_FILES if not (folder / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"tiny:{name}: the shipped model folder {folder} lacks {', '.join(missing)} (an incomplete install "
            f"or checkout); reinstall ugrpo, or rebuild it with `ugrpo pretrain-tiny --out DIR --strength {name}` "
            "and pass DIR as the model name")
    return folder


def file_digests(folder: str | os.PathLike) -> dict[str, dict]:
    """``{file: {"sha256": hex, "bytes": size}}`` for the :data:`MODEL_FILES` of one model folder."""
    out = {}
    for f in MODEL_FILES:
        data = (Path(folder) / f).read_bytes()
        out[f] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    return out


def write_manifest(root: str | os.PathLike, build: dict) -> dict:
    """Write ``<root>/MANIFEST.json``: ``build`` (command, versions, date) and each model's file digests and recipe.

    The recipe of a model is its ``ugrpo_tiny.json`` less the per-evaluation history (which stays in that file).
    """
    root = Path(root)
    models = {}
    for name in SHIPPED_NAMES:
        meta = json.loads((root / name / "ugrpo_tiny.json").read_text())
        models[name] = {"recipe": {k: v for k, v in meta.items() if k != "history"},
                        "files": file_digests(root / name)}
    manifest = {"format": 1, "build": build, "models": models}
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def check_shipped(root: str | os.PathLike | None = None) -> list[str]:
    """Every shipped file whose size or sha256 differs from ``MANIFEST.json`` (empty: all match)."""
    root = Path(root) if root is not None else SHIPPED_ROOT
    manifest = json.loads((root / MANIFEST).read_text())
    bad = []
    for name, entry in manifest["models"].items():
        got = file_digests(root / name)
        bad += [f"{name}/{f}" for f, want in entry["files"].items() if got.get(f) != want]
    return bad


def compare_weights(folder: str | os.PathLike, name: str) -> tuple[bool, float]:
    """(bit-identical?, largest absolute weight difference) of ``folder``'s model against the shipped ``tiny:<name>``.

    Returns ``(False, inf)`` when the two have different tensors or shapes.
    """
    import torch
    from safetensors.torch import load_file

    a = load_file(str(Path(folder) / "model.safetensors"))
    b = load_file(str(shipped_model_path(name) / "model.safetensors"))
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        return False, float("inf")
    diff = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    return all(torch.equal(a[k], b[k]) for k in a), diff


# the settings of ugrpo_tiny.json that decide the weights (the rest are outcomes: steps, accuracies, seconds, history)
RECIPE_KEYS = ("strength", "target_accuracy", "seed", "size", "batch_size", "lr", "task_options")


def difference_cause(rebuilt: dict, shipped: dict) -> str:
    """Why a rebuild's weights differ from the shipped model's, from the two ``ugrpo_tiny.json`` records.

    A changed setting (``RECIPE_KEYS``; the learning-rate decay only where a run went past its start) is named;
    with the same recipe, the first logged warm-up step whose loss differs says where the numbers parted (float32
    kernels differ between CPUs and library versions).

    >>> a = {"lr": 1e-3, "steps": 150, "history": [{"step": 25, "loss": 1.9}, {"step": 50, "loss": 1.3}]}
    >>> difference_cause(a, {**a, "lr": 2e-3})
    'the recipe differs: lr 0.001 here, 0.002 in the shipped model'
    >>> difference_cause(a, {**a, "history": [{"step": 25, "loss": 1.9}, {"step": 50, "loss": 1.4}]})[:62]
    'same recipe; the warm-up loss first differs at step 50 (1.3 he'
    """
    keys = list(RECIPE_KEYS)
    if max(int(rebuilt.get("steps", 0)), int(shipped.get("steps", 0))) > int(
            rebuilt.get("decay_start", shipped.get("decay_start", 10**9))):
        keys += ["decay_start", "final_lr_fraction"]
    changed = [f"{k} {rebuilt.get(k)!r} here, {shipped.get(k)!r} in the shipped model" for k in keys
               if rebuilt.get(k) != shipped.get(k)]
    if changed:
        return "the recipe differs: " + "; ".join(changed)
    theirs = {h["step"]: h["loss"] for h in shipped.get("history", [])}
    for h in rebuilt.get("history", []):
        if h["step"] in theirs and h["loss"] != theirs[h["step"]]:
            return (f"same recipe; the warm-up loss first differs at step {h['step']} ({h['loss']:.6g} here, "
                    f"{theirs[h['step']]:.6g} shipped): float32 kernels differ between CPUs or library versions")
    return ("same recipe and the same logged losses; the runs parted after the last common log step "
            "(float32 kernels differ between CPUs or library versions, or the step cap / target stopped them apart)")
