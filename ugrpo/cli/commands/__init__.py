"""One module per ``ugrpo`` command: ``configure(parser)`` adds the flags, ``main(args)`` parses them into a
config object and calls one library function. The error policy is :mod:`ugrpo.cli.main`'s."""
