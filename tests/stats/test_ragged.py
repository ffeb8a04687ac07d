"""Ragged groups (docs/math.md M37): equal to the dense functions on equal sizes (the advantages bit for bit), to a
per-group loop otherwise (std scaling included, M4)."""

import pytest
import torch

from ugrpo.stats.advantages import compute_advantages
from ugrpo.stats.estimator import policy_gradient, prompt_gradients
from ugrpo.stats.ragged import (
    compute_ragged_advantages,
    dense_to_ragged,
    ragged_advantages,
    ragged_all_equal,
    ragged_hoeffding,
    ragged_policy_gradient,
    ragged_prompt_gradients,
    ragged_reward_spread,
    ragged_t0,
    segment_sum,
)
from ugrpo.stats.ustat import hoeffding_decomposition, pairwise_ustatistic

DT = torch.float64
BASELINES = ["vanilla", "grpo", "grpo_mean", "oracle"]


def _data(sizes, D=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    return (torch.bernoulli(torch.full((n,), 0.4, dtype=DT), generator=gen), torch.randn(n, D, generator=gen, dtype=DT),
            torch.rand(len(sizes), generator=gen, dtype=DT), torch.tensor(sizes))


@pytest.mark.parametrize("baseline", BASELINES)
def test_equal_sizes_equal_dense(baseline):
    B, G = 5, 4
    z, W, v, _ = _data([G] * B, seed=1)
    zd, Wd = z.reshape(B, G), W.reshape(B, G, -1)
    dense = compute_advantages(zd, baseline=baseline, values=v if baseline == "oracle" else None).advantages
    flat, sizes = dense_to_ragged(zd)
    adv = ragged_advantages(flat, sizes, baseline=baseline, values=v if baseline == "oracle" else None)
    torch.testing.assert_close(adv, dense.reshape(-1), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(ragged_prompt_gradients(W, adv, sizes), prompt_gradients(Wd, dense))
    torch.testing.assert_close(ragged_policy_gradient(W, adv, sizes), policy_gradient(Wd, dense))


@pytest.mark.parametrize("baseline", BASELINES)
def test_ragged_equals_per_group_loop(baseline):
    sizes = [2, 5, 3, 7, 2]
    z, W, v, s = _data(sizes, seed=2)
    adv = ragged_advantages(z, s, baseline=baseline, values=v if baseline == "oracle" else None)
    grads = ragged_prompt_gradients(W, adv, s)
    start = 0
    for b, G in enumerate(sizes):
        zb, Wb = z[start:start + G].unsqueeze(0), W[start:start + G].unsqueeze(0)
        want = compute_advantages(zb, baseline=baseline, values=v[b:b + 1] if baseline == "oracle" else None)
        torch.testing.assert_close(adv[start:start + G], want.advantages[0], rtol=1e-13, atol=1e-13)
        torch.testing.assert_close(grads[b], prompt_gradients(Wb, want.advantages)[0])
        if baseline == "grpo":  # Lemma 1: the LOO estimate is the U-statistic of the group, any G_b
            torch.testing.assert_close(grads[b], pairwise_ustatistic(Wb[0], zb[0]))
        start += G
    torch.testing.assert_close(ragged_policy_gradient(W, adv, s), grads.mean(0))


def test_ragged_hoeffding_equals_per_group_and_adds_up():
    sizes = [3, 2, 6]
    z, W, v, s = _data(sizes, seed=3)
    g = torch.randn(3, W.shape[1], dtype=DT)
    first, resid = ragged_hoeffding(W, z, s, v, g)
    loo = ragged_prompt_gradients(W, ragged_advantages(z, s), s)
    torch.testing.assert_close(g + first + resid, loo)
    start = 0
    for b, G in enumerate(sizes):
        parts = hoeffding_decomposition(W[start:start + G], z[start:start + G], v[b], g[b])
        torch.testing.assert_close(first[b], parts.first_order)
        torch.testing.assert_close(resid[b], parts.residual)
        start += G


def test_segment_sum_and_errors():
    torch.testing.assert_close(segment_sum(torch.arange(6, dtype=DT), torch.tensor([1, 2, 3])),
                               torch.tensor([0.0, 3.0, 12.0], dtype=DT))
    z = torch.zeros(5, dtype=DT)
    with pytest.raises(ValueError, match="prompt 1 has G_b = 1"):
        ragged_advantages(z, torch.tensor([4, 1]))
    with pytest.raises(ValueError, match="sum to 4 but there are 5"):
        ragged_advantages(z, torch.tensor([2, 2]))
    with pytest.raises(ValueError, match="needs values"):
        ragged_advantages(z, torch.tensor([2, 3]), baseline="oracle")
    with pytest.raises(ValueError, match="unknown baseline"):
        ragged_advantages(z, torch.tensor([2, 3]), baseline="dr_grpo")
    with pytest.raises(ValueError, match="non-finite"):
        ragged_advantages(torch.tensor([0.0, float("nan")], dtype=DT), torch.tensor([2]))
    with pytest.raises(ValueError, match="scores must have shape"):
        ragged_prompt_gradients(torch.zeros(4, 2, dtype=DT), z, torch.tensor([2, 3]))


def test_ragged_t0_is_the_m14_pair_sum():
    g = torch.Generator().manual_seed(0)
    sizes = torch.tensor([2, 4, 3])
    w = torch.randn(9, 5, generator=g, dtype=torch.float64)
    z = torch.rand(9, generator=g, dtype=torch.float64)
    got = ragged_t0(z, w, sizes)
    off = 0
    for b, G in enumerate(sizes.tolist()):
        pairs = [float(z[off + i] * z[off + j] * (w[off + i] @ w[off + j])) for i in range(G) for j in range(G)
                 if i != j]
        assert got[b].item() == pytest.approx(sum(pairs) / (G * (G - 1)), rel=1e-12)
        off += G


def test_ragged_t0_with_equal_groups_is_the_dense_t0():
    from ugrpo.stats.components import prompt_terms, reduce_scores

    g = torch.Generator().manual_seed(1)
    w = torch.randn(3, 5, 4, generator=g, dtype=torch.float64)
    z = torch.rand(3, 5, generator=g, dtype=torch.float64)
    t0, _, _ = prompt_terms(*reduce_scores(z, w, None))
    torch.testing.assert_close(ragged_t0(z.reshape(-1), w.reshape(15, 4), torch.tensor([5, 5, 5])), t0)


def test_ragged_reward_spread():
    zero, var = ragged_reward_spread(torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0]), torch.tensor([2, 3]))
    assert zero.tolist() == [True, False]
    assert var.tolist() == pytest.approx([0.0, 1 / 3])
    assert ragged_reward_spread(torch.tensor([0.3]), torch.tensor([1]))[1].tolist() == [0.0]  # G_b = 1: no spread


def _brute_std_advantages(z, sizes, baseline, values, ddof, eps, policy):
    """Per-group loop in Python floats: A = Z - C (LOO written out for grpo), divided by s_b + eps with s_b the
    ddof-std around the full group mean (M4); all-equal groups as ``policy`` says."""
    out, zero, off = [], [], 0
    for b, G in enumerate(sizes):
        zb = [float(x) for x in z[off:off + G]]
        mean = sum(zb) / G
        if baseline == "vanilla":
            a = zb
        elif baseline == "oracle":
            a = [x - float(values[b]) for x in zb]
        elif baseline == "grpo_mean":
            a = [x - mean for x in zb]
        else:
            a = [x - (sum(zb) - x) / (G - 1) for x in zb]   # the literal leave-one-out mean
        s = (sum((x - mean) ** 2 for x in zb) / (G - ddof)) ** 0.5
        equal = max(zb) == min(zb)
        zero.append(equal)
        if equal and policy == "zero":
            out += [0.0] * G
        elif equal and policy == "unscaled":
            out += a
        else:
            out += [x / (s + eps) for x in a]
        off += G
    return torch.tensor(out, dtype=DT), torch.tensor(zero)


@pytest.mark.parametrize("baseline", BASELINES)
@pytest.mark.parametrize("policy", ["zero", "eps", "unscaled"])
@pytest.mark.parametrize("ddof", [0, 1])
def test_ragged_std_scaling_equals_a_per_group_loop(baseline, policy, ddof):
    sizes = [2, 5, 3, 7, 2, 4]
    gen = torch.Generator().manual_seed(4)
    z = torch.rand(sum(sizes), generator=gen, dtype=DT)
    z[7:10] = 0.25                                   # prompt 2 (G_b = 3): all equal
    z[17:19] = 1.0                                   # prompt 4 (G_b = 2): all equal
    v = torch.rand(len(sizes), generator=gen, dtype=DT)
    values = v if baseline == "oracle" else None
    got = compute_ragged_advantages(z, torch.tensor(sizes), baseline=baseline, values=values, scale="std",
                                    ddof=ddof, eps=1e-3, zero_std=policy)
    want, zero = _brute_std_advantages(z, sizes, baseline, v, ddof, 1e-3, policy)
    torch.testing.assert_close(got.advantages, want, rtol=1e-12, atol=1e-12)
    assert got.zero_std.tolist() == zero.tolist() == [False, False, True, False, True, False]
    assert got.n_zero_std == 2


@pytest.mark.parametrize("scale", ["none", "std"])
def test_equal_sizes_are_the_dense_advantages_bit_for_bit(scale):
    """Equal groups reduce on the (B, G) view, so the ragged path and compute_advantages agree exactly."""
    gen = torch.Generator().manual_seed(5)
    for G in (2, 5, 8, 16):
        z = torch.randn(6, G, generator=gen, dtype=DT) * 3 + 1
        z[1] = 0.7
        for baseline in BASELINES:
            v = torch.rand(6, generator=gen, dtype=DT) if baseline == "oracle" else None
            dense = compute_advantages(z, baseline=baseline, values=v, scale=scale)
            rag = compute_ragged_advantages(z.reshape(-1), torch.full((6,), G), baseline=baseline, values=v,
                                            scale=scale)
            assert torch.equal(rag.advantages, dense.advantages.reshape(-1))
            assert torch.equal(rag.zero_std, dense.zero_std) and rag.n_zero_std == dense.n_zero_std == 1


def test_ragged_std_errors_name_the_problem():
    z = torch.rand(5, dtype=DT)
    with pytest.raises(ValueError, match=r"ddof=2 needs G_b > ddof for every prompt; prompt 0 has G_b = 2"):
        compute_ragged_advantages(z, torch.tensor([2, 3]), scale="std", ddof=2)
    with pytest.raises(ValueError, match="zero_std='eps' with eps=0"):
        compute_ragged_advantages(z, torch.tensor([2, 3]), scale="std", zero_std="eps", eps=0.0)
    with pytest.raises(ValueError, match="unknown scale"):
        compute_ragged_advantages(z, torch.tensor([2, 3]), scale="max")
    assert ragged_all_equal(torch.tensor([1.0, 1.0, 0.0, 0.1, 0.0]), torch.tensor([2, 3]), atol=0.1).tolist() == \
        [True, True]
