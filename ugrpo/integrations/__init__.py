"""Adapters for the trainers users already run.

- :mod:`ugrpo.integrations.trl`: ``UGRPOTrainer`` (TRL's ``GRPOTrainer`` with any ugrpo baseline as
  the advantage and per-prompt group sizes), ``AdvantageSpec``, ``AllocationSpec``, ``UGRPOConfig`` (``GRPOConfig``
  with ugrpo's fields) and ``GroupSizeMonitor`` (online c1, c2, c3 and G*, paper Thm 7).
  Imported on first attribute access, so ``import ugrpo.integrations`` does not import TRL.
"""

from __future__ import annotations

import importlib

__all__ = ["AdvantageSpec", "AllocationSpec", "GroupSizeMonitor", "MonitorRecord", "UGRPOConfig", "UGRPOTrainer"]


def __getattr__(name: str):  # PEP 562: TRL is imported only when its adapter is used
    if name in __all__:
        return getattr(importlib.import_module("ugrpo.integrations.trl"), name)
    raise AttributeError(f"module 'ugrpo.integrations' has no attribute {name!r}")
