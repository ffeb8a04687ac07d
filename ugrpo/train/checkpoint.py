"""Checkpoints ``checkpoints/step-K/``: trainable weights, optimizer, scheduler, every RNG state.

A checkpoint is written into a temporary folder and renamed into place, so a run killed
while writing never leaves a half checkpoint that ``--resume`` would trust (a temporary folder
left by such a kill is removed by the next save). Contents:

* ``model.safetensors``   the trainable parameters by ``named_parameters`` name (the whole
  model under full fine-tuning, the adapter under LoRA)
* ``optimizer.pt``, ``scheduler.pt``
* ``rng-rank{r}.pt``      python, numpy and torch (and CUDA) RNG states of each process
* ``history.json``        the per-prompt allocation history (:mod:`ugrpo.stats.history`; runs with
  ``allocation.rule`` other than uniform only), plain JSON
* ``state.json``          ``{"step": K, "world_size": W, "sha256": {file: digest}}``, written last

A full disk (or quota) while writing is a :class:`~ugrpo.errors.DiskFullError` naming the file and the last intact
checkpoint; nothing of the half-written one is kept.

Loading is safe for files from others (run folders on shared storage): tensors come from
safetensors or ``torch.load(weights_only=True)`` (tensors and plain containers only, never code),
the rest is JSON. Every file's sha256 is checked first; a checkpoint that fails (a flipped byte, a
truncated file) is skipped with a warning naming the file, and the previous one is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save

from ugrpo.errors import CheckpointError, DiskFullError, ResumeError
from ugrpo.fileio import DISK_FULL, atomic_save, atomic_write_bytes, atomic_write_text
from ugrpo.train.distributed import DistContext, barrier, gather_objects

__all__ = [
    "save_checkpoint", "load_checkpoint", "load_latest", "latest_checkpoint", "checkpoints", "verify_checkpoint",
    "rng_state", "set_rng_state", "read_extra",
]


def rng_state() -> dict:
    """RNG states as tensors and plain containers (numpy's key array as a list), loadable with weights_only."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"python": random.getstate(), "numpy": (kind, keys.tolist(), pos, has_gauss, gauss),
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _trainable(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def save_checkpoint(root: Path, step: int, model, optimizer, scheduler, ctx: DistContext,
                    extra: dict[str, dict] | None = None) -> Path | None:
    """Write ``root/step-{step}`` atomically (rank 0 writes; every rank contributes its RNG state).

    ``extra`` maps file names (``history.json``) to JSON-safe dicts written beside the rest and checksummed.
    """
    from ugrpo.runs import follow_umask

    rngs = gather_objects(rng_state(), ctx)
    final = Path(root) / f"step-{step}"
    if ctx.is_main:
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob(".step-*.tmp"):  # left by a run killed mid-save (the run folder is locked: not ours)
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".step-{step}.", suffix=".tmp"))
        try:
            _write_files(tmp, step, model, optimizer, scheduler, rngs, extra or {}, ctx)
            follow_umask(tmp)  # mkdtemp makes 0700: follow the umask like any file
            if final.exists():
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(e, OSError) and e.errno in DISK_FULL:
                last = latest_checkpoint(root)
                raise DiskFullError(
                    f"cannot write checkpoint {final}: {e.strerror} while writing {e.filename}; nothing of it was "
                    f"kept, and the last checkpoint ({last or 'none yet'}) is intact: free some space, then continue "
                    "with the same command and --resume"
                ) from e
            raise
    barrier(ctx)
    return final


def _write_files(folder: Path, step: int, model, optimizer, scheduler, rngs: list, extra: dict[str, dict],
                 ctx: DistContext) -> None:
    """Every file of the checkpoint into ``folder``, ``state.json`` (the checksums) last; each through
    :func:`ugrpo.fileio.atomic_save`, so a full disk is an ``OSError`` naming the file, whatever the writer."""
    tensors: dict[str, torch.Tensor] = {}
    storages: set[int] = set()
    for n, p in _trainable(model).items():  # one copy (the serialised bytes); a shared storage gets its own
        t = p.detach().cpu().contiguous()
        tensors[n] = t.clone() if t.untyped_storage().data_ptr() in storages else t
        storages.add(t.untyped_storage().data_ptr())
    data = save(tensors)
    del tensors
    atomic_write_bytes(folder / "model.safetensors", data)
    del data
    atomic_save(folder / "optimizer.pt", lambda f: torch.save(optimizer.state_dict(), f))
    atomic_save(folder / "scheduler.pt", lambda f: torch.save(scheduler.state_dict(), f))
    for r, state in enumerate(rngs):
        atomic_save(folder / f"rng-rank{r}.pt", lambda f, s=state: torch.save(s, f))
    for name, content in extra.items():
        atomic_write_text(folder / name, json.dumps(content) + "\n")
    sums = {p.name: _sha256(p) for p in sorted(folder.iterdir())}
    state = {"step": step, "world_size": ctx.world_size, "sha256": sums}
    atomic_write_text(folder / "state.json", json.dumps(state, indent=1) + "\n")


def checkpoints(root: Path) -> list[Path]:
    """Complete ``step-K`` folders (a ``state.json``), newest (largest K) first."""
    root = Path(root)
    found: list[tuple[int, Path]] = []
    if root.is_dir():
        for d in root.iterdir():
            if d.is_dir() and d.name.startswith("step-") and d.name[5:].isdigit() and (d / "state.json").is_file():
                found.append((int(d.name[5:]), d))
    return [d for _, d in sorted(found, reverse=True)]


def latest_checkpoint(root: Path) -> Path | None:
    """The complete ``step-K`` folder with the largest K, or None (not verified: see :func:`load_latest`)."""
    found = checkpoints(root)
    return found[0] if found else None


def verify_checkpoint(path: Path) -> dict:
    """``state.json`` of a checkpoint whose files all match their sha256; raises CheckpointError naming the file."""
    path = Path(path)
    try:
        state = json.loads((path / "state.json").read_text())
        int(state["step"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path / 'state.json'} is unreadable ({e})") from e
    for name, digest in state.get("sha256", {}).items():
        f = path / name
        if not f.is_file():
            raise CheckpointError(f"{f} is missing")
        if _sha256(f) != digest:
            raise CheckpointError(f"{f} fails its sha256 checksum (corrupt)")
    return state


def _read(path: Path, rank: int) -> tuple[dict, dict[str, torch.Tensor], dict, dict, dict | None]:
    """Every part of a verified checkpoint, read into memory (tensors only; nothing that runs code)."""
    state = verify_checkpoint(path)
    try:
        tensors = load_file(str(path / "model.safetensors"))
        opt = torch.load(path / "optimizer.pt", weights_only=True)
        sched = torch.load(path / "scheduler.pt", weights_only=True)
        rng_file = path / f"rng-rank{rank}.pt"
        rng = torch.load(rng_file, weights_only=True) if rng_file.exists() else None
    except Exception as e:  # a truncated file, or a pickle that is more than tensors and containers
        raise CheckpointError(f"a file in {path} cannot be loaded safely ({type(e).__name__}: {str(e)[:200]})") from e
    return state, tensors, opt, sched, rng


def _apply(path: Path, parts, model, optimizer, scheduler) -> int:
    state, tensors, opt, sched, rng = parts
    params = _trainable(model)
    missing = sorted(set(params) - set(tensors))
    extra = sorted(set(tensors) - set(params))
    if missing or extra:
        raise ResumeError(
            f"checkpoint {path} does not match the model: missing {missing[:3]}, unexpected {extra[:3]}; "
            "resume with the same model and LoRA settings as the run that wrote it"
        )
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(tensors[n].to(p.device, p.dtype))
    optimizer.load_state_dict(opt)
    scheduler.load_state_dict(sched)
    if rng is not None:
        set_rng_state(rng)
    return int(state["step"])


def read_extra(path: Path, name: str) -> dict | None:
    """The JSON file ``name`` saved by ``save_checkpoint(extra=...)``, checked against its sha256; None if absent."""
    path = Path(path)
    state = verify_checkpoint(path)
    if name not in state.get("sha256", {}):
        return None
    try:
        return json.loads((path / name).read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path / name} is unreadable ({e})") from e


def load_checkpoint(path: Path, model, optimizer, scheduler, ctx: DistContext) -> int:
    """Verify and restore one checkpoint in place; returns its step (CheckpointError if corrupt)."""
    path = Path(path)
    return _apply(path, _read(path, ctx.rank), model, optimizer, scheduler)


def load_latest(root: Path, model, optimizer, scheduler, ctx: DistContext) -> tuple[int, Path] | None:
    """Restore the newest intact checkpoint under ``root``: (step, folder), or None when there is none.

    A checkpoint that fails its checksum or cannot be read is skipped with a warning naming the
    file; if every checkpoint fails, CheckpointError lists them.
    """
    failures = []
    for path in checkpoints(root):
        try:
            parts = _read(path, ctx.rank)
        except CheckpointError as e:
            failures.append(str(e))
            if ctx.is_main:
                print(f"warning: {e}; falling back to the previous checkpoint", file=sys.stderr, flush=True)
            continue
        return _apply(path, parts, model, optimizer, scheduler), path
    if failures:
        raise CheckpointError(f"no intact checkpoint in {root}: {'; '.join(failures)}; "
                              "start the run over in a new --out")
    return None
