"""What ``ugrpo train --resume`` may change, and the checks that keep a resumed run one run.

A resume continues the same optimisation: every field that changes what a step computes must
equal the saved ``config.json``. Only the fields in :data:`RESUMABLE` may differ (how long to run,
how often to evaluate, log and checkpoint); ``steps`` may change only under a constant lr schedule
(a decaying schedule is a function of ``steps``) and never below the checkpoint's step. A field added to the schema
after the run started (absent from its ``config.json``) is no change while it keeps its default.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ugrpo.errors import ResumeError
from ugrpo.runs import to_jsonable

__all__ = ["RESUMABLE", "config_diff", "check_resume_config", "hashed_config", "finished_result"]

RESUMABLE: tuple[str, ...] = ("steps", "eval.every", "log_every", "checkpoint_every")
"""Dotted config fields that ``--resume`` may change; any other change is an error."""


def _leaves(d: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _leaves(v, f"{prefix}{k}.")
    else:
        yield prefix[:-1], d


def config_diff(saved: dict, new: dict) -> list[tuple[str, Any, Any]]:
    """(field, saved value, new value) for every dotted field that differs (``derived`` ignored)."""
    a = dict(_leaves({k: v for k, v in to_jsonable(saved).items() if k != "derived"}))
    b = dict(_leaves({k: v for k, v in to_jsonable(new).items() if k != "derived"}))
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def check_resume_config(saved: dict | None, cfg, out: Path) -> None:
    """Raise ResumeError naming the first field that changed and may not, with both values."""
    if saved is None:
        return
    new = to_jsonable(asdict(cfg))
    newer = {k for k, _ in _leaves(new)} - {k for k, _ in _leaves(to_jsonable(saved))}  # fields the run predates
    defaults = dict(_leaves(to_jsonable(asdict(type(cfg)()))))
    for field, old, value in config_diff(saved, new):
        if field in RESUMABLE and field != "steps":
            continue
        if field in newer and value == defaults.get(field):
            continue  # added to the schema after the run started, at its default: what the run did all along
        if field == "steps" and new["optim"]["scheduler"] == "constant":
            continue
        why = (f"optim.scheduler={new['optim']['scheduler']} decays over steps, so steps cannot change"
               if field == "steps" else "it changes what the resumed steps compute")
        raise ResumeError(
            f"--resume: {field} is {value!r} but the run in {out} used {old!r} ({why}); resume with "
            f"--{field} {json.dumps(old)} (only {', '.join(RESUMABLE)} may change), or start a new run with a new --out"
        )


def hashed_config(cfg) -> dict:
    """The config that identifies a training run in its manifest: everything but the RESUMABLE fields."""
    d = to_jsonable(asdict(cfg))
    for field in RESUMABLE:
        *parents, last = field.split(".")
        node = d
        for p in parents:
            node = node.get(p, {})
        node.pop(last, None)
    return d


def finished_result(out: Path, steps: int) -> dict | None:
    """``results.json`` of a run in ``out`` that already reached ``steps`` steps, else None."""
    p = Path(out) / "results.json"
    if not p.exists():
        return None
    try:
        res = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return res if isinstance(res, dict) and res.get("steps") == steps else None
