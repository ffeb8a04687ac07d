"""Prompt sets and verifiers: arithmetic (paper section 5.1), GSM8K, MATH, custom JSONL tasks, GSM-Symbolic.

Public API::

    from ugrpo.tasks import get_task, score, Problem, ScoreResult, Task, ARITH_CHARS
    task = get_task("arithmetic", prompt_style="compact", seed=0)
    problems = task.train_problems()
    result = score(task, completions, problems)   # rewards (unscorable -> 0.0) + counts
"""

from ugrpo.tasks.arith_verify import extract_integer, extract_number, last_boxed
from ugrpo.tasks.arithmetic import ARITH_CHARS, CATEGORIES, DIFFICULTIES, ArithmeticTask
from ugrpo.tasks.base import (
    OptionError,
    Problem,
    ScoreResult,
    Task,
    VerifierContractError,
    VerifyStats,
    score,
)
from ugrpo.tasks.custom import CustomTask
from ugrpo.tasks.gsm8k import GSM8KTask
from ugrpo.tasks.gsm_symbolic import GSMSymbolicTask
from ugrpo.tasks.loading import BadRow, RowError
from ugrpo.tasks.math_task import MathTask
from ugrpo.tasks.registry import TASK_NAMES, get_task

__all__ = [
    "ARITH_CHARS",
    "CATEGORIES",
    "DIFFICULTIES",
    "TASK_NAMES",
    "ArithmeticTask",
    "BadRow",
    "CustomTask",
    "GSM8KTask",
    "GSMSymbolicTask",
    "MathTask",
    "OptionError",
    "RowError",
    "VerifierContractError",
    "Problem",
    "ScoreResult",
    "Task",
    "VerifyStats",
    "extract_integer",
    "extract_number",
    "get_task",
    "last_boxed",
    "score",
]
