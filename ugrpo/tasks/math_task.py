"""MATH (Hendrycks et al. 2021) from local files.

Rows use the official field names: ``problem`` and ``solution``, whose gold answer is the
content of the last ``\\boxed{...}`` (nested braces handled), plus the optional ``level``
and ``type`` (kept in ``Problem.meta``). If a row has a non-empty ``answer`` field (as in
the MATH-500 release) it is the gold answer and ``solution`` is optional. Loading,
prompts and scoring (math-verify, gold first): :mod:`ugrpo.tasks.qa`.

Example::

    task = get_task("math", train_path="math/train.jsonl", eval_path="math500.jsonl", timeout_s=2.0)
"""

from __future__ import annotations

from typing import Any, ClassVar

from ugrpo.tasks.arith_verify import last_boxed
from ugrpo.tasks.base import check_options
from ugrpo.tasks.loading import Row, RowError, text_field
from ugrpo.tasks.qa import QA_OPTIONS, QATask

__all__ = ["MathTask", "make_math"]


class MathTask(QATask):
    """MATH from local files; options as in :class:`ugrpo.tasks.qa.QATask`."""

    name: ClassVar[str] = "math"
    _id_prefix: ClassVar[str] = "math"

    def parse_row(self, row: Row) -> tuple[str, str, dict[str, Any]]:
        """(problem, gold, meta with level/type/solution); RowError naming the row and field if unusable."""
        question = text_field(row, "problem")
        meta: dict[str, Any] = {k: row.fields[k] for k in ("level", "type") if row.fields.get(k) is not None}
        answer = row.fields.get("answer")
        if isinstance(answer, (str, int, float)) and not isinstance(answer, bool) and str(answer).strip():
            if row.fields.get("solution") is not None:
                meta["solution"] = str(row.fields["solution"])
            return question, str(answer).strip(), meta
        solution = text_field(row, "solution")
        gold = last_boxed(solution)
        if gold is None or not gold.strip():
            raise RowError(
                f"{row.where}: field 'solution' has no \\boxed{{...}} final answer (with balanced braces) "
                "and the row has no 'answer' field"
            )
        meta["solution"] = solution
        return question, gold.strip(), meta


def make_math(**options: Any) -> MathTask:
    """``get_task("math", **options)``; options: see :class:`ugrpo.tasks.qa.QATask`."""
    check_options("math", options, QA_OPTIONS)
    return MathTask(**options)
