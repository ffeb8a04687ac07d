"""Samples to reach a target on a curve of a metric against samples spent, and their ratio between rules with a paired
bootstrap over seeds: the one home of the reading that the exact-env allocation sweep (gaps reaching down,
:mod:`ugrpo.experiments.sweep.env`) and the language-model sweep (accuracy reaching up,
:mod:`ugrpo.experiments.sweep.lm_alloc`) share."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["BOOTSTRAP_REPS", "samples_to_reach", "first_reach", "reach_ratio", "bootstrap_ratio"]

BOOTSTRAP_REPS = 2000


def samples_to_reach(curve: Sequence[tuple[float, float]], target: float) -> float | None:
    """First samples s at which the piecewise-linear (samples, mean gap) curve reaches ``target`` (None: never).

    >>> samples_to_reach([(0, 1.0), (100, 0.5), (200, 0.2)], 0.35)
    150.0
    """
    for (s0, g0), (s1, g1) in zip(curve, curve[1:]):
        if g0 <= target:
            return float(s0)
        if g1 <= target:
            return float(s0 + (s1 - s0) * (g0 - target) / (g0 - g1))
    return float(curve[-1][0]) if curve and curve[-1][1] <= target else None


def first_reach(samples: Sequence[float], acc: Sequence[float], target: float) -> float | None:
    """First samples at which the piecewise-linear (samples, accuracy) curve reaches ``target``; None: never.

    >>> round(first_reach([0, 100, 200], [0.4, 0.5, 0.6], 0.55), 9)
    150.0
    >>> round(first_reach([0, 100, 200], [0.4, 0.6, 0.5], 0.55), 9), first_reach([0, 100], [0.4, 0.5], 0.55)
    (75.0, None)
    """
    return samples_to_reach([(s, -a) for s, a in zip(samples, acc)], -target)  # reaching up = a gap reaching down


def reach_ratio(acc: Mapping[str, np.ndarray], samples: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Per rule: samples to reach uniform's final mean accuracy, and the ratio to uniform's own samples to reach it.

    Parameters
    ----------
    acc, samples : {rule: (S, C) array}, one row per seed, one column per checkpoint; must hold ``uniform``

    Returns
    -------
    {rule: {'target', 'samples_to_reach' (None: never), 'uniform_samples_to_reach', 'ratio' (None when not reached or
    when uniform reaches its final mean at 0 samples: its final accuracy is not above its initial one)}}
    """
    u_acc, u_s = acc["uniform"].mean(axis=0), samples["uniform"].mean(axis=0)
    target = float(u_acc[-1])
    u_need = first_reach(u_s.tolist(), u_acc.tolist(), target)
    out = {}
    for rule in acc:
        need = first_reach(samples[rule].mean(axis=0).tolist(), acc[rule].mean(axis=0).tolist(), target)
        ratio = None if need is None or not u_need else need / u_need
        out[rule] = {"target": target, "samples_to_reach": need, "uniform_samples_to_reach": u_need, "ratio": ratio}
    return out


def bootstrap_ratio(acc: Mapping[str, np.ndarray], samples: Mapping[str, np.ndarray], *, reps: int = BOOTSTRAP_REPS,
                    seed: int = 0) -> dict[str, dict[str, Any]]:
    """Paired percentile bootstrap over seeds of :func:`reach_ratio`'s ratio: {rule: {ci_low, ci_high,
    not_reached, undefined}}.

    Every rule must have the same S seeds (row i of every array is seed i). A resample where the rule never reaches
    the target is an infinite ratio; one where uniform reaches its own final mean at 0 samples has no ratio
    (``undefined``). With more than 2.5% of resamples undefined no interval is given (both ends None); with more than
    2.5% infinite, the upper end is None (unbounded).
    """
    S = {a.shape[0] for a in acc.values()}
    if len(S) != 1:
        raise ValueError(f"bootstrap_ratio: every rule needs the same seeds, got {sorted(S)} seeds per rule")
    n = S.pop()
    rng = np.random.default_rng(seed)
    draws = {rule: [] for rule in acc}
    for _ in range(reps):
        idx = rng.integers(0, n, size=n)
        res = reach_ratio({k: v[idx] for k, v in acc.items()}, {k: v[idx] for k, v in samples.items()})
        for rule, r in res.items():
            draws[rule].append(math.nan if not r["uniform_samples_to_reach"] else
                               math.inf if r["ratio"] is None else r["ratio"])
    out = {}
    for rule, d in draws.items():
        x = np.asarray(d)
        undefined, not_reached = float(np.isnan(x).mean()), float(np.isinf(x).mean())
        if n < 2 or undefined > 0.025:
            lo = hi = None
        else:
            lo_q, hi_q = np.quantile(x[~np.isnan(x)], [0.025, 0.975], method="inverted_cdf")  # no inf - inf
            lo = None if math.isinf(lo_q) else float(lo_q)
            hi = None if math.isinf(hi_q) else float(hi_q)
        out[rule] = {"ci_low": lo, "ci_high": hi, "not_reached": not_reached, "undefined": undefined, "reps": reps,
                     "seeds": n}
    return out
