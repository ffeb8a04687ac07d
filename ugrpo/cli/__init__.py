"""The ``ugrpo`` command line: :func:`main` and the command table live in :mod:`ugrpo.cli.main`;
one module per command in :mod:`ugrpo.cli.commands`."""

from ugrpo.cli.main import COMMANDS, main

__all__ = ["COMMANDS", "main"]
