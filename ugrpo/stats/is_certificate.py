"""The certificate of a prompt-IS law: posterior interval of its second-moment ratio against uniform (M59).

A law (q, G_x) of :mod:`ugrpo.stats.prompt_is` is judged before the step by R = S(q, G) / S(1/P, G) with
S(q, G) = sum_x a_x(G_x) / (P^2 q(x)) and a_x(G) = ||g(x)||^2 + f_x(G) (M53): the second moment of one weighted
draw over uniform prompts with the uniform G. Joint posterior draws of every pool prompt's (c2, c3, ||g(x)||^2)
from the one predictor (:func:`ugrpo.stats.predict.draw`, M49) give R's posterior; the point is the median, the
interval the equal-tailed quantiles, ``plugin`` the ratio at the posterior means (what the rule optimised).

The MSE ratio is (S - ||g||^2) / (S_u - ||g||^2) with the unknown ||g||^2 = ||(1/P) sum_x g(x)||^2 in
[0, min(S, S_u)]: it lies below R when R < 1 and above R when R > 1, so R understates both a gain and a loss (by
little while ||g||^2 is small against S_u, i.e. while gradient noise dominates). Like the batch certificate
(:mod:`ugrpo.stats.certificate`) this is a posterior interval, not a confidence interval.
"""

from __future__ import annotations

import numpy as np

from .allocation import PromptStats
from .certificate import Certificate
from .exact_mse import prompt_error
from .predict import Posterior, draw, posterior_means
from .prompt_is import PromptLaw, second_moment

__all__ = ["is_certificate"]

_CHUNK = 2_000_000  # draws x prompts held at once


def is_certificate(post: Posterior, law: PromptLaw, group_size: int, *, draws: int = 1000, seed: int = 0,
                   level: float = 0.95) -> Certificate:
    """Posterior median and interval of R = S(q, G) / S(1/P, group_size) (module docstring; docs/math.md M59).

    Parameters
    ----------
    post : the predictor's posterior of EVERY prompt of the pool (P prompts, the law's order)
    law : the law the rule chose (:func:`ugrpo.stats.prompt_is.is_law`)
    group_size : the uniform G of the comparison (N = B G)
    draws, seed, level : posterior draws, their seed, the interval's level
    """
    P = law.P
    if len(post) != P:
        raise ValueError(f"the posterior holds {len(post)} prompts but the law is over {P}")
    rng = np.random.default_rng(seed)
    w_is = 1.0 / (P**2 * law.q)                                                 # (P,)
    sizes = law.sizes.astype(np.float64)
    ratios = []
    step = max(1, _CHUNK // P)
    for start in range(0, int(draws), step):
        _, c2, c3, g2 = draw(post, rng, min(step, int(draws) - start), with_g2=True)  # (d, P) each
        s_is = ((g2 + prompt_error(c2, c3, sizes)) * w_is).sum(1)
        s_u = (g2 + prompt_error(c2, c3, float(group_size))).sum(1) / P
        ratios.append(np.where(s_u > 0, s_is / np.where(s_u > 0, s_u, 1.0), 1.0))
    r = np.concatenate(ratios)
    lo, med, hi = np.quantile(r, (0.5 - level / 2, 0.5, 0.5 + level / 2))
    st: PromptStats = posterior_means(post)
    s_u = second_moment(np.full(P, 1.0 / P), np.full(P, group_size), st)
    plugin = second_moment(law.q, law.sizes, st) / s_u if s_u > 0 else 1.0
    return Certificate(ratio=float(med), plugin=float(plugin), ratio_low=float(lo), ratio_high=float(hi))
