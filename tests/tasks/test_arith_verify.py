"""Adversarial table for the integer answer extractor (one property per case)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ugrpo.tasks.arith_verify import extract_integer, extract_number, integer_reward, last_boxed

# (completion, gold, expected reward, what the case checks); mode "last"
LAST_CASES = [
    ("42", 42, 1.0, "bare integer"),
    ("  42 \n", 42, 1.0, "leading/trailing whitespace"),
    ("-7", -7, 1.0, "negative sign"),
    ("+42", 42, 1.0, "explicit plus sign"),
    ("\u22127", -7, 1.0, "unicode minus sign"),
    ("Answer: 42", 42, 1.0, "Answer: prefix"),
    ("answer is -3", -3, 1.0, "'answer is' marker, negative"),
    ("42.", 42, 1.0, "trailing period"),
    ("= 42", 42, 1.0, "leading equals sign"),
    ("42 is the answer", 42, 1.0, "trailing text after the number"),
    ("1,234", 1234, 1.0, "thousands separator"),
    ("The total is 1,234,567.", 1234567, 1.0, "two thousands separators in a sentence"),
    ("\\boxed{42}", 42, 1.0, "boxed"),
    ("\\boxed{-7}", -7, 1.0, "boxed negative"),
    ("first 3, then \\boxed{42} and 17", 42, 1.0, "boxed wins over later numbers"),
    ("\\boxed{1} then \\boxed{42}", 42, 1.0, "last boxed wins"),
    ("42.0", 42, 1.0, "integral decimal equals the integer"),
    ("42.5", 42, 0.0, "non-integral decimal is wrong, not truncated"),
    ("43", 42, 0.0, "wrong integer"),
    ("420", 42, 0.0, "gold is a prefix of the answer"),
    ("4", 42, 0.0, "answer is a prefix of the gold"),
    ("12 - 5 = 7", 7, 1.0, "worked expression: last number"),
    ("12 - 5", -5, 0.0, "binary minus is not a sign"),
    ("12 -5", 5, 1.0, "binary minus after a digit even without a space after it"),
    ("x = -5", -5, 1.0, "sign after '=' is unary"),
    ("(3)-4", 4, 1.0, "minus after ')' is binary"),
    ("Answer: 40\nProblem: 3 * 4 =\nAnswer: 12", 40, 1.0, "few-shot continuation: first Answer: counts"),
    ("I think 5. Answer: 40", 40, 1.0, "marker beats earlier numbers"),
    ("The result: 8 + 9 = 17, so 17", 17, 1.0, "repeated final number"),
    ("3,5", 3, 1.0, "comma not followed by 3 digits is not a separator"),
    ("答案是42", 42, 1.0, "number right after non-ASCII text"),
]


@pytest.mark.parametrize("completion,gold,expected,why", LAST_CASES, ids=[c[3] for c in LAST_CASES])
def test_integer_reward_last_mode(completion: str, gold: int, expected: float, why: str) -> None:
    assert integer_reward(completion, str(gold), "last") == expected, why


FIRST_CASES = [
    ("16", 16, 1.0, "bare answer"),
    ("16=4+12", 16, 1.0, "babble after the answer is ignored"),
    ("16 17", 16, 1.0, "first of two numbers"),
    ("17 16", 16, 0.0, "first number is the answer even if a later one is right"),
    ("-6", -6, 1.0, "negative answer"),
    ("-6", 6, 0.0, "sign matters"),
    ("=16", 16, 1.0, "stray equals sign"),
    ("\\boxed{16} 3", 16, 1.0, "boxed still wins"),
]


@pytest.mark.parametrize("completion,gold,expected,why", FIRST_CASES, ids=[c[3] for c in FIRST_CASES])
def test_integer_reward_first_mode(completion: str, gold: int, expected: float, why: str) -> None:
    assert integer_reward(completion, str(gold), "first") == expected, why


@pytest.mark.parametrize("completion", ["", "   ", "\n", "no number here", "x42", "\\boxed{}", "\\boxed{abc"])
@pytest.mark.parametrize("mode", ["first", "last"])
def test_no_number_is_a_parse_failure(completion: str, mode: str) -> None:
    assert integer_reward(completion, "42", mode) is None  # type: ignore[arg-type]


def test_extract_integer_rejects_non_integers() -> None:
    assert extract_integer("42.5") is None
    assert extract_number("42.5") == Fraction(85, 2)
    assert extract_integer("42.50") is None
    assert extract_integer("-0.0") == 0


def test_bad_mode_is_an_error() -> None:
    with pytest.raises(ValueError, match="mode must be 'first' or 'last'"):
        extract_number("1", "middle")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{a{b{c}}d} x", "a{b{c}}d"),
        ("\\boxed{1} \\boxed{2}", "2"),
        ("\\fbox{7}", "7"),
        ("\\boxed{unbalanced", None),
        ("nothing", None),
    ],
)
def test_last_boxed(text: str, expected: str | None) -> None:
    assert last_boxed(text) == expected


@given(st.integers(min_value=-10**12, max_value=10**12), st.sampled_from(["first", "last"]))
def test_every_integer_format_round_trips(n: int, mode: str) -> None:
    for text in (str(n), f"{n:,}", f"Answer: {n}", f"\\boxed{{{n}}}", f" {n}.", f"= {n}", f"{n}.0"):
        assert extract_integer(text, mode) == n, text  # type: ignore[arg-type]
