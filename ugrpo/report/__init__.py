"""Reports: one writer per command, each ``write_report(run: RunDir, results: dict, argv=None) -> Path`` (the
composites: ``composite.write_demo_report`` and ``composite.write_reproduce_report``, the same signature); a writer
reads the results dict and the run folder only, writes results.json (where the command has not), its plots and
report.md (report.html for reproduce), and returns the report's path. ``markdown`` and ``plots`` are the helpers
they share."""
