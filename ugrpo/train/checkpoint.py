"""Checkpoints ``checkpoints/step-K/``: trainable weights, optimizer, scheduler, every RNG state.

A checkpoint is written into a temporary folder and renamed into place, so a run killed
while writing never leaves a half checkpoint that ``--resume`` would trust. Contents:

* ``model.safetensors``   the trainable parameters by ``named_parameters`` name (the whole
  model under full fine-tuning, the adapter under LoRA)
* ``optimizer.pt``, ``scheduler.pt``
* ``rng-rank{r}.pt``      python, numpy and torch (and CUDA) RNG states of each process
* ``state.json``          ``{"step": K}``
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ugrpo.train.distributed import DistContext, barrier, gather_objects

__all__ = ["save_checkpoint", "load_checkpoint", "latest_checkpoint", "rng_state", "set_rng_state"]


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _trainable(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def save_checkpoint(root: Path, step: int, model, optimizer, scheduler, ctx: DistContext) -> Path | None:
    """Write ``root/step-{step}`` atomically (rank 0 writes; every rank contributes its RNG state)."""
    rngs = gather_objects(rng_state(), ctx)
    final = Path(root) / f"step-{step}"
    if ctx.is_main:
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".step-{step}.", suffix=".tmp"))
        try:
            tensors = {n: p.detach().cpu().contiguous().clone() for n, p in _trainable(model).items()}
            save_file(tensors, str(tmp / "model.safetensors"))
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
            torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
            for r, state in enumerate(rngs):
                torch.save(state, tmp / f"rng-rank{r}.pt")
            (tmp / "state.json").write_text(json.dumps({"step": step, "world_size": ctx.world_size}) + "\n")
            if final.exists():
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    barrier(ctx)
    return final


def latest_checkpoint(root: Path) -> Path | None:
    """The complete ``step-K`` folder with the largest K, or None."""
    root = Path(root)
    if not root.is_dir():
        return None
    best: tuple[int, Path] | None = None
    for d in root.iterdir():
        if d.is_dir() and d.name.startswith("step-") and (d / "state.json").is_file():
            try:
                k = int(d.name[5:])
            except ValueError:
                continue
            if best is None or k > best[0]:
                best = (k, d)
    return None if best is None else best[1]


def load_checkpoint(path: Path, model, optimizer, scheduler, ctx: DistContext) -> int:
    """Restore a checkpoint in place; returns its step."""
    path = Path(path)
    state = json.loads((path / "state.json").read_text())
    tensors = load_file(str(path / "model.safetensors"))
    params = _trainable(model)
    missing = sorted(set(params) - set(tensors))
    extra = sorted(set(tensors) - set(params))
    if missing or extra:
        raise ValueError(
            f"checkpoint {path} does not match the model: missing {missing[:3]}, unexpected {extra[:3]}; "
            "resume with the same model and LoRA settings as the run that wrote it"
        )
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(tensors[n].to(p.device, p.dtype))
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=False))
    rng_file = path / f"rng-rank{ctx.rank}.pt"
    if rng_file.exists():
        set_rng_state(torch.load(rng_file, weights_only=False))
    return int(state["step"])
