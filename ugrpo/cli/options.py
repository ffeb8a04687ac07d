"""Flags shared by several commands: the dotted training-config overrides and the ``--ray`` options.

Every command that takes a training config (``train``, ``sweep --config``, ``reproduce``) accepts the
same override syntax, ``--section.field VALUE`` (``--optim.lr 1e-4``, ``--budget.group_size 8``,
``--task.options.prompt_style compact``; values follow YAML scalar rules, ``-`` and ``_`` are
interchangeable). ``--help`` lists every field with its type, default and docstring, by section.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

__all__ = ["add_override_flags", "parse_overrides", "ray_options", "add_ray_flags", "config_default", "given"]

_PREFIX = "override:"


def config_default(cls: type, name: str) -> Any:
    """The default of field ``name`` of the config dataclass ``cls``: flags take their defaults (and the defaults
    their ``--help`` shows) from the config, so that each lives in one place."""
    import dataclasses

    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    if f.default is dataclasses.MISSING:
        raise ValueError(f"{cls.__name__}.{name} has no default")
    return f.default


def parse_bool(value: Any, flag: str) -> bool:
    """``true``/``false`` (any case) of a flag as a bool; a ValueError naming the flag otherwise.

    >>> parse_bool("False", "--is-guard")
    False
    """
    if isinstance(value, bool):
        return value
    v = str(value).strip().lower()
    if v not in ("true", "false"):
        raise ValueError(f"{flag} {value!r}: give true or false")
    return v == "true"


def given(args: argparse.Namespace, **fields: str) -> dict[str, Any]:
    """``{field: args.<flag>}`` for each flag given (not None), so that the config's defaults fill in the rest;
    ``fields`` maps a config field to its flag's dest."""
    return {name: getattr(args, dest) for name, dest in fields.items() if getattr(args, dest, None) is not None}


def _escape(text: str) -> str:
    return text.replace("%", "%%")


def add_override_flags(parser: argparse.ArgumentParser, title: str, *, skip: Sequence[str] = ()) -> None:
    """Add one ``--section.field`` flag per training-config field (except ``skip``), grouped by section.

    After parsing, ``args.overrides`` holds the override tokens in command-line order of declaration
    (e.g. ``['--optim.lr', '1e-4']``), including ``--task.options.NAME VALUE`` and any other unknown
    ``--name`` flag: the config loader reports unknown names with close matches.
    """
    from ugrpo.train.config import describe_fields

    usage = parser.format_usage().strip()
    parser.usage = usage[len("usage: "):].replace(parser.prog, "%(prog)s", 1) + " [--section.field VALUE ...]"
    groups: dict[str, Any] = {}
    for f in describe_fields():
        if f.name in skip:
            continue
        section = f.section or "top-level"
        if section not in groups:
            groups[section] = parser.add_argument_group(f"{title}: {section}" if f.section else
                                                        f"{title}: top-level fields")
        flags = sorted({f"--{f.name}", f"--{f.name.replace('_', '-')}"})
        groups[section].add_argument(*flags, dest=_PREFIX + f.name, default=argparse.SUPPRESS, metavar="VALUE",
                                     help=_escape(f"{f.doc} [{f.type}; default: {f.default}]"))
    parser.epilog = ((parser.epilog + "\n") if parser.epilog else "") + (
        "Task options: --task.options.NAME VALUE (e.g. --task.options.prompt_style compact).")
    known = parser.parse_known_args
    fields = {f.name for f in describe_fields()}

    def parse_known_args(args=None, namespace=None):
        ns, extra = known(args, namespace)
        _check_unknown(parser, extra, fields)
        tokens: list[str] = []
        for key in [k for k in vars(ns) if k.startswith(_PREFIX)]:
            tokens += [f"--{key[len(_PREFIX):]}", getattr(ns, key)]
            delattr(ns, key)
        ns.overrides = list(getattr(ns, "overrides", [])) + tokens + list(extra)
        return ns, []

    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]


def _check_unknown(parser: argparse.ArgumentParser, extra: Sequence[str], fields: set[str]) -> None:
    """An unknown flag that is neither a config field nor dotted (``--resum``) is an argparse error naming the closest
    flag (flags are never abbreviated: ``allow_abbrev=False`` in :mod:`ugrpo.cli.main`). A dotted one
    (``--allocation.rul``) is left to the config loader, which names the closest config keys."""
    import difflib

    flags = [o for a in parser._actions for o in a.option_strings if o.startswith("--") and "." not in o]
    for tok in extra:
        name = tok[2:].split("=", 1)[0]
        if not tok.startswith("--") or not name or "." in name or name.replace("-", "_") in fields:
            continue  # a value, a dotted config key or a top-level field: the config loader checks them
        close = difflib.get_close_matches(tok.split("=", 1)[0], flags, n=2, cutoff=0.75)
        hint = f"did you mean {' or '.join(close)}?" if close else "see --help for the flags"
        parser.error(f"unrecognized argument {tok.split('=', 1)[0]}: {hint} (flags are never abbreviated)")


def parse_overrides(tokens: Sequence[str]) -> list[tuple[str, Any]]:
    """``['--optim.lr', '1e-4']`` -> ``[('optim.lr', 0.0001)]`` (YAML scalars); see ``ugrpo.train.config``."""
    from ugrpo.train.config import parse_overrides as parse

    return parse(tokens)


def add_ray_flags(p: argparse.ArgumentParser, *, where: str = "") -> None:
    """``--ray``, ``--ray-address``, ``--ray-cpus``, ``--ray-gpus`` (defaults: ``RayOptions``')."""
    from ugrpo.experiments.sweep.executors import RayOptions

    cpus, gpus = config_default(RayOptions, "cpus_per_run"), config_default(RayOptions, "gpus_per_run")
    p.add_argument("--ray", action="store_true",
                   help=f"{where}one Ray task per training run (pip install 'ugrpo[ray]'); a local Ray of --workers "
                   "CPUs unless --ray-address or $RAY_ADDRESS names a cluster")
    p.add_argument("--ray-address", default=None, help="with --ray: the cluster to join (auto, ray://HOST:10001, ...)")
    p.add_argument("--ray-cpus", type=float, default=None, help=f"with --ray: CPUs per run (default {cpus:g}; also its "
                   "torch threads)")
    p.add_argument("--ray-gpus", type=float, default=None, help=f"with --ray: GPUs per run (default {gpus:g})")


def ray_options(args: argparse.Namespace):
    """``--ray`` and its ``--ray-*`` flags -> ``RayOptions`` (None without --ray; the flags alone are an error)."""
    from ugrpo.experiments.sweep.executors import RayOptions, import_ray

    flags = [f"--{n.replace('_', '-')}" for n in ("ray_address", "ray_cpus", "ray_gpus")
             if getattr(args, n, None) is not None]
    if not getattr(args, "ray", False):
        if flags:
            raise ValueError(f"{', '.join(flags)} only apply with --ray; add --ray or drop them")
        return None
    import_ray()  # not installed: say so before any work
    return RayOptions(address=args.ray_address, **given(args, cpus_per_run="ray_cpus", gpus_per_run="ray_gpus"))
