"""The one predictor's per-prompt posterior (docs/math.md M49, M51, M85, M86): :class:`Posterior` and
:func:`posterior`, the joint posterior of each prompt's p and log score moments under a fitted population model
(:class:`~ugrpo.stats.predict_hyper.Hyper`), its closed-form moments (``_moment``), :func:`fit_hyper` (which needs
it: eta's population is fitted on every prompt's posterior under the rest of the model, M48, M85) and
:func:`bootstrap_posteriors` (M51). The means and draws read from a :class:`Posterior`, and the model's full
description, are :mod:`ugrpo.stats.predict`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .predict_hyper import (
    Hyper,
    _covariate,
    _eta_obs,
    _fit_eta,
    _log_means,
    _sums_of,
    score_population,
)
from .prior_p import P_GRID, fit_p_prior, posterior_nodes

__all__ = ["Posterior", "posterior", "fit_hyper", "bootstrap_posteriors"]


@dataclass(frozen=True)
class Posterior:
    """Posterior of B prompts' moments (arrays of shape (B,) unless noted; docs/math.md M49).

    Attributes
    ----------
    pv, pw : (B, K) each prompt's posterior of p: values (its own grid, :func:`ugrpo.stats.prior_p.posterior_nodes`)
        and weights (the joint posterior's marginal: the binomial likelihood times the score likelihood of M86)
    logm, logm_slope : (B, 2) each: given p, (log m_1, log m_0) is normal with mean logm + logm_slope c(p), c(p)
        the covariate of :class:`Hyper` (M86; None: no dependence on p); logm_cov : (B, 2, 2) its covariance (the
        same at every p)
    eta, eta_sd : normal posterior of eta before its truncation to [0, 1/(p(1-p))]
    seen : prompts with at least one visit; the others are draws from ``pool``
    pool : the posterior of every visited prompt (None: none visited, then the unseen get the population model)
    hyper : the fitted :class:`Hyper`
    """

    pv: np.ndarray
    pw: np.ndarray
    logm: np.ndarray
    logm_cov: np.ndarray
    eta: np.ndarray
    eta_sd: np.ndarray
    seen: np.ndarray
    pool: Posterior | None
    hyper: Hyper
    logm_slope: np.ndarray | None = None

    def take(self, idx: np.ndarray) -> Posterior:
        """The posterior of the prompts ``idx`` (e.g. a drawn batch); the pool is shared."""
        i = np.asarray(idx, dtype=np.int64)
        return replace(self, pv=self.pv[i], pw=self.pw[i], logm=self.logm[i], logm_cov=self.logm_cov[i],
                       eta=self.eta[i], eta_sd=self.eta_sd[i], seen=self.seen[i], logm_slope=self.slope[i])

    @property
    def slope(self) -> np.ndarray:
        """(B, 2) ``logm_slope`` (zeros when None: log m does not depend on p)."""
        return np.zeros_like(self.logm) if self.logm_slope is None else self.logm_slope

    def __len__(self) -> int:
        return int(self.pw.shape[0])


def _gain(cov: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(K (n, 2, 2), (cov + diag v)^-1 (n, 2, 2)): the conjugate gain cov (cov + diag v)^-1 per row."""
    Sy = cov[None] + np.maximum(v, 1e-12)[:, :, None] * np.eye(2)[None]                # (n, 2, 2), never singular
    det = Sy[:, 0, 0] * Sy[:, 1, 1] - Sy[:, 0, 1] * Sy[:, 1, 0]
    inv = np.stack([np.stack([Sy[:, 1, 1], -Sy[:, 0, 1]], -1), np.stack([-Sy[:, 1, 0], Sy[:, 0, 0]], -1)], 1)
    inv = inv / det[:, None, None]
    return np.einsum("ij,njk->nik", cov, inv), inv


def _normal_update(mu: np.ndarray, cov: np.ndarray, y: np.ndarray, v: np.ndarray,
                   beta: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Posterior of theta ~ N(mu + (beta c(p), 0), cov) from y = theta + N(0, diag v), per row and given p (M47,
    M86): (intercept (n, 2), covariance (n, 2, 2), slope (n, 2)) with mean(p) = intercept + slope c(p),
    intercept = K y + (I - K) mu, slope = (I - K) (beta, 0), cov_post = cov - K cov, K = cov (cov + diag v)^-1
    (the conjugate formula at every p; c(p) = log(1-p), :func:`_covariate`)."""
    n = len(y)
    K, _ = _gain(cov, v)                                                                # (n, 2, 2)
    rest = np.eye(2)[None] - K
    mean = np.einsum("nij,nj->ni", K, y) + np.einsum("nij,j->ni", rest, mu)
    slope = rest[:, :, 0] * beta
    post = cov[None] - np.einsum("nij,jk->nik", K, cov)
    post = 0.5 * (post + post.transpose(0, 2, 1))
    return mean, np.broadcast_to(post, (n, 2, 2)).copy(), slope


def _score_loglik(h: Hyper, y: np.ndarray, v: np.ndarray, pv: np.ndarray) -> np.ndarray:
    """(n, K) log N(y; mu + (beta c(p_k), 0), cov + diag v) up to a constant in p at each prompt's grid values pv
    (M86): what the observed log moments say about p when their population mean depends on p (an unobserved reward's
    v is :data:`~ugrpo.stats.predict_hyper._MISSING`, which leaves that component out)."""
    _, inv = _gain(h.cov, v)
    r = np.broadcast_to(y[:, None, :] - h.mu[None, None], pv.shape + (2,)).copy()        # (n, K, 2)
    r[..., 0] -= h.beta * _covariate(pv, h.c_range)
    return -0.5 * np.einsum("nki,nij,nkj->nk", r, inv, r)


def _moment(post, i: int, j: int, e1: int, e0: int) -> np.ndarray:
    """(B,) E[p^i (1-p)^j m_1^e1 m_0^e0] under each prompt's joint posterior (M86): p on its grid (pv, pw) and, given
    p, (log m_1, log m_0) ~ N(logm + slope c(p), logm_cov), c(p) = log(1-p) cut to the fitted range, so
    E[m_1^e1 m_0^e0 | p] = exp(e . logm + (e . slope) c(p) + e' logm_cov e / 2). ``post``: a :class:`Posterior` or
    a dict with those keys."""
    g = post.__getitem__ if isinstance(post, dict) else (lambda k: getattr(post, k))
    e = np.array([e1, e0], dtype=np.float64)
    slope = g("slope") if isinstance(post, dict) else post.slope
    lin = g("logm") @ e + 0.5 * np.einsum("i,bij,j->b", e, g("logm_cov"), e)          # (B,)
    sl = slope @ e                                                                      # (B,)
    pv, pw = g("pv"), g("pw")
    c = _covariate(pv, g("c_range") if isinstance(post, dict) else post.hyper.c_range)  # (B, K)
    with np.errstate(divide="ignore"):
        log = np.log(pw) + i * np.log(pv) + j * np.log1p(-pv) + sl[:, None] * c + lin[:, None]
    return np.exp(np.minimum(log, 700.0)).sum(-1)


def _e_parts(post) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Posterior means of (E||W (Z - p)||^2, E||W||^2 Var(Z), p(1-p) E||W (Z - p)||^2) (polynomials in p times m_z,
    M38 and M49, under the joint posterior of M86)."""
    return (_moment(post, 1, 2, 1, 0) + _moment(post, 2, 1, 0, 1), _moment(post, 2, 1, 1, 0)
            + _moment(post, 1, 2, 0, 1), _moment(post, 2, 3, 1, 0) + _moment(post, 3, 2, 0, 1))


def _divisor(post) -> tuple[np.ndarray, np.ndarray]:
    """(mean, squared coefficient of variation) under the posterior of d = p(1-p) E||W (Z - p)||^2 = p^2 (1-p)^2
    ((1-p) m_1 + p m_0), what multiplies eta in E[T0] (M48, M85)."""
    m = _moment(post, 2, 3, 1, 0) + _moment(post, 3, 2, 0, 1)
    sq = _moment(post, 4, 6, 2, 0) + 2 * _moment(post, 5, 5, 1, 1) + _moment(post, 6, 4, 0, 2)
    safe = np.where(m > 0, m, 1.0)
    return m, np.where(m > 0, np.maximum(sq / safe**2 - 1.0, 0.0), 0.0)


def _parts(s: dict, h: Hyper) -> dict:
    """Per-prompt joint posterior of p and the log moments under the model ``h`` (M86), and what the eta model
    reads (M85): the divisor's mean and squared coefficient of variation and u = E||Z W||^2 = E p m_1."""
    y, v, _ = _log_means(s, h.scores, h.cv2)                # reads the pooled mean of every row
    _, first, inv = np.unique(np.column_stack([s["successes"], s["samples"], y, v]), axis=0, return_index=True,
                              return_inverse=True)
    if len(first) < len(y):  # prompts with the same counts and log moments (e.g. every never-visited one) share
        one = _row_parts({k: s[k][first] for k in ("successes", "samples")}, h, y[first], v[first])  # one computation
        return {k: x if k == "c_range" else x[inv.reshape(-1)] for k, x in one.items()}
    return _row_parts(s, h, y, v)


def _row_parts(s: dict, h: Hyper, y: np.ndarray, v: np.ndarray) -> dict:
    """:func:`_parts` given the observed log moments (y, v) of :func:`_log_means`: row by row, from the counts
    ``successes``, ``samples`` of ``s``."""
    pv, pw = posterior_nodes(h.p_prior, s["successes"], s["samples"])
    if h.scores and h.beta != 0:
        lw = np.log(np.maximum(pw, 1e-300)) + _score_loglik(h, y, v, pv)
        pw = np.exp(lw - lw.max(1, keepdims=True))
        pw = pw / pw.sum(1, keepdims=True)
    logm, logm_cov, slope = _normal_update(h.mu, h.cov, y, v, h.beta)
    parts = {"pv": pv, "pw": pw, "logm": logm, "logm_cov": logm_cov, "slope": slope, "c_range": h.c_range}
    div, cv2 = _divisor(parts)
    parts.update(div=div, div_cv2=cv2, u_hat=_moment(parts, 1, 0, 1, 0))
    return parts


def _fit(s: dict, scores: bool) -> tuple[Hyper, dict]:
    prior = fit_p_prior(s["successes"], s["samples"])
    if scores:
        hyper = Hyper(p_prior=prior, scores=True, **score_population(s, prior))
    else:
        hyper = Hyper(p_prior=prior, scores=False, mu=np.zeros(2), cov=np.zeros((2, 2)), cv2=_log_means(s, False)[2])
    parts = _parts(s, hyper)
    if not scores:
        return hyper, parts
    eta_mu, eta_tau2, kappa = _fit_eta(s, parts)
    return replace(hyper, eta_mu=eta_mu, eta_tau2=eta_tau2, kappa=kappa), parts


def fit_hyper(history, *, scores: bool = True) -> Hyper:
    """The population model of a history (:class:`Hyper`, docs/math.md M46-M48); ``history``: sums or ``.sums``."""
    return _fit(_sums_of(history), scores)[0]


def _eta_posterior(h: Hyper, s: dict, parts: dict) -> tuple[np.ndarray, np.ndarray]:
    """Normal posterior (mean, sd) of eta per prompt (M48, M85): prior N(eta_mu, eta_tau2), one observation r_x with
    variance kappa noise_x + (eta_mu^2 + eta_tau2) cv2_x."""
    P = len(parts["div"])
    if not h.scores or h.kappa <= 0 or h.eta_tau2 <= 0:
        return np.full(P, h.eta_mu if h.scores else 0.0), np.zeros(P)
    r, noise, cv2, ok = _eta_obs(s, parts)
    e2 = h.eta_mu**2 + h.eta_tau2
    var = np.where(ok, h.kappa * noise + e2 * cv2, 1.0)
    prec_obs = np.where(ok, 1.0 / np.maximum(var, 1e-300), 0.0)
    prec = 1.0 / h.eta_tau2 + prec_obs
    return (h.eta_mu / h.eta_tau2 + prec_obs * r) / prec, np.sqrt(1.0 / prec)


def posterior(history, prompts: np.ndarray | None = None, *, scores: bool = True,
              hyper: Hyper | None = None) -> Posterior:
    """The posterior of the prompts ``prompts`` (default: all P) given the history (docs/math.md M49).

    Parameters
    ----------
    history : a :class:`~ugrpo.stats.history.PromptHistory` or its sums (mapping of (P,) arrays,
        :data:`~ugrpo.stats.predict_hyper.REQUIRED` and optionally :data:`~ugrpo.stats.predict_hyper.SECOND_MOMENTS`)
    prompts : (B,) prompt indices
    scores : False for rules that measure no scores (||W||^2 = 1, ||g||^2 = 0 held fixed)
    hyper : a :class:`Hyper` fitted elsewhere (e.g. a bootstrap replicate, M51); default: fitted to ``history``
    """
    s = _sums_of(history)
    if hyper is None:
        h, parts = _fit(s, scores)
    else:  # the same data under another population model (its ``scores`` decides)
        h, parts = hyper, _parts(s, hyper)
    eta, eta_sd = _eta_posterior(h, s, parts)
    seen = s["visits"] > 0
    full = Posterior(pv=parts["pv"], pw=parts["pw"], logm=parts["logm"], logm_cov=parts["logm_cov"], eta=eta,
                     eta_sd=eta_sd, seen=seen, pool=None, hyper=h, logm_slope=parts["slope"])
    if seen.any():
        pool = full.take(np.flatnonzero(seen))
    else:  # nothing visited: the unseen prompts get the population model itself
        pool = replace(full.take(np.zeros(1, dtype=np.int64)), pv=P_GRID[None].copy(), pw=h.p_prior[None].copy(),
                       logm=h.mu[None].copy(), logm_cov=h.cov[None].copy(), eta=np.array([h.eta_mu]),
                       eta_sd=np.array([math.sqrt(h.eta_tau2)]), seen=np.ones(1, bool),
                       logm_slope=np.array([[h.beta, 0.0]]))
    full = replace(full, pool=pool)
    return full if prompts is None else full.take(prompts)


def bootstrap_posteriors(history, prompts: np.ndarray | None, *, scores: bool, replicates: int,
                         rng: np.random.Generator) -> list[Posterior]:
    """Posteriors of ``prompts`` under ``replicates`` bootstrap refits of the population model (docs/math.md M51).

    Each replicate resamples the visited prompts' sums with replacement, refits :class:`Hyper` to the resample
    (:func:`fit_hyper`) and computes every prompt's posterior from its own (unchanged) data under that fit; pooling
    draws over the replicates carries the population model's sampling error into the posterior. Nothing visited:
    the plain posterior, once.
    """
    s = _sums_of(history)
    seen = np.flatnonzero(s["visits"] > 0)
    if len(seen) < 2 or replicates < 1:
        return [posterior(s, prompts, scores=scores)]
    out = []
    for _ in range(int(replicates)):
        pick = seen[rng.integers(len(seen), size=len(seen))]
        h = fit_hyper({k: v[pick] for k, v in s.items()}, scores=scores)
        out.append(posterior(s, prompts, scores=scores, hyper=h))
    return out
