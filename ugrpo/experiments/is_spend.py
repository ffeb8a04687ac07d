"""Exact-spend ``ustat-is`` in the exact lab (docs/math.md M88, docs/allocation.md A8).

M56's joint law (q, G_x) spends N samples per step only in expectation, so its MSE is the closed form M53. At exact
spend (``allocation.is_spend: exact``) the sizes depend on the drawn batch, so the MSE is

    MSE = between + E_draw[ (1/B^2) sum_b w_b^2 f_{x_b}(G_b) ],   between = (1/B)(sum_x ||g(x)||^2/(P^2 q(x)) - ||g||^2)

(M88): the between-prompt part is exact, the within part's mean over draws is a seeded Monte Carlo mean over draws
of the batch, each with its exact conditional variance from the TRUE moments (the sizes chosen from the moments the
law was fitted with: true or predicted), so the only error is over draws and its standard error is stated.
"""

from __future__ import annotations

import math

import numpy as np

from ugrpo.stats.allocation import PromptStats
from ugrpo.stats.prompt_is import PromptLaw, batch_sizes, between_mse, is_mse, within_mse

__all__ = ["exact_spend_mse"]


def exact_spend_mse(law: PromptLaw, moments: PromptStats, true: PromptStats, g_x: np.ndarray, N: int, *,
                    g_min: int, g_max: int, draws: int, seed: int) -> dict:
    """MSE of ``law`` run at exact spend (M88) with its mean and standard error over ``draws`` seeded batches.

    Parameters
    ----------
    law : the step's law (``ustat-is``: sizes per batch; any other rule spends its own sizes, and the MSE is M53's)
    moments : (P,) the moments the law was fitted with (they choose the sizes)
    true : (P,) the true moments (they price the sizes)
    g_x : (P, D) the true per-prompt gradients (g = their mean)
    N, g_min, g_max : the exact budget and the size bounds
    draws, seed : Monte Carlo draws of the batch and their seed

    Returns
    -------
    dict with ``mse``, ``se`` (of the mean over draws), ``between`` (exact), ``within`` (mean over draws),
    ``spent_min``/``spent_max`` (samples per drawn batch) and ``expected_spend_mse`` (M53 at the law's own G_x)
    """
    g2 = float((np.asarray(g_x).mean(0) ** 2).sum())
    rng = np.random.default_rng([int(seed), 0x657870])
    B = law.B
    within, spent = np.empty(draws), np.empty(draws, dtype=np.int64)
    for j in range(draws):
        idx = law.draw(rng)
        sizes = batch_sizes(law, moments, idx, N, spend="exact", g_min=g_min, g_max=g_max)
        within[j] = within_mse(law.weights(idx), true.take(idx), sizes)
        spent[j] = int(sizes.sum())
    between = between_mse(law.q, B, true, g2)
    se = float(within.std(ddof=1) / math.sqrt(draws)) if draws > 1 else 0.0
    return {"mse": between + float(within.mean()), "se": se, "between": between, "within": float(within.mean()),
            "draws": int(draws), "spent_min": int(spent.min()), "spent_max": int(spent.max()),
            "expected_spend_mse": is_mse(law.q, law.sizes, B, true, g2)}
