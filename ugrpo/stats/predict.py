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
* (log m_1(x), log m_0(x)), m_z = E[||W||^2 | Z = z, x], bivariate normal across prompts; a prompt's observed log
  mean of ||W||^2 over its k_z samples of reward z has sampling variance log(1 + cv2_z / k_z) with the pooled
  within-prompt squared coefficient of variation cv2_z (scale-free, so a prompt with 1000x larger norms is as well
  measured as any other); method-of-moments (unweighted) between-prompt variances and the correlation of the
  two, posterior by the conjugate normal formula (M47). A prompt with no sample of one reward gets that log moment
  from the regression on the other;
* ||g(x)||^2 = p^2 (1-p)^2 ||E[W | Z=1] - E[W | Z=0]||^2 (E W = 0), written eta_x p(1-p) E||W (Z - p)||^2 with the
  scale-free eta_x >= 0 (c2 >= 0 needs eta_x <= 1/(p(1-p))); normal random effects on eta from the per-visit
  unbiased T0 (M14) divided by the prompt's predicted p(1-p) E||W (Z - p)||^2, truncated at 0 (M48);
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
    mu : (2,) population mean of (log m_1, log m_0)
    cov : (2, 2) between-prompt covariance of (log m_1, log m_0)
    cv2 : (2,) pooled within-prompt squared coefficient of variation of ||W||^2 given Z = 1, Z = 0
    eta_mu, eta_tau2 : population mean and variance of eta = ||g||^2 / (p(1-p) E||W (Z - p)||^2)
    kappa : the per-visit variance of T0 / E||Z W||^2 (0: eta is not measured, held at eta_mu)
    """

    p_prior: np.ndarray
    scores: bool
    mu: np.ndarray
    cov: np.ndarray
    cv2: np.ndarray
    eta_mu: float = 0.0
    eta_tau2: float = 0.0
    kappa: float = 0.0


@dataclass(frozen=True)
class Posterior:
    """Posterior of B prompts' moments (arrays of shape (B,) unless noted; docs/math.md M49).

    Attributes
    ----------
    pv, pw : (B, K) each prompt's posterior of p: values (its own grid, :func:`ugrpo.stats.prior_p.posterior_nodes`)
        and weights
    logm : (B, 2) posterior mean of (log m_1, log m_0); logm_cov : (B, 2, 2) its covariance
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

    def take(self, idx: np.ndarray) -> Posterior:
        """The posterior of the prompts ``idx`` (e.g. a drawn batch); the pool is shared."""
        i = np.asarray(idx, dtype=np.int64)
        return replace(self, pv=self.pv[i], pw=self.pw[i], logm=self.logm[i], logm_cov=self.logm_cov[i],
                       eta=self.eta[i], eta_sd=self.eta_sd[i], seen=self.seen[i])

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


def _bivariate(y: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Population mean (2,) and covariance (2, 2) of the log moments: :func:`random_effects` per reward, the moment
    estimate of the covariance on the prompts that observed both, correlation cut to [-0.95, 0.95] (M47)."""
    mu, tau2 = np.zeros(2), np.zeros(2)
    obs = v < _MISSING
    for z in range(2):
        m, t = random_effects(y[obs[:, z], z], v[obs[:, z], z])
        mu[z], tau2[z] = (m if np.isfinite(m) else 0.0), t
    if not obs[:, 0].any() and obs[:, 1].any():
        mu[0] = mu[1]  # no success anywhere: m_1's population mean is m_0's
    if not obs[:, 1].any() and obs[:, 0].any():
        mu[1] = mu[0]
    both = obs.all(1)
    cov = 0.0
    if both.sum() >= 3 and tau2.min() > 0:
        c = float(((y[both, 0] - mu[0]) * (y[both, 1] - mu[1])).mean())
        r = max(-0.95, min(0.95, c / math.sqrt(tau2[0] * tau2[1])))
        cov = r * math.sqrt(tau2[0] * tau2[1])
    return mu, np.array([[tau2[0], cov], [cov, tau2[1]]])


def _normal_update(mu: np.ndarray, cov: np.ndarray, y: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Posterior (mean (n, 2), cov (n, 2, 2)) of theta ~ N(mu, cov) from y = theta + N(0, diag v), per row:
    mean = mu + K (y - mu), cov_post = cov - K cov, K = cov (cov + diag v)^-1 (the conjugate formula, M47)."""
    n = len(y)
    Sy = cov[None] + v[:, :, None] * np.eye(2)[None]                                    # (n, 2, 2)
    det = Sy[:, 0, 0] * Sy[:, 1, 1] - Sy[:, 0, 1] * Sy[:, 1, 0]
    inv = np.stack([np.stack([Sy[:, 1, 1], -Sy[:, 0, 1]], -1), np.stack([-Sy[:, 1, 0], Sy[:, 0, 0]], -1)], 1)
    inv = inv / det[:, None, None]
    K = np.einsum("ij,njk->nik", cov, inv)                                              # (n, 2, 2)
    mean = mu[None] + np.einsum("nij,nj->ni", K, y - mu[None])
    post = cov[None] - np.einsum("nij,jk->nik", K, cov)
    post = 0.5 * (post + post.transpose(0, 2, 1))
    return mean, np.broadcast_to(post, (n, 2, 2)).copy()


def _pq(pp: tuple[np.ndarray, np.ndarray], i: int, j: int) -> np.ndarray:
    """E[p^i (1-p)^j] under each prompt's posterior ``pp`` = (values, weights), both (B, K)."""
    v, w = pp
    return (w * v**i * (1 - v) ** j).sum(-1)


def _e_parts(pp, em1, em0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Posterior means of (E||W (Z - p)||^2, E||W||^2 Var(Z), p(1-p) E||W (Z - p)||^2) at the grid posterior ``pw`` of
    p and the means em1, em0 of m_1, m_0 (independent given the history; polynomials in p, M38 and M49)."""
    q1, q0 = _pq(pp, 1, 2), _pq(pp, 2, 1)                          # E p(1-p)^2, E p^2 (1-p)
    return q1 * em1 + q0 * em0, q0 * em1 + q1 * em0, _pq(pp, 2, 3) * em1 + _pq(pp, 3, 2) * em0


def fit_hyper(history, *, scores: bool = True) -> Hyper:
    """The population model of a history (:class:`Hyper`, docs/math.md M46-M48); ``history``: sums or ``.sums``."""
    return _fit(_sums_of(history), scores)[0]


def _parts(s: dict, h: Hyper) -> dict:
    """Per-prompt grid posterior of p, log-moment posterior and predicted E||W (Z - p)||^2 under the model ``h``."""
    y, v, _ = _log_means(s, h.scores, h.cv2)
    logm, logm_cov = _normal_update(h.mu, h.cov, y, v)
    pp = posterior_nodes(h.p_prior, s["successes"], s["samples"])
    em = np.exp(logm + 0.5 * np.diagonal(logm_cov, axis1=1, axis2=2))
    e, _, d = _e_parts(pp, em[:, 0], em[:, 1])
    return {"pp": pp, "logm": logm, "logm_cov": logm_cov, "e_hat": e, "d_hat": d, "u_hat": _pq(pp, 1, 0) * em[:, 0]}


def _fit(s: dict, scores: bool) -> tuple[Hyper, dict]:
    prior = fit_p_prior(s["successes"], s["samples"])
    y, v, cv2 = _log_means(s, scores)
    mu, cov = _bivariate(y, v) if scores else (np.zeros(2), np.zeros((2, 2)))
    hyper = Hyper(p_prior=prior, scores=scores, mu=mu, cov=cov, cv2=cv2)
    parts = _parts(s, hyper)
    if not scores:
        return hyper, parts
    eta_mu, eta_tau2, kappa = _fit_eta(s, parts)
    return replace(hyper, eta_mu=eta_mu, eta_tau2=eta_tau2, kappa=kappa), parts


def _eta_obs(s: dict, parts: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(r_x, u_x / d_x, ok): the observed eta = mean per-visit T0 / d_x and its noise scale (M48).

    d_x = p(1-p) E||W (Z - p)||^2 and u_x = E||Z W||^2 = p m_1 at the posterior; a per-visit T0 has standard
    deviation about sqrt(kappa) u_x (T0 is built from Z W), so r_x has variance kappa (u_x / d_x)^2 / visits.
    """
    d, u, vis = parts["d_hat"], parts["u_hat"], s["visits"]
    ok = (vis > 0) & (d > 0) & (u > 0)
    safe = np.where(ok, d, 1.0)
    return np.where(ok, s["t0_sum"] / np.maximum(vis, 1e-300) / safe, 0.0), np.where(ok, u / safe, 0.0), ok


def _fit_eta(s: dict, parts: dict) -> tuple[float, float, float]:
    """(eta_mu, eta_tau2, kappa) of the ||g||^2 model (M48): kappa pooled from the per-visit spread of T0 / u_x,
    then :func:`random_effects` on r_x with variances kappa (u_x / d_x)^2 / visits."""
    r, ratio, ok = _eta_obs(s, parts)
    vis, u = s["visits"], parts["u_hat"]
    kappa = 0.0
    if "t0_sq" in s:
        two = ok & (vis > 1)
        dof = (vis[two] - 1).sum()
        if dof > 0:
            kappa = float((np.maximum(s["t0_sq"][two] - s["t0_sum"][two] ** 2 / vis[two], 0.0) / u[two] ** 2).sum()
                          / dof)
    eta_mu = eta_tau2 = 0.0
    if kappa > 0:
        eta_mu, eta_tau2 = random_effects(r[ok], kappa * ratio[ok] ** 2 / vis[ok], weighted=True)
    elif ok.any():  # no per-visit spread known: complete pooling (kappa = 0 holds eta at eta_mu)
        eta_mu = float(s["t0_sum"][ok].sum() / (vis[ok] * parts["d_hat"][ok]).sum())
    return float(max(eta_mu, 0.0) if np.isfinite(eta_mu) else 0.0), eta_tau2, kappa


def _eta_posterior(h: Hyper, s: dict, parts: dict) -> tuple[np.ndarray, np.ndarray]:
    """Normal posterior (mean, sd) of eta per prompt (M48): prior N(eta_mu, eta_tau2), one observation r_x with
    variance kappa (u_x / d_x)^2 / visits."""
    P = len(parts["e_hat"])
    if not h.scores or h.kappa <= 0 or h.eta_tau2 <= 0:
        return np.full(P, h.eta_mu if h.scores else 0.0), np.zeros(P)
    r, ratio, ok = _eta_obs(s, parts)
    prec_obs = np.where(ok, s["visits"] / np.where(ok, h.kappa * ratio**2, 1.0), 0.0)
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
    (pv, pw), logm, logm_cov = parts["pp"], parts["logm"], parts["logm_cov"]
    eta, eta_sd = _eta_posterior(h, s, parts)
    seen = s["visits"] > 0
    full = Posterior(pv=pv, pw=pw, logm=logm, logm_cov=logm_cov, eta=eta, eta_sd=eta_sd, seen=seen, pool=None,
                     hyper=h)
    if seen.any():
        pool = full.take(np.flatnonzero(seen))
    else:  # nothing visited: the unseen prompts get the population model itself
        pool = replace(full.take(np.zeros(1, dtype=np.int64)), pv=P_GRID[None].copy(), pw=h.p_prior[None].copy(),
                       logm=h.mu[None].copy(), logm_cov=h.cov[None].copy(), eta=np.array([h.eta_mu]),
                       eta_sd=np.array([math.sqrt(h.eta_tau2)]), seen=np.ones(1, bool))
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
    em = np.exp(post.logm + 0.5 * np.diagonal(post.logm_cov, axis1=1, axis2=2))
    e, m2var, d = _e_parts((post.pv, post.pw), em[:, 0], em[:, 1])
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


def _draw_rows(rng: np.random.Generator, p, logm, logm_cov, eta, eta_sd, scores: bool):
    """(p, c2, c3, ||g||^2) for drawn p and one draw of the score parameters per entry (shapes (...,), (..., 2),
    (..., 2, 2), (...,))."""
    from scipy.special import ndtr, ndtri

    a = eta
    q = p * (1 - p)
    if not scores:
        return p, q, q, np.zeros_like(q)
    l00 = np.sqrt(np.maximum(logm_cov[..., 0, 0], 0.0))
    l10 = np.where(l00 > 0, logm_cov[..., 1, 0] / np.where(l00 > 0, l00, 1.0), 0.0)
    l11 = np.sqrt(np.maximum(logm_cov[..., 1, 1] - l10**2, 0.0))
    u0, u1 = rng.standard_normal(a.shape), rng.standard_normal(a.shape)
    m1 = np.exp(logm[..., 0] + l00 * u0)
    m0 = np.exp(logm[..., 1] + l10 * u0 + l11 * u1)
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

    Visited prompts: p from its posterior, (log m_1, log m_0) ~ N(logm, logm_cov), eta ~ N(eta, eta_sd^2) cut to
    [0, 1/(p(1-p))], independent given the history; with e = E||W(Z-p)||^2 and ||g||^2 = eta p(1-p) e at the drawn
    values, c2 = e - ||g||^2 and c3 = E||W||^2 p(1-p) + ||g||^2. An unseen prompt: per draw a visited prompt
    chosen uniformly, then a draw of its posterior.
    """
    D = int(draws)
    keys = ("logm", "logm_cov", "eta", "eta_sd")
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
    out = _draw_rows(rng, p, *args, scores=post.hyper.scores)
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
                 draws: int) -> tuple[np.ndarray, np.ndarray]:
    """(D, B) draws of (c2, c3) split as evenly as possible over the posteriors ``posts`` (e.g. the bootstrap
    replicates of :func:`bootstrap_posteriors`, M51): draws from their equal-weight mixture."""
    posts = [posts] if isinstance(posts, Posterior) else list(posts)
    n = len(posts)
    parts = [draw(p, rng, draws // n + (k < draws % n))[1:] for k, p in enumerate(posts)]
    return np.concatenate([c2 for c2, _ in parts]), np.concatenate([c3 for _, c3 in parts])
