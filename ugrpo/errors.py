"""User errors: what the user can fix (bad input, a folder in use, a changed config on resume).

The command line prints each as one ``error:`` line and exits with status 2; any other exception
is a bug and keeps its traceback. Importable from every layer (stdlib only).
"""

from __future__ import annotations

__all__ = ["UserError", "RunFolderError", "ResumeError", "NonFiniteError", "CheckpointError"]


class UserError(Exception):
    """An error the user can fix; the message names the problem and the fix."""


class RunFolderError(UserError):
    """A run folder that belongs to another command or config, or is in use by another process."""


class ResumeError(UserError):
    """``--resume`` cannot continue this run (nothing to resume, or a field changed that cannot)."""


class NonFiniteError(UserError):
    """A non-finite loss or gradient under ``nonfinite=stop`` (the model is left as it was before the step)."""


class CheckpointError(UserError):
    """No intact checkpoint to resume from (every one failed its checksum or could not be read)."""
