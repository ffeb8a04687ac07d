"""The console while a progress bar is shown: log records go above the bar, not onto its line.

Shared by every layer that draws a tqdm bar over work that may log (the trainer's bar, the samplers' bars of ``mse
--model`` and ``plan --model``); imports nothing of ugrpo.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tqdm.contrib.logging import logging_redirect_tqdm

__all__ = ["logs_above_bar"]


@contextmanager
def logs_above_bar() -> Iterator[None]:
    """Console log records (a task's one-line scoring warning, :func:`ugrpo.tasks.base.warn_once`) go above any tqdm
    bar through ``tqdm.write``, as a trainer's step lines do, instead of onto the bar's line (tqdm's
    ``logging_redirect_tqdm`` on the root logger; handlers that are not the console, e.g. a log file, are kept, and
    all are restored on exit). The handler it installs keeps the level of the console handler it replaces, or
    WARNING (Python's last-resort handler's) when none was set up, as under ``ugrpo``: as quiet as without it."""
    console = [h for h in logging.root.handlers
               if isinstance(h, logging.StreamHandler) and h.stream in (sys.stdout, sys.stderr)]
    level = console[0].level if console else getattr(logging.lastResort, "level", logging.WARNING)
    before = list(logging.root.handlers)
    with logging_redirect_tqdm():
        for h in logging.root.handlers:
            if h not in before:
                h.setLevel(level)
        yield
