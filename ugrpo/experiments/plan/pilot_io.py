"""Pilot files: a saved pilot batch from which ``ugrpo plan`` estimates c1, c2, c3.

Format (docs/pilot-format.md): a NumPy ``.npz`` with

* ``rewards``: float array (B0, G0), B0 prompts x G0 samples each;
* ``scores``: float array (B0, G0, D), the per-sample scores W = grad log pi(Y|x), **or**
* ``gram``: float array (B0*G0, B0*G0), the Gram matrix <W_i, W_j> of the scores with
  samples in b-major order (row i = b*G0 + g);
* ``meta`` (optional): a 0-d string array holding a JSON object (where the pilot came from).

Every check raises ``ValueError`` naming the file, the array and the expected shape.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["Pilot", "save_pilot", "load_pilot", "MIN_PILOT_GROUP"]

from ugrpo.stats.components import MIN_PILOT_GROUP  # noqa: E402  (one source of truth: G0 >= 4)


@dataclass(frozen=True)
class Pilot:
    """A pilot batch.

    Attributes
    ----------
    rewards : (B0, G0) float64 tensor
    scores : (B0, G0, D) float64 tensor or None
    gram : (B0*G0, B0*G0) float64 tensor or None (b-major)
    meta : free-form JSON-able dict
    """

    rewards: torch.Tensor
    scores: torch.Tensor | None = None
    gram: torch.Tensor | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _validate(self.rewards, self.scores, self.gram, where="pilot")

    @property
    def B0(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def G0(self) -> int:
        return int(self.rewards.shape[1])

    @property
    def samples(self) -> int:
        return self.B0 * self.G0

    def gram_matrix(self) -> torch.Tensor:
        """The (B0*G0, B0*G0) Gram matrix, b-major, from ``gram`` or from ``scores``."""
        if self.gram is not None:
            return self.gram
        w = self.scores.reshape(self.samples, -1)  # (B0*G0, D)
        return w @ w.T


def _validate(rewards, scores, gram, *, where: str) -> None:
    if rewards.ndim != 2:
        raise ValueError(f"{where}: 'rewards' must have shape (B0, G0); got {tuple(rewards.shape)}")
    B0, G0 = rewards.shape
    if B0 < 2:
        raise ValueError(f"{where}: the pilot needs B0 >= 2 prompts (c1 is a between-prompt variance); got B0 = {B0}")
    if G0 < MIN_PILOT_GROUP:
        raise ValueError(
            f"{where}: pilot group size G0 = {G0} < {MIN_PILOT_GROUP}; the unbiased c3 estimate needs "
            f"G0 >= {MIN_PILOT_GROUP} samples per prompt (use --pilot-group {MIN_PILOT_GROUP} or more)"
        )
    if scores is None and gram is None:
        raise ValueError(f"{where}: needs an array 'scores' (B0, G0, D) or 'gram' (B0*G0, B0*G0); found neither")
    if scores is not None and (scores.ndim != 3 or tuple(scores.shape[:2]) != (B0, G0)):
        raise ValueError(
            f"{where}: 'scores' must have shape (B0, G0, D) = ({B0}, {G0}, D) to match 'rewards'; "
            f"got {tuple(scores.shape)}"
        )
    if scores is not None and scores.shape[2] < 1:
        raise ValueError(f"{where}: 'scores' has 0 score dimensions (shape {tuple(scores.shape)}); D must be >= 1")
    n = B0 * G0
    if gram is not None and tuple(gram.shape) != (n, n):
        raise ValueError(
            f"{where}: 'gram' must have shape (B0*G0, B0*G0) = ({n}, {n}) to match 'rewards' {B0}x{G0}; "
            f"got {tuple(gram.shape)}"
        )
    for name, arr in (("rewards", rewards), ("scores", scores), ("gram", gram)):
        if arr is not None and not torch.isfinite(arr).all():
            raise ValueError(f"{where}: '{name}' contains non-finite values")
    if gram is not None and not torch.allclose(gram, gram.T, rtol=1e-8, atol=1e-10):
        raise ValueError(f"{where}: 'gram' is not symmetric; it must be the matrix of inner products <W_i, W_j>")


def save_pilot(path: str | Path, pilot: Pilot, *, with_gram: bool = False) -> Path:
    """Write ``pilot`` as an ``.npz`` (scores if present; plus gram if ``with_gram`` or no scores)."""
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"pilot path {path} must end in .npz")
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {"rewards": pilot.rewards.double().numpy()}
    if pilot.scores is not None:
        arrays["scores"] = pilot.scores.double().numpy()
    if pilot.gram is not None or with_gram or pilot.scores is None:
        arrays["gram"] = pilot.gram_matrix().double().numpy()
    arrays["meta"] = np.array(json.dumps(pilot.meta, sort_keys=True))
    tmp = path.with_name(f".{path.name}.tmp.npz")
    try:
        np.savez(tmp, **arrays)
        tmp.replace(path)
    except BaseException:  # a full disk or Ctrl-C: leave no half-written temporary file behind
        tmp.unlink(missing_ok=True)
        raise
    return path


def load_pilot(path: str | Path) -> Pilot:
    """Read and validate a pilot ``.npz``; errors name the file and what is wrong."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"--pilot {path}: file not found; write one with `ugrpo plan --env ... --save-pilot {path}`")
    with open(path, "rb") as f:
        head = f.read(64).lstrip()
    if head.startswith((b"{", b"[")):  # a JSON file: most likely an env from `ugrpo make-env`
        raise ValueError(f"--pilot {path}: a JSON file, not a pilot .npz; an env file (from `ugrpo make-env`) goes to "
                         f"--env {path}, which samples a pilot from it")
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise ValueError(f"--pilot {path}: not a readable .npz file ({e}); see docs/pilot-format.md") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ValueError(f"--pilot {path}: holds a single array, not an .npz archive; see docs/pilot-format.md")
    with data:
        keys = set(data.files)
        if "rewards" not in keys:
            raise ValueError(f"--pilot {path}: missing array 'rewards' (B0, G0); found {sorted(keys)}")

        def arr(name: str) -> torch.Tensor | None:
            if name not in keys:
                return None
            try:
                a = data[name]
            except ValueError:  # numpy refuses object arrays under allow_pickle=False (unpickling could run code)
                raise ValueError(f"--pilot {path}: array '{name}' holds Python objects (dtype object), which are never "
                                 "loaded (unpickling could run code); save it as an array of numbers") from None
            if not np.issubdtype(a.dtype, np.number) or np.issubdtype(a.dtype, np.complexfloating):
                raise ValueError(f"--pilot {path}: array '{name}' has dtype {a.dtype}; expected real numbers")
            return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))

        rewards, scores, gram = arr("rewards"), arr("scores"), arr("gram")
        meta: dict[str, Any] = {}
        if "meta" in keys:
            try:
                meta = json.loads(str(data["meta"]))
            except ValueError as e:  # not JSON, or an object array (refused without allow_pickle)
                raise ValueError(f"--pilot {path}: 'meta' is not a JSON string ({e})") from None
            if not isinstance(meta, dict):
                raise ValueError(f"--pilot {path}: 'meta' must be a JSON object, got {type(meta).__name__}")
    _validate(rewards, scores, gram, where=f"--pilot {path}")
    return Pilot(rewards=rewards, scores=scores, gram=gram, meta=meta)
