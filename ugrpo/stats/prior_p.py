"""The population of success rates p on a grid, fitted to a history (docs/math.md M46), and each prompt's posterior.

Used by :mod:`ugrpo.stats.predict` (the one per-prompt predictor): :func:`fit_p_prior` fits the population to all
visited prompts' counts (s_x successes in n_x samples), :func:`posterior_weights` is Bayes' rule for each prompt on
the fixed grid :data:`P_GRID`. Pure numpy/scipy.
"""

from __future__ import annotations

import numpy as np

__all__ = ["P_GRID", "NODES", "G_DEGREE", "G_PENALTY", "fit_beta_prior", "fit_p_prior", "posterior_weights",
           "posterior_nodes"]

P_GRID = 1.0 / (1.0 + np.exp(-np.linspace(-8.0, 8.0, 81)))
"""the success rates the p prior lives on: 81 points, equally spaced in logit from 3.4e-4 to 1 - 3.4e-4"""
NODES = 64
"""points of each prompt's own posterior grid (:func:`posterior_nodes`)"""
G_DEGREE = 6
"""Legendre degree of the p prior's log-density correction (M46)"""
G_PENALTY = 0.0
"""its ridge penalty per visited prompt (0: none, the degree is the regularisation; chosen on other seeds than the
benchmarks' instances)"""


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


def fit_p_prior(successes: np.ndarray, samples: np.ndarray, *, steps: int = 50) -> np.ndarray:
    """(K,) weights on :data:`P_GRID`: the population of p fitted to all visited prompts (docs/math.md M46).

    An exponential family on the grid (Efron's g-model): w_k proportional to exp(Q_k alpha) with the statistics
    Q = (log p, log(1-p), Legendre polynomials 1..:data:`G_DEGREE` of logit(p) / 8) in the logit measure; alpha
    = (1, 1, 0, ..) is Beta(1, 1), any alpha with zero Legendre part a Beta. alpha maximises the marginal
    likelihood sum_x log sum_k w_k p_k^s_x (1 - p_k)^(n_x - s_x) of the visited prompts (minus
    :data:`G_PENALTY` times the squared Legendre part) by damped Newton steps from the fitted Beta
    (:func:`fit_beta_prior`): so it can take the pool's shape (a bulk near 1/2 and rare prompts near 0 are two
    bumps, which one Beta cannot be). Fewer than two visited prompts: Beta(1, 1).

    Examples
    --------
    >>> w = fit_p_prior(np.zeros(3), np.zeros(3))  # nothing visited: Beta(1, 1), uniform in p
    >>> round(float(w @ P_GRID), 6)
    0.5
    """
    s = np.asarray(successes, dtype=np.float64)
    n = np.asarray(samples, dtype=np.float64)
    Q = np.concatenate([np.log(P_GRID)[:, None], np.log1p(-P_GRID)[:, None], _basis(G_DEGREE)], 1)   # (K, d)
    seen = n > 0
    if seen.sum() < 2:
        return _weights(Q, np.r_[1.0, 1.0, np.zeros(G_DEGREE)])
    pairs, count = np.unique(np.stack([s[seen], n[seen]], 1), axis=0, return_counts=True)
    ll = _log_lik(pairs[:, 0], pairs[:, 1])
    L = np.exp(ll - ll.max(1, keepdims=True))                                    # (U, K), rows scaled
    c = count / count.sum()
    pen = np.r_[0.0, 0.0, np.full(G_DEGREE, G_PENALTY)]
    best = None
    for a0, b0 in (fit_beta_prior(s, n), (1.0, 1.0)):  # the fitted Beta and the uniform start: the better optimum
        alpha, f = _newton(Q, L, c, pen, np.r_[a0, b0, np.zeros(G_DEGREE)], steps)
        if best is None or f < best[1]:
            best = (alpha, f)
    return _weights(Q, best[0])


def _newton(Q, L, c, pen, alpha: np.ndarray, steps: int) -> tuple[np.ndarray, float]:
    """Damped (Levenberg) Newton descent of :func:`_objective` from ``alpha``; (alpha, f)."""
    f, g, H = _objective(Q, L, c, pen, alpha)
    mu = 1e-3
    for _ in range(int(steps)):
        d = Q.shape[1]
        step = np.linalg.solve(H + mu * (np.abs(np.diag(H)).mean() + 1e-12) * np.eye(d), -g)
        f2, g2, H2 = _objective(Q, L, c, pen, alpha + step)
        if f2 <= f:
            alpha, f, g, H, mu = alpha + step, f2, g2, H2, max(mu / 10, 1e-9)
            if np.abs(step).max() < 1e-8:
                break
        else:
            mu *= 10
            if mu > 1e8:
                break
    return alpha, f


def _weights(Q: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    z = Q @ alpha
    w = np.exp(z - z.max())
    return w / w.sum()


def _objective(Q, L, c, pen, alpha) -> tuple[float, np.ndarray, np.ndarray]:
    """(f, gradient, Hessian) of f = -sum_u c_u log(L_u . w) + sum pen alpha^2 at w = softmax(Q alpha):
    d f / d z = w - c post, d^2 f / dz dz^T = diag(w) - w w^T - diag(c post) + post^T diag(c) post."""
    w = _weights(Q, alpha)
    m = L @ w
    post = L * w[None] / m[:, None]                                              # (U, K)
    cp = c @ post
    f = float(-(c * np.log(m)).sum() + (pen * alpha**2).sum())
    g = Q.T @ (w - cp) + 2 * pen * alpha
    Hz = np.diag(w) - np.outer(w, w) - np.diag(cp) + post.T @ (post * c[:, None])
    return f, g, Q.T @ Hz @ Q + 2 * np.diag(pen)


def posterior_weights(prior: np.ndarray, successes: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """(n, K) posterior of p on the grid: prior times binomial likelihood, normalised (Bayes' rule, M46)."""
    ll = _log_lik(successes, samples) + np.log(np.maximum(prior, 1e-300))[None]
    pw = np.exp(ll - ll.max(1, keepdims=True))
    return pw / pw.sum(1, keepdims=True)


def _log_prior(prior: np.ndarray, t: np.ndarray) -> np.ndarray:
    """log density of the grid prior in the logit measure at logits t inside the grid's range: linear interpolation
    of log w_k between grid points."""
    return np.interp(t, np.log(P_GRID / (1 - P_GRID)), np.log(np.maximum(prior, 1e-300)))


def posterior_nodes(prior: np.ndarray, successes: np.ndarray, samples: np.ndarray,
                    nodes: int = NODES) -> tuple[np.ndarray, np.ndarray]:
    """((n, nodes) values, (n, nodes) weights): each prompt's posterior of p on its own logit grid (M46).

    The grid spans the likelihood, logit((s + 1/2)/(n - s + 1/2)) -+ 5 sd with sd = ((s + 1/2)(n - s + 1/2) /
    (n + 1))^(-1/2) (its curvature), cut to the prior's support (the logits of :data:`P_GRID`'s ends), equally
    spaced, so it resolves the posterior however many samples a prompt has (as n grows the posterior mean tends to
    the prompt's own frequency s/n, unlike on a fixed grid); the weights are the prior's density
    (:func:`_log_prior`) times the binomial likelihood, normalised.
    """
    s = np.asarray(successes, dtype=np.float64)[:, None]
    n = np.asarray(samples, dtype=np.float64)[:, None]
    centre = np.log((s + 0.5) / (n - s + 0.5))
    sd = 1.0 / np.sqrt((s + 0.5) * (n - s + 0.5) / (n + 1.0))
    T = float(np.log(P_GRID[-1] / (1 - P_GRID[-1])))                             # the prior's support: [-T, T]
    lo, hi = np.clip(centre - 5 * sd, -T, T), np.clip(centre + 5 * sd, -T, T)
    lo, hi = np.minimum(lo, hi - 1e-6), np.maximum(hi, lo + 1e-6)
    t = lo + (hi - lo) * np.linspace(0.0, 1.0, int(nodes))[None]                  # (n, nodes)
    p = 1.0 / (1.0 + np.exp(-t))
    ll = s * np.log(p) + (n - s) * np.log1p(-p) + _log_prior(prior, t)
    w = np.exp(ll - ll.max(1, keepdims=True))
    return p, w / w.sum(1, keepdims=True)
