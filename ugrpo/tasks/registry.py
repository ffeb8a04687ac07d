"""The task registry: every task by name (its own module, so that ``base`` has no import of the tasks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ugrpo.tasks.arithmetic import make_arithmetic
from ugrpo.tasks.base import Task
from ugrpo.tasks.custom import make_custom
from ugrpo.tasks.gsm8k import make_gsm8k
from ugrpo.tasks.gsm_symbolic import make_gsm_symbolic
from ugrpo.tasks.math_task import make_math

__all__ = ["TASK_NAMES", "get_task"]

FACTORIES: dict[str, Callable[..., Task]] = {"arithmetic": make_arithmetic, "gsm8k": make_gsm8k, "math": make_math,
                                             "custom": make_custom, "gsm_symbolic": make_gsm_symbolic}
TASK_NAMES = tuple(FACTORIES)


def get_task(name: str, **options: Any) -> Task:
    """Build a task by name.

    Parameters
    ----------
    name : {"arithmetic", "gsm8k", "math", "custom", "gsm_symbolic"}
        The task.
    **options
        The task's keyword options (see ``ArithmeticTask``, ``GSM8KTask``, ``MathTask``,
        ``CustomTask``, ``GSMSymbolicTask``). An unknown option raises ``OptionError`` (a ``TypeError`` and a
        ``ValueError``) listing the valid ones.

    Returns
    -------
    Task

    Examples
    --------
    >>> get_task("arithmetic", seed=0).name
    'arithmetic'
    """
    if name not in FACTORIES:
        raise ValueError(f"unknown task {name!r}; valid tasks are: {', '.join(TASK_NAMES)}")
    return FACTORIES[name](**options)
