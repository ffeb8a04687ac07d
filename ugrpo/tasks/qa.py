"""Shared machinery of the question/answer tasks (GSM8K, MATH): prompts, loading, math-verify scoring.

Prompt template. ``prompt_template`` must contain the placeholder ``{question}``, which is
replaced by the question text (plain substitution, not ``str.format``: braces such as
``\\boxed{}`` need no escaping). The default, :data:`DEFAULT_TEMPLATE`, is the Qwen2.5-Math
style ``"{question}\\nPlease reason step by step, and put your final answer within \\boxed{}."``.
The prompt is raw text: a chat template, if any, is applied by the model code.

Bad rows. ``on_bad_row="error"`` (default) raises :class:`~ugrpo.tasks.loading.RowError`
naming the file, the line (JSONL, 1-based) or row (Parquet / dataset, 0-based) and the
field; ``"skip"`` drops the row, and the task keeps the list in ``bad_rows(split)``.

``limit`` keeps the first ``limit`` usable rows of each split.

Scoring (:func:`verify_qa`). Per completion:

1. fast path, only when the gold answer is a plain number: if the completion's final
   number (see :func:`plain_final_number`) equals the gold exactly, the reward is 1.0
   and math-verify is not called;
2. otherwise math-verify, ``verify(parse(gold), parse(completion))`` with a time limit
   (:mod:`ugrpo.tasks.mathcheck`): correct 1.0, wrong 0.0, and None (unscorable,
   counted) for a timeout, a parse failure or an error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

from ugrpo.tasks.arith_verify import exact_number, last_boxed
from ugrpo.tasks.base import OptionError, Problem, VerifyStats
from ugrpo.tasks.loading import BadRow, BadRowPolicy, Row, RowError, read_rows
from ugrpo.tasks.mathcheck import MathChecker, TimeoutMode

__all__ = [
    "DEFAULT_TEMPLATE",
    "render_prompt",
    "check_template",
    "load_problems",
    "plain_final_number",
    "parse_plain_number",
    "verify_qa",
    "QATask",
    "QA_OPTIONS",
]

DEFAULT_TEMPLATE = "{question}\nPlease reason step by step, and put your final answer within \\boxed{}."

# A plain number: optional minus, digits with optional thousands commas, optional decimals.
_PLAIN_NUMBER_RE = re.compile(r"^-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$")
# A number inside running text, not glued to letters, other digits, or a decimal point / comma.
_NUMBER_IN_TEXT_RE = re.compile(r"(?<![\w.,])[-\u2212]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w]|[.,]\d)")
# Characters that make a number part of a larger expression (a fraction, a power, LaTeX).
_EXPR_NEIGHBOURS = set("/^{}\\_*")
# An empty \boxed{} (the default prompt ends "put your final answer within \boxed{}", which samples echo): it holds
# no answer, and as the last box it would hide the answer boxed before it.
_EMPTY_BOX_RE = re.compile(r"\\(?:boxed|fbox)\{\s*\}")


def check_template(task: str, template: str) -> None:
    """Raise ValueError unless ``template`` is a string containing ``{question}``."""
    if not isinstance(template, str) or "{question}" not in template:
        raise ValueError(
            f"{task}: prompt_template must be a string containing the placeholder {{question}}, got {template!r}"
            + ("; on the command line a value starting with '{' or holding 'X: {' is read as YAML: quote it inside "
               "the shell's quotes, e.g. --task.options.prompt_template '\"Q: {question}\"'"
               if isinstance(template, (dict, list)) else "")
        )


def render_prompt(template: str, question: str) -> str:
    """The prompt: ``template`` with ``{question}`` replaced (plain substitution)."""
    return template.replace("{question}", question)


def parse_plain_number(text: str) -> Fraction | None:
    """``text`` as an exact number if it is a plain number (``1,234``, ``-3``, ``0.5``, ``$18``), else None."""
    t = text.strip().replace("\\$", "").replace("$", "").replace("\\!", "").replace("\\,", "").strip()
    t = t.replace("\u2212", "-")
    if not _PLAIN_NUMBER_RE.match(t):
        return None
    t = t.replace(",", "")
    return -exact_number(t[1:]) if t.startswith("-") else exact_number(t.lstrip("+"))


def plain_final_number(completion: str) -> Fraction | None:
    """The completion's final answer if it is unambiguously a plain number, else None.

    If the completion has a ``\\boxed{}``, the content of the last one must be a plain
    number. Otherwise the last number in the text is taken, unless it is part of a larger
    expression (next to ``/ ^ { } \\ _ *``), in which case None. A None sends the
    completion to math-verify.

    >>> plain_final_number("so she pays 3 * 6 = $18.")
    Fraction(18, 1)
    >>> plain_final_number(r"\\boxed{\\frac{1}{2}}") is None
    True
    """
    boxed = last_boxed(completion)
    if boxed is not None:
        return parse_plain_number(boxed)
    matches = list(_NUMBER_IN_TEXT_RE.finditer(completion))
    if not matches:
        return None
    m = matches[-1]
    before = completion[: m.start()].rstrip()[-1:]
    after = completion[m.end():].lstrip()[:1]
    if before in _EXPR_NEIGHBOURS or after in _EXPR_NEIGHBOURS:
        return None
    t = m.group().replace(",", "").replace("\u2212", "-")  # a Unicode minus sign, as in a box
    return -exact_number(t[1:]) if t.startswith("-") else exact_number(t.lstrip("+"))


RowParser = Callable[[Row], tuple[str, str, dict[str, Any]]]  # row -> (question, gold answer, meta)


def load_problems(
    *,
    task: str,
    path: str,
    split: str,
    id_prefix: str,
    parse_row: RowParser,
    template: str,
    limit: int | None,
    on_bad_row: str,
) -> tuple[list[Problem], list[BadRow]]:
    """Read ``path`` and turn each row into a :class:`Problem` (see the module docstring)."""
    rows = read_rows(path, split=split)
    problems: list[Problem] = []
    bad: list[BadRow] = []
    for row in rows:
        if limit is not None and len(problems) >= limit:
            break
        try:
            question, answer, meta = parse_row(row)
        except RowError as e:
            if on_bad_row == "error":
                raise RowError(f"{task}: {e} (to skip such rows: on_bad_row='skip', on the command line "
                               "--task.options.on_bad_row skip)") from None
            bad.append(BadRow(row.where, str(e)))
            continue
        problems.append(
            Problem(
                id=f"{id_prefix}-{split}-{row.index}",
                prompt=render_prompt(template, question),
                answer=answer,
                meta={"question": question, **meta, "source": row.where},
            )
        )
    return problems, bad


def verify_qa(
    completions: Sequence[str],
    problems: Sequence[Problem],
    *,
    checker: MathChecker,
    fast_path: bool = True,
) -> tuple[list[float | None], VerifyStats]:
    """Rewards of a batch by the fast path and math-verify (module docstring), with counts."""
    if len(completions) != len(problems):
        raise ValueError(f"verify: {len(completions)} completions but {len(problems)} problems")
    stats = VerifyStats()
    out: list[float | None] = [None] * len(completions)
    gold_numbers: dict[str, Fraction | None] = {}
    todo: list[int] = []  # completions the fast path did not decide
    completions = [_EMPTY_BOX_RE.sub("", c) for c in completions]  # an echo of the prompt's "\boxed{}" is no answer
    for i, (completion, problem) in enumerate(zip(completions, problems)):
        if fast_path:
            if problem.answer not in gold_numbers:
                gold_numbers[problem.answer] = parse_plain_number(problem.answer)
            gold = gold_numbers[problem.answer]
            if gold is not None and plain_final_number(completion) == gold:
                out[i] = 1.0
                continue
        todo.append(i)
    checked = checker.check_many([problems[i].answer for i in todo], [completions[i] for i in todo])
    for i, (outcome, detail) in zip(todo, checked):
        if outcome == "correct":
            out[i] = 1.0
        elif outcome == "wrong":
            out[i] = 0.0
        elif outcome == "timeout":
            stats.n_timeouts += 1
        elif outcome == "parse_failure":
            stats.n_parse_failures += 1
            if detail is not None and stats.first_error is None:
                stats.first_error = f"problem {problems[i].id}: {detail}"
        else:
            stats.error(f"problem {problems[i].id}: {detail}")
    return out, stats


@dataclass(frozen=True)
class QATask:
    """Base of :class:`~ugrpo.tasks.gsm8k.GSM8KTask` and :class:`~ugrpo.tasks.math_task.MathTask`.

    Parameters
    ----------
    train_path, eval_path : str, optional
        Local JSONL / Parquet file or saved ``datasets`` folder (for a ``DatasetDict``
        folder the ``"train"`` / ``"test"`` split is read). A path that is needed but not
        set raises a ValueError when the problems are requested.
    limit : int, optional
        Keep the first ``limit`` usable rows of each split.
    prompt_template : str
        Must contain ``{question}``; default :data:`DEFAULT_TEMPLATE`.
    on_bad_row : {"error", "skip"}
        A row without a question or a gold answer raises (default) or is skipped and
        recorded in :meth:`bad_rows`.
    timeout_s : float
        Time limit of one math-verify check, seconds.
    timeout_mode : {"auto", "signal", "process", "none"}
        How the limit is imposed, see :mod:`ugrpo.tasks.mathcheck`.
    fast_path : bool
        Accept an exact plain-number match without calling math-verify.
    workers : int
        0: math-verify checks run in this process; k > 0: over k worker processes in
        parallel (see :class:`~ugrpo.tasks.mathcheck.MathChecker`).
    """

    train_path: str | None = None
    eval_path: str | None = None
    limit: int | None = None
    prompt_template: str = DEFAULT_TEMPLATE
    on_bad_row: BadRowPolicy = "error"
    timeout_s: float = 5.0
    timeout_mode: TimeoutMode = "auto"
    fast_path: bool = True
    workers: int = 0

    name: ClassVar[str] = "qa"
    _id_prefix: ClassVar[str] = "qa"

    def __post_init__(self) -> None:
        for f in ("train_path", "eval_path"):
            v = getattr(self, f)
            if v is not None and not isinstance(v, (str, os.PathLike)):
                raise OptionError(f"{self.name}: {f} must be a path (str), got {v!r}")
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1
        ):
            raise ValueError(f"{self.name}: limit must be a positive int or None, got {self.limit!r}")
        check_template(self.name, self.prompt_template)
        if self.on_bad_row not in ("error", "skip"):
            raise ValueError(f"{self.name}: on_bad_row must be 'error' or 'skip', got {self.on_bad_row!r}")
        if not isinstance(self.fast_path, bool):
            raise OptionError(f"{self.name}: fast_path must be True or False, got {self.fast_path!r}")
        # Validates timeout_s and timeout_mode with a clear message.
        object.__setattr__(self, "_checker", MathChecker(self.timeout_s, self.timeout_mode, self.workers))
        object.__setattr__(self, "_cache", {})

    def parse_row(self, row: Row) -> tuple[str, str, dict[str, Any]]:
        """(question, gold answer, meta) of one row; raises RowError for a bad row."""
        raise NotImplementedError

    def _load(self, split: str) -> tuple[list[Problem], list[BadRow]]:
        cache: dict[str, tuple[list[Problem], list[BadRow]]] = self.__dict__["_cache"]
        if split not in cache:
            path = self.train_path if split == "train" else self.eval_path
            if path is None:
                opt = "train_path" if split == "train" else "eval_path"
                raise ValueError(f"{self.name}: the task option {opt} is not set; give it a .jsonl or .parquet file "
                                 f"(ugrpo train: --task.options.{opt} path/to/{split}.jsonl; ugrpo plan and mse: "
                                 f"--task-option {opt}=path/to/{split}.jsonl)")
            cache[split] = load_problems(
                task=self.name, path=str(path), split=split, id_prefix=self._id_prefix, parse_row=self.parse_row,
                template=self.prompt_template, limit=self.limit, on_bad_row=self.on_bad_row,
            )
        return cache[split]

    def train_problems(self) -> list[Problem]:
        """Problems of ``train_path`` (split ``"train"`` of a dataset folder)."""
        return list(self._load("train")[0])

    def eval_problems(self) -> list[Problem]:
        """Problems of ``eval_path`` (split ``"test"`` of a dataset folder)."""
        return list(self._load("test")[0])

    def bad_rows(self, split: str) -> list[BadRow]:
        """Rows skipped with ``on_bad_row="skip"`` in split ``"train"`` or ``"test"``."""
        if split not in ("train", "test"):
            raise ValueError(f"{self.name}: split must be 'train' or 'test', got {split!r}")
        return list(self._load(split)[1])

    def verify_with_stats(
        self, completions: Sequence[str], problems: Sequence[Problem]
    ) -> tuple[list[float | None], VerifyStats]:
        """Rewards (1.0 / 0.0 / None) with the timeout / parse-failure / error counts."""
        return verify_qa(completions, problems, checker=self.__dict__["_checker"], fast_path=self.fast_path)

    def verify(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[float | None]:
        """1.0 if the completion's answer equals the gold (fast path or math-verify), 0.0 if not, None if unscorable."""
        return self.verify_with_stats(completions, problems)[0]


QA_OPTIONS = (
    "train_path", "eval_path", "limit", "prompt_template", "on_bad_row",
    "timeout_s", "timeout_mode", "fast_path", "workers",
)
