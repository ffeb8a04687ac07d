"""GSM8K (Cobbe et al. 2021) from local files: the task of the paper's section 5.2 (Fig. 5).

Rows use the official field names: ``question``, and ``answer`` whose final answer follows
``####`` (e.g. ``"... so she makes 9 * 2 = $<<9*2=18>>18.\\n#### 18"``); the gold answer
is the text after the last ``####`` with thousands commas removed (the official
normalisation). A row whose ``answer`` has no ``####`` is accepted only if the whole field
is a plain number. Loading, prompts and scoring: :mod:`ugrpo.tasks.qa`.

Example::

    task = get_task("gsm8k", train_path="gsm8k/train.jsonl", eval_path="gsm8k/test.jsonl")
"""

from __future__ import annotations

from typing import Any, ClassVar

from ugrpo.tasks.base import check_options
from ugrpo.tasks.loading import Row, RowError, text_field
from ugrpo.tasks.qa import QA_OPTIONS, QATask, parse_plain_number

__all__ = ["GSM8KTask", "gsm8k_gold", "make_gsm8k"]


def gsm8k_gold(answer_field: str) -> str | None:
    """The gold answer of a GSM8K ``answer`` field, or None if it has none.

    >>> gsm8k_gold("3 + 4 = <<3+4=7>>7 apples\\n#### 1,007")
    '1007'
    >>> gsm8k_gold("42"), gsm8k_gold("no final answer")
    ('42', None)
    """
    if "####" in answer_field:
        gold = answer_field.rsplit("####", 1)[1].strip().replace(",", "")
        return gold or None
    if parse_plain_number(answer_field) is not None:
        return answer_field.strip().replace(",", "")
    return None


class GSM8KTask(QATask):
    """GSM8K from local files; options as in :class:`ugrpo.tasks.qa.QATask`."""

    name: ClassVar[str] = "gsm8k"
    _id_prefix: ClassVar[str] = "gsm8k"

    def parse_row(self, row: Row) -> tuple[str, str, dict[str, Any]]:
        """(question, gold, {"solution": answer field}); RowError naming the row and field if unusable."""
        question = text_field(row, "question")
        solution = text_field(row, "answer")
        gold = gsm8k_gold(solution)
        if gold is None:
            raise RowError(f"{row.where}: field 'answer' has no final answer after '####' (got {solution[-60:]!r})")
        return question, gold, {"solution": solution}


def make_gsm8k(**options: Any) -> GSM8KTask:
    """``get_task("gsm8k", **options)``; options: see :class:`ugrpo.tasks.qa.QATask`."""
    check_options("gsm8k", options, QA_OPTIONS)
    return GSM8KTask(**options)
