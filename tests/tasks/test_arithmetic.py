"""The arithmetic generator (paper section 5.1): gold answers, categories, splits, prompts."""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest

from ugrpo.tasks import ARITH_CHARS, CATEGORIES, DIFFICULTIES, get_task, score
from ugrpo.tasks.arithmetic import ArithmeticTask, _evaluate, generate_problems

_NUM = re.compile(r"\d+")


def _compact(task_kwargs: dict | None = None) -> ArithmeticTask:
    return get_task("arithmetic", prompt_style="compact", **(task_kwargs or {}))  # type: ignore[return-value]


def _python_value(expression: str) -> float:
    """Python's own evaluation of a generated expression (test oracle only)."""
    assert set(expression) <= set(ARITH_CHARS + " "), expression
    return eval(expression, {"__builtins__": {}}, {})  # noqa: S307 - digits and operators only, checked above


@pytest.mark.parametrize("difficulty", sorted(DIFFICULTIES))
def test_gold_answer_equals_python_evaluation(difficulty: str) -> None:
    n_train, n_eval = (150, 50) if difficulty == "easy" else (500, 200)
    task = _compact({"difficulty": difficulty, "n_train": n_train, "n_eval": n_eval})
    for p in task.train_problems() + task.eval_problems():
        expr = p.prompt[:-1]
        value = _python_value(expr)
        assert value == int(p.answer), (p.id, expr, p.answer)
        assert float(int(p.answer)) == value and value == math.floor(value)


def test_division_is_exact_and_in_range() -> None:
    task = _compact()
    d = DIFFICULTIES["medium"]
    divs = [p for p in task.train_problems() + task.eval_problems() if p.meta["category"] == "div"]
    assert divs
    for p in divs:
        a, b = (int(x) for x in p.prompt[:-1].split("/"))
        assert a % b == 0
        assert d.div_divisor[0] <= b <= d.div_divisor[1]
        assert d.div_quotient[0] <= a // b <= d.div_quotient[1]


@pytest.mark.parametrize("difficulty", sorted(DIFFICULTIES))
def test_operands_stay_in_the_difficulty_ranges(difficulty: str) -> None:
    d = DIFFICULTIES[difficulty]
    task = _compact({"difficulty": difficulty, "n_train": 150, "n_eval": 50})
    for p in task.train_problems():
        nums = [int(x) for x in _NUM.findall(p.prompt)]
        cat = p.meta["category"]
        if cat == "mul":
            assert d.mul_a[0] <= nums[0] <= d.mul_a[1] and d.mul_b[0] <= nums[1] <= d.mul_b[1], p
        elif cat != "div":
            assert all(d.addsub[0] <= x <= d.addsub[1] for x in nums), p
            assert len(nums) == {"two_step": 3, "three_step": 4, "paren": 3}[cat]


def test_category_forms() -> None:
    forms = {
        "two_step": re.compile(r"^\d+[+-]\d+[+-]\d+=$"),
        "three_step": re.compile(r"^\d+[+-]\d+[+-]\d+[+-]\d+=$"),
        "mul": re.compile(r"^\d+\*\d+=$"),
        "div": re.compile(r"^\d+/\d+=$"),
        "paren": re.compile(r"^\d+[+-]\(\d+[+-]\d+\)=$"),
    }
    seen_ops: Counter[str] = Counter()
    for p in _compact().train_problems():
        assert forms[p.meta["category"]].match(p.prompt), p.prompt
        seen_ops.update(c for c in p.prompt if c in "+-")
    assert seen_ops["+"] > 100 and seen_ops["-"] > 100  # both +/- operators are drawn


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_categories_are_roughly_uniform(seed: int) -> None:
    # Each count is Binomial(700, 1/5): mean 140, SE sqrt(700 * 0.2 * 0.8) = 10.6; allow 5 SE.
    task = _compact({"seed": seed})
    counts = Counter(p.meta["category"] for p in task.train_problems() + task.eval_problems())
    assert set(counts) == set(CATEGORIES)
    se = math.sqrt(700 * 0.2 * 0.8)
    for cat, c in counts.items():
        assert abs(c - 140) <= 5 * se, (cat, c)


def test_sizes_ids_and_disjoint_splits() -> None:
    task = _compact()
    train, ev = task.train_problems(), task.eval_problems()
    assert len(train) == 500 and len(ev) == 200
    assert train[17].id == "arith-train-00017" and ev[3].id == "arith-eval-00003"
    tr_expr = {p.prompt for p in train}
    ev_expr = {p.prompt for p in ev}
    assert len(tr_expr) == 500 and len(ev_expr) == 200  # no duplicates within a split
    assert not tr_expr & ev_expr


def test_deterministic_per_seed_and_eval_independent_of_n_train() -> None:
    a, b = _compact({"seed": 3}), _compact({"seed": 3})
    assert a.train_problems() == b.train_problems() and a.eval_problems() == b.eval_problems()
    c = _compact({"seed": 4})
    assert [p.prompt for p in c.train_problems()] != [p.prompt for p in a.train_problems()]
    d = _compact({"seed": 3, "n_train": 100})
    assert d.eval_problems() == a.eval_problems()


@pytest.mark.parametrize("difficulty", sorted(DIFFICULTIES))
def test_compact_prompts_and_answers_use_only_arith_chars(difficulty: str) -> None:
    task = _compact({"difficulty": difficulty, "n_train": 150, "n_eval": 50})
    for p in task.train_problems() + task.eval_problems():
        assert set(p.prompt) <= set(ARITH_CHARS), p.prompt
        assert set(p.answer) <= set(ARITH_CHARS), p.answer
        assert p.prompt.endswith("=") and " " not in p.prompt
    assert len(set(ARITH_CHARS)) == len(ARITH_CHARS)  # no duplicate characters


FEWSHOT_VERBATIM = """You are a calculator. Solve the arithmetic problem and return ONLY the final integer.

Examples:
Problem: 15 + 25 =
Answer: 40
Problem: 20 + 30 - 15 =
Answer: 35
Problem: 3 * 4 =
Answer: 12
Problem: 24 / 6 =
Answer: 4
Problem: 25 - (10 + 5) =
Answer: 10

Now solve:
Problem: """


def test_plain_and_fewshot_prompts_are_the_appendix_c_templates() -> None:
    compact = _compact().train_problems()
    plain = get_task("arithmetic", prompt_style="plain").train_problems()
    few = get_task("arithmetic", prompt_style="fewshot").train_problems()
    for c, p, f in zip(compact[:50], plain[:50], few[:50]):
        spaced = p.meta["expression"] + " ="
        assert spaced.replace(" ", "") == c.prompt  # same problem in every style
        assert p.prompt == "Solve the arithmetic problem. Return ONLY the final integer.\n" + spaced
        assert f.prompt == FEWSHOT_VERBATIM + spaced
        assert c.answer == p.answer == f.answer
    paren = next(p for p in plain if p.meta["category"] == "paren")
    assert re.search(r"\d+ [+-] \(\d+ [+-] \d+\) =$", paren.prompt)  # "25 - (10 + 5) =" spacing


def test_evaluator_matches_python_on_hand_cases() -> None:
    for tokens in (["25", "-", "(", "10", "+", "5", ")"], ["12", "-", "7", "+", "30", "+", "4"], ["24", "/", "6"]):
        assert _evaluate(tokens) == _python_value("".join(tokens))
    with pytest.raises(ValueError, match="inexact division"):
        _evaluate(["7", "/", "2"])


def test_verify_uses_first_number_for_compact_and_last_otherwise() -> None:
    compact = _compact({"n_train": 5, "n_eval": 1})
    plain = get_task("arithmetic", n_train=5, n_eval=1)
    p_c, p_p = compact.train_problems()[0], plain.train_problems()[0]
    right, wrong = p_c.answer, str(int(p_c.answer) + 1)
    babble = f"{right}={wrong}"
    assert compact.verify([babble, wrong, ""], [p_c] * 3) == [1.0, 0.0, None]
    assert plain.verify([f"{wrong} ... so {right}", f"{right} ... {wrong}"], [p_p] * 2) == [1.0, 0.0]
    res = score(compact, [right, "", "abc", wrong], [p_c] * 4)
    assert res.rewards == [1.0, 0.0, 0.0, 0.0]
    assert res.unscorable == [False, True, True, False]
    assert (res.n_parse_failures, res.n_timeouts, res.n_errors) == (2, 0, 0)


def test_too_many_problems_for_easy_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="ran out of distinct expressions.*fewer problems.*distinct=False"):
        get_task("arithmetic", difficulty="easy").train_problems()
    assert len(generate_problems(300, seed=0, difficulty="easy")) == 300
    with pytest.raises(ValueError, match="difficulty must be one of"):
        generate_problems(3, seed=0, difficulty="trivial")


def test_generate_problems_stream_with_repeats_respects_exclude() -> None:
    held_out = frozenset(e.text for e in generate_problems(100, seed=1, difficulty="easy"))
    stream = generate_problems(1000, seed=2, difficulty="easy", exclude=held_out, distinct=False)
    assert len(stream) == 1000 and not {e.text for e in stream} & held_out
    assert len({e.text for e in stream}) < 1000  # repeats are allowed (easy has 81 products)
    assert all(_evaluate(e.tokens) == e.value and "".join(e.tokens) == e.text for e in stream)
    assert generate_problems(50, seed=2, difficulty="easy", exclude=held_out, distinct=False) == stream[:50]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"difficulty": "insane"}, "difficulty must be one of"),
        ({"prompt_style": "chat"}, "prompt_style must be one of"),
        ({"n_train": -1}, "must be >= 0"),
        ({"n_train": 1.5}, "n_train must be an int"),
        ({"extract": "middle"}, "extract must be"),
    ],
)
def test_bad_options_are_clear_errors(kwargs: dict, match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        get_task("arithmetic", **kwargs)


def test_unknown_option_lists_the_valid_ones() -> None:
    with pytest.raises(TypeError, match="unknown option.*n_problems.*valid options are: .*n_train"):
        get_task("arithmetic", n_problems=5)
