"""``ugrpo plan``: pilot -> c1, c2, c3 -> the group size G for a budget N (paper Thm 7).

- :mod:`.env`: the planner every source calls (``run_plan``) and the plan from an exact env or a saved pilot
  (``PlanConfig``, ``plan_experiment``);
- :mod:`.pilot_io`: the pilot file format (docs/pilot-format.md);
- :mod:`.lm`: a pilot sampled and sketched from a language model (``LMPlanConfig``, ``lm_plan_experiment``), and the
  sample -> score -> sketch pass ``ugrpo mse --model`` shares;
- :mod:`.trl`: ``--trl-config``, the answer in TRL's terms (``run_trl_plan``).
"""
