"""The budget contract N = B * G (paper Algorithm 1; docs/paper.md 2): G must divide N, never a silent rounding.

>>> divisors(12)
[1, 2, 3, 4, 6, 12]
>>> check_divides(12, 5)
Traceback (most recent call last):
...
ValueError: group size G=5 does not divide the budget N=12 (B = N/G prompts per step must be an integer); \
choose G among the divisors of N from 2 up: [2, 3, 4, 6, 12]

The list starts at 2: G = 1 divides every N but leaves a group nothing to compare with (the GRPO baselines need
G >= 2; docs/math.md M2), so it is never offered.
"""

from __future__ import annotations

__all__ = ["divisors", "check_divides"]


def divisors(N: int) -> list[int]:
    """The positive divisors of ``N`` in increasing order."""
    return [d for d in range(1, N + 1) if N % d == 0]


def check_divides(N: int, G: int, *, n_name: str = "the budget N", g_name: str = "group size G") -> None:
    """Raise a ``ValueError`` naming both values and the valid group sizes when ``G`` does not divide ``N``.

    Parameters
    ----------
    N : int
        Samples per step.
    G : int
        Group size (samples per prompt).
    n_name, g_name : str
        How the message names them, e.g. ``"budget.samples_per_step N"`` for a config field.
    """
    if N % G:
        ds = [d for d in divisors(N) if d >= 2]
        shown = ", ".join(map(str, ds[:24])) + (", ..." if len(ds) > 24 else "")
        raise ValueError(f"{g_name}={G} does not divide {n_name}={N} (B = N/G prompts per step must be an integer); "
                         + (f"choose G among the divisors of N from 2 up: [{shown}]" if ds else
                            "N has no divisor from 2 up: raise N"))
