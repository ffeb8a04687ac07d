"""The certificates' posteriors and posterior draws as they were before the certfast branch (docs/math.md M49, M59,
M60): a Python searchsorted per prompt for the draws of p, a (D, n_unseen, K) cumulative sum per call for the unseen
prompts' donors, every score parameter broadcast to (D, B), every posterior row computed even where rows are equal.
The reference the fast code is tested against (tests/stats/test_is_certificate_speed.py) and timed against
(benchmarks/bench_is_certificate_cost.py); kept verbatim but for names.
"""

from __future__ import annotations

import contextlib

import numpy as np

import ugrpo.stats.population as population
import ugrpo.stats.predict as predict
import ugrpo.stats.predict_posterior as predict_posterior
from ugrpo.stats.predict import _covariate
from ugrpo.stats.predict_hyper import _log_means
from ugrpo.stats.predict_posterior import _divisor, _moment, _normal_update, _score_loglik
from ugrpo.stats.prior_p import posterior_nodes

__all__ = ["reference_draw", "reference_parts", "reference_code"]


def _reference_draw_p(rng, pv, pw, D):
    """The draws of p as first built (a Python searchsorted per prompt): the reference, not the package's code."""
    cdf = np.cumsum(pw, -1)
    u = rng.uniform(size=(D, len(pw))) * cdf[:, -1]
    k = np.stack([np.searchsorted(cdf[b], u[:, b], side="right") for b in range(len(pw))], 1)
    return pv[np.arange(len(pv))[None], np.minimum(k, pv.shape[1] - 1)]


def _reference_draw_rows(rng, p, logm, slope, logm_cov, eta, eta_sd, scores, c_range):
    """The score draws as first built (every parameter broadcast to (D, B), the Cholesky factor per entry)."""
    from scipy.special import ndtr, ndtri

    a = eta
    q = p * (1 - p)
    if not scores:
        return p, q, q, np.zeros_like(q)
    l00 = np.sqrt(np.maximum(logm_cov[..., 0, 0], 0.0))
    l10 = np.where(l00 > 0, logm_cov[..., 1, 0] / np.where(l00 > 0, l00, 1.0), 0.0)
    l11 = np.sqrt(np.maximum(logm_cov[..., 1, 1] - l10**2, 0.0))
    u0, u1 = rng.standard_normal(a.shape), rng.standard_normal(a.shape)
    at = logm + slope * _covariate(p, c_range)[..., None]
    m1 = np.exp(at[..., 0] + l00 * u0)
    m0 = np.exp(at[..., 1] + l10 * u0 + l11 * u1)
    e = q * ((1 - p) * m1 + p * m0)
    hi = 1.0 / np.maximum(q, 1e-300)
    safe = np.where(eta_sd > 0, eta_sd, 1.0)
    lo, up = ndtr(-eta / safe), ndtr((hi - eta) / safe)
    u = lo + (up - lo) * rng.uniform(size=a.shape)
    x = np.where(eta_sd > 0, eta + safe * ndtri(np.clip(u, 1e-300, 1 - 1e-16)), eta)
    g2 = np.clip(x, 0.0, hi) * q * e
    return p, np.clip(e - g2, 0.0, None), q * (p * m1 + (1 - p) * m0) + g2, g2


def reference_draw(post, rng, draws, *, with_g2=False):
    """:func:`ugrpo.stats.predict.draw` as first built (a (D, n_unseen, K) cumulative sum per call, the unseen
    prompts' parameters copied into (D, B) arrays)."""
    D = int(draws)
    keys = ("logm", "slope", "logm_cov", "eta", "eta_sd")
    args = [np.broadcast_to(getattr(post, k), (D,) + getattr(post, k).shape) for k in keys]
    p = _reference_draw_p(rng, post.pv, post.pw, D)
    un = np.flatnonzero(~post.seen)
    if len(un):
        pool = post.pool
        donor = rng.integers(len(pool), size=(D, len(un)))
        args = [x.copy() for x in args]
        for x, k in zip(args, keys):
            x[:, un] = getattr(pool, k)[donor]
        cdf = np.cumsum(pool.pw[donor], -1)
        k = (rng.uniform(size=donor.shape)[..., None] * cdf[..., -1:] > cdf).sum(-1)
        p[:, un] = pool.pv[donor, np.minimum(k, pool.pv.shape[1] - 1)]
    out = _reference_draw_rows(rng, p, *args, scores=post.hyper.scores, c_range=post.hyper.c_range)
    return out if with_g2 else out[:3]


def reference_parts(s, h):
    """:func:`ugrpo.stats.predict_posterior._parts` as first built (every row computed, none shared)."""
    y, v, _ = _log_means(s, h.scores, h.cv2)
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




@contextlib.contextmanager
def reference_code():
    """Within the block the package draws (``predict.draw``, hence ``draw_mixture`` and every certificate) and computes
    posteriors (``_parts``, hence ``posterior`` and ``population_posteriors``) with the reference code."""
    saved = predict.draw, predict_posterior._parts, population._parts
    predict.draw, predict_posterior._parts, population._parts = reference_draw, reference_parts, reference_parts
    try:
        yield
    finally:
        predict.draw, predict_posterior._parts, population._parts = saved
