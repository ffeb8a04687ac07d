"""User errors: what the user can fix (bad input, a folder in use, a changed config on resume).

The command line prints each as one ``error:`` line and exits with status 2; any other exception
is a bug and keeps its traceback. Importable from every layer (stdlib only).
"""

from __future__ import annotations

import os

__all__ = ["UserError", "RunFolderError", "ResumeError", "NonFiniteError", "CheckpointError", "DiskFullError",
           "RewardFunctionError", "check_allocation"]


class UserError(Exception):
    """An error the user can fix; the message names the problem and the fix."""


class RunFolderError(UserError):
    """A run folder that belongs to another command or config, or is in use by another process."""


class ResumeError(UserError):
    """``--resume`` cannot continue this run (nothing to resume, or a field changed that cannot)."""


class NonFiniteError(UserError):
    """A non-finite loss or gradient under ``nonfinite=stop`` (the model is left as it was before the step)."""


class RewardFunctionError(UserError):
    """A reward function that cannot score: it raised (or broke its contract) on a row's gold answer before the run,
    or on every completion of the run's first step."""


class CheckpointError(UserError):
    """No intact checkpoint to resume from (every one failed its checksum or could not be read)."""


class DiskFullError(UserError):
    """A write ran out of disk space or quota; the message names the file, what is intact and how to go on."""


def memory_bytes() -> int | None:
    """Physical memory of this machine, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_allocation(n_bytes: float, what: str, fix: str) -> None:
    """Raise UserError before allocating ``n_bytes`` when that is more than the machine's memory."""
    total = memory_bytes()
    if total is not None and n_bytes > total:
        raise UserError(f"{what} needs about {n_bytes / 1e9:,.1f} GB, more than this machine's {total / 1e9:.1f} GB "
                        f"of memory; {fix}")
