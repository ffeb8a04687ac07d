"""Pure tensor math: estimators, U-statistic, exact MSE, variance components, planner, Theorem 8 asymptotics.

Imports only torch / numpy / scipy. No I/O, no models. Every formula is numbered in
docs/math.md (M1, M2, ...) and cited by the function that computes it.

Nothing is imported here, so that ``import ugrpo.stats.<module>`` costs only that module (the config schema reads
``allocation`` and ``estimators`` without torch, and ``ugrpo train --help`` stays fast): import from the modules,
e.g. ``from ugrpo.stats.advantages import compute_advantages``. The modules (docs/architecture.md):

- ``advantages`` (``compute_advantages``, ``BASELINES``, ``loo_advantages``, ...), ``ragged`` (any group sizes),
  ``estimator`` (``policy_gradient``, ``prompt_gradients``), ``ustat`` (Lemma 1, the Hoeffding decomposition);
- ``exact_mse`` (``prompt_error``, ``uniform_mse``, ``PromptMoments``, ``PolicyMoments``, ...), ``estimators`` (the
  names), ``components`` (``estimate_components``, ``point_estimates``, ``gaussian_sketch``), ``bootstrap_ci``,
  ``intervals``;
- ``planner`` (``plan_group_size``, ``bound``), ``band``, ``budget``, ``allocation``, ``history``, ``certificate``,
  ``mc_mse``, ``seeds``, ``asymptotics`` (Theorem 8: ``gap_limit``, ``weighted_chi2_cdf``, ...).
"""
