"""The one predictor's population model (docs/math.md M46-M48, M85, M86): :class:`Hyper`, the history sums it reads
and the estimators that fit it; the per-prompt posterior is :mod:`ugrpo.stats.predict_posterior`, the entry points
and the model's full description are :mod:`ugrpo.stats.predict`.

* :func:`check_sums`: the history sums (:data:`REQUIRED`, optionally :data:`SECOND_MOMENTS`) checked, a ValueError
  naming the field and the first bad entry;
* :func:`random_effects`: the method-of-moments (mu, tau^2) of a normal random-effects model (M47, M48);
* :func:`score_population`: the score part of :class:`Hyper` (M47, M86): each prompt's observed log mean ||W||^2 by
  reward with its sampling variance (``_log_means``), the population line of log m_1 in log(1-p) on each prompt's
  posterior mean of the covariate (``_bivariate``, regression calibration) and the covariance of the two;
* ``_fit_eta`` / ``_eta_obs``: eta's population (M48, M85) from each prompt's posterior under the rest of the model
  (what :func:`ugrpo.stats.predict_posterior.fit_hyper` passes as ``parts``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .prior_p import posterior_nodes

__all__ = ["Hyper", "check_sums", "random_effects", "score_population", "REQUIRED", "SECOND_MOMENTS"]

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
    p_prior : (K,) the population's weights on :data:`~ugrpo.stats.prior_p.P_GRID`
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


def _counts(s: dict) -> np.ndarray:
    return np.stack([s["successes"], s["samples"] - s["successes"]], 1)


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


def score_population(s: dict, p_prior: np.ndarray) -> dict:
    """The score part of :class:`Hyper` fitted to the sums ``s`` under the p population ``p_prior`` (M47, M86):
    ``mu``, ``beta``, ``cov``, ``c_range`` (:func:`_bivariate` on each prompt's covariate moments given its rewards)
    and ``cv2``."""
    y, v, cv2 = _log_means(s, True)
    mu, beta, cov, c_range = _bivariate(y, v, *_covariate_moments(*posterior_nodes(p_prior, s["successes"],
                                                                                   s["samples"])))
    return {"mu": mu, "beta": beta, "cov": cov, "c_range": c_range, "cv2": cv2}


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
