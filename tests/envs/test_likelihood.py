"""The pilot's likelihood on an exact synthetic policy and its reward twins (docs/math.md M64-M66), against exact
enumeration of every pilot of a tiny instance."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from ugrpo.envs.generate import random_env
from ugrpo.envs.likelihood import (
    cell_counts,
    contrast_patterns,
    contrast_twins,
    exact_constants,
    mixture_log_ratio,
    pilot_log_likelihood,
    reward_log_ratio,
    sample_cells,
    shrink_twin,
    total_variation,
)
from ugrpo.envs.policies import LinearSoftmax, SoftmaxBandit

DT = torch.float64


@pytest.fixture(scope="module")
def tiny():
    """2 prompts x 2 actions; every pilot of B0 = 2 prompts x G0 = 2 samples is enumerable (32^2 = 1,024)."""
    return SoftmaxBandit([[0.3, -0.2], [0.0, 0.8]], [[0.2, 0.7], [0.6, 0.3]])


def _all_pilots(P: int, K: int, B0: int, G0: int):
    """prompts (n, B0), actions and rewards (n, B0, G0) of every pilot."""
    group = [(x, acts, zs) for x in range(P) for acts in itertools.product(range(K), repeat=G0)
             for zs in itertools.product((0.0, 1.0), repeat=G0)]
    rows = list(itertools.product(group, repeat=B0))
    prompts = torch.tensor([[g[0] for g in row] for row in rows])
    actions = torch.tensor([[g[1] for g in row] for row in rows])
    rewards = torch.tensor([[g[2] for g in row] for row in rows], dtype=DT)
    return prompts, actions, rewards


def test_likelihood_sums_to_one_and_matches_the_sampler(tiny):
    """M64: the closed form sums to 1 over all pilots, and 40,000 pilots drawn by the policy's own sampler fall on
    the number of successes as the likelihood says (each count within 4 binomial SEs)."""
    pr, a, z = _all_pilots(2, 2, 2, 2)
    lik = pilot_log_likelihood(tiny, pr, a, z).exp()
    assert float(lik.sum()) == pytest.approx(1.0, abs=1e-12)
    succ = z.sum((-1, -2))
    exact = torch.stack([lik[succ == s].sum() for s in range(5)])
    b = tiny.sample_many(tiny.theta0.unsqueeze(0).expand(40_000, -1), 2, 2, torch.Generator().manual_seed(3))
    freq = torch.stack([(b.rewards.sum((-1, -2)) == s).double().mean() for s in range(5)])
    assert ((freq - exact).abs() <= 4 * (exact * (1 - exact) / 40_000).sqrt() + 1e-12).all(), (freq, exact)


def test_sample_cells_draws_what_the_policy_samples():
    """The scoreless sampler makes the same generator calls as SyntheticPolicy.sample_many: the same pilots."""
    env = random_env("linear_softmax", n_prompts=5, n_actions=3, dim=4, reward_spread=1.0, seed=3)
    b = env.sample_many(env.theta0.unsqueeze(0).expand(7, -1), 6, 5, torch.Generator().manual_seed(7))
    pr, a, z = sample_cells(env, 6, 5, 7, torch.Generator().manual_seed(7))
    assert torch.equal(b.prompts, pr) and torch.equal(b.actions, a) and torch.equal(b.rewards, z)
    n, k = cell_counts(5, 3, pr, a, z)
    assert n.shape == (7, 5, 3) and torch.equal(n.sum((-1, -2)), torch.full((7,), 30.0, dtype=DT))
    assert torch.equal(k.sum((-1, -2)), z.sum((-1, -2)))


def test_reward_ratio_and_twin_mixture_against_enumeration(tiny):
    """log dQ/dP from cell counts equals the difference of the closed-form log likelihoods (point twin), and the
    mixture ratio equals the average likelihood over every combination of patterns (one per prompt); the Monte-Carlo
    TV is within 4 SE of the exact TV = 1/2 sum |P - Q|; the likelihood-ratio test attains P(A) + Q(A^c) = 1 + TV."""
    pr, a, z = _all_pilots(2, 2, 2, 2)
    n, k = cell_counts(2, 2, pr, a, z)
    lp = pilot_log_likelihood(tiny, pr, a, z)
    r = tiny.reward_mean
    r2 = shrink_twin(tiny, 0.3)
    lq = pilot_log_likelihood(tiny, pr, a, z, reward_mean=r2)
    torch.testing.assert_close(reward_log_ratio(n, k, r, r2), lq - lp, rtol=0, atol=1e-12)
    twins = contrast_twins(tiny, 0.9)  # (2, 2, 2): patterns (+, -) and (-, +)
    assert twins.shape == (2, 2, 2)
    combos = [twins[[s0, s1], [0, 1]] for s0 in range(2) for s1 in range(2)]
    q_mix = torch.stack([pilot_log_likelihood(tiny, pr, a, z, reward_mean=t).exp() for t in combos]).mean(0)
    torch.testing.assert_close(mixture_log_ratio(n, k, r, twins), (q_mix / lp.exp()).log(), rtol=0, atol=1e-12)
    p = lp.exp()
    tv_exact = 0.5 * float((p - q_mix).abs().sum())
    test = p >= q_mix  # the Neyman-Pearson test: "instance" where its likelihood is the larger
    assert float(p[test].sum() + q_mix[~test].sum()) == pytest.approx(1 + tv_exact, abs=1e-12)
    other = z.sum((-1, -2)) >= 2  # any other test does no better
    assert float(p[other].sum() + q_mix[~other].sum()) <= 1 + tv_exact + 1e-12
    spr, sa, sz = sample_cells(tiny, 2, 2, 20_000, torch.Generator().manual_seed(5))
    tv, se = total_variation(mixture_log_ratio(*cell_counts(2, 2, spr, sa, sz), r, twins))
    assert abs(tv - tv_exact) < 4 * se and 0 < se < 0.01


def test_twins_keep_the_policy_and_every_value():
    """M65: contrast twins and the shrink twin keep V(x) = sum_a pi r for every prompt; the patterns are the 2^K - 2
    non-constant sign vectors; t = 0 and lam = 1 give the instance back."""
    env = random_env("softmax_bandit", n_prompts=6, n_actions=4, reward_spread=1.0, seed=11)
    p, r = env.probs(), env.reward_mean
    V = (p * r).sum(-1)
    tw = contrast_twins(env, 1.3)
    assert tw.shape == (14, 6, 4) and contrast_patterns(4).shape == (14, 4)
    assert float(((p * tw).sum(-1) - V).abs().max()) < 1e-12 and bool(((tw > 0) & (tw < 1)).all())
    torch.testing.assert_close(contrast_twins(env, 0.0), r.expand(14, -1, -1), rtol=0, atol=1e-12)
    sh = shrink_twin(env, 0.25)
    assert float(((p * sh).sum(-1) - V).abs().max()) < 1e-12
    torch.testing.assert_close(shrink_twin(env, 1.0), r)
    with pytest.raises(ValueError, match="lam = 1.5"):
        shrink_twin(env, 1.5)


def test_exact_constants_equal_the_policy_moments():
    """The batched constants (Gram form) equal SyntheticPolicy.exact's c1, c2, c3 for the policy's own rewards and for
    other reward tables at the same policy."""
    env = random_env("linear_softmax", n_prompts=7, n_actions=3, dim=5, reward_spread=1.0, seed=12)
    tables = torch.rand(3, 7, 3, generator=torch.Generator().manual_seed(1), dtype=DT)
    got = exact_constants(env, torch.cat([env.reward_mean[None], tables]))
    for row, r in zip(got, [env.reward_mean, *tables]):
        same = LinearSoftmax(env.theta0.tolist(), env.features.tolist(), r.tolist())  # another reward table
        exact = same.exact(sigma=False).policy_moments
        assert row.tolist() == pytest.approx([exact.c1, exact.c2, exact.c3], rel=1e-10, abs=1e-14)


def test_contrast_twins_raise_c1_and_shrink_lowers_it():
    """Random action contrasts add to E||g(X)||^2 (c1 up, the band to smaller G); shrinking them by lam multiplies
    every g(x) = sum_a pi (r - V) W by lam, so c1 by lam^2."""
    env = random_env("softmax_bandit", n_prompts=16, n_actions=4, reward_spread=0.3, seed=13)
    c1 = exact_constants(env, env.reward_mean[None])[0, 0]
    tw = contrast_twins(env, 0.8)
    idx = torch.randint(tw.shape[0], (200, 16), generator=torch.Generator().manual_seed(2))
    up = exact_constants(env, tw[idx, torch.arange(16)])[:, 0]
    assert up.mean() > 2 * c1
    assert exact_constants(env, shrink_twin(env, 0.5)[None])[0, 0] == pytest.approx(0.25 * c1, rel=1e-10)
    assert math.isfinite(float(up.min()))
