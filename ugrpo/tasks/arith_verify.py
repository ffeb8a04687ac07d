"""Integer answer extraction for the arithmetic task (binary reward of paper section 5.1).

The paper parses "the LLM output for the answer" and gives reward 1 if it equals the
ground truth (docs/paper.md 8.1); it does not say how. This module fixes one documented rule.

Extraction rule (:func:`extract_integer`), applied in this order:

1. ``\\boxed{...}`` present: the text inside the **last** ``\\boxed{}`` (nested braces
   handled) is the answer text; the first number in it is the answer.
2. mode ``"last"`` (default for the ``plain`` and ``fewshot`` prompt styles): if the
   completion contains an answer marker (``Answer:``, ``answer is``, case-insensitive),
   the first number after the **first** marker is the answer; so a few-shot model that
   goes on writing ``Problem: ... Answer: ...`` is judged on its first answer.
   Otherwise the **last** number in the completion is the answer
   (``"= 42"`` -> 42, ``"42 is the answer"`` -> 42, ``"7 + 5 = 12"`` -> 12).
3. mode ``"first"`` (default for the ``compact`` style, where the completion follows
   ``"12+7-3="`` directly and a tiny model may babble after its answer): the **first**
   number in the completion is the answer (``"16=4+12"`` -> 16).

A *number* is an optional sign (``-``, ``+`` or the Unicode minus U+2212) directly before
the digits that is not a binary operator (a sign after a digit or closing bracket, spaces
allowed between, is an operator: ``"12 -5"`` -> 5, ``"= -5"`` -> -5, ``"is -5"`` -> -5), digits with optional
thousands separators (``1,234``), and an optional decimal part. ``42.`` is 42;
``42.0`` equals 42; ``42.5`` is a number that equals no integer (reward 0.0, not a
parse failure). A completion with no number (including the empty one) is a parse
failure: :func:`extract_integer` returns None and the verifier reports it as unscorable.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from fractions import Fraction
from typing import Literal

__all__ = ["ExtractMode", "extract_number", "extract_integer", "last_boxed", "integer_reward"]

ExtractMode = Literal["first", "last"]

# A signed number. The sign is dropped later if it is a binary operator (see _numbers).
_NUMBER_RE = re.compile(
    r"(?P<sign>[-+\u2212])?"  # optional sign directly before the digits
    r"(?<![A-Za-z0-9_.,])(?P<int>\d{1,3}(?:,\d{3})+(?!\d)|\d+)"  # integer part, optional thousands commas
    r"(?P<frac>\.\d+)?"  # optional decimal part ("42." keeps no fraction)
)
_OPERAND_END = frozenset("0123456789)]}")


def _after_operand(text: str, pos: int) -> bool:
    """True if the last non-space character before ``pos`` ends an operand (so a sign there is binary)."""
    j = pos - 1
    while j >= 0 and text[j].isspace():
        j -= 1
    return j >= 0 and text[j] in _OPERAND_END
_MARKER_RE = re.compile(r"answer\s*(?::|is\b)", re.IGNORECASE)


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``; nested braces handled.

    Returns None if there is no boxed expression or its braces are unbalanced.

    >>> last_boxed(r"so \\boxed{\\frac{1}{2}} and \\boxed{42}")
    '42'
    >>> last_boxed(r"\\boxed{\\frac{1}{2}}")
    '\\\\frac{1}{2}'
    """
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


_MAX_DIGITS = 4000
"""longer digit strings are not converted exactly (Python refuses int() of more than 4300 digits by default)"""


def exact_number(digits: str) -> Fraction:
    """``digits`` (``123``, ``0.5``, no sign or commas) as an exact Fraction; a number of more than
    :data:`_MAX_DIGITS` digits (a degenerate sample's ``999...``) as a power of ten of at least its size (>= 10^4000,
    even for ``0.000...1``), which no answer of a task equals, instead of the ValueError that would have failed the
    whole batch's scoring.

    >>> exact_number("0.25"), exact_number("9" * 5000) > 10 ** 4990, exact_number("0." + "0" * 4500 + "1") >= 10 ** 4000
    (Fraction(1, 4), True, True)
    """
    if len(digits) > _MAX_DIGITS:
        return Fraction(10) ** max(len(digits.split(".")[0]), _MAX_DIGITS)
    return Fraction(digits)


def _numbers(text: str, start: int = 0) -> Iterator[Fraction]:
    """Every number in ``text[start:]``, in order, with unary signs applied."""
    for m in _NUMBER_RE.finditer(text, start):
        sign = m.group("sign")
        negative = sign in ("-", "\u2212") and not _after_operand(text, m.start())
        digits = m.group("int").replace(",", "") + (m.group("frac") or "")
        yield -exact_number(digits) if negative else exact_number(digits)


def extract_number(text: str, mode: ExtractMode = "last") -> Fraction | None:
    """The answer number of a completion by the module's extraction rule, exactly.

    Parameters
    ----------
    text : str
        The completion.
    mode : {"last", "first"}
        Which number wins when there is no ``\\boxed{}`` (see the module docstring).

    Returns
    -------
    Fraction or None
        The number (exact, so ``42.0 == 42`` and ``0.5 != 0``), or None if none was found.

    >>> extract_number("Answer: 1,234.")
    Fraction(1234, 1)
    >>> extract_number("12-5=7")
    Fraction(7, 1)
    >>> extract_number("-3 then 12", mode="first")
    Fraction(-3, 1)
    """
    if mode not in ("first", "last"):
        raise ValueError(f"mode must be 'first' or 'last', got {mode!r}")
    boxed = last_boxed(text)
    if boxed is not None:
        return next(_numbers(boxed), None)
    if mode == "last":
        marker = _MARKER_RE.search(text)
        if marker is not None:
            first_after = next(_numbers(text, marker.end()), None)
            if first_after is not None:
                return first_after
        last = None
        for last in _numbers(text):  # noqa: B007 - the loop runs to the last number
            pass
        return last
    return next(_numbers(text), None)


def extract_integer(text: str, mode: ExtractMode = "last") -> int | None:
    """The extracted answer as an int if it is an integer, else None (no number, or ``42.5``).

    >>> extract_integer("The result is 42.")
    42
    >>> extract_integer("") is None
    True
    """
    x = extract_number(text, mode)
    if x is None or x.denominator != 1:
        return None
    return int(x)


def integer_reward(completion: str, answer: str | int, mode: ExtractMode = "last") -> float | None:
    """Binary reward: 1.0 if the extracted number equals the integer ``answer``, else 0.0.

    Returns None (unscorable: a parse failure) if the completion contains no number.

    >>> integer_reward(" = 16", "16"), integer_reward("15", 16), integer_reward("no idea", 16)
    (1.0, 0.0, None)
    """
    x = extract_number(completion, mode)
    if x is None:
        return None
    return 1.0 if x == int(answer) else 0.0
