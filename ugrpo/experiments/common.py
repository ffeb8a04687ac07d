"""Shared plumbing of the experiment commands: parsing of list flags, env and theta lookup, worker counts.

Kept free of math: the commands' logic lives in ``mse.py``, ``plan.py``, ``sweep.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported inside the functions that use it: every command's --help imports this module
    import torch

__all__ = [
    "parse_int_list",
    "parse_float_list",
    "resolve_env",
    "env_theta0",
    "parse_theta",
    "resolve_theta",
    "command_line",
]


def parse_int_list(text: str, *, name: str, minimum: int = 1) -> list[int]:
    """'2,4,8' -> [2, 4, 8]; a clear error naming the flag and the bad item otherwise."""
    items = _items(text, name, "such as 2,4,8")
    out = []
    for t in items:
        try:
            v = int(t)
        except ValueError:
            raise ValueError(f"{name}: {t!r} is not an integer; give a comma-separated list such as 2,4,8") from None
        if v < minimum:
            raise ValueError(f"{name}: {v} is below the minimum {minimum}")
        out.append(v)
    if len(set(out)) != len(out):
        raise ValueError(f"{name}: {text!r} has repeated values; list each once")
    return out


def parse_float_list(text: str, *, name: str) -> list[float]:
    """'0.1,-2' -> [0.1, -2.0]; non-finite values are errors."""
    out = []
    for t in _items(text, name, "such as 0.1,-2"):
        try:
            v = float(t)
        except ValueError:
            raise ValueError(f"{name}: {t!r} is not a number") from None
        if not math.isfinite(v):
            raise ValueError(f"{name}: {t!r} is not finite")
        out.append(v)
    return out


def _items(text: str, name: str, example: str) -> list[str]:
    """The stripped items of a comma-separated list; an empty list or an empty item (``4,,8``: a value left out?)
    is an error naming the flag. A trailing comma is allowed."""
    items = [t.strip() for t in str(text).split(",")]
    if items and not items[-1] and len(items) > 1:
        items.pop()
    if not any(items):
        raise ValueError(f"{name} is empty; give a comma-separated list {example}")
    if not all(items):
        raise ValueError(f"{name}: {str(text)!r} has an empty item (two commas in a row, or one at the start); give a "
                         f"comma-separated list {example}")
    return items


def check_env_spec(spec) -> None:
    """A missing ``--env`` file is an error before anything heavy is imported (the commands call this first)."""
    spec = str(spec)
    if not spec.startswith("builtin:") and not Path(spec).exists():
        raise ValueError(
            f"--env {spec}: file not found; give an env JSON written by `ugrpo make-env` or builtin:demo"
        )


def resolve_env(spec: str):
    """``builtin:NAME`` -> ``builtin_env(NAME)``; otherwise a JSON file path -> ``load_env``."""
    from ugrpo.envs.io import builtin_env, load_env

    check_env_spec(spec)
    spec = str(spec)
    if spec.startswith("builtin:"):
        return builtin_env(spec.split(":", 1)[1])
    return load_env(Path(spec))


def env_theta0(env) -> torch.Tensor:
    """The env's starting parameters theta0 as a flat float64 tensor."""
    theta = getattr(env, "theta0", None)
    if theta is None:
        raise ValueError(f"env {type(env).__name__} has no theta0; pass --theta explicitly")
    import torch

    return torch.as_tensor(theta, dtype=torch.float64).reshape(-1)


def parse_theta(text: str | None, env) -> torch.Tensor:
    """--theta 'v1,v2,...' (length D) or None -> theta0."""
    theta0 = env_theta0(env)
    if text is None:
        return theta0
    vals = parse_float_list(text, name="--theta")
    if len(vals) != theta0.numel():
        raise ValueError(f"--theta has {len(vals)} values but the env has D = {theta0.numel()} parameters")
    import torch

    return torch.tensor(vals, dtype=torch.float64)


def resolve_theta(env, theta: Sequence[float] | None) -> torch.Tensor:
    """Parameters given as numbers (length D) or None -> the env's theta0; a clear error on a wrong length."""
    theta0 = env_theta0(env)
    if theta is None:
        return theta0
    if len(theta) != theta0.numel():
        raise ValueError(f"--theta has {len(theta)} values but the env has D = {theta0.numel()} parameters")
    import torch

    return torch.tensor([float(v) for v in theta], dtype=torch.float64)


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one): the default ``--workers``."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def default_workers() -> int:
    """Default ``--workers`` of the LM sweeps: the available CPU cores (one torch thread per run), but 1 when
    a GPU is visible (pool workers would all train on the same device; spread runs over GPUs with
    ``--ray --ray-gpus 1``)."""
    import torch

    return 1 if torch.cuda.is_available() else available_cores()


def command_line(name: str, args: Any) -> list[str]:
    """The resolved command as an argv list, rebuilt from parsed args (for config.json / report.md)."""
    out = ["ugrpo", name]
    for k, v in sorted(vars(args).items()):
        if k == "command" or v is None or v is False:
            continue
        if k == "overrides":  # the training-config overrides, already flag tokens: --optim.lr 1e-4 ...
            out += [str(t) for t in v]
            continue
        flag = "--" + k.replace("_", "-")
        if isinstance(v, (list, tuple)):  # a repeatable flag (action="append"): one flag per value
            for item in v:
                out += [flag, str(item)]
            continue
        out += [flag] if v is True else [flag, str(v)]
    return out
