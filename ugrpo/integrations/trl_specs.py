"""What :class:`~ugrpo.integrations.trl.UGRPOTrainer` changes in a TRL run: the advantage and the group sizes.

:class:`AdvantageSpec` (which ugrpo baseline replaces TRL's advantages) and :class:`AllocationSpec` (per-prompt group
sizes G_b, the trainer's own :class:`~ugrpo.train.config.AllocationConfig` with the rules the TRL adapter runs).
Frozen dataclasses, checked at construction; no TRL import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ugrpo.stats.advantages import BASELINES
from ugrpo.train.config import ALLOCATION_RULES, AllocationConfig

__all__ = ["AdvantageSpec", "AllocationSpec", "TRL_RULES"]

TRL_RULES: tuple[str, ...] = ("uniform", "vip", "knapsack", "ustat", "uniform-is", "ustat-is")
"""the allocation rules of ``ugrpo train`` the TRL adapter runs (the others are refused with a message)"""


@dataclass(frozen=True)
class AdvantageSpec:
    """Which ugrpo advantage replaces TRL's (arguments of :func:`~ugrpo.stats.advantages.compute_advantages`).

    ``AdvantageSpec(baseline="grpo_mean", scale="std", ddof=1, eps=1e-4, zero_std="eps")`` reproduces
    TRL's default ``scale_rewards="group"`` (docs/trl-equivalence.md).
    """

    baseline: str = "grpo"
    """"grpo" (leave-one-out mean, paper eq. (4)), "grpo_mean" (full mean), "vanilla" (C = 0), "oracle" (C = V(x))."""
    scale: str = "none"
    """"none" (Algorithm 1, the paper's theory) or "std" (Algorithm 2: divide by the group's std)."""
    ddof: int = 1
    """divisor G - ddof of the std (TRL and the paper: 1)."""
    eps: float = 1e-6
    """added to the std (TRL hard-codes 1e-4)."""
    zero_std: str = "zero"
    """what an all-equal group gets with scale="std": "zero", "eps" (TRL) or "unscaled"."""

    def __post_init__(self) -> None:
        if self.baseline not in BASELINES:
            raise ValueError(f"AdvantageSpec.baseline={self.baseline!r}; choose one of {sorted(BASELINES)}")
        if self.scale not in ("none", "std"):
            raise ValueError(f"AdvantageSpec.scale={self.scale!r}; choose 'none' or 'std'")
        if self.zero_std not in ("zero", "eps", "unscaled"):
            raise ValueError(f"AdvantageSpec.zero_std={self.zero_std!r}; choose 'zero', 'eps' or 'unscaled'")
        if isinstance(self.ddof, bool) or self.ddof not in (0, 1):
            raise ValueError(f"AdvantageSpec.ddof={self.ddof!r}; choose 0 or 1")
        if not (isinstance(self.eps, (int, float)) and math.isfinite(self.eps) and self.eps >= 0):
            raise ValueError(f"AdvantageSpec.eps={self.eps!r} must be a finite number >= 0")


@dataclass(frozen=True)
class AllocationSpec(AllocationConfig):
    """Per-prompt group sizes G_b in a TRL run (docs/trl.md, "Per-prompt group sizes"; docs/allocation.md).

    The fields are those of ``ugrpo train``'s ``allocation:`` section (:class:`~ugrpo.train.config.AllocationConfig`:
    ``rule``, ``g_min``, ``g_max``, ``safe_tol``, ``safe_level``, ``scores``, ``sketch_dim``, ``is_lambda``,
    ``is_guard``, ``is_spend``, ``is_law_every``, ``is_certificate_every``) with the same meaning; the budget N is TRL's
    ``generation_batch_size`` and the mean size Gbar its ``num_generations``. ``rule`` is one of :data:`TRL_RULES`;
    ``dynamic`` (several generation rounds per step) and any rule not in that list are refused. ``ustat-is`` runs at
    exact spend only (``is_spend="exact"``, the default here; docs/math.md M88): TRL generates exactly
    ``generation_batch_size`` rows per batch, so M56's joint law, which spends N only in expectation, is refused.

    >>> AllocationSpec(rule="vip", g_min=2).bounds(64, 8)
    (2, 32)
    """

    is_spend: str = "exact"
    """ustat-is: exact (the only spend TRL's fixed generation batch allows; M88)"""

    def __post_init__(self) -> None:
        if self.rule not in TRL_RULES:
            if self.rule not in ALLOCATION_RULES:
                raise ValueError(f"allocation rule {self.rule!r} is not valid; choose one of {list(TRL_RULES)}")
            why = (" (DAPO dynamic sampling draws several rounds per step; `ugrpo train --allocation dynamic` has it)"
                   if self.rule == "dynamic" else "")
            raise ValueError(f"allocation rule {self.rule} is not supported in the TRL adapter yet{why}; choose one "
                             f"of {list(TRL_RULES)}")
        super().__post_init__()
        if self.rule == "ustat-is" and self.is_spend != "exact":
            raise ValueError(f"allocation rule ustat-is with is_spend={self.is_spend!r} is not supported in the TRL "
                             "adapter: M56's joint law gives each drawn prompt its own G_x and spends "
                             "generation_batch_size only in expectation, B sum_x q(x) G_x, while TRL generates exactly "
                             "generation_batch_size rows per batch; use is_spend='exact' (the default here: the same "
                             "law q, then the batch's sizes split exactly generation_batch_size, docs/math.md M88), or "
                             "`ugrpo train --allocation ustat-is` for the expected spend")
