"""What ``ugrpo train --resume`` may change, and the checks that keep a resumed run one run.

A resume continues the same optimisation: every field that changes what a step computes must
equal the saved ``config.json``. Only the fields in :data:`RESUMABLE` may differ (how long to run,
how often to evaluate, log and checkpoint, where to log: ``report_to``, and how often the prompt-IS certificate is
computed, which only reports); ``steps`` may change only under a constant lr schedule (a decaying schedule is a
function of ``steps``) and never below the checkpoint's step.

The run's manifest (``run.json``, :mod:`ugrpo.runlock`) holds a hash of the config without the
:data:`RESUMABLE` fields, written when the run started. A resume compares it too: a ``config.json``
edited since the start is refused, and a folder that lost ``config.json`` resumes only with the
run's own config (the same hash), never with another one. A field added to the schema
after the run started (absent from its ``config.json``) is no change while it keeps its default.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ugrpo.errors import ResumeError
from ugrpo.runlock import MANIFEST, config_hash, read_manifest
from ugrpo.runs import finished_results, to_jsonable

__all__ = ["RESUMABLE", "config_diff", "check_resume_config", "hashed_config", "finished_result",
           "check_history_json"]

RESUMABLE: tuple[str, ...] = ("steps", "eval.every", "log_every", "checkpoint_every", "report_to",
                               "allocation.is_certificate_every")
"""Dotted config fields that ``--resume`` may change; any other change is an error."""

_HASHED_FORMS: tuple[tuple[str, ...], ...] = (RESUMABLE, RESUMABLE[:5])
"""The RESUMABLE sets a manifest's hash may have been written with: this version's, and the one before
``allocation.is_certificate_every`` became resumable (a run started then hashed it; it resumes all the same)."""


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
    """Raise ResumeError naming the first field that changed and may not, with both values.

    ``saved`` is the run's ``config.json`` (None when the folder has none); the manifest of ``out`` is compared
    as well (module docstring).
    """
    out = Path(out)
    manifest = read_manifest(out)
    if saved is None:
        if manifest is not None:
            _check_without_config(cfg, out, manifest["config_hash"])
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
    if manifest is not None and manifest["config_hash"] not in _saved_hashes(saved):
        raise ResumeError(
            f"--resume: {out / 'config.json'} does not match the run's manifest {out / MANIFEST} (config hash "
            f"{manifest['config_hash']} there, {_saved_hashes(saved)[0]} for config.json): config.json was edited or "
            "replaced since the run started, so it no longer says what the run used; restore config.json from a "
            "copy, or start a new run with a new --out"
        )


def _check_without_config(cfg, out: Path, recorded: str) -> None:
    """A folder without ``config.json``: resume only with the run's own config (its manifest hash)."""
    from ugrpo.train.checkpoint import latest_checkpoint

    missing = out / "config.json"
    given = config_hash(hashed_config(cfg))
    if recorded not in [config_hash(_strip(asdict(cfg), form)) for form in _HASHED_FORMS]:
        raise ResumeError(
            f"--resume: {missing} is missing, and this config is not the run's: its hash {given} differs from "
            f"{recorded}, recorded in {out / MANIFEST} when the run started (a field other than "
            f"{', '.join(RESUMABLE)} differs; config.json would name it); resume with exactly the config the run "
            "started with (the same --config and flags), restore config.json from a copy, or start a new run with a "
            "new --out"
        )
    if cfg.optim.scheduler != "constant" and latest_checkpoint(out / "checkpoints") is not None:
        raise ResumeError(
            f"--resume: {missing} is missing; the config matches the run's manifest {out / MANIFEST} except steps, "
            f"which only config.json records and which optim.scheduler={cfg.optim.scheduler} decays over, so a "
            "resume cannot tell whether the lr schedule stays the same; restore config.json from a copy, or start a "
            "new run with a new --out"
        )
    print(f"note: {missing} is missing; the config given matches the run recorded in {out / MANIFEST}, so the "
          "resume goes on", flush=True)


def _strip(d: dict, fields: Sequence[str] = RESUMABLE) -> dict:
    """A config dict without ``derived`` and the ``fields`` (:data:`RESUMABLE`: what the manifest hashes)."""
    d = {k: v for k, v in to_jsonable(d).items() if k != "derived"}
    for field in fields:
        *parents, last = field.split(".")
        node = d
        for p in parents:
            node = node.get(p, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(last, None)
    return d


def _saved_hashes(saved: dict) -> list[str]:
    """Hashes that a manifest of the run ``config.json`` describes can hold: of config.json as written, and of
    config.json read with the defaults of fields added since (a manifest written by this version), each without
    the RESUMABLE fields of this version or of an earlier one (:data:`_HASHED_FORMS`)."""
    from ugrpo.train.config import config_from_dict

    out = []
    for form in _HASHED_FORMS:
        out.append(config_hash(_strip(saved, form)))
        try:
            out.append(config_hash(_strip(asdict(config_from_dict(_strip(saved, form))), form)))
        except (ValueError, TypeError):  # a field this version no longer has: only the file as written counts
            pass
    return out


def hashed_config(cfg) -> dict:
    """The config that identifies a training run in its manifest: everything but the RESUMABLE fields."""
    return _strip(asdict(cfg))


def finished_result(out: Path, steps: int) -> dict | None:
    """``results.json`` of a run in ``out`` that finished (:func:`ugrpo.runs.finished_results`) after ``steps``
    steps, else None; its ``out_dir`` is ``out`` (a run folder copied elsewhere reports where it is now)."""
    res = finished_results(out)  # None for a damaged results.json too: finished again from the last checkpoint
    if res is None or res.get("steps") != steps:
        return None
    return {**res, "out_dir": str(out)}


def check_history_json(data: Any, n_prompts: int, path: Path, required: Sequence[str],
                       optional: Sequence[str] = ()) -> None:
    """Check a checkpoint's ``history.json`` (:mod:`ugrpo.stats.history`) before a resume trusts it.

    It has passed its sha256, so whatever is wrong was written together with ``state.json`` (an edit, another
    tool). Raises ResumeError naming the file, the field and what is wrong, and the ways out.
    """
    path = Path(path)
    fix = (f"; {path.name} passed its checksum, so state.json was rewritten with it (an edit, or another tool): "
           f"restore {path.parent} from a copy, delete it to resume from the checkpoint before, or start a new run "
           "with a new --out")
    if not isinstance(data, dict):
        raise ResumeError(f"{path} holds a JSON {type(data).__name__}, not the allocation history object{fix}")
    saved = data.get("n_prompts")
    if isinstance(saved, bool) or not isinstance(saved, int):
        raise ResumeError(f"{path}: n_prompts is {saved!r}, not a number of train prompts{fix}")
    if saved != n_prompts:
        raise ResumeError(
            f"{path} is the allocation history of {saved} train prompts, but the task gives {n_prompts}: the task "
            f"settings are those of config.json, so the task's data files changed since the checkpoint (restore "
            f"them), or {path.name} was edited{fix}"
        )
    for key in list(required) + [k for k in optional if k in data]:
        v = data.get(key)
        ok = isinstance(v, list) and len(v) == n_prompts and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
        if not ok or not np.isfinite(np.asarray(v, dtype=np.float64)).all():
            got = "absent" if key not in data else f"{type(v).__name__} {str(v)[:60]}"
            raise ResumeError(f"{path}: {key!r} is not a list of {n_prompts} finite numbers (got {got}){fix}")
        if key != "t0_sum" and min(v) < 0:  # every sum but T0's (an unbiased estimate, M14) is >= 0
            i = int(np.argmin(v))
            raise ResumeError(f"{path}: {key!r} is {v[i]!r} for prompt {i}; a sum over visits cannot be negative{fix}")
    over = np.flatnonzero(np.asarray(data["successes"]) > np.asarray(data["samples"]) + 1e-9) \
        if "successes" in required and "samples" in required else []
    if len(over):
        i = int(over[0])
        raise ResumeError(f"{path}: prompt {i} has {data['successes'][i]!r} successes in {data['samples'][i]!r} "
                          f"samples (rewards are in [0, 1]){fix}")
