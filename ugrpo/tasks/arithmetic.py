"""Synthetic integer arithmetic, the dataset of the paper's section 5.1 (docs/paper.md 8.1, Fig. 4).

Problems are drawn uniformly from the paper's 5 categories:

==============  ======================  ================================
category        form                    example
==============  ======================  ================================
``two_step``    ``a +/- b +/- c``       ``20 + 30 - 15``
``three_step``  ``a +/- b +/- c +/- d`` ``12 - 7 + 30 + 4``
``mul``         ``a * b``               ``3 * 4``
``div``         ``a / b`` with b | a    ``24 / 6``
``paren``       ``a +/- (b +/- c)``     ``25 - (10 + 5)``
==============  ======================  ================================

Each ``+/-`` is ``+`` or ``-`` with probability 1/2. Number ranges per ``difficulty`` are in
:data:`DIFFICULTIES` (the paper says only "medium difficulty"). Answers may be negative.

Deviations from / additions to the paper
----------------------------------------
* The paper does not give number ranges, operator choices or a held-out set: the ranges
  are ours; the held-out eval set (default 200) is drawn from its own seed stream and is
  disjoint from the train set (default 500, the paper's size) by expression text. No
  expression occurs twice within a set either.
* Prompt styles: ``plain`` and ``fewshot`` are the two Appendix C templates, verbatim
  (the paper's labels for them look swapped, docs/paper.md 8.1; the names here avoid the
  labels). ``compact`` is ``"12+7-3="`` for the built-in character-level model.
* Answer extraction: see :mod:`ugrpo.tasks.arith_verify` (default mode ``last`` for
  ``plain``/``fewshot``, ``first`` for ``compact``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ugrpo.tasks.arith_verify import ExtractMode, integer_reward
from ugrpo.tasks.base import OptionError, Problem, VerifyStats

__all__ = [
    "ARITH_CHARS",
    "CATEGORIES",
    "DIFFICULTIES",
    "PROMPT_STYLES",
    "PLAIN_TEMPLATE",
    "FEWSHOT_TEMPLATE",
    "Difficulty",
    "Expression",
    "ArithmeticTask",
    "generate_problems",
    "make_arithmetic",
]

Category = Literal["two_step", "three_step", "mul", "div", "paren"]
PromptStyle = Literal["plain", "fewshot", "compact"]
CATEGORIES: tuple[Category, ...] = ("two_step", "three_step", "mul", "div", "paren")
PROMPT_STYLES: tuple[PromptStyle, ...] = ("plain", "fewshot", "compact")

#: Every character a compact prompt or a gold answer can contain (the minus sign is ``-``).
#: The tiny character-level tokenizer is built from this string (order is fixed).
ARITH_CHARS: str = "0123456789+-*/()="

#: Appendix C, labelled "for the In-Context Learning model" (likely swapped, docs/paper.md 8.1).
PLAIN_TEMPLATE = "Solve the arithmetic problem. Return ONLY the final integer.\n{problem}"
#: Appendix C, labelled "for the Base and Instruct models" (likely swapped, docs/paper.md 8.1).
FEWSHOT_TEMPLATE = (
    "You are a calculator. Solve the arithmetic problem and return ONLY the final integer.\n"
    "\n"
    "Examples:\n"
    "Problem: 15 + 25 =\n"
    "Answer: 40\n"
    "Problem: 20 + 30 - 15 =\n"
    "Answer: 35\n"
    "Problem: 3 * 4 =\n"
    "Answer: 12\n"
    "Problem: 24 / 6 =\n"
    "Answer: 4\n"
    "Problem: 25 - (10 + 5) =\n"
    "Answer: 10\n"
    "\n"
    "Now solve:\n"
    "Problem: {problem}"
)


@dataclass(frozen=True)
class Difficulty:
    """Inclusive number ranges of one difficulty level.

    Attributes
    ----------
    addsub : (int, int)
        Range of every operand of the ``two_step``, ``three_step`` and ``paren`` categories.
    mul_a, mul_b : (int, int)
        Ranges of the two factors of ``a * b``.
    div_divisor, div_quotient : (int, int)
        ``a / b`` is built as ``a = b * q`` with b from ``div_divisor``, q from ``div_quotient``.
    """

    addsub: tuple[int, int]
    mul_a: tuple[int, int]
    mul_b: tuple[int, int]
    div_divisor: tuple[int, int]
    div_quotient: tuple[int, int]


DIFFICULTIES: dict[str, Difficulty] = {
    # 1-digit operands everywhere.
    "easy": Difficulty(addsub=(1, 9), mul_a=(1, 9), mul_b=(1, 9), div_divisor=(1, 9), div_quotient=(1, 9)),
    # up to 2 digits for +/-, products 2..30 x 2..12, divisors 2..12 with quotients 2..30.
    "medium": Difficulty(addsub=(1, 99), mul_a=(2, 30), mul_b=(2, 12), div_divisor=(2, 12), div_quotient=(2, 30)),
    # up to 3 digits for +/-, 2-digit products, 2-digit quotients.
    "hard": Difficulty(addsub=(1, 999), mul_a=(2, 99), mul_b=(2, 99), div_divisor=(2, 20), div_quotient=(2, 99)),
}


@dataclass(frozen=True)
class Expression:
    """One generated problem: its category, its tokens and its exact integer value.

    Attributes
    ----------
    category : str
        One of :data:`CATEGORIES`.
    tokens : tuple[str, ...]
        E.g. ``("25", "-", "(", "10", "+", "5", ")")``; ``"".join(tokens)`` is the compact text.
    value : int
        The gold answer.
    """

    category: Category
    tokens: tuple[str, ...]
    value: int

    @property
    def text(self) -> str:
        """Compact text without ``=``, e.g. ``"25-(10+5)"`` (the key of ``exclude`` and of disjointness)."""
        return "".join(self.tokens)


def _draw(rng: random.Random, category: Category, d: Difficulty) -> Expression:
    def num(r: tuple[int, int]) -> int:
        return rng.randint(r[0], r[1])

    def op() -> str:
        return rng.choice(("+", "-"))

    if category == "two_step":
        a, b, c = num(d.addsub), num(d.addsub), num(d.addsub)
        tokens: tuple[str, ...] = (str(a), op(), str(b), op(), str(c))
    elif category == "three_step":
        a, b, c, e = (num(d.addsub) for _ in range(4))
        tokens = (str(a), op(), str(b), op(), str(c), op(), str(e))
    elif category == "mul":
        tokens = (str(num(d.mul_a)), "*", str(num(d.mul_b)))
    elif category == "div":
        b, q = num(d.div_divisor), num(d.div_quotient)
        tokens = (str(b * q), "/", str(b))
    else:  # paren
        a, b, c = num(d.addsub), num(d.addsub), num(d.addsub)
        tokens = (str(a), op(), "(", str(b), op(), str(c), ")")
    return Expression(category, tokens, _evaluate(tokens))


def _evaluate(tokens: Sequence[str]) -> int:
    """Exact integer value of a generated expression (no ``eval``): left to right, parentheses first."""
    def term(i: int) -> tuple[int, int]:
        if tokens[i] == "(":
            v, j = expr(i + 1)
            return v, j + 1  # skip ")"
        return int(tokens[i]), i + 1

    def expr(i: int) -> tuple[int, int]:
        v, i = term(i)
        while i < len(tokens) and tokens[i] != ")":
            o = tokens[i]
            w, i = term(i + 1)
            if o == "+":
                v += w
            elif o == "-":
                v -= w
            elif o == "*":
                v *= w
            else:  # "/" only ever appears as a single exact division
                if w == 0 or v % w:
                    raise ValueError(f"inexact division {v} / {w}")
                v //= w
        return v, i

    return expr(0)[0]


def _spaced(tokens: Sequence[str]) -> str:
    """``25 - (10 + 5)``: spaces around operators, none inside parentheses (Appendix C style)."""
    out = ""
    for t in tokens:
        if t in "+-*/":
            out += f" {t} "
        else:
            out += t
    return out


def _prompt(expr: Expression, style: PromptStyle) -> str:
    if style == "compact":
        return "".join(expr.tokens) + "="
    problem = _spaced(expr.tokens) + " ="
    return (PLAIN_TEMPLATE if style == "plain" else FEWSHOT_TEMPLATE).format(problem=problem)


def generate_problems(
    n: int,
    *,
    seed: int,
    difficulty: str = "medium",
    exclude: frozenset[str] = frozenset(),
    distinct: bool = True,
) -> list[Expression]:
    """Draw ``n`` expressions, none of whose compact text (``Expression.text``) is in ``exclude``.

    Parameters
    ----------
    n : int
        Number of expressions.
    seed : int
        Seed of the draw (``random.Random(seed)``); the result is a pure function of the arguments.
    difficulty : {"easy", "medium", "hard"}
        Number ranges, :data:`DIFFICULTIES`.
    exclude : frozenset[str]
        Compact texts (without ``=``) that must not be drawn, e.g. a held-out set.
    distinct : bool
        True: no expression twice in the result. False: repeats allowed (a stream of
        training data larger than a category's supply, e.g. big batches at ``easy``).

    The category of each problem is uniform over :data:`CATEGORIES`; within it the operands
    are redrawn until the expression is allowed, so the category counts stay
    multinomial(n, 1/5).

    Raises
    ------
    ValueError
        If a category runs out of allowed expressions (``easy`` has only 81 products).
    """
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"arithmetic: option difficulty must be one of {sorted(DIFFICULTIES)}, got {difficulty!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"arithmetic: n must be an int >= 0, got {n!r}")
    d = DIFFICULTIES[difficulty]
    rng = random.Random(seed)
    seen: set[str] = set(exclude)
    out: list[Expression] = []
    for _ in range(n):
        category = rng.choice(CATEGORIES)  # uniform over categories, as in the paper
        for _attempt in range(_MAX_REDRAWS):  # redraw operands until the expression is new
            e = _draw(rng, category, d)
            key = e.text
            if key not in seen:
                break
        else:
            raise ValueError(
                f"arithmetic: category {category!r} of difficulty {difficulty!r} ran out of distinct "
                f"expressions after {len(out)} of {n} problems (excluding {len(exclude)}); ask for fewer "
                "problems (n_train/n_eval), use a harder difficulty, or, for a training stream, "
                "generate_problems(..., distinct=False)"
            )
        if distinct:
            seen.add(key)
        out.append(e)
    return out


_MAX_REDRAWS = 2000


@dataclass(frozen=True)
class ArithmeticTask:
    """The paper's arithmetic task (section 5.1): seeded problem sets and a binary integer verifier.

    Parameters
    ----------
    n_train : int
        Size of the train set (paper: 500).
    n_eval : int
        Size of the held-out eval set, disjoint from train by expression text.
    seed : int
        Generation seed; the sets are deterministic per (seed, difficulty, n_train, n_eval).
    difficulty : {"easy", "medium", "hard"}
        Number ranges, see :data:`DIFFICULTIES`.
    prompt_style : {"plain", "fewshot", "compact"}
        Prompt template, see the module docstring.
    extract : {"first", "last"} or None
        Answer extraction mode of :func:`ugrpo.tasks.arith_verify.extract_number`;
        None picks ``"first"`` for ``compact`` and ``"last"`` otherwise.
    """

    n_train: int = 500
    n_eval: int = 200
    seed: int = 0
    difficulty: str = "medium"
    prompt_style: PromptStyle = "plain"
    extract: ExtractMode | None = None
    name: str = field(default="arithmetic", init=False)

    def __post_init__(self) -> None:
        for f in ("n_train", "n_eval", "seed"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int):
                raise OptionError(f"arithmetic: {f} must be an int, got {v!r}")
        if self.n_train < 0 or self.n_eval < 0:
            raise ValueError(f"arithmetic: n_train and n_eval must be >= 0, got {self.n_train}, {self.n_eval}")
        if self.difficulty not in DIFFICULTIES:
            raise ValueError(f"arithmetic: option difficulty must be one of {sorted(DIFFICULTIES)}, got "
                             f"{self.difficulty!r}")
        if self.prompt_style not in PROMPT_STYLES:
            raise ValueError(
                f"arithmetic: option prompt_style must be one of {list(PROMPT_STYLES)}, got {self.prompt_style!r}"
            )
        if self.extract not in (None, "first", "last"):
            raise ValueError(f"arithmetic: extract must be 'first', 'last' or None, got {self.extract!r}")

    @property
    def extract_mode(self) -> ExtractMode:
        """The extraction mode in use (resolves ``extract=None`` by prompt style)."""
        if self.extract is not None:
            return self.extract
        return "first" if self.prompt_style == "compact" else "last"

    def _sets(self) -> tuple[list[Expression], list[Expression]]:
        cached = self.__dict__.get("_cache")
        if cached is None:
            # Eval first, from its own stream, so it does not change when n_train changes.
            ev = generate_problems(self.n_eval, seed=2 * self.seed + 1, difficulty=self.difficulty)
            tr = generate_problems(
                self.n_train, seed=2 * self.seed, difficulty=self.difficulty,
                exclude=frozenset(e.text for e in ev),
            )
            cached = (tr, ev)
            object.__setattr__(self, "_cache", cached)
        return cached

    def _problems(self, exprs: list[Expression], split: str) -> list[Problem]:
        return [
            Problem(
                id=f"arith-{split}-{i:05d}",
                prompt=_prompt(e, self.prompt_style),
                answer=str(e.value),
                meta={"category": e.category, "expression": _spaced(e.tokens), "difficulty": self.difficulty},
            )
            for i, e in enumerate(exprs)
        ]

    def train_problems(self) -> list[Problem]:
        """The ``n_train`` training problems."""
        return self._problems(self._sets()[0], "train")

    def eval_problems(self) -> list[Problem]:
        """The ``n_eval`` held-out problems (no expression in common with the train set)."""
        return self._problems(self._sets()[1], "eval")

    def verify_with_stats(
        self, completions: Sequence[str], problems: Sequence[Problem]
    ) -> tuple[list[float | None], VerifyStats]:
        """Rewards (1.0 / 0.0, None where the completion has no number) and the parse-failure count."""
        if len(completions) != len(problems):
            raise ValueError(f"arithmetic.verify: {len(completions)} completions but {len(problems)} problems")
        stats = VerifyStats()
        out: list[float | None] = []
        for c, p in zip(completions, problems):
            r = integer_reward(c, p.answer, self.extract_mode)
            if r is None:
                stats.n_parse_failures += 1
            out.append(r)
        return out, stats

    def verify(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[float | None]:
        """Binary reward per completion (paper section 5.1); None = no number found (parse failure)."""
        return self.verify_with_stats(completions, problems)[0]


_OPTIONS = ("n_train", "n_eval", "seed", "difficulty", "prompt_style", "extract")


def make_arithmetic(**options: object) -> ArithmeticTask:
    """``get_task("arithmetic", **options)``; options: n_train, n_eval, seed, difficulty, prompt_style, extract."""
    from ugrpo.tasks.base import check_options

    check_options("arithmetic", options, _OPTIONS)
    return ArithmeticTask(**options)  # type: ignore[arg-type]
