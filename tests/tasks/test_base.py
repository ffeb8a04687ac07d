"""The task contract: score() never crashes a run and counts what it could not score."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence

import pytest

from ugrpo.tasks import Problem, ScoreResult, Task, VerifierContractError, get_task, score

P = Problem(id="p0", prompt="1+1=", answer="2")


class FakeTask:
    name = "fake"

    def __init__(self, values: list[object] | Exception) -> None:
        self.values = values

    def train_problems(self) -> list[Problem]:
        return [P]

    def eval_problems(self) -> list[Problem]:
        return [P]

    def verify(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[float | None]:
        if isinstance(self.values, Exception):
            raise self.values
        return self.values  # type: ignore[return-value]


def test_unscorable_values_become_zero_and_are_counted() -> None:
    import numpy as np
    import torch

    values = [1.0, None, math.nan, "0.5", 0.5, True, math.inf, np.float32(0.25), torch.tensor(1.0)]
    res = score(FakeTask(values), ["c"] * 9, [P] * 9)
    assert res.rewards == [1.0, 0.0, 0.0, 0.0, 0.5, 1.0, 0.0, 0.25, 1.0]
    assert res.unscorable == [False, True, True, True, False, False, True, False, False]
    # an unclassified None, NaN, a string and inf are errors for a task without verify_with_stats
    assert (res.n_errors, res.n_timeouts, res.n_parse_failures) == (4, 0, 0)
    assert res.n_unscorable == 4


def test_raising_verifier_is_counted_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    task = FakeTask(RuntimeError("verifier bug"))
    task.name = "fake-raising"
    with caplog.at_level(logging.WARNING, logger="ugrpo.tasks.base"):
        res = score(task, ["a", "b"], [P, P])
        again = score(task, ["a"], [P])
    assert res.rewards == [0.0, 0.0] and res.unscorable == [True, True] and res.n_errors == 2
    assert res.first_error is not None and "verifier bug" in res.first_error
    assert again.n_errors == 1
    logged = [r.getMessage() for r in caplog.records if "fake-raising" in r.getMessage()]
    assert len(logged) == 1 and "\n" not in logged[0] and "verify raised RuntimeError: verifier bug" in logged[0]


def test_contract_violations_raise() -> None:
    with pytest.raises(VerifierContractError, match="returned 1 rewards for 2 completions"):
        score(FakeTask([1.0]), ["a", "b"], [P, P])
    with pytest.raises(ValueError, match="2 completions but 1 problems"):
        score(FakeTask([1.0, 1.0]), ["a", "b"], [P])


def test_results_and_problems_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        P.answer = "3"  # type: ignore[misc]
    res = score(FakeTask([1.0]), ["a"], [P])
    assert isinstance(res, ScoreResult)
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.n_errors = 1  # type: ignore[misc]


def test_get_task_errors_and_protocol() -> None:
    with pytest.raises(ValueError, match="unknown task 'chess'; valid tasks are: arithmetic, gsm8k, math, custom"):
        get_task("chess")
    assert isinstance(get_task("arithmetic", n_train=3, n_eval=2), Task)
    assert isinstance(get_task("gsm8k"), Task) and isinstance(get_task("math"), Task)
    assert isinstance(FakeTask([]), Task)
