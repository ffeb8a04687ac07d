"""Where a model name points, checked without torch or transformers: a ``tiny:*`` model, a local folder, a hub id.

:func:`check_model_name` is what ``ugrpo train`` checks before it creates its run folder (and before it imports
torch, so that a wrong ``model.name`` is a one-line error in well under 2 s); :func:`ugrpo.lm.loading.load_policy`
resolves the same way, so both give the same message. Only ``tiny:*`` names are ever told about
``ugrpo pretrain-tiny``: a missing folder of someone's own model is not a tiny model to build.

>>> model_source("tiny:instruct").kind, model_source("Qwen/Qwen2.5-0.5B-Instruct").kind
('tiny', 'hub')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ugrpo.lm.tiny_shipped import SHIPPED_NAMES

__all__ = ["TINY_NAMES", "ModelSource", "model_source", "check_model_name", "hub_cached", "not_cached_message"]

TINY_NAMES: tuple[str, ...] = ("random", *SHIPPED_NAMES)
"""Every ``tiny:<name>``: ``random`` (cached, built in seconds) and the shipped warm models."""

_HUB_ID_RE = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")  # "org/name" or "name"

KINDS = "give tiny:instruct (or tiny:base, tiny:fewshot, tiny:random), a folder written by save_pretrained, or a hub id"


@dataclass(frozen=True)
class ModelSource:
    """What a model name is: ``kind`` tiny (``name`` the strength), folder (``path``) or hub (``name`` the id)."""

    kind: str
    name: str
    path: Path | None = None


def model_source(name_or_path: str, *, where: str = "load_policy") -> ModelSource:
    """Classify ``name_or_path`` and check what can be checked from the name and the file system alone; the
    messages start with ``where`` (a function, or the config field: ``model.name``).

    Raises
    ------
    ValueError
        An empty name, or an unknown ``tiny:`` name.
    FileNotFoundError
        A path that does not exist, a file, or a folder without ``config.json``.
    """
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ValueError(f"{where}: {name_or_path!r} is not a model name; {KINDS}")
    if name_or_path.startswith("tiny:"):
        strength = name_or_path.split(":", 1)[1]
        if strength not in TINY_NAMES:
            raise ValueError(f"{where}: unknown tiny model strength {strength!r}; choose one of "
                             f"{', '.join(TINY_NAMES)} (e.g. 'tiny:instruct')")
        return ModelSource("tiny", strength)
    p = Path(name_or_path).expanduser()
    if p.exists():
        if not p.is_dir():
            raise FileNotFoundError(f"{where}: {p} is a file; pass the folder that save_pretrained wrote")
        if not (p / "config.json").is_file():
            raise FileNotFoundError(
                f"{where}: {p} is not a loadable model folder: it has no config.json; pass a folder written by "
                "save_pretrained (config.json, weights, tokenizer files)"
            )
        return ModelSource("folder", name_or_path, p)
    if not _HUB_ID_RE.fullmatch(name_or_path):
        raise FileNotFoundError(f"{where}: local model folder {p} does not exist; check the path ({KINDS})")
    return ModelSource("hub", name_or_path)


def hub_cached(repo_id: str) -> bool:
    """Whether the local Hugging Face cache holds ``repo_id``'s ``config.json`` (nothing is downloaded)."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)


def not_cached_message(repo_id: str, where: str = "load_policy") -> str:
    """The error for a hub id that is neither a local folder nor in the local cache."""
    folder = Path(repo_id).expanduser().absolute()
    return (f"{where}: model {repo_id!r} is neither a local folder (no {folder}) nor a Hugging Face hub id in the "
            "local cache, and nothing is downloaded at run time. If it names a local folder: put the model there "
            f"beforehand, e.g. on a machine with network `hf download <hub id> --local-dir {repo_id}` (a folder "
            "that save_pretrained wrote); if it is a hub id: `hf download "
            f"{repo_id}` there, then copy the cache (HF_HOME) here.")


def check_model_name(name_or_path: str, *, where: str = "model.name") -> ModelSource:
    """:func:`model_source`, and for a hub id that the local cache holds it (a FileNotFoundError if not)."""
    source = model_source(name_or_path, where=where)
    if source.kind == "hub" and not hub_cached(source.name):
        raise FileNotFoundError(not_cached_message(source.name, where))
    return source
