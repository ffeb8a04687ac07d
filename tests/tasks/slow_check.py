"""A check function for the math-verify worker process that hangs on demand (tests only)."""

from __future__ import annotations

import time


def hang_on_request(gold: str, pred: str) -> tuple[str, None]:
    """Sleep far past any test time limit when ``pred == "hang"``; else exact string match."""
    if pred == "hang":
        time.sleep(60)
    return ("correct" if gold == pred else "wrong"), None
