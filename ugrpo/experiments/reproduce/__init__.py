"""``ugrpo reproduce``: the paper's experiments at one scale, one report.

- :mod:`.run`: the scales and the parts (Fig. 4, Fig. 5, Table 2, Theorem 8), run resumably (``ReproduceConfig``,
  ``run_reproduce``);
- :mod:`.claims`: the verdict on each of the paper's claims and the summary tables.
"""
