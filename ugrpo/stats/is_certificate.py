"""The certificate of a prompt-IS law: posterior interval of its second-moment ratio against uniform (M59).

A law (q, G_x) of :mod:`ugrpo.stats.prompt_is` is judged before the step by R = S(q, G) / S(1/P, G) with
S(q, G) = sum_x a_x(G_x) / (P^2 q(x)) and a_x(G) = ||g(x)||^2 + f_x(G) (M53): the second moment of one weighted
draw over uniform prompts with the uniform G. Joint posterior draws of every pool prompt's (c2, c3, ||g(x)||^2)
from the one predictor (:func:`ugrpo.stats.predict.draw`, M49) give R's posterior; the point is the median, the
interval the equal-tailed quantiles, ``plugin`` the ratio at the posterior means (what the rule optimised).

The MSE ratio is (S - ||g||^2) / (S_u - ||g||^2) with the unknown ||g||^2 = ||(1/P) sum_x g(x)||^2 in
[0, min(S, S_u)]: it lies below R when R < 1 and above R when R > 1, so R understates both a gain and a loss (by
little while ||g||^2 is small against S_u, i.e. while gradient noise dominates).

Calibration (M89), as for the batch certificate (:mod:`ugrpo.stats.certificate`, M60-M61): the draws can come from
the predictor's posterior under several draws of its population model
(:func:`ugrpo.stats.population.population_posteriors` of every pool prompt), so an error of the fitted population is
shared by all P prompts of a draw, and the interval is widened on the log scale about the median by
:func:`ugrpo.stats.certificate.widening` with this ratio's own table :data:`IS_WIDEN`, fitted by simulation on
development instances. Its frequentist coverage is measured (benchmarks/bench_is_certificate.py, docs/allocation.md
A8) and quoted wherever it is shown.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .allocation import PromptStats
from .certificate import Certificate, ratio_interval, widening
from .exact_mse import prompt_error
from .population import population_posteriors
from .predict import Posterior, draw_mixture, posterior_means
from .prompt_is import PromptLaw, second_moment

__all__ = ["is_certificate", "history_certificate", "IS_WIDEN"]

IS_WIDEN: tuple[tuple[float, float], ...] = ((25.0, 1.7), (math.inf, 2.3))
"""(upper end of the history's samples per visited prompt, widening factor) of the prompt-IS certificate (M89), read
by :func:`ugrpo.stats.certificate.widening`: the smallest factor with which the development cells of that history size
together covered 95% and each at least 90% (benchmarks/results/is_certificate_widening.json,
``bench_is_certificate.py --fit-widening`` on seed offsets 100 and 200, never the benchmark's own instances)"""

_CHUNK = 2_000_000  # draws x prompts held at once


def is_certificate(post: Posterior, law: PromptLaw, group_size: int, *,
                   population: Sequence[Posterior] | None = None, draws: int = 1000, seed: int = 0,
                   level: float = 0.95, widen: float = 1.0) -> Certificate:
    """Posterior median and interval of R = S(q, G) / S(1/P, group_size) (module docstring; docs/math.md M59, M89).

    Parameters
    ----------
    post : the predictor's posterior of EVERY prompt of the pool (P prompts, the law's order); its means give the
        plug-in ratio
    law : the law the rule chose (:func:`ugrpo.stats.prompt_is.is_law`)
    group_size : the uniform G of the comparison (N = B G)
    population : posteriors of the same P prompts sharing the draws, one per draw of the population model
        (:func:`ugrpo.stats.population.population_posteriors`, M60); None: ``post`` alone (M59 as first built)
    draws, seed, level : posterior draws, their seed, the interval's level (equal-tailed quantiles)
    widen : the widening factor (:func:`ugrpo.stats.certificate.widening` with :data:`IS_WIDEN`, M89; 1: the
        posterior quantiles)
    """
    P = law.P
    posts = [post] if population is None else list(population)
    if any(len(p) != P for p in [post, *posts]):
        raise ValueError(f"the posterior holds {min(len(p) for p in [post, *posts])} prompts but the law is over {P}")
    rng = np.random.default_rng(seed)
    w_is = 1.0 / (P**2 * law.q)                                                 # (P,)
    sizes = law.sizes.astype(np.float64)
    ratios = []
    step = max(1, _CHUNK // P)
    for start in range(0, int(draws), step):
        c2, c3, g2 = draw_mixture(posts, rng, min(step, int(draws) - start), with_g2=True)  # (d, P) each
        s_is = ((g2 + prompt_error(c2, c3, sizes)) * w_is).sum(1)
        s_u = (g2 + prompt_error(c2, c3, float(group_size))).sum(1) / P
        ratios.append(np.where(s_u > 0, s_is / np.where(s_u > 0, s_u, 1.0), 1.0))
    lo, med, hi, plo, phi = ratio_interval(np.concatenate(ratios), level, widen)
    st: PromptStats = posterior_means(post)
    s_u = second_moment(np.full(P, 1.0 / P), np.full(P, group_size), st)
    plugin = second_moment(law.q, law.sizes, st) / s_u if s_u > 0 else 1.0
    return Certificate(ratio=med, plugin=float(plugin), ratio_low=lo, ratio_high=hi, ratio_low_posterior=plo,
                       ratio_high_posterior=phi, widen=float(widen))


def history_certificate(post: Posterior, law: PromptLaw, group_size: int, sums, seed: int) -> Certificate:
    """The certificate as calibrated (M89) and as the trainer and ``mse --model`` show it: :func:`is_certificate`
    under the population draws of every pool prompt (:func:`ugrpo.stats.population.population_posteriors`, M60,
    from the history's ``sums``: ``PromptHistory.sums_for_prediction()``) and widened by the history's factor
    (:func:`ugrpo.stats.certificate.widening` with :data:`IS_WIDEN`); ``seed`` seeds both draws."""
    pops = population_posteriors(sums, np.arange(law.P), post.hyper, rng=np.random.default_rng([seed, 0x706f70]))
    return is_certificate(post, law, group_size, population=pops, seed=seed, widen=widening(sums, IS_WIDEN))
