"""Each config field's dotted name, type, default and docstring, read from the schema's source.

The docstrings under the fields of :mod:`ugrpo.train.config.schema` are the documentation of the
config; ``ugrpo train --help`` prints them from here, grouped by section.

>>> lr = next(f for f in describe_fields() if f.name == "optim.lr")
>>> lr.section, lr.type, lr.default
('optim', 'float', '1e-05')
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import typing
from dataclasses import dataclass

from ugrpo.train.config.schema import TrainConfig

__all__ = ["FieldHelp", "describe_fields", "summary_line"]


@dataclass(frozen=True)
class FieldHelp:
    """One config field as ``--help`` shows it."""

    name: str
    """dotted name, e.g. ``optim.lr``"""
    section: str
    """``optim``, ... or ``""`` for a top-level field"""
    type: str
    """the annotation, readable: ``float``, ``int | None``, ``{constant,cosine}``"""
    default: str
    """the default value as YAML would write it"""
    doc: str
    """the field's docstring, on one line"""


def _docstrings(cls: type) -> dict[str, str]:
    """Field name -> the string literal right below it in the class body."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    out = {}
    for a, b in zip(body, body[1:]):
        if (isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name) and isinstance(b, ast.Expr)
                and isinstance(b.value, ast.Constant) and isinstance(b.value.value, str)):
            out[a.target.id] = " ".join(b.value.value.split())
    return out


def _type_name(tp: typing.Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return "{" + ",".join(str(a) for a in args) + "}"
    if origin is typing.Union or type(tp).__name__ == "UnionType":
        return " | ".join(_type_name(a) for a in args)
    if origin is tuple:
        return "list of " + (_type_name(args[0]) if args else "values")
    if tp is type(None):
        return "None"
    return getattr(tp, "__name__", str(tp))


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        v = f.default
    elif f.default_factory is not dataclasses.MISSING:
        v = f.default_factory()
    else:
        return "(required)"
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, tuple):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return str(v) if not isinstance(v, dict) else ("{}" if not v else str(v))


def describe_fields(cls: type = TrainConfig, prefix: str = "") -> list[FieldHelp]:
    """Every leaf field of ``cls`` (sections expanded), in declaration order."""
    hints = typing.get_type_hints(cls)
    docs = _docstrings(cls)
    out: list[FieldHelp] = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            out += describe_fields(tp, prefix + f.name + ".")
            continue
        name = prefix + f.name
        out.append(FieldHelp(name=name, section=name.split(".")[0] if "." in name else "", type=_type_name(tp),
                             default=_default(f), doc=docs.get(f.name, "")))
    return out


def summary_line(cfg: TrainConfig) -> str:
    """The resolved config in one line (the whole of it is in the run folder's config.json).

    >>> from ugrpo.train.config import config_from_dict
    >>> summary_line(config_from_dict({}))
    'config: model tiny:instruct, task arithmetic, N = 64 samples per step, G = 8 (B = 8 prompts), algorithm 1, \
baseline grpo, scale none, adamw lr 1e-05 (constant), 100 steps, seed 0'
    """
    b = cfg.budget
    return (f"config: model {cfg.model.name}, task {cfg.task.name}, N = {b.samples_per_step} samples per step, "
            f"G = {b.group_size} (B = {cfg.prompts_per_step} prompts), algorithm {cfg.algorithm}, baseline "
            f"{cfg.baseline}, scale {cfg.scale}, {cfg.optim.name} lr {cfg.optim.lr:g} ({cfg.optim.scheduler}), "
            f"{cfg.steps} steps, seed {cfg.seed}"
            + (f", allocation {cfg.allocation.rule}" if cfg.allocation.rule != "uniform" else "")
            + (f", sampling on {cfg.sampling.backend}" if cfg.sampling.backend != "hf" else ""))
