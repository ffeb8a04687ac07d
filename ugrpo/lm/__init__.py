"""Language models: the tiny model and its tokenizer, loading, reproducible sampling, log-probs.

Public API (details in each module):

- :func:`build_char_tokenizer` (``tokenizer.py``), :func:`build_tiny_model`, ``STRENGTHS`` (``tiny.py``),
  :func:`pretrain_tiny`, :class:`PretrainResult`, ``TINY_TASK_OPTIONS`` (``pretrain.py``), :func:`tiny_model_path`
  (``tiny_cache.py``; the shipped warm models: ``tiny_shipped.py``)
- :func:`load_policy`, :class:`Policy`, :class:`LoraSettings`, :func:`format_prompt` (``loading.py``)
- :func:`sample_groups`, :class:`Rollout` (``sampling.py``)
- :func:`completion_logprobs` (``logprobs.py``)
"""

from ugrpo.lm.loading import LoraSettings, Policy, context_length, format_prompt, has_chat_template, load_policy
from ugrpo.lm.logprobs import completion_logprobs
from ugrpo.lm.pretrain import TINY_TASK_OPTIONS, PretrainResult, pretrain_tiny
from ugrpo.lm.sampling import Rollout, sample_groups
from ugrpo.lm.tiny import STRENGTHS, build_tiny_model
from ugrpo.lm.tiny_cache import tiny_model_path
from ugrpo.lm.tokenizer import build_char_tokenizer

__all__ = [
    "LoraSettings",
    "Policy",
    "PretrainResult",
    "Rollout",
    "STRENGTHS",
    "TINY_TASK_OPTIONS",
    "build_char_tokenizer",
    "build_tiny_model",
    "completion_logprobs",
    "context_length",
    "format_prompt",
    "has_chat_template",
    "load_policy",
    "pretrain_tiny",
    "sample_groups",
    "tiny_model_path",
]
