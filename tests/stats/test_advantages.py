"""Advantages (paper eq. (4), Table 1, Algorithm 2; docs/math.md M1-M4): closed forms by enumeration."""

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ugrpo.stats.advantages import BASELINES, compute_advantages, loo_advantages, mean_advantages, zero_std_groups

DT = torch.float64


def _all_binary(G):
    return torch.tensor(list(itertools.product([0.0, 1.0], repeat=G)), dtype=DT)  # (2^G, G)


def _probs(Z, p):
    k = Z.sum(1)
    return p**k * (1 - p) ** (Z.shape[1] - k)


@pytest.mark.parametrize("G", [2, 3, 5])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_enumerated_mean_and_variance(G, p):
    """Exact E[A_1], Var(A_1) over all 2^G Bernoulli(p) outcomes against closed forms."""
    Z = _all_binary(G)
    pr = _probs(Z, p)
    v = p * (1 - p)
    want = {  # baseline -> (E A_1, Var A_1)
        "vanilla": (p, v),
        "grpo": (0.0, v * G / (G - 1)),          # Var(Z_1 - mean of the G-1 others)
        "grpo_mean": (0.0, v * (G - 1) / G),     # Var(Z_1 - Zbar)
        "oracle": (0.0, v),
    }
    for name, (mean, var) in want.items():
        values = torch.full((Z.shape[0],), p, dtype=DT) if name == "oracle" else None
        A = compute_advantages(Z, baseline=name, values=values).advantages[:, 0]
        m = float((pr * A).sum())
        assert m == pytest.approx(mean, abs=1e-14)
        assert float((pr * (A - m) ** 2).sum()) == pytest.approx(var, rel=1e-12)


@pytest.mark.parametrize("G", [2, 3, 4, 6])
def test_std_scaled_binary_closed_form(G):
    """Algorithm 2 on a binary group with k ones: a 1 gets (G-k)/(G-1) / sqrt(k(G-k)/(G(G-1)))."""
    Z = _all_binary(G)
    A = compute_advantages(Z, baseline="grpo", scale="std", ddof=1, eps=0.0).advantages
    for z, a in zip(Z, A):
        k = int(z.sum())
        if k in (0, G):
            assert torch.all(a == 0)
            continue
        se = math.sqrt(k * (G - k) / (G * (G - 1)))
        want = torch.tensor([(G - k) / (G - 1) / se if zi == 1 else -k / (G - 1) / se for zi in z], dtype=DT)
        torch.testing.assert_close(a, want, rtol=1e-12, atol=1e-14)


@settings(max_examples=40, deadline=None)
@given(G=st.integers(2, 7), B=st.integers(1, 4), seed=st.integers(0, 10**6))
def test_loo_is_literal_leave_one_out_and_mean_is_scaled(G, B, seed):
    Z = torch.rand(B, G, generator=torch.Generator().manual_seed(seed), dtype=DT)
    literal = torch.stack([torch.stack([Z[b, g] - (Z[b].sum() - Z[b, g]) / (G - 1) for g in range(G)])
                           for b in range(B)])
    torch.testing.assert_close(loo_advantages(Z), literal, rtol=1e-12, atol=1e-13)       # eq. (4), M2
    torch.testing.assert_close(mean_advantages(Z), (G - 1) / G * loo_advantages(Z))     # M3


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), scale=st.floats(0.1, 10))
def test_shift_and_scale_invariance(seed, scale):
    gen = torch.Generator().manual_seed(seed)
    Z = torch.rand(3, 5, generator=gen, dtype=DT)
    shift = torch.randn(3, 1, generator=gen, dtype=DT) * 10
    for name in ("grpo", "grpo_mean"):
        torch.testing.assert_close(compute_advantages(Z + shift, baseline=name).advantages,
                                   compute_advantages(Z, baseline=name).advantages, rtol=1e-9, atol=1e-10)
        scaled = compute_advantages(scale * Z + shift, baseline=name, scale="std", eps=0.0).advantages
        torch.testing.assert_close(scaled, compute_advantages(Z, baseline=name, scale="std", eps=0.0).advantages,
                                   rtol=1e-9, atol=1e-9)


def test_std_denominator_is_ddof_std_around_full_mean():
    Z = torch.tensor([[1.0, 0.0, 0.0, 3.0]], dtype=DT)
    for ddof in (0, 1):
        sd = math.sqrt(((Z - Z.mean()) ** 2).sum() / (4 - ddof))
        got = compute_advantages(Z, baseline="grpo", scale="std", ddof=ddof, eps=1e-6).advantages
        torch.testing.assert_close(got, loo_advantages(Z) / (sd + 1e-6))


def test_zero_std_policies_and_counting():
    Z = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]], dtype=DT)
    assert zero_std_groups(Z).tolist() == [True, False, True]
    for policy in ("zero", "eps", "unscaled"):
        for scale in ("none", "std"):
            r = compute_advantages(Z, baseline="vanilla", scale=scale, zero_std=policy, eps=1e-4)
            assert r.n_zero_std == 2 and r.frac_zero_std == pytest.approx(2 / 3)
    zero = compute_advantages(Z, baseline="vanilla", scale="std", zero_std="zero").advantages
    eps = compute_advantages(Z, baseline="vanilla", scale="std", zero_std="eps", eps=1e-4).advantages
    keep = compute_advantages(Z, baseline="vanilla", scale="std", zero_std="unscaled").advantages
    assert torch.all(zero[0] == 0) and torch.allclose(eps[0], torch.full((3,), 1e4, dtype=DT))
    assert torch.equal(keep[0], Z[0]) and torch.equal(keep[2], Z[2])
    assert torch.isfinite(zero).all()
    grpo = compute_advantages(Z, baseline="grpo", scale="std", zero_std="eps", eps=1e-4).advantages
    assert torch.all(grpo[0] == 0)  # centred numerator is exactly 0


def test_oracle_and_registry():
    Z = torch.tensor([[1.0, 0.0], [0.5, 0.5]], dtype=DT)
    V = torch.tensor([0.25, 0.5], dtype=DT)
    torch.testing.assert_close(compute_advantages(Z, baseline="oracle", values=V).advantages,
                               torch.tensor([[0.75, -0.25], [0.0, 0.0]], dtype=DT))
    assert set(BASELINES) == {"vanilla", "grpo", "grpo_mean", "oracle"}


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="G >= 2, got G = 1"):
        compute_advantages(torch.zeros(3, 1), baseline="grpo")
    bad = torch.zeros(2, 3)
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"non-finite value\(s\), first at \[prompt 1, sample 2\]"):
        compute_advantages(bad)
    with pytest.raises(ValueError, match=r"shape \(B, G\).*got shape \(6,\)"):
        compute_advantages(torch.zeros(6))
    with pytest.raises(ValueError, match="needs values=V"):
        compute_advantages(torch.zeros(2, 3), baseline="oracle")
    with pytest.raises(ValueError, match=r"values must have shape \(B,\) = \(2,\)"):
        compute_advantages(torch.zeros(2, 3), baseline="oracle", values=torch.zeros(3))
    with pytest.raises(TypeError, match="floating-point"):
        compute_advantages(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="unknown baseline 'loo'"):
        compute_advantages(torch.zeros(2, 3), baseline="loo")
    with pytest.raises(ValueError, match="eps=0"):
        compute_advantages(torch.ones(2, 3), scale="std", zero_std="eps", eps=0.0)
    with pytest.raises(ValueError, match="ddof=1 needs G > ddof"):
        compute_advantages(torch.ones(2, 1), baseline="vanilla", scale="std", ddof=1)
