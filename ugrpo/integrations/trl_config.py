"""``UGRPOConfig``: TRL's ``GRPOConfig`` with ugrpo's fields, so a TRL YAML or ``TrlParser`` sets them (docs/trl.md).

The fields are :class:`ugrpo.train.config.trl_options.UGRPOOptions` (flat names: ``advantage_*``,
``allocation_*``, ``monitor_*``). :class:`~ugrpo.integrations.trl.UGRPOTrainer` given a ``UGRPOConfig`` takes its
advantage, allocation and monitor from it::

    from trl import TrlParser
    from ugrpo.integrations.trl import UGRPOConfig, UGRPOTrainer
    # --config grpo.yaml --allocation_rule ustat; the YAML's other keys (model, dataset, ...) come back in rest
    config, rest = TrlParser((UGRPOConfig,)).parse_args_and_config(return_remaining_strings=True)
    trainer = UGRPOTrainer(model=..., reward_funcs=..., args=config, train_dataset=...)

Bad values are errors at construction naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass

from trl import GRPOConfig

from ugrpo.train.config.trl_options import UGRPOOptions

from .trl_specs import AdvantageSpec, AllocationSpec

__all__ = ["FROM_ARGS", "UGRPOConfig", "from_config"]

FROM_ARGS = object()
"""default of UGRPOTrainer's ``advantages``, ``allocation``, ``monitor``: not given, so from a UGRPOConfig ``args``"""


@dataclass
class UGRPOConfig(GRPOConfig, UGRPOOptions):
    """``GRPOConfig`` plus ugrpo's advantage (``advantage_*``), allocation (``allocation_*``) and monitor
    (``monitor_*``) fields (:class:`~ugrpo.train.config.trl_options.UGRPOOptions`)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.advantage_spec()
        self.allocation_spec()
        for name, lo in (("monitor_every", 0), ("monitor_sketch_dim", 1), ("monitor_n_boot", 2), ("monitor_pool", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"UGRPOConfig.{name}={v!r} must be an integer >= {lo}")

    def advantage_spec(self) -> AdvantageSpec | None:
        """The :class:`AdvantageSpec` of the ``advantage_*`` fields; None for ``advantage_baseline: trl``."""
        if self.advantage_baseline == "trl":
            return None
        if self.advantage_baseline == "oracle":
            raise ValueError("UGRPOConfig.advantage_baseline='oracle' needs a value function, which a config cannot "
                             "hold: pass advantages=AdvantageSpec(baseline='oracle') and value_fn=... to UGRPOTrainer")
        try:
            return AdvantageSpec(baseline=self.advantage_baseline, scale=self.advantage_scale,
                                 ddof=self.advantage_ddof, eps=self.advantage_eps, zero_std=self.advantage_zero_std)
        except ValueError as e:
            raise ValueError(f"UGRPOConfig: {e}".replace("AdvantageSpec.", "advantage_")
                             .replace("choose one of [", "choose 'trl' or one of [")) from None

    def allocation_spec(self) -> AllocationSpec | None:
        """The :class:`AllocationSpec` of the ``allocation_*`` fields; None for the uniform rule."""
        try:
            spec = AllocationSpec(rule=self.allocation_rule, g_min=self.allocation_g_min, g_max=self.allocation_g_max,
                                  safe_tol=self.allocation_safe_tol, safe_level=self.allocation_safe_level,
                                  scores=self.allocation_scores, sketch_dim=self.allocation_sketch_dim,
                                  is_lambda=self.allocation_is_lambda, is_guard=self.allocation_is_guard,
                                  is_certificate_every=self.allocation_is_certificate_every,
                                  is_law_every=self.allocation_is_law_every)
        except ValueError as e:
            raise ValueError(f"UGRPOConfig.allocation_rule={self.allocation_rule!r}: "
                             + str(e).replace("allocation.", "allocation_")) from None
        return None if spec.rule == "uniform" else spec


def from_config(args, advantages, allocation, monitor):
    """UGRPOTrainer's (advantages, allocation, monitor) with those not given (:data:`FROM_ARGS`) taken from a
    :class:`UGRPOConfig` ``args`` (else the defaults ``AdvantageSpec()``, None, None); the monitor from a config is
    the dict of ``GroupSizeMonitor`` arguments. A ValueError when one is set both ways."""
    cfg = args if isinstance(args, UGRPOConfig) else None
    if cfg is None:
        return (AdvantageSpec() if advantages is FROM_ARGS else advantages, None if allocation is FROM_ARGS else
                allocation, None if monitor is FROM_ARGS else monitor)
    own_adv, own_alloc = cfg.advantage_spec(), cfg.allocation_spec()
    own_mon = (dict(every=cfg.monitor_every, sketch_dim=cfg.monitor_sketch_dim, n_boot=cfg.monitor_n_boot,
                    pool=cfg.monitor_pool, seed=cfg.seed) if cfg.monitor_every > 0 else None)
    for name, given, own, fields in (("advantages", advantages, own_adv != AdvantageSpec(), "advantage_* fields"),
                                     ("allocation", allocation, own_alloc is not None, "allocation_rule"),
                                     ("monitor", monitor, own_mon is not None, "monitor_every")):
        if given is not FROM_ARGS and own:
            raise ValueError(f"UGRPOTrainer({name}=...) and the UGRPOConfig's {fields} both set it; set it in one "
                             "place")
    return (own_adv if advantages is FROM_ARGS else advantages, own_alloc if allocation is FROM_ARGS else allocation,
            own_mon if monitor is FROM_ARGS else monitor)
