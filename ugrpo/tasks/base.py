"""The task contract: problems, a batched verifier, and a scorer that never crashes a run.

A *task* is a set of prompts with gold answers plus a verifier. It feeds the reward
tensor Z of the paper (eq. (5): one reward per completion; the binary reward of
section 5.1 / docs/paper.md 8.1). The verifier follows the TRL reward-function contract:
``verify(completions, problems) -> list[float | None]`` where ``None`` means
"could not be scored". :func:`score` wraps it for training: every unscorable value
(``None``, NaN, a non-number, an exception inside the verifier) becomes reward 0.0
and is counted, so one bad completion never ends a run.

Tasks are built by name with :func:`ugrpo.tasks.registry.get_task`; options are explicit keyword
arguments and an unknown option is an error that lists the valid ones.
"""

from __future__ import annotations

import logging
import math
import numbers
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "Problem",
    "ScoreResult",
    "Task",
    "VerifyStats",
    "score",
    "OptionError",
    "check_options",
    "VerifierContractError",
    "warn_once",
    "error_line",
]

log = logging.getLogger(__name__)


class VerifierContractError(ValueError):
    """A verifier broke its contract (e.g. returned the wrong number of rewards).

    Unlike an error while scoring one batch, this is a bug in the reward code, so
    :func:`score` lets it through instead of counting it.
    """


@dataclass(frozen=True)
class Problem:
    """One prompt with its gold answer.

    Attributes
    ----------
    id : str
        Stable id, e.g. ``"arith-train-00017"``, ``"gsm8k-test-12"``.
    prompt : str
        The full text given to the model, already formatted in the task's prompt style.
    answer : str
        The gold answer as text.
    meta : Mapping[str, Any]
        Free-form extras, e.g. ``{"category": "two_step"}`` or ``{"level": "Level 3"}``.
    """

    id: str
    prompt: str
    answer: str
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScoreResult:
    """Rewards of a batch of completions, with the failures counted.

    Attributes
    ----------
    rewards : list[float]
        One reward per completion; an unscorable completion gets 0.0.
    unscorable : list[bool]
        True where the verifier returned ``None`` / NaN / a non-number, timed out,
        could not parse, or raised.
    n_timeouts : int
        Checks that hit the verifier's time limit (reported by the task).
    n_parse_failures : int
        Completions (or gold answers) that could not be parsed (reported by the task).
    n_errors : int
        Everything else that was unscorable: an exception in the verifier, a ``None``
        the task did not classify, NaN, or a value that is not a number.
    first_error : str | None
        The first traceback / message of an error, for the run log; None if no error.
    """

    rewards: list[float]
    unscorable: list[bool]
    n_timeouts: int
    n_parse_failures: int
    n_errors: int
    first_error: str | None = None

    @property
    def n_unscorable(self) -> int:
        """Number of completions that got reward 0.0 because they could not be scored."""
        return sum(self.unscorable)


@dataclass
class VerifyStats:
    """Mutable counters a task fills during one :meth:`Task.verify` call.

    A task that can tell *why* a completion is unscorable offers
    ``verify_with_stats(completions, problems) -> (list[float | None], VerifyStats)``;
    :func:`score` prefers it and uses the counts to split the unscorable completions
    into timeouts / parse failures / errors. Tasks without it are fine: their ``None``
    values are then counted as errors.
    """

    n_timeouts: int = 0
    n_parse_failures: int = 0
    n_errors: int = 0
    first_error: str | None = None

    def error(self, message: str) -> None:
        """Count one error and keep the first message."""
        self.n_errors += 1
        if self.first_error is None:
            self.first_error = message


@runtime_checkable
class Task(Protocol):
    """A prompt set with a verifier (TRL reward-function contract)."""

    name: str

    def train_problems(self) -> list[Problem]:
        """The training prompts (deterministic for a given configuration)."""
        ...

    def eval_problems(self) -> list[Problem]:
        """Held-out prompts, disjoint from the training prompts where the task can ensure it."""
        ...

    def verify(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[float | None]:
        """One reward per completion, ``None`` where it cannot be scored."""
        ...


def _as_reward(value: Any) -> float | None:
    """A finite float, or None if ``value`` is None, NaN, infinite or not a real number.

    Real numbers (``bool`` -> 1.0/0.0, numpy scalars, 0-d tensors via ``__float__``) are
    accepted; strings are not numbers.
    """
    if value is None or isinstance(value, (str, bytes)):
        return None
    if not isinstance(value, numbers.Real):
        if not hasattr(value, "__float__"):
            return None
        try:  # 0-d numpy / torch values
            value = float(value)
        except (TypeError, ValueError, RuntimeError):
            return None
    value = float(value)
    return value if math.isfinite(value) and abs(value) <= _MAX_REWARD else None


_MAX_REWARD = 3.4028234663852886e38
"""float32's largest value: a larger reward overflows the float32 loss to inf, so it is unscorable too."""


_WARNED: set[int] = set()  # id() of tasks that cannot hold the flag themselves (no __dict__)
COUNTS = ("n_errors, n_timeouts and n_parse_failures per step in a training run's metrics.jsonl "
          "(eval_n_errors at evaluations)")
"""Where the counts of unscorable completions are read (named by the one-time warning)."""


def warn_once(task: object, message: str) -> None:
    """Log a scoring problem on one line the first time a task object has it: once per run, since every run builds
    its own task (the counts are in every ScoreResult, the traceback in its ``first_error``)."""
    name = str(getattr(task, "name", type(task).__name__))
    d = getattr(task, "__dict__", None)
    if (d.get("_ugrpo_warned", False) if d is not None else id(task) in _WARNED):
        return
    if d is not None:
        d["_ugrpo_warned"] = True
    else:
        _WARNED.add(id(task))
    log.warning("task %r: %s; those completions score 0 and are counted: %s. Not logged again in this run.",
                name, message, COUNTS)


def error_line(error: str | BaseException) -> str:
    """``'KeyError: 'x''``: an exception, or the last line of a traceback or error message, on one line."""
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"
    lines = [x.strip() for x in error.strip().splitlines() if x.strip()]
    return lines[-1] if lines else error


def score(task: Task, completions: Sequence[str], problems: Sequence[Problem]) -> ScoreResult:
    """Score a batch for training: unscorable -> reward 0.0, counted, never raised.

    Parameters
    ----------
    task : Task
        The task whose ``verify`` is called once on the whole batch.
    completions : Sequence[str]
        Model outputs, one per problem (a group of G samples repeats its problem G times).
    problems : Sequence[Problem]
        The problem of each completion, same length as ``completions``.

    Returns
    -------
    ScoreResult
        Rewards (the Z of paper eq. (5)) and the counts of timeouts / parse failures /
        errors. If ``verify`` itself raises, every completion is unscorable and the
        first traceback is kept in ``first_error`` (and logged).

    Raises
    ------
    ValueError
        If ``completions`` and ``problems`` differ in length.
    VerifierContractError
        If ``verify`` returns a list of the wrong length (or raises this error itself):
        those are bugs in the reward code, not bad completions.
    """
    n = len(completions)
    if len(problems) != n:
        raise ValueError(
            f"score: got {n} completions but {len(problems)} problems; pass one problem per completion "
            "(repeat each problem G times for a group of G samples)"
        )
    stats: VerifyStats | None = None
    try:
        if hasattr(task, "verify_with_stats"):
            raw_values, stats = task.verify_with_stats(completions, problems)  # type: ignore[attr-defined]
            raw = list(raw_values)
        else:
            raw = list(task.verify(completions, problems))
    except VerifierContractError:
        raise
    except Exception as e:  # a crashing verifier must not end the run: count it, log it
        tb = traceback.format_exc()
        warn_once(task, f"verify raised {error_line(e)} on a batch of {n} completions")
        return ScoreResult([0.0] * n, [True] * n, 0, 0, n, tb)
    if len(raw) != n:
        raise VerifierContractError(
            f"task {getattr(task, 'name', task)!r}: verify returned {len(raw)} rewards for {n} completions; "
            "it must return exactly one value (float or None) per completion"
        )
    rewards: list[float] = []
    unscorable: list[bool] = []
    n_bad_values = 0
    first_bad: str | None = None
    for i, value in enumerate(raw):
        r = _as_reward(value)
        if r is None:
            rewards.append(0.0)
            unscorable.append(True)
            if value is not None:  # NaN / inf / non-number: always an error
                n_bad_values += 1
                if first_bad is None:
                    first_bad = (f"completion {i}: verifier returned {value!r}, not a finite number "
                                 "(within float32 range)")
        else:
            rewards.append(r)
            unscorable.append(False)
    n_none = sum(1 for v in raw if v is None)
    n_timeouts = stats.n_timeouts if stats else 0
    n_parse = stats.n_parse_failures if stats else 0
    n_err_task = stats.n_errors if stats else 0
    # None values the task did not classify are counted as errors so the counts add up.
    unclassified = max(0, n_none - n_timeouts - n_parse - n_err_task)
    n_errors = n_err_task + unclassified + n_bad_values
    first_error = (stats.first_error if stats else None) or first_bad
    if first_error is not None and n_errors:
        warn_once(task, f"{n_errors} scoring error(s) in a batch of {n} completions; first: {error_line(first_error)}")
    return ScoreResult(rewards, unscorable, n_timeouts, n_parse, n_errors, first_error)


class OptionError(TypeError, ValueError):
    """A task option that is unknown, missing or of the wrong type: bad input, so the command line reports it
    as a user error (a ``ValueError``); a ``TypeError`` too, as Python reports a bad keyword argument."""


def check_options(task_name: str, options: Mapping[str, Any], valid: Sequence[str]) -> None:
    """Raise a clear error for an unknown option, listing the valid ones."""
    unknown = sorted(set(options) - set(valid))
    if unknown:
        import difflib

        close = [m for u in unknown for m in difflib.get_close_matches(u, list(valid), n=1)]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise OptionError(
            f"task {task_name!r}: unknown option(s) {', '.join(unknown)}{hint}; valid options are: "
            f"{', '.join(sorted(valid))}"
        )
