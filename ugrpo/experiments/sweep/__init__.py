"""``ugrpo sweep``: training at a fixed budget along a G axis or an allocation-rules axis (paper Fig. 5, Table 2).

- :mod:`.env`: Algorithm 1 on an exact env (``SweepConfig``: the G axis; ``AllocSweepConfig``: the rules axis of
  ``--allocation``), both run by ``sweep_experiment``;
- :mod:`.lm`: training runs of a language model per (N, G[, rule], seed) (``LMSweepConfig``, ``sweep_lm``);
- :mod:`.lm_aggregate`: their aggregation along the G axis (mean and interval per cell, best G, scoring faults);
- :mod:`.lm_alloc`: the rules axis of a language-model sweep: accuracy against samples spent, samples to reach
  uniform's accuracy, the verdicts;
- :mod:`.executors`: where the training runs execute (in-process, a process pool, Ray).
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_GROUPS = (2, 4, 8, 16, 32, 64)
"""group sizes swept (every mode of ``ugrpo sweep``) when none are given"""
DEFAULT_SEEDS = 5
"""independent runs per cell (every mode of ``ugrpo sweep``) when not given"""
SWEEP_KEYS = ("budget.samples_per_step", "budget.group_size", "seed", "steps", "allocation.rule")
"""training-config fields a language-model sweep sets itself (``--set`` and the overrides may not touch them)"""


def default_checkpoints(steps: int) -> tuple[int, ...]:
    """steps/4, steps/2, 3 steps/4 and steps (distinct, >= 1): the default ``--checkpoints``."""
    return tuple(sorted({max(1, steps * k // 4) for k in (1, 2, 3, 4)}))


def check_checkpoints(checkpoints: Sequence[int], steps: int) -> None:
    """Checkpoints (of every env sweep) must be strictly increasing step counts in 0..steps."""
    cps = list(checkpoints)
    if not cps or cps != sorted(set(cps)) or cps[0] < 0 or cps[-1] > steps:
        raise ValueError(f"--checkpoints {cps}: need strictly increasing step counts in 0..steps={steps}")
