"""Exact finite-G MSE formulas (Thm 2, Prop 3; docs/math.md M8-M13) against exact enumeration."""

import itertools

import pytest
import torch

from ugrpo.stats.advantages import compute_advantages
from ugrpo.stats.estimator import prompt_gradients
from ugrpo.stats.exact_mse import ESTIMATORS, PolicyMoments, PromptMoments, minibatch_mse, policy_moments, prompt_mse

from ._enumerate import (
    DT,
    enumerate_group,
    linear_softmax,
    policy_moments_exact,
    prompt_moments_exact,
    softmax_bandit,
    true_grads,
)


def _estimates(b, p, G, estimator):
    """Every outcome's estimate ghat(x_p) and its probability."""
    probs, W, Z = enumerate_group(b, p, G)
    values = torch.full((Z.shape[0],), prompt_moments_exact(b, p).value, dtype=DT)
    adv = compute_advantages(Z, baseline=estimator, values=values if estimator == "oracle" else None).advantages
    return probs, prompt_gradients(W, adv)  # (N,), (N, D)


POLICIES = {
    "bandit3": lambda: softmax_bandit(2, 3, seed=11),
    "bandit2": lambda: softmax_bandit(2, 2, seed=12),
    "linear": lambda: linear_softmax(2, 3, 4, seed=13),
}


CASES = [(policy, G, est) for policy in POLICIES for G in (1, 2, 3, 4) for est in ESTIMATORS
         if not (G == 1 and est in ("grpo", "grpo_mean"))]


@pytest.mark.parametrize("policy,G,estimator", CASES)
def test_prompt_mse_equals_enumeration(policy, G, estimator):
    b = POLICIES[policy]()
    for p in range(b.P):
        probs, est = _estimates(b, p, G, estimator)
        exact = float((probs * ((est - true_grads(b)[p]) ** 2).sum(1)).sum())
        assert prompt_mse(prompt_moments_exact(b, p), estimator, G) == pytest.approx(exact, rel=1e-11, abs=1e-15)


@pytest.mark.parametrize("G", [2, 3])
def test_means_unbiased_and_grpo_mean_biased(G):
    b = softmax_bandit(1, 3, seed=2)
    g = true_grads(b)[0]
    for estimator in ESTIMATORS:
        probs, est = _estimates(b, 0, G, estimator)
        mean = (probs.unsqueeze(1) * est).sum(0)
        want = g * (G - 1) / G if estimator == "grpo_mean" else g
        torch.testing.assert_close(mean, want, rtol=1e-12, atol=1e-14)


def _minibatch_enumerated(b, B, G, estimator):
    """Brute force over B iid prompt draws (each from the prompt distribution) and all their outcomes."""
    g = (b.weights.unsqueeze(1) * true_grads(b)).sum(0)
    probs, ests = [], []
    for p in range(b.P):
        pr, est = _estimates(b, p, G, estimator)
        probs.append(b.weights[p] * pr)
        ests.append(est)
    probs, ests = torch.cat(probs), torch.cat(ests)  # the mixture law of ghat(X)
    total = torch.zeros((), dtype=DT)
    for combo in itertools.product(range(probs.shape[0]), repeat=B - 1):  # last draw vectorised
        fixed = sum((ests[i] for i in combo), torch.zeros(b.D, dtype=DT))
        pr = torch.prod(probs[list(combo)]) if combo else torch.ones((), dtype=DT)
        err = (fixed + ests) / B - g  # (M, D)
        total = total + pr * (probs * (err**2).sum(1)).sum()
    return float(total)


@pytest.mark.parametrize("policy", ["bandit2", "linear"])
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_minibatch_mse_equals_enumeration_B2(policy, estimator):
    b = POLICIES[policy]()
    pm = policy_moments_exact(b)
    assert pm.c1 > 1e-3  # prompt-sampling variance present, so the c1 terms are tested
    for G in (2, 3):
        exact = _minibatch_enumerated(b, 2, G, estimator)
        assert minibatch_mse(pm, estimator, B=2, G=G) == pytest.approx(exact, rel=1e-10)


def test_minibatch_grpo_mean_B3_and_B1():
    b = softmax_bandit(2, 2, seed=12)
    pm = policy_moments_exact(b)
    for B in (1, 3):
        exact = _minibatch_enumerated(b, B, 2, "grpo_mean")
        assert minibatch_mse(pm, "grpo_mean", B=B, G=2) == pytest.approx(exact, rel=1e-10)


def test_policy_moments_closed_form_and_weights():
    m1 = PromptMoments(value=0.5, var_z=0.25, e_w2=2.0, g_norm2=1.0, tr_sigma_oracle=0.5, tr_cov_wz=1.5)
    m2 = PromptMoments(value=0.1, var_z=0.09, e_w2=1.0, g_norm2=4.0, tr_sigma_oracle=0.25, tr_cov_wz=0.75)
    g_x = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=DT)
    pm = policy_moments([m1, m2], g_x, weights=[3.0, 1.0])
    # g = (0.75, 0.5); c1 = 0.75*||(0.25,-0.5)||^2 + 0.25*||(-0.75,1.5)||^2
    assert pm.g_norm2 == pytest.approx(0.75**2 + 0.5**2)
    assert pm.c1 == pytest.approx(0.75 * (0.0625 + 0.25) + 0.25 * (0.5625 + 2.25))
    assert pm.c1 == pytest.approx(pm.mean_g_norm2 - pm.g_norm2)
    assert pm.c2 == pytest.approx(0.75 * 0.5 + 0.25 * 0.25)
    assert pm.c3 == pytest.approx(0.75 * (2.0 * 0.25 + 1.0) + 0.25 * (0.09 + 4.0))
    assert pm.c2_vanilla == pytest.approx(0.75 * 1.5 + 0.25 * 0.75)


def test_grpo_approaches_oracle_and_beats_vanilla():
    """Cor 4/5 shape: MSE_grpo - MSE_oracle = c3/(G(G-1)) exactly, so the gap shrinks like 1/G^2."""
    pm = policy_moments_exact(linear_softmax(3, 4, 5, seed=1))
    for G in (2, 4, 8, 64):
        gap = minibatch_mse(pm, "grpo", 1, G) - minibatch_mse(pm, "oracle", 1, G)
        assert gap == pytest.approx(pm.c3 / (G * (G - 1)))


def test_errors():
    pm = PolicyMoments(1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    m = PromptMoments(0.5, 0.25, 1.0, 0.1, 0.2, 0.3)
    with pytest.raises(ValueError, match="G >= 2"):
        prompt_mse(m, "grpo", 1)
    with pytest.raises(ValueError, match="unknown estimator 'loo'"):
        prompt_mse(m, "loo", 4)
    with pytest.raises(ValueError, match="B must be"):
        minibatch_mse(pm, "grpo", 0, 4)
    with pytest.raises(ValueError, match=r"shape \(P, D\) = \(2, D\)"):
        policy_moments([m, m], torch.zeros(3, 2))
    with pytest.raises(ValueError, match="weights must have shape"):
        policy_moments([m, m], torch.zeros(2, 2), weights=[1.0])
    with pytest.raises(ValueError, match="tr_sigma_oracle = -1"):
        prompt_mse(PromptMoments(0.5, 0.25, 1.0, 0.1, -1.0, 0.3), "oracle", 4)


def test_hoeffding_split_adds_up_to_the_exact_grpo_mse_and_oracle_part_is_the_oracle_mse():
    from ugrpo.stats.exact_mse import PolicyMoments, hoeffding_split, minibatch_mse

    pm = PolicyMoments(c1=0.3, c2=1.7, c3=2.9, c2_vanilla=3.1, mean_g_norm2=0.8, g_norm2=0.5)
    for B, G in [(1, 2), (4, 3), (16, 32)]:
        sp = hoeffding_split(pm.c1, pm.c2, pm.c3, B, G)
        assert abs(sp["total"] - minibatch_mse(pm, "grpo", B, G)) < 1e-12
        assert abs(sp["oracle_part"] - minibatch_mse(pm, "oracle", B, G)) < 1e-12
    with pytest.raises(ValueError, match="G >= 2"):
        hoeffding_split(1.0, 1.0, 1.0, 4, 1)
