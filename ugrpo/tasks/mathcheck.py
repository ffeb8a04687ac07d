"""Answer equivalence with math-verify, with a per-check time limit that works in any thread.

One check is ``verify(parse(gold), parse(pred))``, gold first (RUNTIME.md); the gold is
wrapped as ``\\boxed{gold}`` so that bare LaTeX such as ``\\sqrt{8}`` parses. The outcome
of a check is one of

* ``"correct"`` / ``"wrong"``: the reward is 1.0 / 0.0;
* ``"timeout"``: the check ran past ``timeout_s`` (scored 0, counted as a timeout);
* ``"parse_failure"``: math-verify found no answer in the completion or the gold;
* ``"error"``: math-verify raised.

Time limit. math-verify's own timeout uses ``signal.alarm`` (whole seconds, main thread
only). We switch it off (``parsing_timeout=None``, ``timeout_seconds=None``) and impose
our own limit on the whole check:

* ``timeout_mode="signal"``: a ``SIGALRM`` interval timer (``signal.setitimer``, fractions
  of a second allowed). Only possible in the main thread of the main interpreter.
* ``timeout_mode="process"``: the checks run in one worker process (spawned once and
  reused); a check that runs past the limit kills the worker, which is restarted for the
  next check. Works in any thread; costs ~1 s to start the worker (POSIX only).
* ``timeout_mode="none"``: no limit at all (a pathological expression can hang).
* ``timeout_mode="auto"`` (default): ``signal`` in the main thread, ``process`` elsewhere.

Parallel checks: ``MathChecker(workers=k)`` spreads a batch over k worker processes.
Finished comparisons are memoised on (gold, extracted answer text), so a group of samples
that repeat an answer pays for the sympy comparison once.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

__all__ = ["CheckOutcome", "TimeoutMode", "MathChecker", "check_one"]

log = logging.getLogger(__name__)

CheckOutcome = Literal["correct", "wrong", "timeout", "parse_failure", "error"]
TimeoutMode = Literal["auto", "signal", "process", "none"]
_TIMEOUT_MODES = ("auto", "signal", "process", "none")


class _CheckTimeout(BaseException):  # noqa: N818
    """Raised by our SIGALRM handler; a BaseException so math-verify's ``except Exception`` lets it through."""


def _mv_check(gold: str, pred: str) -> tuple[CheckOutcome, str | None]:
    """One check without any time limit: math-verify with its own signal timeouts off."""
    import math_verify.grader
    import math_verify.parser
    from math_verify import parse, verify

    # We impose the time limit ourselves; silence math-verify's "timeout is disabled" warning.
    math_verify.parser.TIMEOUT_WARNING_SHOWN = True
    math_verify.grader.TIMEOUT_WARNING_SHOWN = True
    try:
        gold_parsed = parse(f"\\boxed{{{gold}}}" if "\\boxed" not in gold else gold, parsing_timeout=None)
        if not gold_parsed:
            return "parse_failure", f"gold answer {gold!r} could not be parsed by math-verify"
        pred_parsed = parse(pred, parsing_timeout=None)
        if not pred_parsed:
            return "parse_failure", None
        # Same gold and same extracted answer text -> same outcome: a group of G samples often
        # repeats an answer, and sympy comparisons of symbolic answers cost ~50 ms.
        key = (gold, tuple(str(x) for x in pred_parsed))
        if key in _MEMO:
            _MEMO.move_to_end(key)
            return _MEMO[key], None
        ok = verify(gold_parsed, pred_parsed, timeout_seconds=None)
    except Exception:
        return "error", traceback.format_exc()
    outcome: CheckOutcome = "correct" if ok else "wrong"
    _MEMO[key] = outcome
    if len(_MEMO) > _MEMO_SIZE:
        _MEMO.popitem(last=False)
    return outcome, None


_MEMO: OrderedDict[tuple[str, tuple[str, ...]], CheckOutcome] = OrderedDict()  # LRU of finished comparisons
_MEMO_SIZE = 4096


def _check_with_signal(gold: str, pred: str, timeout_s: float) -> tuple[CheckOutcome, str | None]:
    def handler(signum: int, frame: object) -> None:
        raise _CheckTimeout()

    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            return _mv_check(gold, pred)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _CheckTimeout:
        return "timeout", None
    finally:
        signal.signal(signal.SIGALRM, old)


class _Worker:
    """One reusable worker process (``python -m ugrpo.tasks._mv_worker``); killed and restarted after a timeout."""

    def __init__(self, target: str | None = None, startup_s: float = 120.0) -> None:
        self._target = target
        self._startup_s = startup_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._lock = threading.Lock()

    def _start(self) -> None:
        cmd = [sys.executable, "-m", "ugrpo.tasks._mv_worker"] + ([self._target] if self._target else [])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self._buf = b""
        if self._readline(self._startup_s) != "ready":
            self._kill()
            raise RuntimeError(f"the math-verify worker process did not start within {self._startup_s} s: {cmd}")

    def _readline(self, timeout_s: float) -> str | None:
        """One line from the worker, or None if none arrives within ``timeout_s`` or it died."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:  # EOF: the worker died
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            for f in (self._proc.stdin, self._proc.stdout):
                if f is not None:
                    f.close()
        self._proc = None

    def check(self, gold: str, pred: str, timeout_s: float) -> tuple[CheckOutcome, str | None]:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._kill()
                self._start()
            assert self._proc is not None and self._proc.stdin is not None
            try:
                self._proc.stdin.write((json.dumps([gold, pred]) + "\n").encode())
                self._proc.stdin.flush()
            except OSError:
                self._kill()
                return "error", "the math-verify worker process died (see its stderr)"
            line = self._readline(timeout_s)
            if line is None:
                died = self._proc.poll() is not None
                self._kill()
                return ("error", "the math-verify worker process died (see its stderr)") if died else ("timeout", None)
            outcome, detail = json.loads(line)
            return outcome, detail

    def close(self) -> None:
        with self._lock:
            self._kill()


_WORKER = _Worker()
atexit.register(_WORKER.close)
_POOL: list[_Worker] = []  # worker processes for MathChecker(workers=k), grown on demand
atexit.register(lambda: [w.close() for w in _POOL])


def _check_in_pool(
    golds: Sequence[str], preds: Sequence[str], timeout_s: float, workers: int
) -> list[tuple[CheckOutcome, str | None]]:
    """Run the checks on ``workers`` worker processes in parallel (one driving thread per process)."""
    while len(_POOL) < workers:
        _POOL.append(_Worker())
    results: list[tuple[CheckOutcome, str | None]] = [("error", "not run")] * len(golds)
    next_index = iter(range(len(golds)))
    lock = threading.Lock()

    def drive(worker: _Worker) -> None:
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            results[i] = worker.check(golds[i], preds[i], timeout_s)

    n = min(workers, len(golds))
    if n:
        with ThreadPoolExecutor(max_workers=n) as ex:
            for f in [ex.submit(drive, w) for w in _POOL[:n]]:
                f.result()
    return results


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def check_one(
    gold: str, pred: str, *, timeout_s: float = 5.0, timeout_mode: TimeoutMode = "auto"
) -> tuple[CheckOutcome, str | None]:
    """Check one completion against one gold answer.

    Parameters
    ----------
    gold : str
        The gold answer (LaTeX or plain text, without ``$``).
    pred : str
        The completion; math-verify extracts its answer (``\\boxed{}`` first).
    timeout_s : float
        Time limit of the whole check (parse gold + parse completion + compare), > 0.
    timeout_mode : {"auto", "signal", "process", "none"}
        How the limit is imposed (module docstring).

    Returns
    -------
    (outcome, detail)
        ``outcome`` is one of ``CheckOutcome``; ``detail`` is a traceback / message for
        ``"error"`` and an unparsable gold, else None.
    """
    if timeout_mode not in _TIMEOUT_MODES:
        raise ValueError(f"timeout_mode must be one of {list(_TIMEOUT_MODES)}, got {timeout_mode!r}")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
    mode = timeout_mode
    if mode == "auto":
        mode = "signal" if _in_main_thread() else "process"
    if mode == "signal":
        if not _in_main_thread():
            raise RuntimeError(
                "timeout_mode='signal' needs the main thread (SIGALRM); use timeout_mode='auto' or 'process' "
                "when scoring from a worker thread"
            )
        return _check_with_signal(gold, pred, timeout_s)
    if mode == "process":
        return _WORKER.check(gold, pred, timeout_s)
    return _mv_check(gold, pred)


@dataclass(frozen=True)
class MathChecker:
    """Settings of math-verify checks; see :func:`check_one`.

    Attributes
    ----------
    timeout_s : float
        Time limit of one check, seconds.
    timeout_mode : {"auto", "signal", "process", "none"}
        How the limit is imposed when ``workers == 0``.
    workers : int
        0 (default): check in this process, one after another. k > 0: spread the checks of
        a batch over k worker processes (each started once, ~1 s, and reused); the limit
        is then imposed by killing a worker (as ``timeout_mode="process"``), from any thread.
    """

    timeout_s: float = 5.0
    timeout_mode: TimeoutMode = "auto"
    workers: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) or not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be a number of seconds > 0, got {self.timeout_s!r}")
        if self.timeout_mode not in _TIMEOUT_MODES:
            raise ValueError(f"timeout_mode must be one of {list(_TIMEOUT_MODES)}, got {self.timeout_mode!r}")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 0:
            raise ValueError(f"workers must be an int >= 0 (0 = check in this process), got {self.workers!r}")

    def check(self, gold: str, pred: str) -> tuple[CheckOutcome, str | None]:
        """One check with these settings."""
        return self.check_many([gold], [pred])[0]

    def check_many(self, golds: Sequence[str], preds: Sequence[str]) -> list[tuple[CheckOutcome, str | None]]:
        """Check pairs ``(golds[i], preds[i])``; in parallel if ``workers > 0``."""
        if len(golds) != len(preds):
            raise ValueError(f"check_many: {len(golds)} gold answers but {len(preds)} predictions")
        if self.workers > 0:
            return _check_in_pool(golds, preds, float(self.timeout_s), self.workers)
        limit, mode = float(self.timeout_s), self.timeout_mode
        return [check_one(g, p, timeout_s=limit, timeout_mode=mode) for g, p in zip(golds, preds)]
