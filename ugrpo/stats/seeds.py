"""Seed derivation: one convention for the independent random streams of an experiment.

A stream is named by the run's ``seed`` and an ``index`` (a prompt, a group size, a pilot row);
:func:`derive_seed` maps them to a 62-bit torch seed. The strides differ between uses so that the
streams of, e.g., the reference samples and the pilot of one run do not coincide. :func:`stream_seed` names a
stream by any tuple of integers (the run's seed, a step, a tag per use) through numpy's ``SeedSequence``.

>>> derive_seed(0, 3, stride=7_919, offset=17)
23774
>>> derive_seed(1, 0) == 1_000_003
True
>>> stream_seed(0, 3, 0x636572) == stream_seed(0, 3, 0x636572) != stream_seed(0, 4, 0x636572)
True
"""

from __future__ import annotations

import numpy as np

__all__ = ["SEED_MULTIPLIER", "derive_seed", "stream_seed"]

SEED_MULTIPLIER = 1_000_003
"""a prime larger than any index, so that (seed, index) pairs map to distinct seeds"""


def derive_seed(seed: int, index: int = 0, *, stride: int = 1, offset: int = 0) -> int:
    """``(seed * 1_000_003 + index * stride + offset) mod 2**62``: the seed of stream ``index`` of run ``seed``.

    Parameters
    ----------
    seed : int
        The run's seed (>= 0).
    index : int
        Which stream of the run (>= 0).
    stride, offset : int
        Separate the families of streams of one run (each use keeps its own, so results do not move).
    """
    return (seed * SEED_MULTIPLIER + index * stride + offset) % (2**62)


def stream_seed(*parts: int) -> int:
    """One 32-bit seed for the stream named by ``parts`` (e.g. the run's seed, the step, a tag of the use):
    ``numpy.random.SeedSequence(parts)``'s first state word, so distinct tuples give independent streams."""
    return int(np.random.SeedSequence([int(x) for x in parts]).generate_state(1)[0])
