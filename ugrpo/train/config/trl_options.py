"""The options ugrpo adds to TRL's ``GRPOConfig``: the fields of :class:`ugrpo.integrations.trl_config.UGRPOConfig`.

A plain dataclass without TRL, so that both the TRL adapter (``integrations``, which inherits it) and
``ugrpo plan --trl-config`` (``experiments``, which accepts the same YAML file) read one list of names. The values
are checked where they are used: ``UGRPOConfig.__post_init__`` builds the adapter's specs from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

__all__ = ["UGRPOOptions", "option_names"]


def _help(text: str) -> dict:
    return {"help": text}


@dataclass
class UGRPOOptions:
    """ugrpo's fields of a TRL config (flat, as ``HfArgumentParser`` / ``TrlParser`` need them)."""

    advantage_baseline: str = field(default="grpo", metadata=_help(
        "ugrpo's advantage: grpo (leave-one-out mean, paper eq. (4)), grpo_mean (full group mean), vanilla (no "
        "baseline), or trl (keep TRL's own advantages). The oracle baseline needs a value function: pass "
        "advantages=AdvantageSpec(baseline='oracle') and value_fn to UGRPOTrainer"))
    advantage_scale: str = field(default="none", metadata=_help(
        "none (Algorithm 1) or std (divide by the group's reward std, Algorithm 2)"))
    advantage_ddof: int = field(default=1, metadata=_help("std divisor G - ddof (0 or 1)"))
    advantage_eps: float = field(default=1e-6, metadata=_help("added to the std before dividing"))
    advantage_zero_std: str = field(default="zero", metadata=_help(
        "what an all-equal group gets with advantage_scale=std: zero, eps (TRL) or unscaled"))
    allocation_rule: str = field(default="uniform", metadata=_help(
        "per-prompt group sizes G_b (docs/trl.md): uniform (every prompt num_generations), vip, knapsack, ustat, "
        "uniform-is or ustat-is (prompts drawn from a law q, weighted 1/(P q); ustat-is at exact spend, docs/math.md "
        "M88); sum_b G_b = generation_batch_size, each G_b fixed from the prompts' earlier visits"))
    allocation_g_min: int = field(default=2, metadata=_help("smallest G_b (>= 2)"))
    allocation_g_max: int = field(default=0, metadata=_help(
        "largest G_b; 0 = 4 x num_generations, capped at N - (B - 1) g_min"))
    allocation_safe_tol: float = field(default=0.0, metadata=_help(
        "ustat's safe rule (docs/math.md M50): the chosen sizes' posterior allocation_safe_level quantile of their "
        "MSE over uniform num_generations may not exceed 1 + safe_tol (in [0, 1)); else they blend toward uniform"))
    allocation_safe_level: float = field(default=0.9, metadata=_help(
        "ustat's safe rule: the posterior quantile it bounds (in [0.5, 1))"))
    allocation_scores: str = field(default="output", metadata=_help(
        "ustat: which per-sample scores the history measures: output (the output projection's score, exact, one "
        "no-gradient forward per generation batch) or sketch (all trainable parameters, sketched: one extra "
        "per-sample backward pass per generation batch)"))
    allocation_sketch_dim: int = field(default=64, metadata=_help(
        "ustat with allocation_scores=sketch: dimension of the per-sample score sketch"))
    allocation_is_lambda: float = field(default=0.1, metadata=_help(
        "uniform-is/ustat-is: the defensive floor q(x) >= allocation_is_lambda / P, in (0, 1] (every weight "
        "1/(P q) <= 1/allocation_is_lambda; 1 = uniform prompts; docs/math.md M55)"))
    allocation_is_guard: bool = field(default=True, metadata=_help(
        "uniform-is/ustat-is: judge the law on held-out history before use and fall back, down to uniform prompts, "
        "when that history refutes it (docs/math.md M78; needs num_generations >= 3); false: the posterior's law"))
    allocation_is_law_every: int = field(default=1, metadata=_help(
        "uniform-is/ustat-is: compute the law on the first step and every this many steps after; the steps between "
        "draw from it unchanged (still unbiased; a resume rebuilds it from the history the checkpoint keeps)"))
    allocation_is_certificate_every: int = field(default=1, metadata=_help(
        "uniform-is/ustat-is: log the law's certificate (ugrpo/is_predicted_ratio, docs/math.md M89) on the first "
        "step and every this many steps after; it only reports, and at GSM8K's size costs about as much as the law"))
    monitor_every: int = field(default=0, metadata=_help(
        "the G* monitor (GroupSizeMonitor) every K generation steps; 0 = off"))
    monitor_sketch_dim: int = field(default=128, metadata=_help("the monitor's score sketch dimension"))
    monitor_n_boot: int = field(default=200, metadata=_help("bootstrap replicates of the monitor's intervals"))
    monitor_pool: int = field(default=4, metadata=_help(
        "batches the monitor pools when one batch cannot decide (1 = never pool)"))


def option_names() -> frozenset[str]:
    """The names of :class:`UGRPOOptions` (the keys a TRL YAML may add for ugrpo)."""
    return frozenset(f.name for f in fields(UGRPOOptions))
