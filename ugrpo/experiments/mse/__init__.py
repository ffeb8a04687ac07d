"""``ugrpo mse``: gradient MSE per estimator and group size (paper Fig. 4).

- :mod:`.env`: on an exact env, Monte Carlo against the exact values (``MSEConfig``, ``mse_experiment``);
- :mod:`.lm`: on a language model, in sketch space (``LMMSEConfig``, ``lm_mse_experiment``);
- :mod:`.lm_alloc`: ``--allocation``, the realised MSE of per-prompt allocation rules on the same samples.
"""
