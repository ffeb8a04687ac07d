"""The names of the gradient estimators (the baselines C of paper eq. (5); docs/math.md M1-M3), defined once.

>>> ESTIMATORS
('vanilla', 'grpo', 'grpo_mean', 'oracle')
>>> min_group_size("grpo"), min_group_size("oracle")
(2, 1)
"""

from __future__ import annotations

import typing
from typing import Literal

__all__ = ["EstimatorName", "ESTIMATORS", "GROUP_BASELINES", "min_group_size", "check_estimator"]

EstimatorName = Literal["vanilla", "grpo", "grpo_mean", "oracle"]
"""vanilla (C = 0), grpo (leave-one-out mean, eq. (4)), grpo_mean (full group mean, biased), oracle (C = V(x))"""

ESTIMATORS: tuple[str, ...] = typing.get_args(EstimatorName)
"""every estimator name, in the order tables and plots use"""

GROUP_BASELINES: tuple[str, ...] = ("grpo", "grpo_mean")
"""the estimators whose baseline is computed from the group itself: they need G >= 2"""


def min_group_size(estimator: str) -> int:
    """The smallest group size G the estimator is defined for (2 for a baseline from the group, else 1)."""
    check_estimator(estimator)
    return 2 if estimator in GROUP_BASELINES else 1


def check_estimator(estimator: str) -> None:
    """Raise a ``ValueError`` naming the valid estimators when ``estimator`` is not one of them."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}; choose one of {', '.join(ESTIMATORS)}")
