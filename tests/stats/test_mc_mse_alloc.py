"""Ragged squared errors and per-prompt moments of ``ugrpo.stats.mc_mse`` (docs/lm-mse.md R8-R10): brute force,
the dense block code, and seeded Monte Carlo against the exact MSE of M33 on synthetic policies."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ugrpo.envs.generate import random_env
from ugrpo.stats.allocation import PromptStats, allocate, predicted_mse
from ugrpo.stats.history import PromptHistory
from ugrpo.stats.mc_mse import (
    block_squared_errors,
    history_prompt_posterior,
    history_prompt_sums,
    is_block_errors,
    ragged_block_errors,
    reference_moments,
    sample_prompt_stats,
)

DT = torch.float64


def _blocks(R: int, B: int, Gmax: int, k: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(R, B, Gmax, k, generator=gen, dtype=DT)
    z = (torch.rand(R, B, Gmax, generator=gen) < 0.4).to(DT)
    return s, z, torch.randn(k, generator=gen, dtype=DT), gen


def test_ragged_block_errors_match_per_row_loops():
    """Brute force: per repetition, per prompt, the LOO advantage Z_i - mean of the other G_b - 1 rewards."""
    R, B, Gmax, k = 3, 4, 7, 5
    s, z, g, gen = _blocks(R, B, Gmax, k, 0)
    sizes = torch.randint(2, Gmax + 1, (R, B), generator=gen)
    got = ragged_block_errors(s, z, sizes, g)
    targets = torch.randn(R, k, generator=gen, dtype=DT)  # one target per repetition (within the drawn prompts)
    got_t = ragged_block_errors(s, z, sizes, targets)
    for r in range(R):
        est = torch.zeros(k, dtype=DT)
        for b in range(B):
            n = int(sizes[r, b])
            for i in range(n):
                others = [float(z[r, b, j]) for j in range(n) if j != i]
                est += (float(z[r, b, i]) - sum(others) / len(others)) * s[r, b, i] / n / B
        assert float(got[r]) == pytest.approx(float(((est - g) ** 2).sum()), rel=1e-12)
        assert float(got_t[r]) == pytest.approx(float(((est - targets[r]) ** 2).sum()), rel=1e-12)


def test_is_block_errors_by_loop_and_their_mean_is_m53_by_enumeration():
    """docs/lm-mse.md R11: (i) r_rb ||w_rb ghat_rb - g||^2 averaged over the B blocks, by a loop; (ii) for a prompt
    drawn uniformly, E[P q(x) ||w(x) ghat(x) - g||^2] = S(q, G) - ||g||^2 (M53 with B = 1), by exact enumeration."""
    from ugrpo.stats.prompt_is import second_moment

    from ._enumerate import enumerate_group, prompt_moments_exact, softmax_bandit, true_grads

    R, B, Gmax, k = 3, 4, 6, 5
    s, z, g, gen = _blocks(R, B, Gmax, k, 3)
    sizes = torch.randint(2, Gmax + 1, (R, B), generator=gen)
    w, r = torch.rand(R, B, generator=gen, dtype=DT) + 0.5, torch.rand(R, B, generator=gen, dtype=DT) + 0.5
    got = is_block_errors(s, z, sizes, w, r, g)
    for i in range(R):
        want = 0.0
        for b in range(B):
            n = int(sizes[i, b])
            est = torch.zeros(k, dtype=DT)
            for j in range(n):
                others = [float(z[i, b, m]) for m in range(n) if m != j]
                est += (float(z[i, b, j]) - sum(others) / len(others)) * s[i, b, j] / n
            want += float(r[i, b]) * float(((w[i, b] * est - g) ** 2).sum()) / B
        assert float(got[i]) == pytest.approx(want, rel=1e-12)
    bandit = softmax_bandit(3, 2, seed=4)
    gx, q, G = true_grads(bandit), np.array([0.2, 0.5, 0.3]), np.array([2, 3, 2])
    gbar = gx.mean(0)
    expect = 0.0
    for x in range(3):
        probs, W, Z = enumerate_group(bandit, x, int(G[x]))
        n = Z.shape[0]
        e = is_block_errors(W.reshape(n, 1, int(G[x]), -1), Z.reshape(n, 1, int(G[x])),
                            torch.full((n, 1), int(G[x])), torch.full((n, 1), 1 / (3 * q[x]), dtype=DT),
                            torch.full((n, 1), 3 * q[x], dtype=DT), gbar)
        expect += float((probs * e).sum()) / 3  # x uniform
    st = PromptStats.from_moments([prompt_moments_exact(bandit, x) for x in range(3)])
    assert expect == pytest.approx(second_moment(q, G, st) - float((gbar**2).sum()), rel=1e-11)


def test_uniform_sizes_equal_dense_grpo_on_first_group():
    """All G_b = G: the ragged error is block_squared_errors' grpo on the first G samples of each block."""
    R, B, Gmax, k, G = 5, 3, 9, 4, 4
    s, z, g, gen = _blocks(R, B, Gmax, k, 1)
    v = torch.rand(R, B, generator=gen, dtype=DT)
    dense = block_squared_errors(s[:, :, :G], z[:, :, :G], v, g, G)["grpo"]
    torch.testing.assert_close(ragged_block_errors(s, z, torch.full((R, B), G), g), dense, rtol=1e-13, atol=0)


def test_ragged_block_errors_bad_sizes():
    s, z, g, _ = _blocks(2, 2, 4, 3, 2)
    with pytest.raises(ValueError, match=r"in \[2, 4\]"):
        ragged_block_errors(s, z, torch.tensor([[2, 5], [2, 2]]), g)
    with pytest.raises(ValueError, match="integer"):
        ragged_block_errors(s, z, torch.ones(2, 2), g)


class _Sampler:
    """Samples of given prompts from an exact env: scores (..., D) and rewards."""

    def __init__(self, env):
        self.p, self.W, self.r = env.probs(env.theta0), env.score_table(env.theta0), env.reward_mean

    def __call__(self, prompts: torch.Tensor, n: int, gen) -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.multinomial(self.p[prompts.reshape(-1)], n, replacement=True, generator=gen)  # (m, n)
        pr = prompts.reshape(-1, 1)
        s, z = self.W[pr, a], torch.bernoulli(self.r[pr, a], generator=gen)
        return s.view(*prompts.shape, n, -1).to(DT), z.view(*prompts.shape, n).to(DT)


def _env():
    return random_env("softmax_bandit", n_prompts=4, n_actions=3, logit_scale=1.5, extreme_fraction=0.5, seed=7)


def test_ragged_errors_average_to_predicted_mse_on_exact_env():
    """Sizes by ustat and vip from the exact moments, blocks sampled from the policy, errors against the exact g:
    the mean over 4000 repetitions is within 5 SE of the mean of predicted_mse (M33) over the same batches."""
    env = _env()
    ex = env.exact(env.theta0)
    true, c1, g = PromptStats.from_moments(ex.prompt_moments), ex.policy_moments.c1, ex.g_x.mean(0).to(DT)
    sample, gen = _Sampler(env), torch.Generator().manual_seed(3)
    R, B, Gmax, G = 4000, 3, 10, 4
    idx = torch.randint(4, (R, B), generator=gen)
    s, z = sample(idx, Gmax, gen)
    for rule in ("ustat", "vip"):
        sizes = np.stack([allocate(rule, true.take(i), B * G, g_max=Gmax).sizes for i in idx.numpy()])
        assert (sizes != G).any()  # the rule does differ from uniform here
        err = ragged_block_errors(s, z, torch.as_tensor(sizes), g)
        want = np.mean([predicted_mse(a, true.take(i), c1=c1) for a, i in zip(sizes, idx.numpy())])
        zscore = (float(err.mean()) - want) / (float(err.std()) / math.sqrt(R))
        assert abs(zscore) < 5, (rule, float(err.mean()), want, zscore)


def test_reference_correction_with_sizes_chosen_from_the_reference():
    """R8: sizes chosen from the reference samples' own moments ("true" moments of the LM study); the corrected
    mean ||ghat - g_ref||^2 - ref_err over 3000 studies is within 5 SE of E[predicted_mse(sizes, exact moments)],
    and the uncorrected mean is more than 5 SE above it (so the check can fail)."""
    env = _env()
    ex = env.exact(env.theta0)
    true, c1 = PromptStats.from_moments(ex.prompt_moments), ex.policy_moments.c1
    sample, gen = _Sampler(env), torch.Generator().manual_seed(5)
    P, M, R, B, Gmax, G = 4, 6, 3, 2, 8, 4
    corrected, raw, target = [], [], []
    for _ in range(3000):
        ref_s, ref_z = sample(torch.arange(P), M, gen)
        ref = reference_moments(ref_s, ref_z)
        known = sample_prompt_stats(ref_s, ref_z)
        idx = torch.randint(P, (R, B), generator=gen)
        sizes = np.stack([allocate("ustat", known.take(i), B * G, g_max=Gmax).sizes for i in idx.numpy()])
        s, z = sample(idx, Gmax, gen)
        err = float(ragged_block_errors(s, z, torch.as_tensor(sizes), ref.g_ref).mean())
        corrected.append(err - ref.ref_err)
        raw.append(err)
        target.append(np.mean([predicted_mse(a, true.take(i), c1=c1) for a, i in zip(sizes, idx.numpy())]))
    d, d_raw = np.array(corrected) - np.array(target), np.array(raw) - np.array(target)
    se = d.std(ddof=1) / math.sqrt(len(d))
    assert abs(d.mean()) / se < 5, (d.mean(), se)
    assert d_raw.mean() / (d_raw.std(ddof=1) / math.sqrt(len(d))) > 5


def test_sample_prompt_stats_unbiased_for_exact_prompt_moments():
    """Per-prompt p, c2(x), c3(x) (U-statistics; the clip at 0 rarely acts on them at M = 12): the mean over 3000
    pools is within 5 SE of the exact PromptMoments. (g_norm2 = max(T0, 0) is not: the clip biases it upwards
    where ||g(x)||^2 is small; no rule here uses it.)"""
    env = _env()
    true = PromptStats.from_moments(env.exact(env.theta0).prompt_moments)
    sample, gen = _Sampler(env), torch.Generator().manual_seed(9)
    vals = {k: [] for k in ("value", "c2", "c3")}
    for _ in range(3000):
        st = sample_prompt_stats(*sample(torch.arange(4), 12, gen))
        for k in vals:
            vals[k].append(getattr(st, k))
    for k, v in vals.items():
        a = np.array(v)                                            # (n, P)
        z = (a.mean(0) - getattr(true, k)) / (a.std(0, ddof=1) / math.sqrt(len(a)) + 1e-15)
        assert (np.abs(z) < 5).all(), (k, a.mean(0), getattr(true, k), z)


def test_history_prompt_sums_are_the_prompt_history_of_the_same_visits():
    gen = torch.Generator().manual_seed(4)
    P, V, h, k = 3, 2, 4, 5
    s = torch.randn(P, V, h, k, generator=gen, dtype=DT)
    z = (torch.rand(P, V, h, generator=gen) < 0.5).to(DT)
    got = history_prompt_sums(s, z)
    hist = PromptHistory(P)
    for v in range(V):  # one step per visit: every prompt once, h samples each
        hist.update(np.arange(P), np.full(P, h), z[:, v].reshape(-1).numpy(), s[:, v].reshape(P * h, k).numpy())
    assert set(got) == set(hist.sums)
    for key, want in hist.sums.items():
        np.testing.assert_allclose(got[key], want, rtol=1e-12, atol=1e-12, err_msg=key)
    post = history_prompt_posterior(s, z)
    assert len(post) == P and post.seen.all()
