"""The logic of each command, one folder or module per command (``mse``, ``plan``, ``sweep``, ``reproduce``,
``allocate``, ``gap``, ``demo``); ``common`` holds the plumbing they share. Each entry point takes a config
object and a run folder and calls its command's writer in :mod:`ugrpo.report`."""
