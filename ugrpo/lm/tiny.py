"""The built-in tiny model: a ~1 M parameter Qwen2 over a character vocabulary.

``build_tiny_model`` makes a randomly initialised model (seeded). :func:`ugrpo.lm.pretrain.pretrain_tiny`
warms it up on compact arithmetic so that RL has a reward signal; the warm models it built ship with the package
(:mod:`ugrpo.lm.tiny_shipped`) and :func:`ugrpo.lm.tiny_cache.tiny_model_path` resolves ``tiny:<name>`` to them
(``load_policy("tiny:instruct")`` goes through it). Imports run one way: ``tiny`` <- ``pretrain`` <- ``tiny_cache``.

Strengths (the paper's base / instruct / few-shot models, one flag apart) differ only in
the sampled accuracy (temperature 1) at which the warm-up stops; see ``STRENGTHS``.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["TinySize", "Strength", "STRENGTHS", "build_tiny_model"]

TinySize = Literal["1m", "4m"]
Strength = Literal["base", "instruct", "fewshot"]

STRENGTHS: dict[str, float] = {"base": 0.15, "instruct": 0.35, "fewshot": 0.60}
"""Target sampled accuracy (temperature 1, held-out problems) at which the warm-up stops.

The shipped models (seed 0, defaults, one torch thread, 2026-12-03; ``ugrpo/data/tiny/README.md``): base stopped at
step 150 (sampled 0.160 +- 0.025, greedy 0.21) in 35 s, instruct at step 775 (0.385 +- 0.039, greedy 0.44) in
2.8 min; fewshot at step 2100 (0.600 +- 0.044, greedy 0.64) in 11.9 min, with the learning-rate decay after step
1000 (:func:`ugrpo.lm.pretrain.lr_factor`; without it fewshot stayed at 0.45-0.56 and ended at the 3000-step cap with
0.42). The same code and seed stopped instruct at step 650 and at step 675 on two other
machines (float32 kernels differ between CPUs), hence the shipped weights. The held-out SE is ~0.04 (100 problems x
4 samples). On a loaded machine, 2 torch threads ran ~10x slower than 1 (1.5-5 s a step against ~0.3 s): set
``OMP_NUM_THREADS=1`` when other jobs share the cores."""

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
    import torch
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
