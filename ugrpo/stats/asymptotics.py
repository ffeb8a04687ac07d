"""Theorem 8: the limit law of n * gap under eta_i = beta / i, and its ingredients (docs/math.md M25-M31).

Under paper Thm 8 (A1, A3-A9), n * Delta(pi_theta_n) -> sum_k w_k chi2_{1,k}. This module computes

* :func:`identifiable_subspace`: Q, H* = Q^T H Q from a (possibly singular) Hessian (A7);
* :func:`estimator_covariance`: the exact Gamma = Cov(ghat(theta)) of vanilla / grpo / grpo_mean /
  oracle for B prompts x G samples, from exact per-prompt moments (:func:`prompt_covariances`; M28-M29);
* :func:`lyapunov_covariance`: Sigma, the limit covariance of sqrt(n) Q^T(theta_n - theta*) (M25-M26);
* :func:`gap_weights` / :func:`gap_limit`: the weights w_k (M27);
* :func:`weighted_chi2_cdf`, :func:`weighted_chi2_quantile`, :func:`weighted_chi2_sample`: the law
  sum_k w_k chi2_{1,k} (Ruben's exact chi-square mixture series, M30).

Deviation from the paper: the printed proof of Thm 8 uses Omega = Q^T Gamma Q in the Lyapunov equation;
the martingale increment of Algorithm 1 is beta Q^T (ghat - g), so the correct right-hand side is
beta^2 Q^T Gamma Q (docs/math.md M26). ``convention="corrected"`` (default) uses beta^2;
``convention="printed"`` reproduces the paper's text (weights smaller by the factor beta^2).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from scipy import optimize
from scipy import stats as sps
from torch import Tensor

from ugrpo.stats.exact_mse import prompt_error

__all__ = [
    "Convention", "Subspace", "identifiable_subspace", "lyapunov_covariance", "GapLimit", "gap_limit",
    "gap_weights", "weighted_chi2_cdf", "weighted_chi2_quantile", "weighted_chi2_sample",
    "PromptCovariances", "prompt_covariances", "estimator_covariance",
]

Convention = Literal["corrected", "printed"]
DT = torch.float64


# ----------------------------------------------------------------------------- validation
def _matrix(M: Tensor, name: str, r: int | None = None) -> Tensor:
    M = torch.as_tensor(M, dtype=DT)
    if M.ndim != 2 or M.shape[0] != M.shape[1] or (r is not None and M.shape[0] != r):
        want = "a square (r, r) matrix" if r is None else f"shape ({r}, {r})"
        raise ValueError(f"{name} must be {want}, got shape {tuple(M.shape)}")
    if not torch.isfinite(M).all():
        raise ValueError(f"{name} has non-finite entries")
    scale = max(1.0, float(M.abs().max()))
    asym = float((M - M.T).abs().max())
    if asym > 1e-9 * scale:
        raise ValueError(f"{name} must be symmetric (max |M - M^T| = {asym:.3g}); pass (M + M^T)/2 if this is rounding")
    return (M + M.T) / 2


def _beta(beta: float) -> float:
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real) or not math.isfinite(beta) or beta <= 0:
        raise ValueError(f"beta must be a positive finite number (eta_i = beta / i), got {beta!r}")
    return float(beta)


def _convention(convention: str) -> None:
    if convention not in ("corrected", "printed"):
        raise ValueError(f"convention must be 'corrected' (beta^2 Q^T Gamma Q, M26) or 'printed' "
                         f"(the paper's Q^T Gamma Q), got {convention!r}")


# ----------------------------------------------------------------------------- Hessian
@dataclass(frozen=True)
class Subspace:
    """The identifiable part of a Hessian at a maximiser (paper A7).

    Attributes
    ----------
    Q : (d, r) orthonormal basis of the non-null space of H
    H_star : (r, r) Q^T H Q, negative definite
    eigenvalues : (d,) all eigenvalues of H, ascending
    rank : r
    tol : eigenvalues with |lambda| <= tol count as zero
    """

    Q: Tensor
    H_star: Tensor
    eigenvalues: Tensor
    rank: int
    tol: float


def identifiable_subspace(H: Tensor, *, rtol: float = 1e-8) -> Subspace:
    """Split a symmetric Hessian at a maximiser into its null space and H* = Q^T H Q (paper A7).

    Parameters
    ----------
    H : (d, d) Hessian of J at a point of Theta*
    rtol : eigenvalues with |lambda| <= rtol * max|lambda| are treated as 0 (flat directions)

    Returns
    -------
    Subspace; raises ValueError when a non-null eigenvalue is positive (not a local maximum).
    """
    H = _matrix(H, "H")
    lam, U = torch.linalg.eigh(H)                                     # ascending
    tol = rtol * max(float(lam.abs().max()), 1e-300)
    keep = lam.abs() > tol
    if (lam[keep] > 0).any():
        raise ValueError(f"H has positive eigenvalues {lam[lam > tol].tolist()}: theta is not a local maximum")
    if not keep.any():
        raise ValueError("H is zero (rank 0): J is flat, Theorem 8 has nothing to say")
    Q = U[:, keep]                                                    # (d, r)
    return Subspace(Q=Q, H_star=torch.diag(lam[keep]), eigenvalues=lam, rank=int(keep.sum()), tol=tol)


# ----------------------------------------------------------------------------- Lyapunov and weights
def lyapunov_covariance(H_star: Tensor, Gamma_Q: Tensor, beta: float, *,
                        convention: Convention = "corrected") -> Tensor:
    """Sigma solving A Sigma + Sigma A = beta^2 Q^T Gamma Q, A = -beta H* - I/2 (paper Thm 8 step (iv); M25-M26).

    Parameters
    ----------
    H_star : (r, r) symmetric negative definite, Q^T H(theta*) Q
    Gamma_Q : (r, r) symmetric positive semi-definite, Q^T Gamma Q with Gamma = Cov(ghat(theta*)) (A8)
    beta : the learning-rate constant of eta_i = beta / i (A5(b))
    convention : ``corrected`` (right-hand side beta^2 Gamma_Q, M26) or ``printed`` (Gamma_Q, as in the paper)

    Returns
    -------
    (r, r) Sigma = c int_0^inf e^{-Au} Gamma_Q e^{-Au} du, c = beta^2 (corrected) or 1 (printed): the
    asymptotic covariance of sqrt(n) (Q^T theta_n - Q^T theta*).

    Notes
    -----
    A must be positive definite: lambda_min(-beta H*) > 1/2, i.e. beta > 1 / (2 lambda_min(-H*)).
    With A = U diag(a) U^T, Sigma = U [(U^T Omega U)_ij / (a_i + a_j)] U^T.

    Examples
    --------
    >>> float(lyapunov_covariance(torch.tensor([[-1.0]]), torch.tensor([[2.0]]), 2.0)[0, 0])  # 4*2/(2*2-1)
    2.6666666666666665
    """
    H_star = _matrix(H_star, "H_star")
    r = H_star.shape[0]
    Gamma_Q = _matrix(Gamma_Q, "Gamma_Q", r)
    beta = _beta(beta)
    _convention(convention)
    lam = torch.linalg.eigvalsh(-H_star)                              # ascending
    if lam[0] <= 0:
        raise ValueError(f"H_star must be negative definite; -H_star has eigenvalue {float(lam[0]):.4g} <= 0")
    g_min = float(torch.linalg.eigvalsh(Gamma_Q)[0])
    if g_min < -1e-9 * max(1.0, float(Gamma_Q.abs().max())):
        raise ValueError(f"Gamma_Q must be positive semi-definite (a covariance); smallest eigenvalue {g_min:.4g}")
    if beta * lam[0] <= 0.5:
        raise ValueError(
            f"beta = {beta:g} is too small: the smallest eigenvalue of -beta H* is {beta * float(lam[0]):.4g} <= 1/2 "
            f"(lambda_min(-H*) = {float(lam[0]):.4g}); Theorem 8 needs beta > 1/(2 lambda_min) = "
            f"{1 / (2 * float(lam[0])):.4g}. Choose a larger beta.")
    omega = Gamma_Q * (beta**2 if convention == "corrected" else 1.0)
    return _lyapunov(-beta * H_star - 0.5 * torch.eye(r, dtype=DT), omega)


def _lyapunov(A: Tensor, omega: Tensor) -> Tensor:
    a, U = torch.linalg.eigh(A)
    S = (U.T @ omega @ U) / (a[:, None] + a[None, :])
    S = U @ S @ U.T
    return (S + S.T) / 2


@dataclass(frozen=True)
class GapLimit:
    """The Theorem 8 limit of n * gap: sum_k w_k chi2_{1,k}.

    Attributes
    ----------
    weights : (r,) w_k, non-increasing
    sigma : (r, r) Sigma of :func:`lyapunov_covariance`
    beta : float
    convention : ``corrected`` or ``printed``
    mean : E = sum_k w_k = tr(-H* Sigma)/2
    variance : 2 sum_k w_k^2
    """

    weights: Tensor
    sigma: Tensor
    beta: float
    convention: str
    mean: float
    variance: float


def gap_limit(H_star: Tensor, Gamma_Q: Tensor, beta: float, *, convention: Convention = "corrected") -> GapLimit:
    """Weights w_k = eig(1/2 Sigma^{1/2} (-H*) Sigma^{1/2}) of paper Thm 8 (M27), with mean and variance.

    See :func:`lyapunov_covariance` for the parameters. For diagonal H* = -diag(lambda) this is the
    paper's 1/2 Sigma^{1/2} diag(lambda) Sigma^{1/2}; the general form is invariant to rotating Q.
    """
    sigma = lyapunov_covariance(H_star, Gamma_Q, beta, convention=convention)
    s, U = torch.linalg.eigh(sigma)
    root = U @ torch.diag(s.clamp(min=0).sqrt()) @ U.T                # Sigma^{1/2}
    M = 0.5 * root @ (-_matrix(H_star, "H_star")) @ root
    w = torch.linalg.eigvalsh((M + M.T) / 2).clamp(min=0).flip(0)     # non-increasing
    return GapLimit(weights=w, sigma=sigma, beta=float(beta), convention=convention,
                    mean=float(w.sum()), variance=float(2 * (w**2).sum()))


def gap_weights(H_star: Tensor, Gamma_Q: Tensor, beta: float, *, convention: Convention = "corrected") -> Tensor:
    """The (r,) weights w_k of paper Thm 8, non-increasing (M27); see :func:`gap_limit`.

    Examples
    --------
    >>> gap_weights(torch.tensor([[-1.0]]), torch.tensor([[2.0]]), 2.0)  # lambda Sigma / 2
    tensor([1.3333], dtype=torch.float64)
    """
    return gap_limit(H_star, Gamma_Q, beta, convention=convention).weights


# ----------------------------------------------------------------------------- the weighted chi-square law
def _weights(w: Tensor) -> np.ndarray:
    w = np.asarray(torch.as_tensor(w, dtype=DT).reshape(-1).numpy(), dtype=np.float64)
    if w.size == 0 or not np.isfinite(w).all() or (w < 0).any() or w.max() <= 0:
        raise ValueError("weights must be a non-empty vector of finite non-negative numbers, not all 0; got "
                         f"{w.tolist()}")
    return w[w > 1e-12 * w.max()]                                     # zero weights add nothing


def _ruben_coefficients(w: np.ndarray, tol: float, max_terms: int) -> tuple[np.ndarray, float]:
    """a_j of P(Q <= x) = sum_j a_j P(chi2_{r+2j} <= x / b), b = min w (Ruben 1962; M30)."""
    b = float(w.min())
    gam = 1.0 - b / w                                                 # in [0, 1)
    need = 1 if gam.max() == 0 else int(min(max_terms + 1, 10 + math.log(tol) / math.log(gam.max()) * 1.5))
    if need > max_terms:
        raise ValueError(f"weights {w.tolist()} are too spread (ratio {w.max() / w.min():.3g}) for the exact series "
                         f"within {max_terms} terms; use weighted_chi2_sample for a Monte Carlo CDF")
    a = np.zeros(need + 1)
    g = np.zeros(need + 1)                                            # g[m] = sum_k gam_k^m
    a[0] = math.exp(0.5 * np.log(b / w).sum())
    powers = np.ones_like(gam)
    total, j = a[0], 0
    while 1.0 - total > tol and j < need:
        j += 1
        powers = powers * gam
        g[j] = powers.sum()
        a[j] = float(np.dot(g[j:0:-1], a[:j])) / (2 * j)              # sum_i g_{j-i} a_i / (2j)
        total += a[j]
    return a[: j + 1], b


def weighted_chi2_cdf(x, w: Tensor, *, tol: float = 1e-12, max_terms: int = 50_000) -> np.ndarray:
    """P(sum_k w_k chi2_{1,k} <= x), exact to ``tol`` (Ruben's chi-square mixture series; M30).

    Parameters
    ----------
    x : scalar or array of points
    w : (r,) non-negative weights (zeros are dropped)
    tol : the neglected mass of the series (an upper bound on the error)
    max_terms : the series needs about log(tol) / log(1 - w_min/w_max) terms; beyond ``max_terms``
        (weight ratios beyond ~2000) a ValueError suggests :func:`weighted_chi2_sample` instead

    Returns
    -------
    numpy array shaped like x.

    Examples
    --------
    >>> round(float(weighted_chi2_cdf(2.0, torch.tensor([1.0, 1.0]))), 12)  # chi2_2: 1 - exp(-1)
    0.632120558829
    """
    ww = _weights(w)
    x = np.asarray(x, dtype=np.float64)
    a, b = _ruben_coefficients(ww, tol, max_terms)
    r = ww.size
    dof = r + 2 * np.arange(a.size)                                   # (J,)
    F = sps.chi2.cdf(np.maximum(x, 0.0)[..., None] / b, dof)          # (..., J)
    return np.clip(F @ a, 0.0, 1.0)


def weighted_chi2_quantile(q, w: Tensor) -> np.ndarray:
    """Quantiles of sum_k w_k chi2_{1,k} for probabilities q in (0, 1) (root of :func:`weighted_chi2_cdf`)."""
    ww = _weights(w)
    qs = np.asarray(q, dtype=np.float64)
    if ((qs <= 0) | (qs >= 1)).any():
        raise ValueError(f"quantile probabilities must lie in (0, 1), got {qs.min()} .. {qs.max()}")
    def cdf(x: float) -> float:
        return float(weighted_chi2_cdf(x, torch.from_numpy(ww)))

    hi = float(ww.sum() * 4 + 1e-300)
    out = np.empty(qs.size)
    for i, p in enumerate(qs.reshape(-1)):
        top = hi
        while cdf(top) < p:
            top *= 2
        out[i] = optimize.brentq(lambda x, p=p: cdf(x) - p, 0.0, top, xtol=1e-14 * top, rtol=1e-12)
    return out.reshape(qs.shape)


def weighted_chi2_sample(w: Tensor, n: int, generator: torch.Generator) -> Tensor:
    """n iid draws of sum_k w_k N_k^2 (exact Monte Carlo of the Theorem 8 limit); (n,) float64."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    ww = torch.as_tensor(w, dtype=DT).reshape(-1)
    _weights(ww)
    z = torch.randn(int(n), ww.numel(), generator=generator, dtype=DT)
    return (z**2 * ww).sum(1)


# ----------------------------------------------------------------------------- estimator covariance
@dataclass(frozen=True)
class PromptCovariances:
    """Exact per-prompt moments of a finite policy at one theta (W = grad log pi(Y|x), Z the reward).

    Attributes
    ----------
    g_x : (P, D) g(x) = E[W Z | x]
    cov_wz : (P, D, D) Cov(W Z | x)                      (vanilla's per-sample covariance)
    sigma_oracle : (P, D, D) Cov(W (Z - V(x)) | x)       (paper eq. (7), Sigma_oracle(x))
    e_wwt : (P, D, D) E[W W^T | x]
    var_z : (P,) Var(Z | x)
    weights : (P,) prompt probabilities f(x), summing to 1
    """

    g_x: Tensor
    cov_wz: Tensor
    sigma_oracle: Tensor
    e_wwt: Tensor
    var_z: Tensor
    weights: Tensor


def prompt_covariances(probs: Tensor, scores: Tensor, reward_mean: Tensor, *, reward_second: Tensor | None = None,
                       weights: Tensor | None = None) -> PromptCovariances:
    """Exact per-prompt moment matrices from a finite action table (M28).

    Parameters
    ----------
    probs : (P, K) pi(a | x) (rows sum to 1; padding has probability 0)
    scores : (P, K, D) W(x, a) = grad log pi(a | x)
    reward_mean : (P, K) E[Z | x, a]
    reward_second : (P, K) E[Z^2 | x, a]; default ``reward_mean`` (Bernoulli rewards, Z^2 = Z)
    weights : (P,) prompt distribution f; default uniform
    """
    p = torch.as_tensor(probs, dtype=DT)
    W = torch.as_tensor(scores, dtype=DT)
    r = torch.as_tensor(reward_mean, dtype=DT)
    m2 = r if reward_second is None else torch.as_tensor(reward_second, dtype=DT)
    if p.ndim != 2 or W.ndim != 3 or W.shape[:2] != p.shape or r.shape != p.shape or m2.shape != p.shape:
        raise ValueError(f"need probs (P, K), scores (P, K, D), reward_mean (P, K); got {tuple(p.shape)}, "
                         f"{tuple(W.shape)}, "
                         f"{tuple(r.shape)}" + ("" if reward_second is None else f", {tuple(m2.shape)}"))
    if (p < 0).any() or not torch.allclose(p.sum(1), torch.ones(p.shape[0], dtype=DT), atol=1e-9):
        raise ValueError("probs must be non-negative with rows summing to 1 (one distribution per prompt)")
    P = p.shape[0]
    f = torch.full((P,), 1.0 / P, dtype=DT) if weights is None else torch.as_tensor(weights, dtype=DT)
    if f.shape != (P,) or (f < 0).any() or f.sum() <= 0:
        raise ValueError(f"weights must be ({P},) non-negative and not all zero, got {tuple(f.shape)}")
    V = (p * r).sum(1)                                                # (P,)
    g_x = torch.einsum("pk,pkd->pd", p * r, W)                        # (P, D)
    wwt = torch.einsum("pkd,pke->pkde", W, W)                         # (P, K, D, D)
    ggt = g_x[:, :, None] * g_x[:, None, :]                           # (P, D, D)
    e2 = m2 - 2 * r * V[:, None] + V[:, None] ** 2                    # E[(Z - V)^2 | a]  (P, K)
    return PromptCovariances(
        g_x=g_x,
        cov_wz=torch.einsum("pk,pkde->pde", p * m2, wwt) - ggt,
        sigma_oracle=torch.einsum("pk,pkde->pde", p * e2, wwt) - ggt,
        e_wwt=torch.einsum("pk,pkde->pde", p, wwt),
        var_z=(p * m2).sum(1) - V**2,
        weights=f / f.sum(),
    )


def estimator_covariance(pc: PromptCovariances, estimator: str, B: int, G: int) -> Tensor:
    """Exact Gamma = Cov(ghat(theta)) for B iid prompts x G samples (the A8 limit at theta*; M29).

    Parameters
    ----------
    pc : :class:`PromptCovariances` at theta
    estimator : ``vanilla`` (C = 0), ``oracle`` (C = V(x)), ``grpo`` (LOO mean, paper eq. (4)) or
        ``grpo_mean`` (full mean, = (G-1)/G grpo exactly)
    B, G : prompts and samples per prompt (G >= 2 for grpo, grpo_mean)

    Returns
    -------
    (D, D) (1/B) [E_X C(X) + Cov_X(g(X))], with per-prompt C(x) = Cov(WZ|x)/G (vanilla),
    Sigma_oracle(x)/G (oracle), Sigma_oracle(x)/G + (E[WW^T] Var(Z|x) + g(x)g(x)^T)/(G(G-1)) (grpo).
    Its trace is the exact MSE of :func:`ugrpo.stats.exact_mse.minibatch_mse` (unbiased estimators).
    """
    from ugrpo.stats.estimators import min_group_size

    need = min_group_size(estimator)
    for name, v, lo in (("B", B, 1), ("G", G, need)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo} for estimator {estimator!r}, got {v!r}")
    f = pc.weights
    if estimator == "vanilla":
        per = pc.cov_wz / G
    elif estimator == "oracle":
        per = pc.sigma_oracle / G
    else:
        ggt = pc.g_x[:, :, None] * pc.g_x[:, None, :]
        per = prompt_error(pc.sigma_oracle, pc.e_wwt * pc.var_z[:, None, None] + ggt, G)
        if estimator == "grpo_mean":
            per = per * ((G - 1) / G) ** 2
    within = torch.einsum("p,pde->de", f, per)
    g = f @ pc.g_x                                                    # (D,)
    dg = pc.g_x - g
    between = torch.einsum("p,pd,pe->de", f, dg, dg)                  # Cov_X(g(X))
    if estimator == "grpo_mean":                                      # ghat_mean(x) = (G-1)/G ghat_grpo(x)
        between = between * ((G - 1) / G) ** 2
    out = (within + between) / B
    return (out + out.T) / 2
