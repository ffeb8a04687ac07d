"""Training configuration: the schema (:mod:`.schema`, frozen dataclasses whose field docstrings are the
documentation), loading and dotted overrides (:mod:`.load`), and the field descriptions that ``ugrpo train
--help`` prints (:mod:`.describe`)."""

from ugrpo.train.config.describe import FieldHelp, describe_fields, summary_line
from ugrpo.train.config.load import config_from_dict, field_names, load_config, parse_overrides
from ugrpo.train.config.schema import (
    ALLOCATION_RULES,
    AllocationConfig,
    BudgetConfig,
    EvalConfig,
    LossConfig,
    ModelConfig,
    OptimConfig,
    SamplingConfig,
    TaskConfig,
    TrainConfig,
)

__all__ = [
    "ALLOCATION_RULES",
    "AllocationConfig",
    "BudgetConfig",
    "EvalConfig",
    "FieldHelp",
    "LossConfig",
    "ModelConfig",
    "OptimConfig",
    "SamplingConfig",
    "TaskConfig",
    "TrainConfig",
    "config_from_dict",
    "describe_fields",
    "field_names",
    "load_config",
    "parse_overrides",
    "summary_line",
]
