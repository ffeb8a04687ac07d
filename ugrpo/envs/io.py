"""Reading, writing and validating synthetic-policy instances (JSON).

Format (unknown keys are errors; ``name`` and ``description`` are optional strings)::

    {"kind": "softmax_bandit",
     "prompts": [{"logits": [K numbers], "reward_mean": [K numbers in [0, 1]]}, ...]}

    (a bandit prompt may add "score_scale": s > 0, default 1: the same policy with scores s (e_a - pi))

    {"kind": "linear_softmax", "theta": [d numbers],
     "prompts": [{"features": [K rows of d numbers], "reward_mean": [K numbers]}, ...]}

K may differ between prompts but must be >= 2. Every malformed input raises
:class:`EnvFormatError` naming the file, the field path (``prompts[3].reward_mean[1]``), the bad
value and what is expected.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from ugrpo.fileio import read_json

from .base import SyntheticPolicy
from .policies import LinearSoftmax, SoftmaxBandit

__all__ = ["EnvFormatError", "load_env", "save_env", "env_from_dict", "env_to_dict",
           "builtin_env", "list_builtin_envs", "check_varied_rewards", "KINDS", "DATA_DIR"]

KINDS = ("softmax_bandit", "linear_softmax")
DATA_DIR = Path(__file__).resolve().parent.parent / "data"
_TOP_KEYS = {"softmax_bandit": {"kind", "prompts", "name", "description"},
             "linear_softmax": {"kind", "theta", "prompts", "name", "description"}}
_PROMPT_KEYS = {"softmax_bandit": ("logits", "reward_mean"), "linear_softmax": ("features", "reward_mean")}
_OPTIONAL_KEYS = {"softmax_bandit": ("score_scale",), "linear_softmax": ()}


class EnvFormatError(ValueError):
    """A synthetic-policy file or dict that does not follow the format in :mod:`ugrpo.envs.io`."""


def _fail(src: str, field: str, msg: str) -> EnvFormatError:
    return EnvFormatError(f"{src}: {field} {msg}")


def _number(v: Any, src: str, field: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _fail(src, field, f"= {v!r} is not a number; expected a finite JSON number")
    if not math.isfinite(v):
        raise _fail(src, field, f"= {v!r} is not finite; expected a finite JSON number (no NaN/Infinity)")
    return float(v)


def _numbers(v: Any, src: str, field: str, *, length: int | None = None, min_len: int = 1,
             unit: bool = False) -> list[float]:
    if not isinstance(v, list):
        raise _fail(src, field, f"must be a list of numbers, got {type(v).__name__} {v!r}")
    if length is not None and len(v) != length:
        raise _fail(src, field, f"has {len(v)} entries, expected {length}")
    if len(v) < min_len:
        raise _fail(src, field, f"has {len(v)} entries, expected at least {min_len}")
    out = [_number(x, src, f"{field}[{i}]") for i, x in enumerate(v)]
    if unit:
        for i, x in enumerate(out):
            if not 0.0 <= x <= 1.0:
                raise _fail(src, f"{field}[{i}]", f"= {x} is outside [0, 1]; reward means are Bernoulli probabilities")
    return out


def env_from_dict(data: Any, *, source: str = "<dict>") -> SyntheticPolicy:
    """Validate a parsed instance and build the policy. ``source`` names it in error messages."""
    src = source
    if not isinstance(data, dict):
        raise _fail(src, "top level", f"must be a JSON object, got {type(data).__name__}")
    if "kind" not in data:
        raise _fail(src, "kind", f"is missing; add \"kind\": one of {list(KINDS)}")
    kind = data["kind"]
    if kind not in KINDS:
        raise _fail(src, "kind", f"= {kind!r} is unknown; expected one of {list(KINDS)}")
    unknown = sorted(set(data) - _TOP_KEYS[kind])
    if unknown:
        raise _fail(src, f"key(s) {unknown}", f"not allowed for kind {kind!r}; allowed: {sorted(_TOP_KEYS[kind])}")
    meta = {}
    for key in ("name", "description"):
        if key in data:
            if not isinstance(data[key], str):
                raise _fail(src, key, f"must be a string, got {type(data[key]).__name__}")
            meta[key] = data[key]
    d = None
    theta = None
    if kind == "linear_softmax":
        if "theta" not in data:
            raise _fail(src, "theta", "is missing; linear_softmax needs \"theta\": [d numbers]")
        theta = _numbers(data["theta"], src, "theta")
        d = len(theta)
    prompts = data.get("prompts")
    if prompts is None:
        raise _fail(src, "prompts", "is missing; expected a non-empty list of prompt objects")
    if not isinstance(prompts, list) or not prompts:
        raise _fail(src, "prompts", "must be a non-empty list of prompt objects")
    first_key, _ = _PROMPT_KEYS[kind]
    firsts, rewards, scales = [], [], []
    for i, pr in enumerate(prompts):
        f = f"prompts[{i}]"
        if not isinstance(pr, dict):
            raise _fail(src, f, f"must be an object with keys {list(_PROMPT_KEYS[kind])}, got {type(pr).__name__}")
        allowed = _PROMPT_KEYS[kind] + _OPTIONAL_KEYS[kind]
        unknown = sorted(set(pr) - set(allowed))
        if unknown:
            raise _fail(src, f"{f} key(s) {unknown}", f"not allowed for kind {kind!r}; allowed: {list(allowed)}")
        if "score_scale" in pr:
            sc = _number(pr["score_scale"], src, f"{f}.score_scale")
            if sc <= 0:
                raise _fail(src, f"{f}.score_scale", f"= {sc} must be > 0 (a multiplier of the prompt's scores)")
            scales.append(sc)
        else:
            scales.append(1.0)
        for key in _PROMPT_KEYS[kind]:
            if key not in pr:
                raise _fail(src, f"{f}.{key}", "is missing")
        if kind == "softmax_bandit":
            first = _numbers(pr["logits"], src, f"{f}.logits", min_len=2)
            k = len(first)
        else:
            rows = pr["features"]
            if not isinstance(rows, list) or len(rows) < 2:
                raise _fail(src, f"{f}.features", f"must be a list of K >= 2 rows of d = {d} numbers")
            first = [_numbers(row, src, f"{f}.features[{a}]", length=d) for a, row in enumerate(rows)]
            k = len(first)
        rm = pr["reward_mean"]
        if isinstance(rm, list) and len(rm) != k:
            raise _fail(src, f"{f}.reward_mean", f"has {len(rm)} entries but {f}.{first_key} has {k}; "
                        "expected one reward mean per action")
        rewards.append(_numbers(rm, src, f"{f}.reward_mean", length=k, unit=True))
        firsts.append(first)
    if kind == "softmax_bandit":
        return SoftmaxBandit(firsts, rewards, **meta, score_scale=scales)
    return LinearSoftmax(theta, firsts, rewards, **meta)


def env_to_dict(env: SyntheticPolicy) -> dict:
    """The JSON layout of ``env`` (with its ``theta0``); inverse of :func:`env_from_dict`."""
    out: dict[str, Any] = {"kind": env.kind}
    if env.name:
        out["name"] = env.name
    if env.description:
        out["description"] = env.description
    ks = env.n_actions.tolist()
    rm = [env.reward_mean[i, :k].tolist() for i, k in enumerate(ks)]
    if isinstance(env, SoftmaxBandit):
        out["prompts"] = [{"logits": lg, "reward_mean": r, **({"score_scale": s} if s != 1.0 else {})}
                          for lg, r, s in zip(env.logits_list(), rm, env.score_scale)]
    elif isinstance(env, LinearSoftmax):
        out["theta"] = env.theta0.tolist()
        out["prompts"] = [{"features": env.features[i, :k].tolist(), "reward_mean": r}
                          for i, (k, r) in enumerate(zip(ks, rm))]
    else:
        raise TypeError(f"cannot serialise {type(env).__name__}")
    return out


def load_env(path: str | os.PathLike) -> SyntheticPolicy:
    """Load and validate a synthetic policy from a JSON file (format in the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such environment file; built-in ones: {list_builtin_envs()}")
    try:
        data = read_json(path, "give the JSON file written by `ugrpo make-env`")
    except ValueError as e:  # a binary file, or text that is not JSON: the message names the file and where
        raise EnvFormatError(str(e)) from None
    return env_from_dict(data, source=str(path))


def check_varied_rewards(env: SyntheticPolicy, source: str) -> None:
    """Refuse an env in which no reward ever varies: every prompt's reward means all 0, or all 1.

    Its rewards are constants, so every estimator's gradient is exactly 0 with MSE 0: there is nothing to
    compare or allocate (the per-prompt error ratios would be 0 / 0). ``source`` names the env in the error.
    """
    r, mask = env.reward_mean, env.action_mask  # (P, Kmax)
    zero = ((r == 0) | ~mask).all(dim=1)
    one = ((r == 1) | ~mask).all(dim=1)
    if bool((zero | one).all()):
        raise EnvFormatError(
            f"{source}: in every prompt the reward means are all 0 or all 1, so every reward is a constant and every "
            "estimator's gradient is exactly 0 (MSE 0): nothing to measure or allocate; give an env in which some "
            "prompt has a reward mean strictly between 0 and 1, or both 0 and 1 (e.g. one from `ugrpo make-env`)"
        )


def save_env(env: SyntheticPolicy, path: str | os.PathLike) -> None:
    """Write ``env`` as JSON; ``load_env(path)`` gives back the same instance."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(env_to_dict(env), indent=1) + "\n")


def list_builtin_envs() -> list[str]:
    """Names of the instances shipped in ``ugrpo/data/*.json``."""
    return sorted(p.stem for p in DATA_DIR.glob("*.json"))


def builtin_env(name: str) -> SyntheticPolicy:
    """A shipped instance by name, e.g. ``builtin_env("demo")``."""
    path = DATA_DIR / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"unknown built-in environment {name!r}; available: {list_builtin_envs()}")
    return load_env(path)
