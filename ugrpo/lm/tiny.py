"""The built-in tiny model: a ~1 M parameter Qwen2 over a character vocabulary, and its cache.

``build_tiny_model`` makes a randomly initialised model (seeded). ``pretrain_tiny``
(in :mod:`ugrpo.lm.pretrain`, re-exported here) warms it up on compact arithmetic so
that RL has a reward signal. ``tiny_model_path(strength)`` returns the cached warm model,
building it on first use; ``load_policy("tiny:instruct")`` goes through it.

Strengths (the paper's base / instruct / few-shot models, one flag apart) differ only in
the sampled accuracy (temperature 1) at which the warm-up stops; see ``STRENGTHS``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path
from typing import Literal

import torch

__all__ = [
    "TinySize",
    "Strength",
    "STRENGTHS",
    "CACHE_VERSION",
    "build_tiny_model",
    "tiny_model_path",
    "pretrain_tiny",
    "PretrainResult",
]

TinySize = Literal["1m", "4m"]
Strength = Literal["base", "instruct", "fewshot"]

STRENGTHS: dict[str, float] = {"base": 0.15, "instruct": 0.35, "fewshot": 0.60}
"""Target sampled accuracy (temperature 1, held-out problems) at which the warm-up stops.

Recipe v2, defaults (seed 0, batch 128, lr 1e-3), ``OMP_NUM_THREADS=1``, 2-core machine at load
average ~4-5: instruct stops at step 650 (sampled 0.372 +- 0.038, greedy 0.40) in 3.0 min.
(Recipe v1 measured base at step 150 (0.16 / 0.23), instruct at 700, fewshot at 1675, ~0.24
CPU-seconds a step; base and fewshot were not re-measured for v2.) The held-out SE is ~0.04
(100 problems x 4 samples). On a loaded machine, 2 torch threads ran ~10x slower than 1
(1.5-5 s a step against ~0.3 s): set ``OMP_NUM_THREADS=1`` when other jobs share the cores."""

CACHE_VERSION = "v2"
"""Bump when the tiny model, tokenizer, task or warm-up recipe changes (invalidates caches).
v2: the warm-up stream is one draw with repeats per step (``pretrain._training_batch``), not draws of 64 distinct."""

_SIZES: dict[str, int] = {"1m": 128, "4m": 256}


def build_tiny_model(tokenizer, *, size: TinySize = "1m", seed: int = 0, max_position_embeddings: int = 128):
    """A randomly initialised ``Qwen2ForCausalLM`` sized for CPU runs.

    Parameters
    ----------
    tokenizer : PreTrainedTokenizerFast
        Sets the vocabulary size and the pad / bos / eos ids (e.g. :func:`build_char_tokenizer`).
    size : {"1m", "4m"}
        Hidden size 128 (1.05 M parameters with the 22-token character vocabulary) or 256 (4.2 M); 4 layers, 4 heads,
        4 kv heads, MLP width 4x hidden, tied input/output embeddings.
    seed : int
        ``torch.manual_seed`` before the weights are drawn (the global RNG state is restored).
    max_position_embeddings : int
        Longest sequence (prompt + completion) the model is used for.

    Returns
    -------
    transformers.Qwen2ForCausalLM
        In float32, eval mode off (``train()``), on the CPU.
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if size not in _SIZES:
        raise ValueError(f"build_tiny_model: size={size!r} is not one of {sorted(_SIZES)}")
    hidden = _SIZES[size]
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        use_cache=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def _cache_root(cache_dir: str | os.PathLike | None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("UGRPO_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ugrpo"


def tiny_model_path(strength: str = "instruct", cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder of the cached warm tiny model of this strength; built on first use.

    The folder is ``<root>/tiny/<strength>-<CACHE_VERSION>`` with root = ``cache_dir``, else
    ``$UGRPO_CACHE``, else ``~/.cache/ugrpo``. The first call runs :func:`pretrain_tiny`
    with its defaults and seed 0 (about 1-3 minutes on a CPU) into a temporary folder next to it and renames it into
    place, under an exclusive file lock (``<strength>-<CACHE_VERSION>.lock``): a second process waits for
    the first and then reuses its model; no process ever sees a half-written folder.

    Raises
    ------
    ValueError
        An unknown strength.
    """
    if strength not in STRENGTHS:
        raise ValueError(f"unknown tiny model strength {strength!r}; choose one of {', '.join(STRENGTHS)} (e.g. 'tiny:instruct')")
    root = _cache_root(cache_dir) / "tiny"
    final = root / f"{strength}-{CACHE_VERSION}"
    if _complete(final):
        return final
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{strength}-{CACHE_VERSION}.lock", "w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the file closes
        if _complete(final):  # another process built it while we waited
            return final
        if final.exists():  # an incomplete folder can only come from outside; do not trust it
            shutil.rmtree(final)
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{strength}-{CACHE_VERSION}.", suffix=".tmp"))
        try:
            from ugrpo.lm.pretrain import pretrain_tiny

            pretrain_tiny(tmp, strength=strength, seed=0, progress=True)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final


def _complete(folder: Path) -> bool:
    return (folder / "ugrpo_tiny.json").is_file() and (folder / "model.safetensors").is_file()


def __getattr__(name: str):  # PEP 562: re-export the warm-up without an import cycle
    if name in ("pretrain_tiny", "PretrainResult"):
        from ugrpo.lm import pretrain

        return getattr(pretrain, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
