"""Per-prompt allocation (docs/math.md M32-M36): solver vs brute force, predicted MSE vs exact enumeration."""

import itertools

import numpy as np
import pytest
import torch

from ugrpo.stats.allocation import (
    RULES,
    PromptStats,
    allocate,
    best_uniform,
    dp_allocation,
    greedy_allocation,
    predicted_mse,
    rule_table,
)
from ugrpo.stats.exact_mse import minibatch_mse
from ugrpo.stats.ragged import ragged_advantages, ragged_prompt_gradients

from ._enumerate import enumerate_group, policy_moments_exact, prompt_moments_exact, softmax_bandit, true_grads


def _random_stats(rng, B):
    return PromptStats(value=rng.uniform(0, 1, B), c2=rng.uniform(0, 3, B), c3=rng.uniform(0, 3, B))


def _brute(table, g_min, costs, budget, exact):
    B, K = table.shape
    best = np.inf
    for sizes in itertools.product(range(g_min, g_min + K), repeat=B):
        spent = int(np.dot(costs, sizes))
        if (spent == budget) if exact else (spent <= budget):
            best = min(best, table[np.arange(B), np.array(sizes) - g_min].sum())
    return best


def _objective(table, sizes, g_min):
    return table[np.arange(len(sizes)), sizes - g_min].sum()


@pytest.mark.parametrize("rule", ["ustat", "vip", "knapsack"])
def test_greedy_and_dp_equal_brute_force_in_samples(rule):
    rng = np.random.default_rng(1)
    for B in (1, 2, 3, 4):
        for N in range(2 * B, 17, 3):
            g_max = min(N, 9)
            if N > B * g_max:
                continue
            st = _random_stats(rng, B)
            table = rule_table(rule, st, 2, g_max)
            want = _brute(table, 2, np.ones(B, int), N, exact=True)
            got = allocate(rule, st, N, g_max=g_max)
            assert got.sizes.sum() == N and got.cost == N
            assert _objective(table, got.sizes, 2) == pytest.approx(want, rel=1e-12, abs=1e-15)
            dp = dp_allocation(table, 2, np.ones(B, int), N, exact=True)
            assert _objective(table, dp, 2) == pytest.approx(want, rel=1e-12, abs=1e-15)


def test_token_dp_equals_brute_force_and_ratio_greedy_is_not_exact():
    """Greedy on gain/cost is not exact with unequal costs (M35): it loses on some seeded instance; the DP never."""
    rng = np.random.default_rng(2)
    greedy_worse = 0
    for _ in range(60):
        B = int(rng.integers(1, 4))
        st = _random_stats(rng, B)
        L = rng.integers(1, 5, B)
        T = int(L.sum() * 2 + rng.integers(0, 10))
        table = rule_table("ustat", st, 2, 7)
        want = _brute(table, 2, L, T, exact=False)
        got = allocate("ustat", st, T, g_max=7, unit="tokens", lengths=L)
        assert got.cost <= T
        assert _objective(table, got.sizes, 2) == pytest.approx(want, rel=1e-12)
        sizes, spent = np.full(B, 2), int(2 * L.sum())          # greedy on marginal gain per token
        while True:
            ok = [b for b in range(B) if sizes[b] < 7 and spent + L[b] <= T]
            if not ok:
                break
            b = max(ok, key=lambda b: (table[b, sizes[b] - 2] - table[b, sizes[b] - 1]) / L[b])
            sizes[b] += 1
            spent += L[b]
        greedy_worse += _objective(table, sizes, 2) > want + 1e-9
    assert greedy_worse >= 1


def test_predicted_mse_equals_enumeration_for_a_ragged_fixed_batch():
    """Given the batch (x_1, x_2) with G = (2, 3): E||ghat - mean_b g(x_b)||^2 = (1/B^2) sum_b f_b(G_b) (M33),
    and the estimate (ragged LOO, weight 1/B per prompt) is unbiased (M32)."""
    b = softmax_bandit(2, 2, seed=12)
    gx = true_grads(b)
    sizes = (2, 3)
    outs = [enumerate_group(b, p, G) for p, G in zip((0, 1), sizes)]
    est = []
    for probs, W, Z in outs:
        G = Z.shape[1]
        flat = ragged_advantages(Z.reshape(-1), torch.full((Z.shape[0],), G))
        est.append((probs, ragged_prompt_gradients(W.reshape(-1, W.shape[-1]), flat, torch.full((Z.shape[0],), G))))
    (p0, e0), (p1, e1) = est
    prob = p0[:, None] * p1[None, :]
    total = (e0[:, None, :] + e1[None, :, :]) / 2
    target = gx.mean(0)
    mean = torch.einsum("ij,ijd->d", prob, total)
    torch.testing.assert_close(mean, target, rtol=1e-12, atol=1e-14)
    mse = float((prob * ((total - target) ** 2).sum(-1)).sum())
    pm = [prompt_moments_exact(b, p) for p in (0, 1)]
    assert predicted_mse(np.array(sizes), pm) == pytest.approx(mse, rel=1e-11)


@pytest.mark.parametrize("G", [2, 3, 5])
def test_predicted_mse_of_uniform_averaged_over_batches_is_exact_mse(G):
    """E over iid prompt pairs of c1/B + (1/B^2) sum f_b(G) equals minibatch_mse (M11) for uniform G."""
    b = softmax_bandit(3, 2, seed=5)
    pm = policy_moments_exact(b)
    moms = [prompt_moments_exact(b, p) for p in range(b.P)]
    w = b.weights.numpy()
    avg = sum(w[i] * w[j] * predicted_mse([G, G], [moms[i], moms[j]], c1=pm.c1)
              for i in range(b.P) for j in range(b.P))
    assert avg == pytest.approx(minibatch_mse(pm, "grpo", 2, G), rel=1e-12)


def test_rules_behave_as_their_formulas_say():
    st = PromptStats(value=np.array([0.5, 0.0, 1.0, 0.1]), c2=np.array([1.0, 0.0, 0.0, 5.0]),
                     c3=np.array([1.0, 0.2, 0.2, 5.0]))
    assert allocate("uniform", st, 16).sizes.tolist() == [4, 4, 4, 4]
    vip = allocate("vip", st, 16).sizes
    assert vip[1] == vip[2] == 2 and vip.sum() == 16                # p(1-p) = 0: nothing beyond g_min
    us = allocate("ustat", st, 16).sizes
    assert us[3] > us[0] > us[1] == us[2] == 2                       # the big c2/c3 prompt gets the most
    kn = allocate("knapsack", st, 16).sizes
    assert kn[3] > 2 and kn.sum() == 16


def test_best_uniform_matches_minibatch_formula():
    G, mse = best_uniform(1.0, 2.0, 8.0, 24)
    cands = {g: (1.0 + 2.0 / g + 8.0 / (g * (g - 1))) / (24 // g) for g in (2, 3, 4, 6, 8, 12, 24)}
    assert G == min(cands, key=cands.get) and mse == pytest.approx(cands[G])


def test_bad_input_names_the_problem():
    st = _random_stats(np.random.default_rng(0), 4)
    with pytest.raises(ValueError, match="below the minimum 8"):
        allocate("ustat", st, 7)
    with pytest.raises(ValueError, match="g_max = 2 is below g_min = 3"):
        allocate("ustat", st, 16, g_min=3, g_max=2)
    with pytest.raises(ValueError, match="unknown allocation rule 'dapo'"):
        allocate("dapo", st, 16)
    with pytest.raises(ValueError, match="token budget needs lengths"):
        allocate("ustat", st, 160, unit="tokens")
    with pytest.raises(ValueError, match="exceeds B \\* g_max"):
        allocate("vip", st, 40, g_max=8)
    with pytest.raises(ValueError, match="do not divide"):
        allocate("uniform", st, 18)
    with pytest.raises(ValueError, match="G_b >= 2"):
        predicted_mse([1, 3, 2, 2], st)
    with pytest.raises(ValueError, match="c2 and c3 are second moments"):
        PromptStats(value=np.array([0.5]), c2=np.array([-1.0]), c3=np.array([0.0]))
    assert set(RULES) == {"uniform", "vip", "knapsack", "ustat", "uniform-is", "ustat-is"}
    with pytest.raises(ValueError, match="does not split a drawn batch"):
        allocate("ustat-is", st, 16)
    assert greedy_allocation(np.zeros((2, 3)), 2, 4).tolist() == [2, 2]


def test_docs_token_counterexample():
    """docs/math.md M35: greedy on gain per token gives (5, 2) with F = 3.15; the optimum is (2, 3), F = 2.5."""
    st = PromptStats(value=np.array([0.5, 0.5]), c2=np.zeros(2), c3=np.array([3.0, 6.0]))
    got = allocate("ustat", st, 11, unit="tokens", lengths=np.array([1, 3]))
    assert got.sizes.tolist() == [2, 3] and got.cost == 11
    assert predicted_mse(got, st) * 4 == pytest.approx(2.5)
    assert predicted_mse([5, 2], st) * 4 == pytest.approx(3.15)


def test_screening_is_explicit_exact_for_its_objective_and_refused_elsewhere():
    rng = np.random.default_rng(4)
    for _ in range(10):
        B = int(rng.integers(1, 4))
        st = PromptStats(value=rng.uniform(0, 1, B), c2=rng.uniform(0, 3, B), c3=rng.uniform(0, 3, B),
                         g_norm2=rng.uniform(0, 0.5, B))
        N = int(rng.integers(2 * B, 3 * B + 4))
        got = allocate("ustat", st, N, g_max=7, screen=True)
        table = rule_table("ustat", st, 2, 7)
        best = np.inf
        for sizes in itertools.product([0, 2, 3, 4, 5, 6, 7], repeat=B):
            if sum(sizes) == N:
                best = min(best, sum(st.g_norm2[b] if G == 0 else table[b, G - 2] for b, G in enumerate(sizes)))
        val = sum(st.g_norm2[b] if G == 0 else table[b, G - 2] for b, G in enumerate(got.sizes))
        assert got.rule == "ustat+screen" and got.sizes.sum() == N and val == pytest.approx(best, rel=1e-12)
    assert (allocate("ustat", st, N, g_max=7).sizes >= 2).all()        # the default never drops a prompt
    with pytest.raises(ValueError, match="defined for rule 'ustat'"):
        allocate("vip", st, N, g_max=7, screen=True)
    with pytest.raises(ValueError, match="without g_norm2"):
        allocate("ustat", PromptStats(st.value, st.c2, st.c3), N, g_max=7, screen=True)


def test_dropping_a_prompt_is_biased_by_its_gradient():
    """Enumeration (docs/math.md M32): with G = (0, 3) the mean of the estimate misses g(x_1)/B."""
    b = softmax_bandit(2, 2, seed=12)
    gx = true_grads(b)
    probs, W, Z = enumerate_group(b, 1, 3)
    sizes = torch.full((Z.shape[0],), 3)
    est = ragged_prompt_gradients(W.reshape(-1, W.shape[-1]), ragged_advantages(Z.reshape(-1), sizes), sizes) / 2
    mean = (probs[:, None] * est).sum(0)
    torch.testing.assert_close(mean - gx.mean(0), -gx[0] / 2, rtol=1e-12, atol=1e-14)
    mse = float((probs * ((est - gx.mean(0)) ** 2).sum(1)).sum())
    f1 = predicted_mse([3], [prompt_moments_exact(b, 1)])        # f_1(3)
    assert mse == pytest.approx(float((gx[0] ** 2).sum()) / 4 + f1 / 4, rel=1e-11)
