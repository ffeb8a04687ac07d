"""Atomic, umask-respecting file writes and JSON conversion: the layer under run folders and their locks.

Shared by every package; imports nothing of ugrpo. :mod:`ugrpo.runs` (run folders) and :mod:`ugrpo.runlock`
(their manifest and lock) both write through it, so neither needs the other to write a file.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["file_mode", "follow_umask", "to_jsonable", "atomic_write_text", "atomic_write_json"]


def file_mode(directory: bool = False) -> int:
    """The permissions a new file (or folder) gets under the user's umask: 0644 / 0755 under umask 022."""
    mask = os.umask(0)
    os.umask(mask)
    return (0o777 if directory else 0o666) & ~mask


def follow_umask(path: str | os.PathLike) -> None:
    """Give ``path`` (and everything under it) the umask's permissions: some writers (safetensors,
    mkdtemp) create 0600 / 0700 files, which a team sharing the run folder cannot read."""
    path = Path(path)
    os.chmod(path, file_mode(directory=path.is_dir()))
    if path.is_dir():
        for p in path.rglob("*"):
            if not p.is_symlink():
                os.chmod(p, file_mode(directory=p.is_dir()))


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, tensors, numpy scalars/arrays, paths -> plain JSON types; NaN/inf -> None."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (bool, int, str)) or obj is None:
        return obj
    if hasattr(obj, "tolist"):  # torch.Tensor, numpy array or scalar
        return to_jsonable(obj.tolist())
    if hasattr(obj, "item"):
        return to_jsonable(obj.item())
    return str(obj)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, file_mode())  # mkstemp makes 0600; the final file follows the umask like any other
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(to_jsonable(obj), indent=2, allow_nan=False) + "\n")
