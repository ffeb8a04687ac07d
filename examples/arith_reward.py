"""Reward function of ``examples/grpo-trl.yaml`` in TRL's signature (``examples/arith_reward.py:correct``).

TRL calls it with the prompts, the completions and every other dataset column as keyword lists (here ``answer``).
"""

from __future__ import annotations

from ugrpo.tasks.arith_verify import integer_reward


def correct(prompts, completions, answer, **kwargs) -> list[float]:
    """1.0 when the last number in the completion equals the row's ``answer``, else 0.0 (also when it has no number)."""
    return [integer_reward(c, a) or 0.0 for c, a in zip(completions, answer)]


def correct_first(completions, answers, **kwargs) -> list[float | None]:
    """``ugrpo``'s custom-task signature (examples/arith-mixed.yaml): the arithmetic task's reward for its compact
    prompts (``7*5=``), 1.0 when the FIRST number in the completion equals the answer, 0.0 when it does not, None
    (unscorable) when there is no number."""
    return [integer_reward(c, a, "first") for c, a in zip(completions, answers)]
