"""math-verify checks, their time limit (signal and worker process), and GSM8K/MATH scoring."""

from __future__ import annotations

import json
import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest

from ugrpo.tasks import get_task, mathcheck, score
from ugrpo.tasks.mathcheck import MathChecker, check_one
from ugrpo.tasks.qa import plain_final_number

MV_CASES = [
    ("42", "\\boxed{42}", "correct", "boxed prediction"),
    ("\\boxed{42}", "42", "correct", "boxed gold, bare prediction"),
    ("1/2", "0.5", "correct", "fraction equals decimal"),
    ("\\frac{1}{2}", "The answer is $0.5$.", "correct", "decimal inside text"),
    ("\\frac{1}{3}", "0.33", "wrong", "rounded decimal is rejected"),
    ("\\sqrt{8}", "$2\\sqrt{2}$", "correct", "bare LaTeX gold is parsed (wrapped in boxed)"),
    ("7", "\\boxed{8}", "wrong", "wrong number"),
    ("7", "", "parse_failure", "empty completion"),
]


@pytest.mark.parametrize("gold,pred,expected,why", MV_CASES, ids=[c[3] for c in MV_CASES])
def test_math_verify_cases(gold: str, pred: str, expected: str, why: str) -> None:
    assert check_one(gold, pred, timeout_s=10.0, timeout_mode="signal")[0] == expected, why


def _sleepy(seconds: float):
    def check(gold: str, pred: str):
        time.sleep(seconds)
        return "correct", None

    return check


def test_signal_timeout_scores_zero_and_is_counted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(mathcheck, "_mv_check", _sleepy(5.0))
    t0 = time.monotonic()
    assert check_one("1", "1", timeout_s=0.05, timeout_mode="signal") == ("timeout", None)
    assert time.monotonic() - t0 < 2.0

    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"problem": "x?", "solution": "\\boxed{x^2}"}) + "\n")
    task = get_task("math", train_path=str(path), timeout_s=0.05, timeout_mode="signal")
    (p,) = task.train_problems()
    res = score(task, ["\\boxed{x^2}", "\\boxed{x^3}"], [p, p])
    assert res.rewards == [0.0, 0.0] and res.unscorable == [True, True]
    assert (res.n_timeouts, res.n_parse_failures, res.n_errors) == (2, 0, 0)


def test_signal_mode_outside_main_thread_is_a_clear_error() -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            check_one("1", "1", timeout_mode="signal")
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    th = threading.Thread(target=run)
    th.start()
    th.join()
    assert len(errors) == 1 and "needs the main thread" in str(errors[0])


def test_worker_process_timeout_kills_and_restarts() -> None:
    worker = mathcheck._Worker(target="tests.tasks.slow_check:hang_on_request")
    try:
        assert worker.check("a", "a", timeout_s=30.0) == ("correct", None)
        t0 = time.monotonic()
        assert worker.check("a", "hang", timeout_s=0.3) == ("timeout", None)
        assert time.monotonic() - t0 < 5.0
        assert worker.check("a", "b", timeout_s=30.0) == ("wrong", None)  # a fresh worker took over
    finally:
        worker.close()


def test_auto_mode_in_a_thread_uses_the_worker_process() -> None:
    results: list[object] = []

    def run() -> None:
        results.append(check_one("\\frac{1}{2}", "0.5", timeout_s=30.0))
        results.append(check_one("\\frac{1}{3}", "0.33", timeout_s=30.0))

    th = threading.Thread(target=run)
    th.start()
    th.join()
    assert results == [("correct", None), ("wrong", None)]
    assert mathcheck._WORKER._proc is not None  # the shared worker served the thread


def test_checker_options_are_validated() -> None:
    with pytest.raises(ValueError, match="timeout_s must be"):
        MathChecker(timeout_s=0)
    with pytest.raises(ValueError, match="timeout_mode must be one of"):
        MathChecker(timeout_mode="thread")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout_s must be"):
        get_task("gsm8k", timeout_s=-1)


@pytest.mark.parametrize(
    "completion,expected",
    [
        ("so she pays 3 * 6 = $18.", Fraction(18)),
        ("\\boxed{1,234}", Fraction(1234)),
        ("\\boxed{$-3$}", Fraction(-3)),
        ("\\boxed{0.5}", Fraction(1, 2)),
        ("\\boxed{\\frac{1}{2}}", None),  # not a plain number: math-verify decides
        ("the ratio is 3/7", None),  # part of a fraction
        ("x^2", None),  # part of a power
        ("no number", None),
    ],
)
def test_plain_final_number(completion: str, expected: Fraction | None) -> None:
    assert plain_final_number(completion) == expected


def _gsm_task(tmp_path: Path, **opts):
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "#### 1,234"}) + "\n")
    task = get_task("gsm8k", train_path=str(path), **opts)
    return task, task.train_problems()[0]


def test_gsm8k_fast_path_skips_math_verify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(gold: str, pred: str):
        raise AssertionError("math-verify must not be called on the fast path")

    task, p = _gsm_task(tmp_path, timeout_mode="none")
    monkeypatch.setattr(mathcheck, "_mv_check", boom)
    assert task.verify(["The answer is 1,234.", "\\boxed{1234}", "so #### 1234"], [p] * 3) == [1.0, 1.0, 1.0]


def test_gsm8k_scoring_falls_back_to_math_verify(tmp_path: Path) -> None:
    task, p = _gsm_task(tmp_path)
    comps = ["\\boxed{\\frac{2468}{2}}", "it is 1233", "", "\\boxed{1234}"]
    res = score(task, comps, [p] * 4)
    assert res.rewards == [1.0, 0.0, 0.0, 1.0]
    assert res.unscorable == [False, False, True, False]
    assert (res.n_parse_failures, res.n_timeouts, res.n_errors) == (1, 0, 0)
    # without the fast path math-verify alone gives the same rewards here
    slow, _ = _gsm_task(tmp_path, fast_path=False)
    assert score(slow, comps, [p] * 4).rewards == res.rewards


def test_math_verify_error_is_counted_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    task, p = _gsm_task(tmp_path, fast_path=False)

    def broken_verify(*args, **kwargs):
        raise RuntimeError("sympy exploded")

    import math_verify

    monkeypatch.setattr(math_verify, "verify", broken_verify)
    res = score(task, ["\\boxed{5}"], [p])
    assert res.rewards == [0.0] and res.n_errors == 1
    assert res.first_error is not None and "sympy exploded" in res.first_error


def test_worker_pool_gives_the_same_outcomes() -> None:
    golds = [c[0] for c in MV_CASES]
    preds = [c[1] for c in MV_CASES]
    expected = [(c[2], None) for c in MV_CASES]
    assert MathChecker(timeout_s=30.0, workers=2).check_many(golds, preds) == expected
    with pytest.raises(ValueError, match="workers must be an int >= 0"):
        MathChecker(workers=-1)


def test_memo_is_keyed_on_gold_and_answer() -> None:
    for _ in range(2):  # the second round is served from the memo
        assert check_one("\\frac{1}{2}", "\\boxed{0.5}")[0] == "correct"
        assert check_one("\\frac{1}{3}", "\\boxed{0.5}")[0] == "wrong"
        assert check_one("\\frac{1}{2}", "so \\boxed{0.5}")[0] == "correct"
