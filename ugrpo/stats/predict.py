"""The one per-prompt predictor: a fitted hierarchical (empirical-Bayes) model of the history (docs/math.md M46-M49).

Every allocation rule (``vip``, ``knapsack``, ``ustat``), the trainer, the synthetic lab and the certificate ask this
module what a prompt's success rate p and moments c2, c3 (M33) are before it is sampled. The input is the history
sums of :class:`ugrpo.stats.history.PromptHistory` (a mapping of (P,) arrays, or any object with ``.sums``); the
entry points are

* :func:`predict` -> :class:`~ugrpo.stats.allocation.PromptStats`: the posterior means of p, c2, c3 (what a rule
  optimises: M33 is linear in c2, c3, so the posterior mean of the MSE is the MSE at the posterior means);
* :func:`posterior` -> :class:`Posterior` and :func:`draw` -> (D, B) joint draws of (p, c2, c3): what the safe rule
  (:mod:`ugrpo.stats.safe`) and the certificate (:mod:`ugrpo.stats.certificate`) integrate over;
* :func:`fit_hyper` -> :class:`Hyper`: the population model, fitted once per history and reusable.

The model (the population is fitted to all visited prompts, each prompt's own data then update it):

* p_x ~ a prior on a fixed grid of success rates fitted to all visited prompts' (s_x, n_x) (:func:`fit_p_prior`,
  M46): the beta-binomial maximum-likelihood Beta times a smooth, penalised correction (a g-model), so it can take
  the pool's shape (a bulk near 1/2 and a few prompts near 0 are two bumps, which one Beta cannot be); the
  posterior of p_x is that prior times its binomial likelihood;
* (log m_1(x), log m_0(x)), m_z = E[||W||^2 | Z = z, x], bivariate normal across prompts, log m_1's mean linear in
  log(1-p_x) (M86: a near-certain answer has a tiny score, so m_1 falls as p -> 1); a prompt's observed log
  mean of ||W||^2 over its k_z samples of reward z has sampling variance log(1 + cv2_z / k_z) with the pooled
  within-prompt squared coefficient of variation cv2_z (scale-free, so a prompt with 1000x larger norms is as well
  measured as any other); method-of-moments (unweighted) between-prompt variances and the correlation of the
  two, posterior by the conjugate normal formula given p, joint with p's posterior (M47, M86). A prompt with no
  sample of one reward gets that log moment from the line at its p and the regression on the other;
* ||g(x)||^2 = p^2 (1-p)^2 ||E[W | Z=1] - E[W | Z=0]||^2 (E W = 0), written eta_x p(1-p) E||W (Z - p)||^2 with the
  scale-free eta_x >= 0 (c2 >= 0 needs eta_x <= 1/(p(1-p))); normal random effects on eta from the per-visit
  unbiased T0 (M14) divided by the prompt's predicted p(1-p) E||W (Z - p)||^2, whose own uncertainty enters the
  observation's variance (M85), truncated at 0 (M48);
* a prompt never visited is a draw from the population: its means are the average over visited prompts and its
  draws come from a randomly chosen visited prompt's posterior (this keeps the population's p-m correlation, M49).

``scores=False`` (``vip``, ``knapsack``: no score measurements) holds ||W||^2 = 1 and ||g(x)||^2 = 0, so
c2 = c3 = E p(1-p).

The code: :mod:`ugrpo.stats.predict_hyper` (the history sums, :class:`Hyper` and its estimators),
:mod:`ugrpo.stats.predict_posterior` (:class:`Posterior`, :func:`posterior`, :func:`fit_hyper`,
:func:`bootstrap_posteriors`) and this module (the means and draws read from a :class:`Posterior`); every name is
importable from here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .allocation import PromptStats
from .predict_hyper import _NO_RANGE, REQUIRED, SECOND_MOMENTS, Hyper, _covariate, check_sums, random_effects
from .predict_hyper import score_population as score_population
from .predict_posterior import Posterior, _e_parts, bootstrap_posteriors, fit_hyper, posterior
from .prior_p import P_GRID, fit_beta_prior, fit_p_prior

__all__ = ["Hyper", "Posterior", "P_GRID", "fit_beta_prior", "fit_p_prior", "fit_hyper", "posterior", "predict",
           "posterior_means", "reward_variance", "draw", "draw_mixture", "bootstrap_posteriors", "random_effects",
           "check_sums", "REQUIRED", "SECOND_MOMENTS"]


def _pq(pp: tuple[np.ndarray, np.ndarray], i: int, j: int) -> np.ndarray:
    """E[p^i (1-p)^j] under each prompt's posterior ``pp`` = (values, weights), both (B, K)."""
    v, w = pp
    return (w * v**i * (1 - v) ** j).sum(-1)


def _trunc_mean(mu: np.ndarray, sd: np.ndarray, hi: float) -> np.ndarray:
    """E[X | 0 <= X <= hi] for X ~ N(mu, sd^2); sd = 0: mu cut to [0, hi]."""
    from scipy.special import ndtr

    safe = np.where(sd > 0, sd, 1.0)
    lo, up = -mu / safe, (hi - mu) / safe
    mass = ndtr(up) - ndtr(lo)
    dens = (np.exp(-0.5 * lo**2) - np.exp(-0.5 * up**2)) / math.sqrt(2 * math.pi)
    m = mu + safe * dens / np.maximum(mass, 1e-300)
    return np.clip(np.where((sd > 0) & (mass > 1e-12), m, mu), 0.0, hi)


def _means(post: Posterior) -> PromptStats:
    """Posterior means of p, c2, c3, ||g||^2 of each prompt, unseen ones included as if seen (M49); eta is cut to
    [0, 4] (4 = min over p of 1/(p(1-p))) and c2 at 0."""
    e, m2var, d = _e_parts(post)
    g2 = np.minimum(_trunc_mean(post.eta, post.eta_sd, 4.0) * d, e)
    return PromptStats(value=_pq((post.pv, post.pw), 1, 0), c2=np.clip(e - g2, 0.0, None), c3=m2var + g2, g_norm2=g2)


def predict(history, prompts: np.ndarray | None = None, *, scores: bool = True,
            hyper: Hyper | None = None) -> PromptStats:
    """Posterior means of p, c2, c3 and ||g||^2 of the prompts (docs/math.md M49): what every rule optimises.

    A prompt never visited gets the average over visited prompts (a draw from the population). Arguments as in
    :func:`posterior`.

    Examples
    --------
    >>> z = np.zeros(2)
    >>> st = predict({k: z for k in REQUIRED})  # no history: uniform p, E p(1-p) = 1/6 (on the grid) for everyone
    >>> [round(float(v), 3) for v in st.value], [round(float(c), 3) for c in st.c2]
    ([0.5, 0.5], [0.167, 0.167])
    """
    post = posterior(history, prompts, scores=scores, hyper=hyper)
    return posterior_means(post)


def posterior_means(post: Posterior) -> PromptStats:
    """:func:`predict` for a :class:`Posterior` (unseen prompts: the pool's average)."""
    own = _means(post)
    if post.seen.all():
        return own
    pm = _means(post.pool)
    fill = {k: float(getattr(pm, k).mean()) for k in ("value", "c2", "c3", "g_norm2")}
    un = ~post.seen
    vals = {k: np.where(un, fill[k], getattr(own, k)) for k in fill}
    return PromptStats(**vals)


def reward_variance(post: Posterior) -> np.ndarray:
    """(B,) posterior mean E[p(1-p)] of each prompt (M46); unseen prompts: the pool's average."""
    own = _pq((post.pv, post.pw), 1, 1)
    if post.seen.all():
        return own
    return np.where(post.seen, own, float(_pq((post.pool.pv, post.pool.pw), 1, 1).mean()))


def _inverse_cdf(pv: np.ndarray, pw: np.ndarray, rows: np.ndarray, u: np.ndarray, *, strict: bool) -> np.ndarray:
    """Draws of p by inverse CDF: entry (d, j) from the discrete posterior (pv[r], pw[r]) of row r = rows[d, j]
    ((R, K) each) at the uniform u[d, j]: the first grid value whose cumulative weight exceeds u times the row's
    total (``strict``: reaches it; the two differ only on ties of measure zero)."""
    cdf = np.cumsum(pw, -1)
    k = _count_below(cdf, rows, u * cdf[rows, -1], strict=strict)
    return pv[rows, np.minimum(k, pv.shape[1] - 1)]


def _count_below(cdf: np.ndarray, rows: np.ndarray, x: np.ndarray, *, strict: bool) -> np.ndarray:
    """How many entries of the non-decreasing row ``cdf[r]`` lie below ``x`` (``strict``: < x, else <= x), for every
    entry r of ``rows`` and x of ``x`` (same shapes): ``np.searchsorted(cdf[r], x, side="left" / "right")`` per entry,
    by one binary search over all entries at once (log2 K passes, not a Python call per row)."""
    K = cdf.shape[1]
    flat, base = cdf.reshape(-1), rows * K - 1
    pos = np.zeros(x.shape, dtype=np.int64)
    step = 1 << (K.bit_length() - 1)
    while step:
        cand = np.minimum(pos + step, K)                # the first cand entries lie below x when entry cand-1 does
        v = flat[base + cand]
        pos = np.where((v < x) if strict else (v <= x), cand, pos)
        step >>= 1
    return pos


def _row_params(post: Posterior) -> dict[str, np.ndarray]:
    """(R,) arrays the score draws read of each posterior row (M86, M48): the means and slopes of (log m_1, log
    m_0), the Cholesky factor (l00, l10, l11) of ``logm_cov``, eta's mean, sd (1 where it is 0, then ``has_sd``
    is False) and the normal CDF at eta's lower truncation point 0 (``lo``)."""
    from scipy.special import ndtr

    cov, eta, eta_sd = post.logm_cov, post.eta, post.eta_sd
    l00 = np.sqrt(np.maximum(cov[:, 0, 0], 0.0))
    l10 = np.where(l00 > 0, cov[:, 1, 0] / np.where(l00 > 0, l00, 1.0), 0.0)
    safe = np.where(eta_sd > 0, eta_sd, 1.0)
    return {"a1": post.logm[:, 0], "a0": post.logm[:, 1], "b1": post.slope[:, 0], "b0": post.slope[:, 1],
            "l00": l00, "l10": l10, "l11": np.sqrt(np.maximum(cov[:, 1, 1] - l10**2, 0.0)), "eta": eta, "safe": safe,
            "has_sd": eta_sd > 0, "lo": ndtr(-eta / safe)}


def _draw_rows(rng: np.random.Generator, p: np.ndarray, r: dict[str, np.ndarray], scores: bool,
               c_range: tuple[float, float] = _NO_RANGE):
    """(p, c2, c3, ||g||^2) for drawn p (D, B) and one draw of the score parameters per entry given it, ``r`` the
    :func:`_row_params` of each entry's posterior row (arrays broadcasting to p): log m ~ N(logm + slope c(p),
    logm_cov) (M86), eta ~ N(eta, eta_sd^2) cut to [0, 1/(p(1-p))] (M48)."""
    from scipy.special import ndtr, ndtri

    q = p * (1 - p)
    if not scores:
        return p, q, q, np.zeros_like(q)
    u0, u1 = rng.standard_normal(p.shape), rng.standard_normal(p.shape)
    c = _covariate(p, c_range)
    m1 = np.exp((r["a1"] + r["b1"] * c) + r["l00"] * u0)
    m0 = np.exp((r["a0"] + r["b0"] * c) + r["l10"] * u0 + r["l11"] * u1)
    e = q * ((1 - p) * m1 + p * m0)
    hi = 1.0 / np.maximum(q, 1e-300)                              # c2 >= 0: eta p(1-p) <= 1
    eta, safe, lo = r["eta"], r["safe"], r["lo"]
    up = ndtr((hi - eta) / safe)
    u = lo + (up - lo) * rng.uniform(size=p.shape)
    x = np.where(r["has_sd"], eta + safe * ndtri(np.clip(u, 1e-300, 1 - 1e-16)), eta)
    g2 = np.clip(x, 0.0, hi) * q * e
    return p, np.clip(e - g2, 0.0, None), q * (p * m1 + (1 - p) * m0) + g2, g2


def draw(post: Posterior, rng: np.random.Generator, draws: int, *, with_g2: bool = False) -> tuple[np.ndarray, ...]:
    """(D, B) joint posterior draws of (p, c2, c3), and of ||g(x)||^2 with ``with_g2`` (docs/math.md M49; the
    prompt-IS certificate needs it, M59).

    Visited prompts: p from its posterior, (log m_1, log m_0) ~ N(logm + logm_slope c(p), logm_cov) given it
    (M86), eta ~ N(eta, eta_sd^2) cut to [0, 1/(p(1-p))], independent of them given the history; with
    e = E||W(Z-p)||^2 and ||g||^2 = eta p(1-p) e at the drawn values, c2 = e - ||g||^2 and c3 = E||W||^2 p(1-p) +
    ||g||^2. An unseen prompt: per draw a visited prompt chosen uniformly, then a draw of its posterior.
    """
    D = int(draws)
    B = len(post)
    u = rng.uniform(size=(D, B))                   # p of every prompt by inverse CDF (an unseen one's is replaced)
    un = np.flatnonzero(~post.seen)
    if not len(un):
        rows = _row_params(post)                                                         # (B,) each
        p = _inverse_cdf(post.pv, post.pw, np.broadcast_to(np.arange(B), (D, B)), u, strict=False)
    else:  # an unseen prompt: per draw a random visited prompt's posterior (row B + donor of post + pool)
        pool, sn = post.pool, np.flatnonzero(post.seen)
        donor = rng.integers(len(pool), size=(D, len(un)))
        idx = np.empty((D, B), dtype=np.int64)
        idx[:, sn], idx[:, un] = sn, B + donor
        rows = {k: np.concatenate([v, w])[idx] for (k, v), w in zip(_row_params(post).items(),
                                                                     _row_params(pool).values())}  # (D, B) each
        p = np.empty((D, B))
        p[:, sn] = _inverse_cdf(post.pv[sn], post.pw[sn], np.broadcast_to(np.arange(len(sn)), (D, len(sn))),
                                u[:, sn], strict=False)
        p[:, un] = _inverse_cdf(pool.pv, pool.pw, donor, rng.uniform(size=donor.shape), strict=True)
    out = _draw_rows(rng, p, rows, scores=post.hyper.scores, c_range=post.hyper.c_range)
    return out if with_g2 else out[:3]


def draw_mixture(posts: Posterior | Sequence[Posterior], rng: np.random.Generator,
                 draws: int, *, with_g2: bool = False) -> tuple[np.ndarray, ...]:
    """(D, B) draws of (c2, c3), and of ||g(x)||^2 with ``with_g2`` (the prompt-IS certificate, M59, M89), split as
    evenly as possible over the posteriors ``posts`` (e.g. the population draws of
    :func:`ugrpo.stats.population.population_posteriors`, M60, or the bootstrap replicates of
    :func:`bootstrap_posteriors`, M51): draws from their equal-weight mixture."""
    posts = [posts] if isinstance(posts, Posterior) else list(posts)
    n = len(posts)
    parts = [draw(p, rng, draws // n + (k < draws % n), with_g2=with_g2)[1:] for k, p in enumerate(posts)]
    return tuple(np.concatenate(x) for x in zip(*parts))
