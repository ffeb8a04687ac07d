"""Custom tasks: your prompts and answers in a JSONL (or Parquet) file, your reward function.

::

    task = get_task("custom", data_path="train.jsonl", reward_fn="my_rewards:exact_match",
                    prompt_field="prompt", answer_field="answer", eval_path="eval.jsonl")

The reward function, batched like a TRL reward function but called ``fn(completions, answers, **row_fields)``
(TRL's ``(prompts, completions, ...)`` needs a wrapper: :mod:`ugrpo.tasks.custom_check`)::

    def exact_match(completions: list[str], answers: list[str], **row_fields) -> list[float | None]:
        return [float(c.strip() == a) for c, a in zip(completions, answers)]

* ``completions[i]`` is the i-th completion and ``answers[i]`` the ``answer_field`` of its row.
* Keyword arguments: ``prompts`` (the rows' prompts) and every other field of the rows,
  each as a list aligned with ``completions`` (None where a row lacks the field). Only
  the keywords the function accepts are passed (by name, or all with ``**kwargs``).
* It returns one value per completion: a number (``True``/``False`` count as 1/0), or
  None for "cannot score this one".
* ``reward_fn`` is ``"module:function"`` (the module must be importable: on ``sys.path``
  or ``PYTHONPATH``), or a callable.

What happens when it misbehaves (``ugrpo train`` first calls it once on the first train row's gold answer, before
the model loads: :mod:`ugrpo.tasks.custom_check`):

=============================================  =============================================
import fails, function missing/not callable    ``ValueError`` from ``get_task`` (names it)
raises, or returns no number, on the gold      ``RewardFunctionError`` before the run, naming
answer of the first train row (e.g. TRL's      the spec, the row, the calling convention and
``(prompts, completions, ...)`` signature)     (TRL) the fix
scores that gold answer None, NaN or <= 0      a one-line warning before the run
returns a list of the wrong length / no list   :class:`~ugrpo.tasks.base.VerifierContractError`
raises                                          whole batch unscorable (reward 0), counted
                                               as errors, traceback kept (``first_error``);
                                               the first time in a run: one warning line;
                                               on every completion of the first step:
                                               ``RewardFunctionError``, the run stops
returns None for an item                        unscorable, counted as a parse failure
returns NaN, inf or a non-number for an item    unscorable, counted as an error (message kept)
does not return within ``timeout`` seconds      whole batch unscorable, counted as timeouts
                                               (the call goes on in a background thread)
=============================================  =============================================

Rows without the prompt or answer field raise :class:`~ugrpo.tasks.loading.RowError`
naming the file, line and field (``on_bad_row="skip"`` skips them instead).
"""

from __future__ import annotations

import importlib
import inspect
import math
import numbers
import os
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ugrpo.tasks.base import (
    OptionError,
    Problem,
    VerifierContractError,
    VerifyStats,
    check_options,
    error_line,
    warn_once,
)
from ugrpo.tasks.loading import BadRow, BadRowPolicy, RowError, read_rows, text_field

DEFAULT_TIMEOUT_S = 300.0
"""seconds one reward-function call (one batch) may take by default"""

__all__ = ["CALLING_CONVENTION", "CustomTask", "load_reward_fn", "make_custom"]

CALLING_CONVENTION = "fn(completions, answers, **row_fields)"
"""how training calls the reward function: the completions and their rows' gold answers positionally, ``prompts``
and the rows' other fields as keyword lists (those the function accepts)"""

RewardFn = Callable[..., Sequence[Any]]


def load_reward_fn(spec: str | RewardFn) -> RewardFn:
    """The reward function named by ``"module:function"`` (or ``spec`` itself if callable).

    Raises
    ------
    ValueError
        If the spec is malformed, the module cannot be imported, or the function is missing
        or not callable; the message says which and how to fix it.
    """
    if callable(spec):
        return spec
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise ValueError(f"custom: reward_fn must be 'module:function' (e.g. 'my_rewards:exact_match'), got {spec!r}")
    module_name, fn_name = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        raise ValueError(
            f"custom: reward_fn {spec!r}: cannot import module {module_name!r} ({type(e).__name__}: {e}); "
            "put its folder on sys.path or PYTHONPATH"
        ) from e
    fn = getattr(module, fn_name, None)
    if fn is None:
        public = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))
        raise ValueError(
            f"custom: reward_fn {spec!r}: module {module_name!r} has no function {fn_name!r}; "
            f"its callables are: {', '.join(public) or 'none'}"
        )
    if not callable(fn):
        raise ValueError(f"custom: reward_fn {spec!r}: {fn_name!r} is a {type(fn).__name__}, not a function")
    return fn


def _accepted_kwargs(fn: RewardFn, names: Sequence[str]) -> list[str]:
    """The keyword names among ``names`` that ``fn`` accepts."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return list(names)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return list(names)
    return [n for n in names if n in params]


@dataclass(frozen=True)
class CustomTask:
    """A task from a prompt/answer file and a user reward function (module docstring).

    Parameters
    ----------
    data_path : str
        Training rows: JSONL (one object per line), Parquet, or a saved ``datasets`` folder.
    reward_fn : str or callable
        ``"module:function"`` or a callable with the documented signature.
    prompt_field, answer_field : str
        Field names of the prompt and the answer in each row.
    eval_path : str, optional
        Held-out rows in the same format; ``eval_problems()`` raises ValueError if not set.
    limit : int, optional
        Keep the first ``limit`` usable rows of each file.
    on_bad_row : {"error", "skip"}
        What a row without the prompt or answer field does.
    timeout : float or None
        Seconds one call of the reward function (one batch) may take; a call that takes longer
        scores the batch as unscorable (counted as timeouts). None: wait forever.
    """

    data_path: str
    reward_fn: str | RewardFn
    prompt_field: str = "prompt"
    answer_field: str = "answer"
    eval_path: str | None = None
    limit: int | None = None
    on_bad_row: BadRowPolicy = "error"
    timeout: float | None = DEFAULT_TIMEOUT_S
    name: str = field(default="custom", init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.data_path, (str, os.PathLike)):
            raise OptionError(f"custom: data_path must be a path, got {self.data_path!r}")
        for f in ("prompt_field", "answer_field"):
            if not isinstance(getattr(self, f), str) or not getattr(self, f):
                raise ValueError(f"custom: {f} must be a non-empty field name, got {getattr(self, f)!r}")
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1
        ):
            raise ValueError(f"custom: limit must be a positive int or None, got {self.limit!r}")
        if self.on_bad_row not in ("error", "skip"):
            raise ValueError(f"custom: on_bad_row must be 'error' or 'skip', got {self.on_bad_row!r}")
        if self.timeout is not None and (isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float))
                                         or not self.timeout > 0):
            raise ValueError(f"custom: timeout must be a positive number of seconds or None, got {self.timeout!r}")
        object.__setattr__(self, "_fn", load_reward_fn(self.reward_fn))
        object.__setattr__(self, "_cache", {})
        object.__setattr__(self, "_where", {})  # problem id -> file:line, for messages

    def _load(self, split: str) -> tuple[list[Problem], list[BadRow]]:
        cache: dict[str, tuple[list[Problem], list[BadRow]]] = self.__dict__["_cache"]
        if split in cache:
            return cache[split]
        path = self.data_path if split == "train" else self.eval_path
        if path is None:
            raise ValueError("custom: eval_path is not set; pass eval_path='path/to/eval.jsonl'")
        problems: list[Problem] = []
        bad: list[BadRow] = []
        for row in read_rows(str(path)):
            if self.limit is not None and len(problems) >= self.limit:
                break
            try:
                prompt = text_field(row, self.prompt_field)
                answer = text_field(row, self.answer_field)
            except RowError as e:
                if self.on_bad_row == "error":
                    raise RowError(f"custom: {e} (to skip such rows: on_bad_row='skip', on the command line "
                                   "--task.options.on_bad_row skip)") from None
                bad.append(BadRow(row.where, str(e)))
                continue
            meta = {k: v for k, v in row.fields.items() if k not in (self.prompt_field, self.answer_field)}
            problems.append(Problem(f"custom-{split}-{row.index}", prompt, answer, meta))
            self.__dict__["_where"][problems[-1].id] = row.where
        cache[split] = (problems, bad)
        return cache[split]

    def train_problems(self) -> list[Problem]:
        """Problems of ``data_path``."""
        return list(self._load("train")[0])

    def eval_problems(self) -> list[Problem]:
        """Problems of ``eval_path``."""
        return list(self._load("eval")[0])

    def bad_rows(self, split: str) -> list[BadRow]:
        """Rows skipped with ``on_bad_row="skip"``, split ``"train"`` or ``"eval"``."""
        if split not in ("train", "eval"):
            raise ValueError(f"custom: split must be 'train' or 'eval', got {split!r}")
        return list(self._load(split)[1])

    def call(self, completions: Sequence[str], problems: Sequence[Problem]) -> Any:
        """What the reward function returns for ``completions`` of ``problems``, called as training calls it
        (:data:`CALLING_CONVENTION`, within ``timeout``); raises what it raises, or ``TimeoutError``."""
        return _call_with_timeout(self.__dict__["_fn"], (list(completions), [p.answer for p in problems]),
                                  self.keywords(problems), self.timeout)

    def keywords(self, problems: Sequence[Problem]) -> dict[str, list[Any]]:
        """The keyword lists a call on ``problems`` passes: of ``prompts`` and the rows' other fields, those the
        function accepts (by name, or all with ``**kwargs``)."""
        fields = sorted({k for p in problems for k in p.meta} - {"prompts"})
        columns: dict[str, list[Any]] = {"prompts": [p.prompt for p in problems]}
        columns.update({k: [p.meta.get(k) for p in problems] for k in fields})
        return {k: columns[k] for k in _accepted_kwargs(self.__dict__["_fn"], list(columns))}

    def spec(self) -> str:
        """The reward function as the config names it: ``'module:function'``, or a callable's qualified name."""
        fn = self.reward_fn
        return fn if isinstance(fn, str) else f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', fn)}"

    def where(self, problem: Problem) -> str:
        """The file and line (or row) ``problem`` was read from, e.g. ``train.jsonl:line 3``; its id if unknown."""
        return self.__dict__["_where"].get(problem.id, problem.id)

    def verify_with_stats(
        self, completions: Sequence[str], problems: Sequence[Problem]
    ) -> tuple[list[float | None], VerifyStats]:
        """Call the reward function once on the batch and check what it returns (module docstring)."""
        n = len(completions)
        if len(problems) != n:
            raise ValueError(f"custom.verify: {n} completions but {len(problems)} problems")
        stats = VerifyStats()
        try:
            raw = self.call(completions, problems)
        except TimeoutError:
            warn_once(self, f"reward_fn {self.reward_fn!r} did not return within {self.timeout:g} s on a batch of {n} "
                             "completions (raise task.options.timeout if it is just slow)")
            stats.n_timeouts = n
            stats.first_error = f"reward_fn {self.reward_fn!r} timed out after {self.timeout:g} s"
            return [None] * n, stats
        except Exception as e:
            tb = traceback.format_exc()
            warn_once(self, f"reward_fn {self.reward_fn!r} raised {error_line(e)} on a batch of {n} completions")
            stats.n_errors = n
            stats.first_error = tb
            return [None] * n, stats
        return self.values(raw, n, stats), stats

    def values(self, raw: Any, n: int, stats: VerifyStats) -> list[float | None]:
        """The reward function's return value ``raw`` for ``n`` completions as rewards (None: unscorable, counted
        in ``stats``); :class:`VerifierContractError` when it is not a list of ``n`` values."""
        if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence) and not hasattr(raw, "__len__"):
            raise VerifierContractError(
                f"custom reward_fn {self.reward_fn!r} returned {type(raw).__name__}; it must return a list with "
                f"one float or None per completion ({n})"
            )
        raw = list(raw)
        if len(raw) != n:
            raise VerifierContractError(
                f"custom reward_fn {self.reward_fn!r} returned {len(raw)} values for {n} completions; "
                "it must return exactly one float or None per completion"
            )
        out: list[float | None] = []
        for i, v in enumerate(raw):
            if v is None:
                stats.n_parse_failures += 1
                out.append(None)
                continue
            x = float(v) if isinstance(v, (bool, numbers.Real)) else None
            if x is None or not math.isfinite(x):
                stats.error(
                    f"custom reward_fn {self.reward_fn!r} returned {v!r} for completion {i}; "
                    "expected a finite number or None"
                )
                out.append(None)
            else:
                out.append(x)
        return out

    def verify(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[float | None]:
        """The reward function's values, None where unscorable (never raises for a bad batch)."""
        return self.verify_with_stats(completions, problems)[0]


_OPTIONS = ("data_path", "reward_fn", "prompt_field", "answer_field", "eval_path", "limit", "on_bad_row", "timeout")


def _call_with_timeout(fn: Callable, args: tuple, kwargs: dict, timeout: float | None) -> Any:
    """``fn(*args, **kwargs)``, or TimeoutError after ``timeout`` s (the call runs on in a daemon thread: Python
    cannot stop a function from outside, but the run goes on and exits normally)."""
    if timeout is None:
        return fn(*args, **kwargs)
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    t = threading.Thread(target=call, name="ugrpo-reward-fn", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise TimeoutError
    if "error" in box:
        raise box["error"]
    return box["value"]


def make_custom(**options: Any) -> CustomTask:
    """``get_task("custom", **options)``; ``data_path`` and ``reward_fn`` are required."""
    check_options("custom", options, _OPTIONS)
    missing = [k for k in ("data_path", "reward_fn") if k not in options]
    if missing:
        raise OptionError(f"get_task('custom'): missing required option(s) {', '.join(missing)}")
    return CustomTask(**options)
