"""Load a policy (model + tokenizer) by name, offline, optionally wrapped with LoRA.

Names
-----
``tiny:<name>``
    The built-in warmed-up tiny model (``base``, ``instruct`` or ``fewshot``: shipped with the package, loaded
    with no build, :mod:`ugrpo.lm.tiny_shipped`) or its random-weight start (``random``: built in seconds on first
    use and cached); :func:`ugrpo.lm.tiny_cache.tiny_model_path` resolves the name.
a local folder
    Anything ``save_pretrained`` wrote (``config.json`` + weights + tokenizer files).
a hub id such as ``Qwen/Qwen2.5-0.5B-Instruct``
    Only if it is already in the local Hugging Face cache: nothing is downloaded at run time
    (``local_files_only=True``). A missing model raises ``FileNotFoundError`` that says how to
    download it beforehand on a machine with network.

The tokenizer always ends up with a pad token (the EOS token if it had none) and left padding.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from ugrpo.lm.source import model_source, not_cached_message

__all__ = ["LoraSettings", "Policy", "load_policy", "load_tokenizer", "format_prompt", "has_chat_template",
           "context_length"]

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_GENERIC_FAST = ("TokenizersBackend", "PreTrainedTokenizerFast")
_DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapter settings (peft ``LoraConfig``).

    Attributes
    ----------
    r : int
        Rank (>= 1).
    alpha : float
        Scaling ``lora_alpha``; the update is scaled by ``alpha / r``.
    dropout : float
        ``lora_dropout`` in [0, 1).
    target_modules : tuple[str, ...]
        Module names to adapt; empty = the attention and MLP projections
        (``q_proj k_proj v_proj o_proj gate_proj up_proj down_proj``) found in the model,
        or peft's ``"all-linear"`` if the model has none of them.
    """

    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not isinstance(self.r, int) or self.r < 1:
            raise ValueError(f"LoraSettings.r={self.r!r} must be an integer >= 1 (use lora=None for full fine-tuning)")
        if not self.alpha > 0:
            raise ValueError(f"LoraSettings.alpha={self.alpha!r} must be > 0")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoraSettings.dropout={self.dropout!r} must be in [0, 1)")
        if isinstance(self.target_modules, str):
            raise TypeError("LoraSettings.target_modules must be a tuple of module names, not one string")


@dataclass(frozen=True)
class Policy:
    """A causal LM and its tokenizer (pad token set, left padding).

    ``model`` is a ``PreTrainedModel``, or a ``peft.PeftModel`` when LoRA was asked for.
    """

    model: Any
    tokenizer: Any
    name: str = ""


def load_policy(
    name_or_path: str,
    *,
    lora: LoraSettings | None = None,
    dtype: Literal["float32", "bfloat16", "float16"] = "float32",
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> Policy:
    """Load a policy for sampling and training.

    Parameters
    ----------
    name_or_path : str
        ``tiny:<strength>``, a local folder, or a hub id present in the local cache.
    lora : LoraSettings or None
        Wrap the model with a LoRA adapter (only the adapter's parameters require grad).
    dtype : {"float32", "bfloat16", "float16"}
        Parameter dtype.
    device : str or torch.device
        Where the model lives.
    seed : int
        ``torch.manual_seed(seed)`` right before the adapter is built, so its random init is
        reproducible (TRL issue #6688: unseeded LoRA init differs between processes).

    Returns
    -------
    Policy

    Raises
    ------
    FileNotFoundError
        A local path that does not exist, or a hub id not in the local cache.
    ValueError
        An unknown ``tiny:`` strength or dtype.
    """
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ValueError(f"load_policy: dtype={dtype!r} is not one of {sorted(DTYPES)}")
    path = _resolve(name_or_path)
    local = path is not None
    source = str(path) if local else name_or_path
    try:
        tokenizer = load_tokenizer(source)
        with _no_loading_bar():
            model = AutoModelForCausalLM.from_pretrained(source, dtype=DTYPES[dtype], local_files_only=True)
    except (OSError, ValueError) as e:
        if local:
            raise FileNotFoundError(
                f"load_policy: {source} is not a loadable model folder ({e}); it needs config.json, the weights and "
                "the tokenizer files "
                "as written by save_pretrained"
            ) from e
        raise FileNotFoundError(not_cached_message(name_or_path)) from e
    _fix_tokenizer(tokenizer, model)
    model.to(device)
    if lora is not None:
        model = _wrap_lora(model, lora, seed)
    return Policy(model=model, tokenizer=tokenizer, name=name_or_path)


@contextmanager
def _no_loading_bar() -> Iterator[None]:
    """No transformers "Loading weights" bar while ugrpo loads a model (a library caller of ``train`` or
    ``load_policy`` sees the run's own bar only); the caller's setting is restored on exit."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def load_tokenizer(source: str | Path):
    """The tokenizer of a folder or cached hub id, offline, exactly as it was saved.

    A folder whose ``tokenizer_config.json`` names the generic fast class (``TokenizersBackend``
    / ``PreTrainedTokenizerFast``, as the tiny tokenizer does) is loaded with that class:
    ``AutoTokenizer`` would pick the class of the model type (``Qwen2Tokenizer`` for the tiny
    Qwen2 model), which replaces the character pre-tokenizer and drops spaces.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    cfg_file = Path(source) / "tokenizer_config.json"
    if cfg_file.is_file():
        try:
            cls = json.loads(cfg_file.read_text()).get("tokenizer_class")
        except json.JSONDecodeError as e:
            raise ValueError(f"load_policy: {cfg_file} is not valid JSON ({e})") from e
        if cls in _GENERIC_FAST:
            return PreTrainedTokenizerFast.from_pretrained(source, local_files_only=True)
    return AutoTokenizer.from_pretrained(source, local_files_only=True)


def _resolve(name_or_path: str) -> Path | None:
    """A local folder for ``name_or_path``, or None for a hub id (the checks: :func:`ugrpo.lm.source.model_source`)."""
    source = model_source(name_or_path)
    if source.kind == "tiny":
        from ugrpo.lm.tiny_cache import tiny_model_path

        return tiny_model_path(source.name)
    return source.path


def _fix_tokenizer(tokenizer, model) -> None:
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ValueError("load_policy: the tokenizer has neither a pad nor an eos token; set tokenizer.pad_token "
                             "explicitly")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id


def _wrap_lora(model, lora: LoraSettings, seed: int):
    from peft import LoraConfig, get_peft_model

    targets: Any = list(lora.target_modules)
    if not targets:
        names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
        targets = [t for t in _DEFAULT_LORA_TARGETS if t in names] or "all-linear"
    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets,
                        task_type="CAUSAL_LM")
    torch.manual_seed(seed)  # TRL #6688: adapter init must not depend on the process's RNG state
    try:
        return get_peft_model(model, config)
    except ValueError as e:
        raise ValueError(f"load_policy: LoRA target_modules={targets!r} do not match the model ({e}); list module "
                         "names of the model") from e


def has_chat_template(tokenizer) -> bool:
    """True if the tokenizer carries a chat template."""
    return bool(getattr(tokenizer, "chat_template", None))


def format_prompt(tokenizer, text: str, *, chat: bool) -> str:
    """The string to tokenize for a problem prompt.

    ``chat=True`` and the tokenizer has a chat template: one user turn, with the generation
    prompt (``apply_chat_template(..., add_generation_prompt=True)``). ``chat=False``, or a
    tokenizer without a template (such as the tiny model's): ``text`` unchanged.
    """
    if chat and has_chat_template(tokenizer):
        return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                             add_generation_prompt=True)
    return text


def context_length(model) -> int | None:
    """The model's maximum sequence length (``max_position_embeddings``), None if unknown."""
    config = getattr(model, "config", None)
    return getattr(config, "max_position_embeddings", None)
