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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from .allocation import PromptStats
from .prior_p import P_GRID, fit_beta_prior, fit_p_prior, posterior_nodes

__all__ = ["Hyper", "Posterior", "P_GRID", "fit_beta_prior", "fit_p_prior", "fit_hyper", "posterior", "predict",
           "posterior_means", "reward_variance", "draw", "draw_mixture", "bootstrap_posteriors", "random_effects",
           "check_sums", "REQUIRED", "SECOND_MOMENTS"]

REQUIRED: tuple[str, ...] = ("visits", "samples", "successes", "w2_success", "w2_failure", "t0_sum")
"""history sums every prediction reads"""
SECOND_MOMENTS: tuple[str, ...] = ("w4_success", "w4_failure", "t0_sq")
"""sums of z ||W||^4, (1 - z) ||W||^4 and squared per-visit T0: the within-prompt spreads (optional)"""
CV2_DEFAULT = 1.0  # squared coefficient of variation of ||W||^2 when no second moments were kept (exponential-like)
_MISSING = 1e20    # sampling variance of an unobserved log moment (no information)
_FLOOR = 1e-9      # smallest mean ||W||^2 on the log scale, relative to the pooled mean
_MIN_SPREAD = 1e-6  # variance of the prompts' covariate means below which no slope is fitted (M86)
_NO_RANGE = (-math.inf, math.inf)
_LINE_LEVEL = 0.95  # the line of M86 is kept when its F test rejects "no dependence on p" at this level


def check_sums(sums: Mapping[str, np.ndarray], where: str = "history") -> dict[str, np.ndarray]:
    """The history sums as float64 (P,) arrays; a ValueError naming the field and the first bad entry."""
    out = {}
    P = None
    for k in REQUIRED + SECOND_MOMENTS:
        if k not in sums:
            if k in REQUIRED:
                raise ValueError(f"{where}: field {k!r} is missing; a history needs {list(REQUIRED)}")
            continue
        v = np.asarray(sums[k], dtype=np.float64)
        P = v.shape[0] if P is None else P
        if v.shape != (P,):
            raise ValueError(f"{where}: field {k!r} has shape {v.shape}, expected ({P},) like {REQUIRED[0]!r}")
        bad = ~np.isfinite(v) | ((v < 0) if k != "t0_sum" else np.zeros(P, bool))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{where}: field {k!r} entry {i} is {float(v[i])!r}; history sums must be finite and "
                             f"{'' if k == 't0_sum' else 'non-negative '}(counts and sums of squares)")
        out[k] = v
    if (out["successes"] > out["samples"] * (1 + 1e-12)).any():
        i = int(np.flatnonzero(out["successes"] > out["samples"] * (1 + 1e-12))[0])
        raise ValueError(f"{where}: field 'successes' entry {i} ({out['successes'][i]}) exceeds 'samples' "
                         f"({out['samples'][i]}); rewards must lie in [0, 1]")
    return out


def _sums_of(history) -> dict[str, np.ndarray]:
    return check_sums(history.sums if hasattr(history, "sums") else history)


@dataclass(frozen=True)
class Hyper:
    """The fitted population model of one history (docs/math.md M46-M48).

    Attributes
    ----------
    p_prior : (K,) the population's weights on :data:`P_GRID`
    scores : False: ||W||^2 = 1 and ||g||^2 = 0 held fixed (``vip``, ``knapsack``)
    mu : (2,) the population mean of (log m_1, log m_0) at c(p) = 0; given p it is mu + (beta c(p), 0) with
        c(p) = log(1-p) cut to ``c_range`` (M86; beta = 0: no dependence on p, M47)
    beta : slope of log m_1's population mean in log(1-p)
    c_range : (low, high) the range of the covariate the line was fitted on
    cov : (2, 2) between-prompt covariance of (log m_1, log m_0) given p
    cv2 : (2,) pooled within-prompt squared coefficient of variation of ||W||^2 given Z = 1, Z = 0
    eta_mu, eta_tau2 : population mean and variance of eta = ||g||^2 / (p(1-p) E||W (Z - p)||^2)
    kappa : the per-visit variance of T0 / E||Z W||^2 (0: eta is not measured, held at eta_mu)
    """

    p_prior: np.ndarray
    scores: bool
    mu: np.ndarray
    cov: np.ndarray
    cv2: np.ndarray
    beta: float = 0.0
    c_range: tuple[float, float] = _NO_RANGE
    eta_mu: float = 0.0
    eta_tau2: float = 0.0
    kappa: float = 0.0


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


def random_effects(y: np.ndarray, v: np.ndarray, *, weighted: bool = False) -> tuple[float, float]:
    """(mu, tau^2) of y_j = theta_j + e_j, theta_j iid with mean mu and variance tau^2, e_j independent with mean 0
    and variance v_j, by the method of moments (docs/math.md M47).

    ``weighted=False`` (Hedges): mu = mean(y), tau^2 = max(0, s_y^2 - mean(v)) (E s_y^2 = tau^2 + mean(v)). Used for
    the log score moments, where a prompt's v_j (how many samples of reward z it has) depends on its p, which
    correlates with theta_j (rare hard prompts with large scores have few successes): precision weights would
    then under-state the spread. ``weighted=True`` (DerSimonian-Laird): w = 1/v, tau^2 = max(0, (Q - (J - 1)) /
    (S1 - S2 / S1)) with S1 = sum w, S2 = sum w^2 and Q the weighted sum of squares about the weighted mean, then
    mu = the mean with weights 1/(v + tau^2). Used for eta (M48), whose noise varies by orders of magnitude with p
    while eta itself does not depend on p. Fewer than two observations: tau^2 = 0 (mu = nan with none).

    Examples
    --------
    >>> random_effects(np.array([0.0, 2.0]), np.array([1.0, 1.0]))  # s_y^2 = 2, mean v = 1
    (1.0, 1.0)
    >>> random_effects(np.array([0.0, 2.0]), np.array([1.0, 1.0]), weighted=True)  # Q = 2, S1 = 2, S2 = 2
    (1.0, 1.0)
    """
    y, v = np.asarray(y, dtype=np.float64), np.asarray(v, dtype=np.float64)
    if len(y) == 0:
        return math.nan, 0.0
    if not weighted:
        return float(y.mean()), (max(0.0, float(y.var(ddof=1) - v.mean())) if len(y) > 1 else 0.0)
    w = 1.0 / v
    mu_fe = float((w * y).sum() / w.sum())
    if len(y) < 2:
        return mu_fe, 0.0
    q = float((w * (y - mu_fe) ** 2).sum())
    s1, s2 = float(w.sum()), float((w**2).sum())
    tau2 = max(0.0, (q - (len(y) - 1)) / (s1 - s2 / s1)) if s1 - s2 / s1 > 0 else 0.0
    ws = 1.0 / (v + tau2)
    return float((ws * y).sum() / ws.sum()), tau2


def _log_means(s: dict, scores: bool, cv2: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y (P, 2), sampling variances (P, 2), cv2 (2,)): observed log mean ||W||^2 by reward, bias-corrected (M47).

    cv2_z = sum_x (Q_xz - S_xz^2 / k_xz) / mbar_xz^2 / sum_x (k_xz - 1) over prompts with k_xz > 1 (the pooled
    within-prompt squared coefficient of variation), unless given; v = log(1 + cv2 / k), y = log mbar + v / 2.
    """
    k = _counts(s)                                                                      # (P, 2)
    if not scores:
        return np.zeros_like(k), np.full_like(k, _MISSING), np.zeros(2)
    S = np.stack([s["w2_success"], s["w2_failure"]], 1)
    n_all = k.sum()
    pool = S.sum() / n_all if n_all > 0 and S.sum() > 0 else 1.0
    mean = np.where(k > 0, S / np.maximum(k, 1e-300), pool)
    if cv2 is None:
        cv2 = np.full(2, CV2_DEFAULT)
        if all(f in s for f in ("w4_success", "w4_failure")):
            Q = np.stack([s["w4_success"], s["w4_failure"]], 1)
            for z in range(2):
                ok = (k[:, z] > 1) & (mean[:, z] > 0)
                dof = (k[ok, z] - 1).sum()
                if dof > 0:
                    spread = np.maximum(Q[ok, z] - S[ok, z] * mean[ok, z], 0.0) / mean[ok, z] ** 2
                    cv2[z] = float(spread.sum() / dof)
    v = np.where(k > 0, np.log1p(cv2[None, :] / np.maximum(k, 1e-300)), _MISSING)
    y = np.where(k > 0, np.log(np.maximum(mean, _FLOOR * pool)) + v / 2, 0.0)
    return y, v, np.asarray(cv2, dtype=np.float64)


def _pq(pp: tuple[np.ndarray, np.ndarray], i: int, j: int) -> np.ndarray:
    """E[p^i (1-p)^j] under each prompt's posterior ``pp`` = (values, weights), both (B, K)."""
    v, w = pp
    return (w * v**i * (1 - v) ** j).sum(-1)


def _covariate(pv: np.ndarray, c_range: tuple[float, float] = _NO_RANGE) -> np.ndarray:
    """The covariate of log m_1 at success rates pv: log(1-p) (M86), cut to ``c_range``, the range the population
    line was fitted on (no extrapolation)."""
    return np.clip(np.log1p(-pv), c_range[0], c_range[1])


def _covariate_moments(pv: np.ndarray, pw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean (B,), variance (B,)) of the covariate under each prompt's grid posterior (values pv, weights pw)."""
    c = _covariate(pv)
    m = (pw * c).sum(-1)
    return m, (pw * (c - m[:, None]) ** 2).sum(-1)


def _bivariate(y: np.ndarray, v: np.ndarray, c_mean: np.ndarray | None = None, c_var: np.ndarray | None = None
               ) -> tuple[np.ndarray, float, np.ndarray, tuple[float, float]]:
    """Population intercepts mu (2,), the slope beta of log m_1 in log(1-p), covariance (2, 2) of the log moments
    about their means, and the covariate's fitted range (M47, M86).

    log m_1, over the prompts with a success: the least-squares line y_1 = mu_1 + beta c on each prompt's posterior
    mean of c = log(1-p) given its rewards alone, ``c_mean`` (regression calibration: E[y | s, n] = mu + beta E[c | s,
    n]), and tau_1^2 = (RSS - sum_x (1 - h_x)(v_x + beta^2 Var(c | s_x, n_x))) / (J - 2) cut at 0 (E RSS = sum_x
    (1 - h_x)(tau^2 + v_x + beta^2 Var c), h the leverages; ``c_var`` the variances), kept when the F test of the
    line against the mean rejects at level :data:`_LINE_LEVEL`. log m_0, and log m_1 with fewer than 3 prompts, no
    spread of ``c_mean`` or a line not kept: beta = 0 and :func:`random_effects` (the Hedges estimate). The
    covariance is the mean product of the two residuals on the prompts that observed both, correlation cut to
    [-0.95, 0.95].
    """
    from scipy.stats import f as f_dist

    mu, tau2 = np.zeros(2), np.zeros(2)
    beta, c_range = 0.0, _NO_RANGE
    obs = v < _MISSING
    resid = np.zeros_like(y)
    for z in range(2):
        o = obs[:, z]
        yz, vz = y[o, z], v[o, z]
        line = z == 0 and c_mean is not None and o.sum() >= 3 and c_mean[o].var() > _MIN_SPREAD
        if line:
            x = c_mean[o]
            X = np.stack([np.ones_like(x), x], 1)
            XtX_inv = np.linalg.inv(X.T @ X)
            coef = XtX_inv @ X.T @ yz
            r = yz - X @ coef
            rss, J = float(r @ r), int(o.sum())
            line = (float(((yz - yz.mean()) ** 2).sum()) - rss) * (J - 2) > f_dist.ppf(_LINE_LEVEL, 1, J - 2) * rss
        if line:  # the line explains more of the spread than chance would (F test at _LINE_LEVEL)
            lev = np.einsum("ij,jk,ik->i", X, XtX_inv, X)
            t2 = (rss - float(((1 - lev) * (vz + coef[1] ** 2 * c_var[o])).sum())) / (J - 2)
            mu[z], beta, tau2[z], c_range = coef[0], float(coef[1]), max(0.0, t2), (float(x.min()), float(x.max()))
            resid[o, z] = r
        else:
            m, t = random_effects(yz, vz)
            mu[z], tau2[z] = (m if np.isfinite(m) else 0.0), t
            resid[o, z] = yz - mu[z]
    if not obs[:, 0].any() and obs[:, 1].any():
        mu[0] = mu[1]  # no success anywhere: m_1's population mean is m_0's
    if not obs[:, 1].any() and obs[:, 0].any():
        mu[1] = mu[0]
    both = obs.all(1)
    cov = 0.0
    if both.sum() >= 3 and tau2.min() > 0:
        c = float((resid[both, 0] * resid[both, 1]).mean())
        r = max(-0.95, min(0.95, c / math.sqrt(tau2[0] * tau2[1])))
        cov = r * math.sqrt(tau2[0] * tau2[1])
    return mu, beta, np.array([[tau2[0], cov], [cov, tau2[1]]]), c_range


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
    v is :data:`_MISSING`, which leaves that component out)."""
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


def fit_hyper(history, *, scores: bool = True) -> Hyper:
    """The population model of a history (:class:`Hyper`, docs/math.md M46-M48); ``history``: sums or ``.sums``."""
    return _fit(_sums_of(history), scores)[0]


def _parts(s: dict, h: Hyper) -> dict:
    """Per-prompt joint posterior of p and the log moments under the model ``h`` (M86), and what the eta model
    reads (M85): the divisor's mean and squared coefficient of variation and u = E||Z W||^2 = E p m_1."""
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


def score_population(s: dict, p_prior: np.ndarray) -> dict:
    """The score part of :class:`Hyper` fitted to the sums ``s`` under the p population ``p_prior`` (M47, M86):
    ``mu``, ``beta``, ``cov``, ``c_range`` (:func:`_bivariate` on each prompt's covariate moments given its rewards)
    and ``cv2``."""
    y, v, cv2 = _log_means(s, True)
    mu, beta, cov, c_range = _bivariate(y, v, *_covariate_moments(*posterior_nodes(p_prior, s["successes"],
                                                                                   s["samples"])))
    return {"mu": mu, "beta": beta, "cov": cov, "c_range": c_range, "cv2": cv2}


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


def _eta_obs(s: dict, parts: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(r_x, noise_x, cv2_x, ok): the observed eta, its T0 noise per unit kappa and the squared coefficient of
    variation of its divisor (M48, M85).

    r_x = sum_v T0_v / (visits d_x) with d_x the posterior mean of p(1-p) E||W (Z - p)||^2; a per-visit T0 has
    standard deviation about sqrt(kappa) u_x (u_x = E||Z W||^2 = p m_1), so the T0 part of Var r_x is kappa noise_x,
    noise_x = u_x^2 / (visits d_x^2); the divisor's own posterior uncertainty adds E[eta^2] cv2_x (M85).
    """
    d, u, vis = parts["div"], parts["u_hat"], s["visits"]
    den = vis * d
    ok = (vis > 0) & (den > 0) & (u > 0)
    safe = np.where(ok, den, 1.0)
    r = np.where(ok, s["t0_sum"] / safe, 0.0)
    return r, np.where(ok, vis * u**2 / safe**2, 0.0), np.where(ok, parts["div_cv2"], 0.0), ok


def _fit_eta(s: dict, parts: dict) -> tuple[float, float, float]:
    """(eta_mu, eta_tau2, kappa) of the ||g||^2 model (M48, M85): kappa pooled from the per-visit spread of
    T0 / u_x, then :func:`random_effects` (weighted) on r_x with variances kappa noise_x + E[eta^2] cv2_x
    (the divisor's uncertainty, a multiplicative error), iterated to a fixed point of E[eta^2] = eta_mu^2 + tau^2
    from the unweighted second moment of r."""
    r, noise, cv2, ok = _eta_obs(s, parts)
    vis, u = s["visits"], parts["u_hat"]
    kappa = 0.0
    if "t0_sq" in s:
        two = ok & (vis > 1)
        dof = (vis[two] - 1).sum()
        if dof > 0:
            kappa = float((np.maximum(s["t0_sq"][two] - s["t0_sum"][two] ** 2 / vis[two], 0.0) / u[two] ** 2).sum()
                          / dof)
    eta_mu = eta_tau2 = 0.0
    if kappa > 0 and ok.sum() > 0:
        e2 = float((r[ok] ** 2).mean())
        for _ in range(100):
            eta_mu, eta_tau2 = random_effects(r[ok], kappa * noise[ok] + e2 * cv2[ok], weighted=True)
            new = eta_mu**2 + eta_tau2
            if abs(new - e2) <= 1e-9 * max(e2, 1e-300):
                break
            e2 = new
    elif ok.any():  # no per-visit spread known: complete pooling (kappa = 0 holds eta at eta_mu)
        eta_mu = float(s["t0_sum"][ok].sum() / (vis[ok] * parts["div"][ok]).sum())
    return float(max(eta_mu, 0.0) if np.isfinite(eta_mu) else 0.0), eta_tau2, kappa


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
    history : a :class:`~ugrpo.stats.history.PromptHistory` or its sums (mapping of (P,) arrays, :data:`REQUIRED`
        and optionally :data:`SECOND_MOMENTS`)
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


def _counts(s: dict) -> np.ndarray:
    return np.stack([s["successes"], s["samples"] - s["successes"]], 1)


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


def _draw_p(rng: np.random.Generator, pv: np.ndarray, pw: np.ndarray, D: int) -> np.ndarray:
    """(D, B) draws of p, column b from the discrete posterior (pv[b], pw[b]) (B, K) by inverse CDF."""
    cdf = np.cumsum(pw, -1)
    u = rng.uniform(size=(D, len(pw))) * cdf[:, -1]
    k = np.stack([np.searchsorted(cdf[b], u[:, b], side="right") for b in range(len(pw))], 1)
    return pv[np.arange(len(pv))[None], np.minimum(k, pv.shape[1] - 1)]


def _draw_rows(rng: np.random.Generator, p, logm, slope, logm_cov, eta, eta_sd, scores: bool,
               c_range: tuple[float, float] = _NO_RANGE):
    """(p, c2, c3, ||g||^2) for drawn p and one draw of the score parameters per entry given it (shapes (...,),
    (..., 2), (..., 2), (..., 2, 2), (...,), (...,)): log m ~ N(logm + slope c(p), logm_cov) (M86)."""
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
    hi = 1.0 / np.maximum(q, 1e-300)                              # c2 >= 0: eta p(1-p) <= 1
    safe = np.where(eta_sd > 0, eta_sd, 1.0)
    lo, up = ndtr(-eta / safe), ndtr((hi - eta) / safe)
    u = lo + (up - lo) * rng.uniform(size=a.shape)
    x = np.where(eta_sd > 0, eta + safe * ndtri(np.clip(u, 1e-300, 1 - 1e-16)), eta)
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
    keys = ("logm", "slope", "logm_cov", "eta", "eta_sd")
    args = [np.broadcast_to(getattr(post, k), (D,) + getattr(post, k).shape) for k in keys]
    p = _draw_p(rng, post.pv, post.pw, D)                                               # (D, B)
    un = np.flatnonzero(~post.seen)
    if len(un):  # an unseen prompt: per draw a random visited prompt's posterior
        pool = post.pool
        donor = rng.integers(len(pool), size=(D, len(un)))
        args = [x.copy() for x in args]
        for x, k in zip(args, keys):
            x[:, un] = getattr(pool, k)[donor]
        cdf = np.cumsum(pool.pw[donor], -1)                                              # (D, n_un, K)
        k = (rng.uniform(size=donor.shape)[..., None] * cdf[..., -1:] > cdf).sum(-1)
        p[:, un] = pool.pv[donor, np.minimum(k, pool.pv.shape[1] - 1)]
    out = _draw_rows(rng, p, *args, scores=post.hyper.scores, c_range=post.hyper.c_range)
    return out if with_g2 else out[:3]


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
