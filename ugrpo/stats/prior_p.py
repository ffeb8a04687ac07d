"""The population of success rates p on a grid, fitted to a history (docs/math.md M46), and each prompt's posterior.

Used by :mod:`ugrpo.stats.predict` (the one per-prompt predictor): :func:`fit_p_prior` fits the population to all
visited prompts' counts (s_x successes in n_x samples), :func:`posterior_weights` is Bayes' rule for each prompt on
the fixed grid :data:`P_GRID`. Pure numpy/scipy.
"""

from __future__ import annotations

import numpy as np

__all__ = ["P_GRID", "G_DEGREE", "G_PENALTY", "fit_beta_prior", "fit_p_prior", "posterior_weights"]

P_GRID = 1.0 / (1.0 + np.exp(-np.linspace(-8.0, 8.0, 81)))
"""the success rates the p prior lives on: 81 points, equally spaced in logit from 3.4e-4 to 1 - 3.4e-4"""
G_DEGREE = 6
"""Legendre degree of the p prior's log-density correction (M46)"""
G_PENALTY = 1e-2
"""its ridge penalty per visited prompt (chosen on other seeds than the benchmarks' instances)"""


def _log_lik(successes: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """(n, K) binomial log likelihood s log p_k + (n - s) log(1 - p_k) on :data:`P_GRID` (fractional counts)."""
    s, n = np.asarray(successes, dtype=np.float64), np.asarray(samples, dtype=np.float64)
    return s[:, None] * np.log(P_GRID)[None] + (n - s)[:, None] * np.log1p(-P_GRID)[None]


def _basis(degree: int) -> np.ndarray:
    """(K, degree) Legendre polynomials 1..degree of logit(p) / 8 on :data:`P_GRID` (the g-model's basis, M46)."""
    from numpy.polynomial import legendre

    t = np.log(P_GRID / (1 - P_GRID)) / 8.0
    return np.stack([legendre.legval(t, np.eye(degree + 1)[j]) for j in range(1, degree + 1)], 1)


def fit_beta_prior(successes: np.ndarray, samples: np.ndarray, *, grid: int = 41) -> tuple[float, float]:
    """Beta(a, b) maximising the beta-binomial marginal likelihood of all visited prompts' (s_x, n_x) over a log
    grid of a, b in [0.05, 50] (the base of :func:`fit_p_prior`, docs/math.md M46; fractional counts allowed).

    Examples
    --------
    >>> fit_beta_prior(np.zeros(3), np.zeros(3))  # nothing visited: the uniform prior
    (1.0, 1.0)
    """
    from scipy.special import betaln

    s = np.asarray(successes, dtype=np.float64)
    n = np.asarray(samples, dtype=np.float64)
    seen = n > 0
    if seen.sum() < 2:
        return 1.0, 1.0
    pairs, count = np.unique(np.stack([s[seen], n[seen] - s[seen]], 1), axis=0, return_counts=True)
    s, f = pairs[:, 0], pairs[:, 1]                                             # distinct (s_x, n_x - s_x)
    v = np.exp(np.linspace(np.log(0.05), np.log(50.0), grid))
    A, Bp = v[:, None, None], v[None, :, None]
    ll = ((betaln(A + s, Bp + f) - betaln(A, Bp)) * count).sum(-1)             # (grid, grid)
    i, j = np.unravel_index(int(np.argmax(ll)), ll.shape)
    return float(v[i]), float(v[j])


def _basis(degree: int) -> np.ndarray:
    """(K, degree) Legendre polynomials 1..degree of logit(p) / 8 on :data:`P_GRID` (the g-model's basis, M46)."""
    from numpy.polynomial import legendre

    t = np.log(P_GRID / (1 - P_GRID)) / 8.0
    return np.stack([legendre.legval(t, np.eye(degree + 1)[j]) for j in range(1, degree + 1)], 1)


def fit_p_prior(successes: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """(K,) weights on :data:`P_GRID`: the population of p fitted to all visited prompts (docs/math.md M46).

    A g-model (Efron 2016) around the fitted Beta: w_k proportional to p_k^a (1 - p_k)^b exp(Q_k alpha), i.e. the
    Beta(a, b) density of :func:`fit_beta_prior` on the logit grid times a smooth correction, Q the Legendre
    polynomials of logit(p) of degree :data:`G_DEGREE`; alpha maximises the marginal likelihood of the prompts'
    (s_x, n_x) minus :data:`G_PENALTY` ||alpha||^2 (per visited prompt). With thin data it stays near the Beta (a
    few all-correct prompts do not put a spike at p = 1); with enough it takes the pool's shape (a bulk near 1/2
    and rare prompts near 0 are two bumps, which one Beta cannot be). Fewer than two visited prompts: uniform in p.

    Examples
    --------
    >>> w = fit_p_prior(np.zeros(3), np.zeros(3))  # nothing visited: Beta(1, 1), uniform in p
    >>> round(float(w @ P_GRID), 6)
    0.5
    """
    from scipy.optimize import minimize

    s = np.asarray(successes, dtype=np.float64)
    n = np.asarray(samples, dtype=np.float64)
    a, b = fit_beta_prior(s, n)
    base = a * np.log(P_GRID) + b * np.log1p(-P_GRID)                           # Beta(a, b) in logit measure
    seen = n > 0
    if seen.sum() < 2:
        w = np.exp(base - base.max())
        return w / w.sum()
    pairs, count = np.unique(np.stack([s[seen], n[seen]], 1), axis=0, return_counts=True)
    ll = _log_lik(pairs[:, 0], pairs[:, 1])
    L = np.exp(ll - ll.max(1, keepdims=True))                                    # (U, K), rows scaled
    c = count / count.sum()
    Q = _basis(G_DEGREE)

    def weights(alpha: np.ndarray) -> np.ndarray:
        z = base + Q @ alpha
        w = np.exp(z - z.max())
        return w / w.sum()

    def obj(alpha: np.ndarray) -> tuple[float, np.ndarray]:
        w = weights(alpha)
        m = L @ w                                                                 # (U,) marginal likelihoods
        post = L * w[None] / m[:, None]
        return (float(-(c * np.log(m)).sum() + G_PENALTY * alpha @ alpha),
                -Q.T @ (c @ post - w) + 2 * G_PENALTY * alpha)

    return weights(minimize(obj, np.zeros(Q.shape[1]), jac=True, method="L-BFGS-B").x)


def posterior_weights(prior: np.ndarray, successes: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """(n, K) posterior of p on the grid: prior times binomial likelihood, normalised (Bayes' rule, M46)."""
    ll = _log_lik(successes, samples) + np.log(np.maximum(prior, 1e-300))[None]
    pw = np.exp(ll - ll.max(1, keepdims=True))
    return pw / pw.sum(1, keepdims=True)
