"""Building a :class:`~ugrpo.train.config.TrainConfig` from YAML, dicts and dotted overrides.

Unknown keys are errors naming the key, the source (file or command line) and the closest
valid names; values are coerced to the annotated field types (YAML 1.1 reads ``1e-4`` as a
string, so numbers are converted here) and validated by the dataclasses' ``__post_init__``.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml

from ugrpo.train.config.schema import TrainConfig

__all__ = ["load_config", "config_from_dict", "parse_overrides", "field_names", "read_yaml"]


def read_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load(text)``; a parse error is a ValueError naming ``where`` (a file, a flag and its value) and the
    line and column (PyYAML itself would name ``<unicode string>``).

    >>> read_yaml("[1, 2", "--optim.betas")
    Traceback (most recent call last):
    ...
    ValueError: --optim.betas: not valid YAML (line 1, column 6: expected ',' or ']', but got '<stream end>')
    """
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None) or str(e)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ValueError(f"{where}: not valid YAML ({at}{problem})") from None


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def field_names(cls: type = TrainConfig, prefix: str = "") -> list[str]:
    """All dotted field names of a config class, e.g. ``['model.name', ..., 'steps', ...]``."""
    out: list[str] = []
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        if dataclasses.is_dataclass(t):
            out += field_names(t, prefix + f.name + ".")
        else:
            out.append(prefix + f.name)
    return out


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Convert a YAML value to the annotated type ``tp`` or raise naming ``where``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        if isinstance(value, str) and value.lower() in ("none", "null") and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0], where)
    if origin is Literal:
        for a in args:  # "2" from the command line for algorithm: 1 | 2
            if value == a or (isinstance(a, int) and isinstance(value, str) and value == str(a)):
                return a
        raise ValueError(f"{where}={value!r} is not valid; choose one of {list(args)}")
    if origin is tuple:
        if isinstance(value, (str, int, float)):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{where}={value!r} must be a list")
        item = args[0] if args else Any
        return tuple(_coerce(v, item, where) for v in value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ValueError(f"{where}={value!r} must be true or false")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"{where}={value!r} must be an integer")
        try:
            f = float(value)
        except ValueError:
            raise ValueError(f"{where}={value!r} must be an integer") from None
        if not f.is_integer():
            raise ValueError(f"{where}={value!r} must be an integer")
        return int(f)
    if tp is float:
        if isinstance(value, bool):
            raise ValueError(f"{where}={value!r} must be a number")
        try:
            return float(value)  # YAML 1.1 reads '1e-4' as a string
        except (TypeError, ValueError):
            raise ValueError(f"{where}={value!r} must be a number") from None
    if tp is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ValueError(f"{where}={value!r} must be a string")
        return str(value)
    if tp is dict or origin is dict:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}={value!r} must be a mapping")
        return dict(value)
    return value


# keys that existed once: the error says what replaced them
_REMOVED = {f"allocation.{k}": "the allocation rules' prior is now fitted to the run's own history (docs/allocation.md "
            "A3; ustat's safety is allocation.safe_tol / allocation.safe_level); delete the key"
            for k in ("prior_a", "prior_b", "shrink")}


def _unknown(key: str, valid: Sequence[str], source: str) -> ValueError:
    if key.lstrip("-").replace("-", "_") in _REMOVED:
        return ValueError(f"config key {key!r} in {source} was removed: {_REMOVED[key.lstrip('-').replace('-', '_')]}")
    close = difflib.get_close_matches(key, list(valid), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; valid keys: {', '.join(valid)}"
    return ValueError(f"unknown config key {key!r} in {source}{hint}")


def _build(cls: type, data: Mapping[str, Any], source: str, prefix: str = "") -> Any:
    if not isinstance(data, Mapping):
        raise ValueError(f"{source}: section {prefix.rstrip('.') or '<top>'} must be a mapping, got {data!r}")
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in names:
            raise _unknown(prefix + name, [prefix + n for n in names], source)
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = _build(tp, value or {}, source, prefix + name + ".")
        else:
            kwargs[name] = _coerce(value, tp, prefix + name)
    return cls(**kwargs)


def config_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> TrainConfig:
    """Build and validate a :class:`TrainConfig` from a (nested) mapping."""
    return _build(TrainConfig, data, source)


def parse_overrides(args: Sequence[str]) -> list[tuple[str, Any]]:
    """``['--optim.lr', '1e-4', '--eval.greedy=false']`` -> ``[('optim.lr', '1e-4'), ('eval.greedy', False)]``.

    Values are parsed with YAML scalar rules (``null``, ``true``, ``[0.9, 0.99]``); names may
    use ``-`` or ``_``.
    """
    out: list[tuple[str, Any]] = []
    i = 0
    args = list(args)
    while i < len(args):
        a = args[i]
        if not a.startswith("--") or len(a) == 2:
            raise ValueError(f"expected an override like --optim.lr 1e-4, got {a!r}")
        if "=" in a:
            key, raw = a[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(args):
                raise ValueError(f"override {a} has no value; write e.g. {a} VALUE")
            key, raw = a[2:], args[i + 1]
            i += 2
        out.append((key.replace("-", "_"), read_yaml(raw, f"--{key} {raw}") if raw != "" else ""))
    return out


def _set_dotted(data: dict, key: str, value: Any) -> None:
    if key == "allocation" and isinstance(value, str):  # shorthand: --allocation ustat = --allocation.rule ustat
        key = "allocation.rule"
    parts = key.split(".")
    valid = field_names()
    # task.options.<name> sets one task option; everything else must be a known field
    if not (key in valid or (parts[:2] == ["task", "options"] and len(parts) == 3)):
        raise _unknown(key, valid, "the command-line overrides")
    node = data
    for p in parts[:-1]:
        nxt = node.get(p)
        if nxt is None:
            nxt = node[p] = {}
        elif not isinstance(nxt, dict):
            raise ValueError(f"override {key}: {p} is not a section")
        node = nxt
    node[parts[-1]] = value


def _normalise_keys(data: Any) -> Any:
    """kebab-case -> snake_case in config keys (task options are passed through untouched)."""
    if not isinstance(data, dict):
        return data
    out = {}
    for k, v in data.items():
        k = str(k).replace("-", "_")
        if k == "allocation" and isinstance(v, str):  # shorthand ``allocation: ustat`` = ``allocation: {rule: ustat}``
            v = {"rule": v}
        out[k] = v if k == "options" else _normalise_keys(v)
    return out


def load_config(path: str | Path | None, overrides: Sequence[str] | Sequence[tuple[str, Any]] = ()) -> TrainConfig:
    """Read a YAML config, apply dotted overrides, validate.

    Parameters
    ----------
    path : YAML file (top-level keys = :class:`TrainConfig` fields) or None for the defaults
    overrides : raw command-line tokens (``['--optim.lr', '1e-4']``) or parsed ``(key, value)`` pairs

    Raises
    ------
    ValueError
        For an unknown key (naming the key, the file and close matches) or an invalid value.
    """
    data: dict = {}
    source = "the defaults"
    if path is not None:
        p = Path(path)
        if not p.exists():
            raise FileNotFoundError(f"config file {p} does not exist")
        from ugrpo.fileio import read_text

        loaded = read_yaml(read_text(p, "save the config as UTF-8 YAML"), str(p))
        if loaded is not None and not isinstance(loaded, dict):
            raise ValueError(f"{p}: the top level must be a mapping of config keys, got {type(loaded).__name__}")
        data = _normalise_keys(loaded or {})
        source = str(p)
    pairs = parse_overrides(overrides) if overrides and isinstance(overrides[0], str) else list(overrides)
    _check_keys(data, source)  # unknown keys in the file are reported against the file
    for key, value in pairs:
        _set_dotted(data, key, value)
    return _build(TrainConfig, data, source if not pairs else f"{source} + command-line overrides")


def _check_keys(data: Mapping[str, Any], source: str, cls: type = TrainConfig, prefix: str = "") -> None:
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key, value in data.items():
        if key not in names:
            raise _unknown(prefix + key, [prefix + n for n in names], source)
        if dataclasses.is_dataclass(hints[key]) and isinstance(value, Mapping):
            _check_keys(value, source, hints[key], prefix + key + ".")
