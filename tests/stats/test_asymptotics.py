"""Theorem 8 machinery (docs/math.md M25-M31) against closed forms, quadrature and exact enumeration."""

import itertools
import math

import numpy as np
import pytest
import torch
from scipy import integrate, linalg, stats

from ugrpo.stats.advantages import compute_advantages
from ugrpo.stats.asymptotics import (
    estimator_covariance,
    gap_limit,
    gap_weights,
    identifiable_subspace,
    lyapunov_covariance,
    prompt_covariances,
    weighted_chi2_cdf,
    weighted_chi2_quantile,
    weighted_chi2_sample,
)
from ugrpo.stats.estimator import prompt_gradients
from ugrpo.stats.exact_mse import minibatch_mse

from ._enumerate import DT, enumerate_group, linear_softmax, policy_moments_exact, softmax_bandit, true_grads


def _random_problem(r: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    U, _ = torch.linalg.qr(torch.randn(r, r, generator=gen, dtype=DT))
    lam = torch.linspace(0.4, 1.5, r, dtype=DT)
    H = -(U @ torch.diag(lam) @ U.T)                                  # non-diagonal, negative definite
    L = torch.randn(r, r, generator=gen, dtype=DT)
    return H, L @ L.T / r, lam


# ----------------------------------------------------------------------------- Lyapunov (M25-M26)
def test_lyapunov_solves_equation_and_equals_integral_form():
    H, Gam, lam = _random_problem(3, seed=1)
    beta = 2.5
    S = lyapunov_covariance(H, Gam, beta)
    A = -beta * H - 0.5 * torch.eye(3, dtype=DT)
    torch.testing.assert_close(A @ S + S @ A, beta**2 * Gam, rtol=0, atol=1e-12)
    An, Gn = A.numpy(), Gam.numpy()
    integral, err = integrate.quad_vec(lambda u: linalg.expm(-An * u) @ Gn @ linalg.expm(-An * u), 0, np.inf,
                                       epsabs=1e-12, epsrel=1e-11)
    np.testing.assert_allclose(S.numpy(), beta**2 * integral, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(S.numpy(), linalg.solve_continuous_lyapunov(An, beta**2 * Gn), rtol=1e-10, atol=1e-12)
    printed = lyapunov_covariance(H, Gam, beta, convention="printed")
    torch.testing.assert_close(printed * beta**2, S, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("lam,gamma,beta", [(1.0, 2.0, 2.0), (0.3, 0.7, 4.0), (2.0, 0.05, 0.3)])
def test_scalar_closed_form(lam, gamma, beta):
    sigma = beta**2 * gamma / (2 * beta * lam - 1)
    res = gap_limit(torch.tensor([[-lam]], dtype=DT), torch.tensor([[gamma]], dtype=DT), beta)
    assert float(res.sigma[0, 0]) == pytest.approx(sigma, rel=1e-13)
    assert float(res.weights[0]) == pytest.approx(lam * sigma / 2, rel=1e-13)
    assert res.mean == pytest.approx(lam * sigma / 2,
                                     rel=1e-13) and res.variance == pytest.approx(2 * (lam * sigma / 2) ** 2)
    printed = gap_weights(torch.tensor([[-lam]], dtype=DT), torch.tensor([[gamma]], dtype=DT), beta,
                          convention="printed")
    assert float(printed[0]) == pytest.approx(lam * sigma / 2 / beta**2, rel=1e-13)


def test_beta_too_small_names_beta_eigenvalue_and_minimum():
    H = torch.diag(torch.tensor([-2.0, -0.4], dtype=DT))
    with pytest.raises(ValueError, match=r"beta = 1 is too small.*0\.4.*beta > 1/\(2 lambda_min\) = 1\.25"):
        lyapunov_covariance(H, torch.eye(2, dtype=DT), 1.0)
    with pytest.raises(ValueError, match="negative definite"):
        gap_weights(-H, torch.eye(2, dtype=DT), 3.0)
    with pytest.raises(ValueError, match="symmetric"):
        gap_weights(torch.tensor([[-1.0, 0.5], [0.0, -1.0]]), torch.eye(2, dtype=DT), 3.0)
    with pytest.raises(ValueError, match="positive semi-definite"):
        gap_weights(H, -torch.eye(2, dtype=DT), 3.0)
    with pytest.raises(ValueError, match="shape"):
        gap_weights(H, torch.eye(3, dtype=DT), 3.0)
    with pytest.raises(ValueError, match="convention"):
        gap_weights(H, torch.eye(2, dtype=DT), 3.0, convention="paper")


def test_weights_rotation_invariant_and_paper_diagonal_form():
    H, Gam, lam = _random_problem(3, seed=2)
    beta = 3.0
    res = gap_limit(H, Gam, beta)
    # paper's form in the eigenbasis of -H*: 1/2 Sigma^{1/2} diag(lambda) Sigma^{1/2}
    lam_, U = torch.linalg.eigh(-H)
    rot = gap_limit(-torch.diag(lam_), U.T @ Gam @ U, beta)
    torch.testing.assert_close(rot.weights, res.weights, rtol=1e-10, atol=1e-14)
    assert (res.weights[:-1] >= res.weights[1:]).all() and (res.weights > 0).all()
    assert res.mean == pytest.approx(0.5 * float(torch.trace(-H @ res.sigma)), rel=1e-12)


def test_weights_equal_linear_stochastic_approximation_limit():
    """Exact covariance recursion of v_{i+1} = v_i + beta/i (H v_i + xi_i), Cov xi = Gamma: n P_n -> Sigma (beta^2)."""
    H, Gam, lam = _random_problem(2, seed=3)
    beta = 2.0
    Hn, Gn = H.numpy(), Gam.numpy()
    P = np.zeros((2, 2))
    n = 40_000
    for i in range(1, n + 1):
        M = np.eye(2) + beta / i * Hn
        P = M @ P @ M.T + (beta / i) ** 2 * Gn
    limit = gap_limit(H, Gam, beta)
    np.testing.assert_allclose(n * P, limit.sigma.numpy(), rtol=2e-3, atol=1e-4 * float(limit.sigma.abs().max()))
    mean_gap = n * 0.5 * float(np.trace(-Hn @ P))                    # n E[gap] of the quadratic objective
    assert mean_gap == pytest.approx(limit.mean, rel=2e-3)
    printed = gap_limit(H, Gam, beta, convention="printed")
    assert abs(mean_gap / printed.mean - beta**2) < 0.02 * beta**2  # the printed version is off by beta^2


# ----------------------------------------------------------------------------- Hessian subspace
def test_identifiable_subspace_finds_null_space():
    gen = torch.Generator().manual_seed(4)
    U, _ = torch.linalg.qr(torch.randn(5, 5, generator=gen, dtype=DT))
    H = U[:, :2] @ torch.diag(torch.tensor([-2.0, -0.5], dtype=DT)) @ U[:, :2].T
    sub = identifiable_subspace(H)
    assert sub.rank == 2 and sub.Q.shape == (5, 2)
    torch.testing.assert_close(sub.Q @ sub.Q.T, U[:, :2] @ U[:, :2].T, rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.diag(sub.H_star), torch.tensor([-2.0, -0.5], dtype=DT), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="not a local maximum"):
        identifiable_subspace(-H)


# ----------------------------------------------------------------------------- weighted chi-square (M30)
def test_cdf_exact_cases():
    x = np.linspace(0.0, 30.0, 61)
    np.testing.assert_allclose(weighted_chi2_cdf(x, torch.tensor([2.5])), stats.chi2.cdf(x / 2.5, 1), atol=1e-14)
    np.testing.assert_allclose(weighted_chi2_cdf(x, torch.tensor([1.5] * 3)), stats.chi2.cdf(x / 1.5, 3), atol=1e-12)
    # (w, w, v, v): 2w Exp + 2v Exp, a hypoexponential with rates a = 1/(2w), b = 1/(2v); Ruben series is non-trivial
    w, v = 3.0, 0.4
    a, b = 1 / (2 * w), 1 / (2 * v)
    exact = 1 - (b * np.exp(-a * x) - a * np.exp(-b * x)) / (b - a)
    np.testing.assert_allclose(weighted_chi2_cdf(x, torch.tensor([w, w, v, v])), exact, atol=1e-11)
    assert weighted_chi2_cdf(-1.0, torch.tensor([1.0, 2.0])) == 0.0


def test_cdf_quantile_sample_agree():
    w = torch.tensor([2.0, 0.7, 0.1, 0.0], dtype=DT)                  # a zero weight is dropped
    q = np.array([0.01, 0.25, 0.5, 0.9, 0.999])
    xq = weighted_chi2_quantile(q, w)
    np.testing.assert_allclose(weighted_chi2_cdf(xq, w), q, atol=1e-10)
    n = 200_000
    s = weighted_chi2_sample(w, n, torch.Generator().manual_seed(5)).numpy()
    assert s.mean() == pytest.approx(float(w.sum()), abs=5 * s.std() / math.sqrt(n))
    pts = np.linspace(0.05, 8.0, 15)
    F = weighted_chi2_cdf(pts, w)
    se = np.sqrt(F * (1 - F) / n)
    assert (np.abs((s[:, None] <= pts).mean(0) - F) <= 5 * se + 1e-12).all()
    with pytest.raises(ValueError, match="non-negative"):
        weighted_chi2_cdf(1.0, torch.tensor([1.0, -0.1]))
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        weighted_chi2_quantile([0.0], w)


# ----------------------------------------------------------------------------- estimator covariance (M28-M29)
def _pc(b):
    return prompt_covariances(b.probs, b.scores, b.means, weights=b.weights)


def _single_prompt_outcomes(b, G, estimator):
    """Every (prompt, group outcome) of one prompt draw: probabilities (N,) and estimates (N, D)."""
    probs, ests = [], []
    for p in range(b.P):
        pr, W, Z = enumerate_group(b, p, G)
        V = float((b.probs[p] * b.means[p]).sum())
        adv = compute_advantages(Z, baseline=estimator,
                                 values=torch.full((Z.shape[0],), V, dtype=DT) if estimator == "oracle" else None)
        probs.append(b.weights[p] * pr)
        ests.append(prompt_gradients(W, adv.advantages))
    return torch.cat(probs), torch.cat(ests)


def _cov(probs, est):
    mean = probs @ est
    d = est - mean
    return torch.einsum("n,nd,ne->de", probs, d, d), mean


@pytest.mark.parametrize("G", [2, 3])
@pytest.mark.parametrize("estimator", ["vanilla", "grpo", "grpo_mean", "oracle"])
def test_covariance_equals_enumeration_B1(estimator, G):
    b = linear_softmax(2, 3, 3, seed=13)
    probs, est = _single_prompt_outcomes(b, G, estimator)
    cov, _ = _cov(probs, est)
    torch.testing.assert_close(estimator_covariance(_pc(b), estimator, 1, G), cov, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("estimator", ["vanilla", "grpo", "oracle"])
def test_covariance_equals_enumeration_B2_and_trace_is_mse(estimator):
    b = softmax_bandit(2, 2, seed=12)
    probs, est = _single_prompt_outcomes(b, 2, estimator)
    pairs = torch.tensor(list(itertools.product(range(probs.shape[0]), repeat=2)))
    cov, mean = _cov(probs[pairs].prod(1), est[pairs].mean(1))        # every pair of prompt draws
    got = estimator_covariance(_pc(b), estimator, 2, 2)
    torch.testing.assert_close(got, cov, rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(mean, b.weights @ true_grads(b), rtol=1e-10, atol=1e-14)  # unbiased: trace = MSE
    assert float(torch.trace(got)) == pytest.approx(minibatch_mse(policy_moments_exact(b), estimator, 2, 2), rel=1e-10)


def test_covariance_trace_is_mse_at_an_optimum():
    """A 1-prompt bandit at an interior point where g = 0 (equal rewards): MSE = trace Cov."""
    b = softmax_bandit(3, 3, seed=7)
    for G in (2, 5, 9):
        for est in ("vanilla", "grpo", "oracle"):
            got = float(torch.trace(estimator_covariance(_pc(b), est, 3, G)))
            assert got == pytest.approx(minibatch_mse(policy_moments_exact(b), est, 3, G), rel=1e-11)


# ----------------------------------------------------------------------------- Corollary 9
def test_corollary9_weight_gap_shrinks_like_G_minus_2():
    b = linear_softmax(3, 3, 3, seed=21)
    pc = _pc(b)
    H = -torch.diag(torch.tensor([1.0, 0.6, 0.3], dtype=DT))
    beta = 3.0

    def diff(G):
        return (gap_weights(H, estimator_covariance(pc, "grpo", 4, G), beta)
                - gap_weights(H, estimator_covariance(pc, "oracle", 4, G), beta))

    # exact numbers: d(G)/d(2G) = 4 + O(1/G); measured |ratio - 4| * G stays below ~16 for G in 16..4096 (the
    # third weight has the largest constant because the c1 part of Gamma has rank 2 here)
    ratios = {G: diff(G) / diff(2 * G) for G in (16, 64, 256, 1024, 4096)}
    for G, r in ratios.items():
        assert (r - 4).abs().max() < 25 / G, (G, r)
    assert (ratios[4096] - 4).abs().max() < (ratios[16] - 4).abs().max() / 10
    scaled = {G: G**2 * diff(G) for G in (1024, 4096)}                 # G^2 d(G) -> a constant
    torch.testing.assert_close(scaled[1024], scaled[4096], rtol=0.02, atol=0)
    assert (diff(8) > 0).all()                                         # GRPO's weights exceed the oracle's
