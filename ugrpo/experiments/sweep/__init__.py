"""``ugrpo sweep``: training at a fixed budget along a G axis or an allocation-rules axis (paper Fig. 5, Table 2).

- :mod:`.env`: Algorithm 1 on an exact env (``SweepConfig``: the G axis; ``AllocSweepConfig``: the rules axis of
  ``--allocation``), both run by ``sweep_experiment``;
- :mod:`.lm`: training runs of a language model per (N, G[, rule], seed) (``LMSweepConfig``, ``sweep_lm``);
- :mod:`.lm_alloc`: the rules axis of a language-model sweep: accuracy against samples spent, samples to reach
  uniform's accuracy, the verdicts;
- :mod:`.executors`: where the training runs execute (in-process, a process pool, Ray).
"""
