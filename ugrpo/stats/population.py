"""The population model's own uncertainty: replicates of the fitted model for the certificate (docs/math.md M60).

The one predictor (:mod:`ugrpo.stats.predict`, M46-M49) fits ONE population model to the history (the p
population of M46, the score moments' random effects of M47, the eta model of M48) and treats it as known. Every
prompt of a batch is then drawn independently given that fit, so a certificate summing B prompts narrows like
1/sqrt(B), while an error of the fit is shared by all B prompts and does not average out: this is why the
certificate's interval missed (docs/allocation.md A6). :func:`population_posteriors` returns R posteriors of the
batch, each under one draw of the population model; drawing the certificate's samples from their equal mixture
(:func:`ugrpo.stats.predict.draw_mixture`) shares each population draw by all B prompts. A draw:

* the p population: a smooth perturbation of the fitted one's log-density on the grid, exp(Q delta), Q a cubic
  B-spline basis in logit p, delta from the Laplace approximation of its posterior under the prompts' marginal
  (beta-binomial) likelihood and a N(0, tau^2 I) prior (:func:`p_population_draws`). Where the data decide (the
  bulk) the perturbations are small; where they do not (the tails: with 8 samples, s = 0 says little about
  whether p is 0.02 or 0.0005) they are as wide as the prior allows, and every prompt of that tail moves
  together. The perturbed density is built on the fitted one mixed with ``defensive`` uniform-in-logit mass, so
  no region the data cannot exclude stays at zero density;
* the score part: the random effects of M47 and the eta model of M48 refitted to a bootstrap resample of the
  visited prompts (their sampling error: the between-prompt variance of log m_z from a few noisy samples per
  prompt is shared by every prompt's shrinkage).

Each replicate's posterior of a prompt is the predictor's (M49) under that population draw.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .predict import Hyper, Posterior, check_sums, posterior, score_population
from .predict_hyper import _fit_eta
from .predict_posterior import _parts
from .prior_p import P_GRID, _log_lik

__all__ = ["population_posteriors", "p_population_draws", "p_basis", "REPLICATES", "P_TAU", "P_DEFENSIVE",
           "P_KNOTS", "POOL"]

REPLICATES = 16
"""population draws per certificate (the 1000 draws of the certificate are split over them)"""
P_TAU = 3.0
"""prior sd of each B-spline coefficient of the log-density perturbation of the p population"""
P_DEFENSIVE = 0.01
"""uniform-in-logit mass mixed into the fitted p population before it is perturbed"""
P_KNOTS = 9
"""equally spaced knots of the cubic B-spline basis on the logit grid [-8, 8] (11 basis functions)"""
POOL = 256
"""visited prompts kept per replicate as donors for never-visited ones (all when fewer)"""
_LOGIT = np.log(P_GRID / (1.0 - P_GRID))


def p_basis(knots: int = P_KNOTS) -> np.ndarray:
    """(K, knots + 2) cubic B-spline basis on the logits of :data:`~ugrpo.stats.prior_p.P_GRID` (M60).

    Examples
    --------
    >>> Q = p_basis()
    >>> Q.shape, bool(np.allclose(Q.sum(1), 1.0))  # a partition of unity
    ((81, 11), True)
    """
    from scipy.interpolate import BSpline

    inner = np.linspace(_LOGIT[0], _LOGIT[-1], int(knots))
    t = np.r_[[inner[0]] * 3, inner, [inner[-1]] * 3]
    return BSpline.design_matrix(_LOGIT, t, 3).toarray()


def _log_post(delta: np.ndarray, L: np.ndarray, c: np.ndarray, lb: np.ndarray, Q: np.ndarray,
              tau: float, value_only: bool = False) -> tuple[float, np.ndarray, np.ndarray] | float:
    """(value, gradient, Hessian) of the perturbation's log-posterior (M60), up to a constant; the value alone with
    ``value_only``.

    f(delta) = sum_u c_u log sum_k L_uk pi_k(delta) - |delta|^2 / (2 tau^2), pi(delta) ~ exp(lb + Q delta)
    normalised; gradient sum_u c_u (E_rho_u q - E_pi q) - delta / tau^2, Hessian sum_u c_u (Cov_rho_u q -
    Cov_pi q) - I / tau^2, rho_u the grid posterior of a prompt with likelihood L_u (rows of Q: q_k).
    """
    n = float(c.sum())
    lw = lb + Q @ delta
    w = np.exp(lw - lw.max())
    w /= w.sum()
    rho = L * w[None]                                                                    # (U, K)
    m = rho.sum(1)
    f = float((c * np.log(m)).sum()) - 0.5 * float(delta @ delta) / tau**2
    if value_only:
        return f
    rho /= m[:, None]
    eq_pi, eq_r = w @ Q, rho @ Q                                                         # (d,), (U, d)
    g = c @ eq_r - n * eq_pi - delta / tau**2
    cov_pi = (Q * w[:, None]).T @ Q - np.outer(eq_pi, eq_pi)
    cov_r = (Q * (c @ rho)[:, None]).T @ Q - (eq_r * c[:, None]).T @ eq_r
    return f, g, cov_r - n * cov_pi - np.eye(len(delta)) / tau**2


def _precision(H: np.ndarray, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (floored at 1/tau^2, the prior's precision) and eigenvectors of -H."""
    ev, V = np.linalg.eigh(-0.5 * (H + H.T))
    return np.maximum(ev, 1.0 / tau**2), V


def _laplace(L: np.ndarray, c: np.ndarray, base: np.ndarray, Q: np.ndarray, tau: float,
             steps: int = 12) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(MAP delta, eigenvalues, eigenvectors of the posterior precision) of the perturbation (M60): damped Newton
    on :func:`_log_post` from delta = 0 (halving the step until f does not decrease)."""
    lb = np.log(base)
    delta = np.zeros(Q.shape[1])
    f, g, H = _log_post(delta, L, c, lb, Q, tau)
    for _ in range(int(steps)):
        ev, V = _precision(H, tau)
        step = V @ ((V.T @ g) / ev)
        a = 1.0
        f2, g2, H2 = _log_post(delta + step, L, c, lb, Q, tau)
        while f2 < f - 1e-9 and a > 1e-3:
            a /= 2
            f2, g2, H2 = _log_post(delta + a * step, L, c, lb, Q, tau)
        if f2 < f - 1e-9:
            break
        delta, f, g, H = delta + a * step, f2, g2, H2
        if float(np.abs(a * step).max()) < 1e-6:
            break
    ev, V = _precision(H, tau)
    return delta, ev, V


def p_population_draws(successes: np.ndarray, samples: np.ndarray, prior: np.ndarray, replicates: int,
                       rng: np.random.Generator, *, tau: float = P_TAU, defensive: float = P_DEFENSIVE,
                       knots: int = P_KNOTS, oversample: int = 8) -> np.ndarray:
    """(R, K) draws of the p population on :data:`~ugrpo.stats.prior_p.P_GRID` around the fitted ``prior`` (M60).

    pi(delta) ~ ((1 - defensive) prior + defensive / K) exp(Q delta) with Q :func:`p_basis` and delta from the
    posterior given the visited prompts' (s_x, n_x) and the prior delta ~ N(0, tau^2 I): ``oversample`` R proposals
    from its Laplace approximation N(delta_hat, Lambda^-1), resampled (systematic) with weights posterior /
    proposal, which corrects the Gaussian where the likelihood is one-sided (mass where the data exclude it is
    penalised, less mass is not). Fewer than two visited prompts: R copies of the defended ``prior``.

    Examples
    --------
    >>> from ugrpo.stats.prior_p import fit_p_prior
    >>> s, n = np.zeros(40), np.full(40, 8.0)          # 40 prompts, never a success in 8 samples
    >>> w = p_population_draws(s, n, fit_p_prior(s, n), 50, np.random.default_rng(0))
    >>> mean_p = w @ P_GRID                              # where the p population sits, per draw
    >>> bool(mean_p.max() < 0.05), bool(mean_p.max() / mean_p.min() > 5)  # near 0; how near, not pinned down
    (True, True)
    """
    prior = np.asarray(prior, dtype=np.float64)
    base = (1.0 - defensive) * prior / prior.sum() + defensive / len(prior)
    s, n = np.asarray(successes, dtype=np.float64), np.asarray(samples, dtype=np.float64)
    seen = n > 0
    if seen.sum() < 2:
        return np.repeat(base[None], int(replicates), 0)
    pairs, count = np.unique(np.stack([s[seen], n[seen]], 1), axis=0, return_counts=True)
    L = _log_lik(pairs[:, 0], pairs[:, 1])
    L = np.exp(L - L.max(1, keepdims=True))                                             # (U, K)
    Q = p_basis(knots)
    c, lb = count.astype(np.float64), np.log(base)
    delta, ev, V = _laplace(L, c, base, Q, float(tau))
    R = int(replicates)
    z = rng.standard_normal((oversample * R, len(delta)))           # proposals from N(delta_hat, Lambda^-1)
    cand = delta[None] + (z / np.sqrt(ev)[None]) @ V.T
    logw = np.array([_log_post(d, L, c, lb, Q, tau, value_only=True) for d in cand]) + 0.5 * (z**2).sum(1)
    prob = np.exp(logw - logw.max())
    pick = cand[_systematic(prob / prob.sum(), R, rng)]                                 # (R, d)
    lw = lb[None] + pick @ Q.T                                                            # (R, K)
    w = np.exp(lw - lw.max(1, keepdims=True))
    return w / w.sum(1, keepdims=True)


def _systematic(prob: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n indices drawn by systematic resampling from the probabilities ``prob`` (each i about n prob_i times)."""
    u = (rng.uniform() + np.arange(n)) / n
    return np.minimum(np.searchsorted(np.cumsum(prob), u), len(prob) - 1)


def population_posteriors(history, prompts: np.ndarray, hyper: Hyper, *, rng: np.random.Generator,
                          replicates: int = REPLICATES, tau: float = P_TAU, defensive: float = P_DEFENSIVE,
                          pool: int = POOL) -> list[Posterior]:
    """Posteriors of ``prompts`` under ``replicates`` draws of the population model (module docstring; M60).

    Parameters
    ----------
    history : the history sums (mapping of (P,) arrays) or an object with ``.sums``
    prompts : (B,) the drawn prompts
    hyper : the point fit of the same history (``posterior(...).hyper``); its ``scores`` decides whether the score
        part is refitted (``vip``, ``knapsack``: only p is drawn)
    rng : seeds the population draws, the bootstrap resamples and the donor pools
    replicates, tau, defensive : the draws and the p perturbation's prior (:func:`p_population_draws`)
    pool : visited prompts kept per replicate as donors for never-visited ones
    """
    s = check_sums(history.sums if hasattr(history, "sums") else history)
    prompts = np.asarray(prompts, dtype=np.int64)
    seen = np.flatnonzero(s["visits"] > 0)
    R = int(replicates)
    ws = p_population_draws(s["successes"], s["samples"], hyper.p_prior, R, rng, tau=tau, defensive=defensive)
    parts = _parts(s, hyper) if hyper.scores and len(seen) > 1 else None
    out = []
    for r in range(R):
        h = replace(hyper, p_prior=ws[r])
        if parts is not None:  # the score part refitted to a bootstrap resample of the visited prompts
            pick = seen[rng.integers(len(seen), size=len(seen))]
            sb = {k: v[pick] for k, v in s.items()}
            eta_mu, eta_tau2, kappa = _fit_eta(sb, {k: parts[k][pick] for k in ("div", "div_cv2", "u_hat")})  # M85
            h = replace(h, **score_population(sb, ws[r]), eta_mu=eta_mu, eta_tau2=eta_tau2, kappa=kappa)
        donors = seen if len(seen) <= pool else rng.choice(seen, size=pool, replace=False)
        rows = np.concatenate([donors, prompts])
        sub = {k: v[rows] for k, v in s.items()}
        post = posterior(sub, None, hyper=h)                 # every row's posterior under this population draw
        own = post.take(np.arange(len(donors), len(rows)))
        pool_post = post.take(np.arange(len(donors))) if len(donors) else post.pool
        out.append(replace(own, pool=pool_post))
    return out
