"""Is a custom task's reward function callable as training calls it? Checked before the model loads, and said clearly.

A reward function with another signature (TRL's ``def correct(prompts, completions, answer, **kwargs)``) raises on
every batch; training counts each such batch as unscorable (reward 0) and goes on (:func:`ugrpo.tasks.base.score`),
so the run would train on zeros. :func:`check_reward_fn` calls the function once on a train row's own gold answer
(:func:`check_task_reward`: the first train row). Every command that takes a custom task calls it once, before it
loads a model: ``train`` in :func:`ugrpo.train.preflight.preflight`, ``sweep --config`` and ``reproduce --task``
before their first run, ``mse --model`` and ``plan --model`` before their run folder (:func:`check_named_task`).
:func:`failure_advice` says what ugrpo calls (:data:`~ugrpo.tasks.custom.CALLING_CONVENTION`) and how to adapt a
TRL-style function; the trainer uses it too when every completion of a run's first step was a scoring error.
"""

from __future__ import annotations

import inspect
import numbers
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ugrpo.errors import RewardFunctionError
from ugrpo.tasks.base import Problem, Task, VerifierContractError, VerifyStats
from ugrpo.tasks.custom import CALLING_CONVENTION, CustomTask

__all__ = ["check_reward_fn", "check_task_reward", "check_named_task", "failure_advice"]

_SIGNATURE_WORDS = ("multiple values for argument", "required positional argument", "positional argument but",
                    "positional arguments but", "unexpected keyword argument")
"""words of the TypeError of a call that does not fit the function's signature (when it has no inspectable one)"""


def failure_advice(task: CustomTask, problems: Sequence[Problem], error: str) -> str:
    """What to tell the user after the reward function failed on ``problems`` with ``error`` (``'Type: message'``).

    The calling convention and, when the function's signature cannot take that call (TRL's
    ``(prompts, completions, ...)``: ``got multiple values for argument 'prompts'``), how to adapt it; otherwise
    that a completion it cannot score gets None, not an exception.
    """
    said = (f"ugrpo's custom task calls {CALLING_CONVENTION}: completions and answers positionally, prompts and the "
            "rows' other fields as keyword lists")
    fn = task.__dict__["_fn"]
    if not _signature_refuses(fn, task.keywords(problems), error):
        return (f"{said}; for a completion it cannot score it must return None, not raise (one exception leaves "
                "the whole batch unscorable)")
    name = getattr(fn, "__name__", "fn")
    return (f"{said}. TRL reward functions take (prompts, completions, ...); ugrpo's custom task passes completions "
            f"and answers positionally: write it as def {name}(completions, answers, **kwargs), or wrap it: "
            f"def reward(completions, answers, **fields): return {name}(completions=completions, "
            f"{task.answer_field}=answers, **fields)")


def _signature_refuses(fn, keywords: dict, error: str) -> bool:
    """Whether ``fn`` cannot take two positional lists and ``keywords``: from its signature, or from the TypeError's
    words (``error``) when it has none."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return error.startswith("TypeError") and any(w in error for w in _SIGNATURE_WORDS)
    try:
        signature.bind([], [], **keywords)
    except TypeError:
        return True
    return False


def check_reward_fn(task: CustomTask, problem: Problem) -> str | None:
    """Call the reward function once as training will, with ``problem``'s gold answer as the completion.

    Returns
    -------
    str or None
        A warning when the gold answer scores None, NaN or <= 0 (fine for rewards that are not 1 for the bare gold
        text) or the call times out; None when it scores > 0.

    Raises
    ------
    RewardFunctionError
        If the function raises, or does not return a list of one number (or None): the message names
        ``task.options.reward_fn``, the row, the error, the calling convention and, for a signature that does not fit
        (TRL's), how to adapt the function.
    """
    head = f"task.options.reward_fn {task.spec()!r} on the gold answer of {task.where(problem)} ({problem.answer!r})"
    try:
        raw = task.call([problem.answer], [problem])
    except TimeoutError:
        return (f"{head}: no reward within {task.timeout:g} s (task.options.timeout); in training each batch that "
                "takes as long is unscorable (reward 0)")
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
        raise RewardFunctionError(f"{head}: {error}. {failure_advice(task, [problem], error)}") from e
    try:
        value = task.values(raw, 1, VerifyStats())[0]
    except VerifierContractError as e:
        raise RewardFunctionError(f"{head}: {e}. {failure_advice(task, [problem], '')}") from None
    given = list(raw)[0]
    if given is not None and not isinstance(given, (bool, numbers.Real)):
        raise RewardFunctionError(f"{head}: returned [{given!r}] ({type(given).__name__}); each value must be a "
                                  f"number (or None: cannot score). {failure_advice(task, [problem], '')}")
    if value is None or value <= 0:
        return (f"{head}: reward {given!r}; fine if the bare gold text is not how a completion should look, else "
                "check the function (training would score right answers so)")
    return None


def check_task_reward(task: Task, problems: Sequence[Problem] | None = None, *, warn: bool = True) -> None:
    """:func:`check_reward_fn` on the first of ``problems`` (default: the task's train problems) when ``task`` is a
    custom task; nothing for the other tasks. Its warning is one ``warning:`` line on stderr (when ``warn``).

    Raises
    ------
    RewardFunctionError
        As :func:`check_reward_fn`.
    """
    if not isinstance(task, CustomTask):
        return
    problems = task.train_problems() if problems is None else problems
    if problems and (warning := check_reward_fn(task, problems[0])) and warn:
        print(f"warning: {warning}", file=sys.stderr, flush=True)


def check_named_task(name: str, options: Mapping[str, Any]) -> None:
    """:func:`check_task_reward` for the task ``name`` with ``options`` (a config's ``task`` section), built only
    when it is the custom task: a command that trains or measures it checks once, before its first run."""
    if name == "custom":
        from ugrpo.tasks.registry import get_task

        check_task_reward(get_task(name, **options))
