"""Language models: the tiny model and its tokenizer, loading, reproducible sampling, log-probs.

Nothing is imported here, so that ``import ugrpo.lm.<module>`` costs only that module (``ugrpo pretrain-tiny --help``
reads ``tiny.STRENGTHS`` without torch or transformers). Import from the modules:

- :func:`~ugrpo.lm.tokenizer.build_char_tokenizer` (``tokenizer.py``), :func:`~ugrpo.lm.tiny.build_tiny_model`,
  ``STRENGTHS`` (``tiny.py``), :func:`~ugrpo.lm.pretrain.pretrain_tiny`, ``PretrainResult``, ``TINY_TASK_OPTIONS``
  (``pretrain.py``), :func:`~ugrpo.lm.tiny_cache.tiny_model_path` (``tiny_cache.py``; the shipped warm models:
  ``tiny_shipped.py``)
- :func:`~ugrpo.lm.loading.load_policy`, ``Policy``, ``LoraSettings``, ``format_prompt``, ``context_length``,
  ``has_chat_template`` (``loading.py``)
- :func:`~ugrpo.lm.sampling.sample_groups`, ``Rollout`` (``sampling.py``)
- :func:`~ugrpo.lm.logprobs.completion_logprobs` (``logprobs.py``)
"""
