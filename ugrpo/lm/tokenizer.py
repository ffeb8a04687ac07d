"""Character-level tokenizer for the built-in tiny model (RUNTIME.md recipe).

One token per character, plus four special tokens with fixed ids:

====== =========== =================================================
id     token       role
====== =========== =================================================
0      ``<pad>``   padding (left padding: ``padding_side="left"``)
1      ``<bos>``   added in front of every encoded text (see below)
2      ``<eos>``   end of a completion; never added by ``encode``
3      ``<unk>``   any character outside ``chars``
4..    characters  in the order of ``chars``
====== =========== =================================================

Encoding ``"12+7="`` with the default ``add_special_tokens=True`` gives
``[<bos>, "1", "2", "+", "7", "="]``: a BOS is prepended (a template post-processor), an EOS
is **not** appended (prompts are continued by the model; the pre-training targets append
``eos_token_id`` by hand). ``decode(ids, skip_special_tokens=True)`` returns the text exactly
(the ``Fuse`` decoder joins characters without spaces; tokenization-space clean-up is off).
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

__all__ = ["DEFAULT_CHARS", "SPECIAL_TOKENS", "build_char_tokenizer"]

DEFAULT_CHARS: str = string.digits + "+-*/()= "
"""Digits, the four operators, brackets, ``=`` and space: every compact arithmetic prompt."""

SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>", "<unk>")


def build_char_tokenizer(chars: str = DEFAULT_CHARS) -> PreTrainedTokenizerFast:
    """Build a character-level ``PreTrainedTokenizerFast`` over ``chars``.

    Parameters
    ----------
    chars : str
        The characters of the vocabulary, one token each, in this order (ids 4, 5, ...).
        Must be non-empty single characters without duplicates and must not contain a newline
        (the character-splitting regex ``.`` does not match it).

    Returns
    -------
    PreTrainedTokenizerFast
        ``pad_token_id=0``, ``bos_token_id=1``, ``eos_token_id=2``, ``unk_token_id=3``,
        ``padding_side="left"``; ``save_pretrained`` / ``from_pretrained`` round-trip offline.

    Raises
    ------
    ValueError
        If ``chars`` is empty, has duplicates, or contains a newline.
    """
    if not chars:
        raise ValueError("build_char_tokenizer: chars is empty; pass the characters of the task, e.g. '0123456789+-='")
    dupes = sorted({c for c in chars if chars.count(c) > 1})
    if dupes:
        raise ValueError(f"build_char_tokenizer: chars has duplicate characters {dupes!r}; list each character once")
    if "\n" in chars or "\r" in chars:
        raise ValueError("build_char_tokenizer: chars contains a newline; the tiny tokenizer is for single-line "
                         "prompts")
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for c in chars:
        vocab[c] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=1024,
    )
    return hf
