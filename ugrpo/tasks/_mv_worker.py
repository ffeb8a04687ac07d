"""Worker process for :mod:`ugrpo.tasks.mathcheck` (``timeout_mode="process"``).

Run as ``python -m ugrpo.tasks._mv_worker [module:function]``. Reads one JSON array
``[gold, pred]`` per line on stdin and writes one JSON array ``[outcome, detail]`` per line
on stdout. The check function defaults to ``ugrpo.tasks.mathcheck:_mv_check``; another
``module:function`` with the same signature can be named (used by the tests to simulate
a check that hangs). Started with ``subprocess`` rather than ``multiprocessing`` so that
the caller's ``__main__`` is never re-imported.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys


def main(argv: list[str]) -> int:
    target = argv[0] if argv else "ugrpo.tasks.mathcheck:_mv_check"
    module, _, name = target.partition(":")
    fn = getattr(importlib.import_module(module), name)
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    import math_verify  # noqa: F401  (import before "ready": the first check's time limit excludes it)
    out = sys.stdout
    sys.stdout = sys.stderr  # anything the check prints must not corrupt the protocol
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        gold, pred = json.loads(line)
        out.write(json.dumps(list(fn(gold, pred))) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
