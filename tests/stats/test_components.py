"""Unbiased c1, c2, c3 from a pilot (docs/math.md M13-M20): exact enumeration, brute force, Monte Carlo."""

import itertools

import numpy as np
import pytest
import torch

from ugrpo.stats.bootstrap_ci import summarise
from ugrpo.stats.components import (
    _bootstrap_replicates,
    centred_c1_terms,
    estimate_components,
    gaussian_sketch,
    point_estimates,
    prompt_terms,
    reduce_scores,
)

from ._enumerate import DT, enumerate_group, linear_softmax, policy_moments_exact, sample, softmax_bandit


def _naive(rewards, scores):
    """Literal definitions: loops over ordered pairs / triples of distinct samples and prompt pairs."""
    B, G, _ = scores.shape
    c1_t0, c2, c3, gbar = 0.0, 0.0, 0.0, []
    for b in range(B):
        Z, W = rewards[b].tolist(), scores[b]
        K = (W @ W.T).tolist()
        t0 = sum(Z[i] * Z[j] * K[i][j] for i in range(G) for j in range(G) if i != j) / (G * (G - 1))
        trip = list(itertools.permutations(range(G), 3))
        t1 = sum(K[i][i] * (Z[i] - Z[j]) * (Z[i] - Z[k]) for i, j, k in trip) / len(trip)
        t2 = sum(K[i][i] * 0.5 * (Z[j] - Z[k]) ** 2 for i, j, k in trip) / len(trip)
        c1_t0 += t0 / B
        c2 += (t1 - t0) / B
        c3 += (t2 + t0) / B
        gbar.append((rewards[b].unsqueeze(1) * W).mean(0))
    cross = sum(float(gbar[b] @ gbar[c]) for b in range(B) for c in range(B) if b != c) / (B * (B - 1))
    return torch.tensor([c1_t0 - cross, c2, c3], dtype=DT)


def _naive_centred_c1(rewards, scores):
    """M67 literally: T0' with the mean of the other G - 2 rewards for every ordered pair, and the prompts' gradients
    with the leave-one-out mean of the other G - 1 rewards."""
    B, G, _ = scores.shape
    t0, gh = 0.0, []
    for b in range(B):
        Z, W = rewards[b].tolist(), scores[b]
        K = (W @ W.T).tolist()
        for i in range(G):
            for j in range(G):
                if i != j:
                    m = sum(Z[k] for k in range(G) if k not in (i, j)) / (G - 2)
                    t0 += (Z[i] - m) * (Z[j] - m) * K[i][j] / (G * (G - 1) * B)
        loo = [Z[i] - sum(Z[k] for k in range(G) if k != i) / (G - 1) for i in range(G)]
        gh.append((torch.tensor(loo, dtype=DT).unsqueeze(1) * W).mean(0))
    cross = sum(float(gh[b] @ gh[c]) for b in range(B) for c in range(B) if b != c) / (B * (B - 1))
    return t0 - cross


@pytest.mark.parametrize("B,G", [(2, 4), (3, 5), (4, 7)])
def test_vectorised_equals_brute_force(B, G):
    gen = torch.Generator().manual_seed(B * 10 + G)
    scores = torch.randn(B, G, 3, generator=gen, dtype=DT)
    rewards = torch.rand(B, G, generator=gen, dtype=DT)
    torch.testing.assert_close(point_estimates(rewards, scores=scores, c1_baseline="none"), _naive(rewards, scores),
                               rtol=1e-12, atol=1e-13)
    centred = point_estimates(rewards, scores=scores)
    torch.testing.assert_close(centred[1:], _naive(rewards, scores)[1:], rtol=1e-12, atol=1e-13)  # c2, c3 unchanged
    assert float(centred[0]) == pytest.approx(_naive_centred_c1(rewards, scores), rel=1e-11, abs=1e-13)


def test_centred_c1_is_unchanged_by_a_reward_shift_and_less_noisy():
    """M67: c1 from rewards Z + a equals c1 from Z (the raw form moves); on a bandit whose mean reward is 0.8, 2,000
    seeded pilots (16 x 8) give a centred c1 with under half the raw one's standard deviation, the same mean."""
    gen = torch.Generator().manual_seed(8)
    scores, rewards = torch.randn(6, 5, 4, generator=gen, dtype=DT), torch.rand(6, 5, generator=gen, dtype=DT)
    c, c_up = point_estimates(rewards, scores=scores), point_estimates(rewards + 3.0, scores=scores)
    assert float(c_up[0]) == pytest.approx(float(c[0]), rel=1e-10)
    raw, raw_up = (point_estimates(z, scores=scores, c1_baseline="none")[0] for z in (rewards, rewards + 3.0))
    assert abs(float(raw_up - raw)) > 1e-3
    from ugrpo.envs.generate import random_env

    env = random_env("softmax_bandit", n_prompts=16, n_actions=4, reward_spread=1.0, difficulty=-1.4, seed=5)
    b = env.sample_many(env.theta0.unsqueeze(0).expand(2000, -1), 16, 8, torch.Generator().manual_seed(9))
    cen = point_estimates(b.rewards, scores=b.scores)[:, 0]
    raw = point_estimates(b.rewards, scores=b.scores, c1_baseline="none")[:, 0]
    c1 = env.exact(sigma=False).policy_moments.c1
    for est in (cen, raw):
        assert abs(float(est.mean()) - c1) < 4 * float(est.std()) / 2000**0.5
    assert float(raw.std()) > 2 * float(cen.std())


def test_gram_path_equals_scores_path():
    gen = torch.Generator().manual_seed(0)
    B, G, D = 5, 6, 7
    scores = torch.randn(B, G, D, generator=gen, dtype=DT)
    rewards = (torch.rand(B, G, generator=gen) < 0.4).to(DT)
    flat = scores.reshape(B * G, D)
    gram = flat @ flat.T
    torch.testing.assert_close(point_estimates(rewards, gram=gram), point_estimates(rewards, scores=scores),
                               rtol=1e-12, atol=1e-14)
    a = estimate_components(rewards, gram=gram, n_boot=300, generator=torch.Generator().manual_seed(1))
    b = estimate_components(rewards, scores=scores, n_boot=300, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(a.replicates, b.replicates, rtol=1e-12, atol=1e-14, equal_nan=True)


@pytest.mark.parametrize("c1_baseline", ["leave-out", "none"])
@pytest.mark.parametrize("make", [lambda: softmax_bandit(2, 2, seed=21), lambda: linear_softmax(2, 2, 3, seed=22)],
                         ids=["tabular", "linear"])
def test_unbiased_by_exact_enumeration(make, c1_baseline):
    """Every pilot of B0=2 prompts x G0=4 samples, weighted by its probability: E[estimate] == exact c's."""
    b, G0 = make(), 4
    probs, scores, rewards = [], [], []
    for p in range(b.P):
        pr, W, Z = enumerate_group(b, p, G0)
        probs.append(b.weights[p] * pr)
        scores.append(W)
        rewards.append(Z)
    probs, scores, rewards = torch.cat(probs), torch.cat(scores), torch.cat(rewards)  # law of one prompt's group
    i, j = torch.meshgrid(torch.arange(len(probs)), torch.arange(len(probs)), indexing="ij")
    i, j = i.reshape(-1), j.reshape(-1)
    est = point_estimates(torch.stack([rewards[i], rewards[j]], 1), scores=torch.stack([scores[i], scores[j]], 1),
                          c1_baseline=c1_baseline)
    mean = ((probs[i] * probs[j]).unsqueeze(1) * est).sum(0)
    pm = policy_moments_exact(b)
    torch.testing.assert_close(mean, torch.tensor([pm.c1, pm.c2, pm.c3], dtype=DT), rtol=1e-10, atol=1e-13)
    assert min(pm.c1, pm.c2, pm.c3) > 1e-3  # every constant is non-trivial here


def test_unbiased_monte_carlo_linear_softmax():
    """20,000 seeded pilots (B0=6, G0=5) of a shared-parameter linear-softmax: mean within 4 SE of exact."""
    b = linear_softmax(4, 3, 5, seed=23)
    R, B0, G0 = 20_000, 6, 5
    _, scores, rewards = sample(b, R * B0, G0, torch.Generator().manual_seed(24))
    est = point_estimates(rewards.reshape(R, B0, G0), scores=scores.reshape(R, B0, G0, -1))  # (R, 3)
    pm = policy_moments_exact(b)
    exact = torch.tensor([pm.c1, pm.c2, pm.c3], dtype=DT)
    se = est.std(0) / R**0.5
    assert ((est.mean(0) - exact).abs() < 4 * se).all(), (est.mean(0), exact, se)
    assert (se < 0.05 * exact.abs()).all()  # the test resolves each constant to a few percent


def test_sketches_are_unbiased_over_sketch_seeds():
    """E_S[estimate(S W)] == estimate(W) (linear in inner products): 1,500 sketch seeds, within 4 SE."""
    b = linear_softmax(3, 4, 40, seed=25)
    _, scores, rewards = sample(b, 5, 4, torch.Generator().manual_seed(26))
    exact = point_estimates(rewards, scores=scores)
    gen = torch.Generator().manual_seed(27)
    R = 1500
    sk = torch.stack([gaussian_sketch(scores, 6, gen) for _ in range(R)])  # (R, 5, 4, 6)
    est = point_estimates(rewards.expand(R, -1, -1), scores=sk)
    se = est.std(0) / R**0.5
    assert ((est.mean(0) - exact).abs() < 4 * se).all(), (est.mean(0), exact, se)
    assert not torch.allclose(est[0], exact)  # a single sketch is noisy: the check has teeth


def test_sketch_preserves_inner_products_in_expectation():
    gen = torch.Generator().manual_seed(3)
    a, c = torch.randn(2, 30, generator=gen, dtype=DT)
    x = torch.stack([torch.stack([a, c]) for _ in range(1)])
    vals = torch.stack([(lambda s: s[0, 0] @ s[0, 1])(gaussian_sketch(x, 5, gen)) for _ in range(2000)])
    assert abs(float(vals.mean() - a @ c)) < 4 * float(vals.std() / 2000**0.5)


def test_bootstrap_replicates_match_definition():
    gen = torch.Generator().manual_seed(5)
    B, G = 5, 4
    scores = torch.randn(B, G, 3, generator=gen, dtype=DT)
    rewards = torch.rand(B, G, generator=gen, dtype=DT)
    z, diag, M = reduce_scores(rewards, scores, None)
    t0, t1, t2 = prompt_terms(z, diag, M)
    counts = torch.tensor([[1, 1, 1, 1, 1], [3, 0, 2, 0, 0], [0, 0, 0, 5, 0]], dtype=DT)
    reps, se = _bootstrap_replicates(t0, t1, t2, M, counts)
    torch.testing.assert_close(reps[0], point_estimates(rewards, scores=scores, c1_baseline="none"))  # counts 1
    w = counts[1].tolist()
    num = sum(w[b] * w[c] * float(M[b, c]) for b in range(B) for c in range(B) if b != c)
    den = sum(w[b] * w[c] for b in range(B) for c in range(B) if b != c)
    want = torch.tensor([float((counts[1] * t0).sum()) / B - num / den,
                         float((counts[1] * (t1 - t0)).sum()) / B, float((counts[1] * (t2 + t0)).sum()) / B], dtype=DT)
    torch.testing.assert_close(reps[1], want)
    assert torch.isnan(reps[2, 0]) and torch.isfinite(reps[2, 1:]).all()  # one distinct prompt: c1 undefined
    # the standard errors of the original sample (all counts 1): sd of the influence values / sqrt(B) (M39)
    # c1 is a U-statistic of order 2: Var = [4 (B-2) zeta1 + 2 zeta2] / (B (B-1)), zeta1 = Var(psi)/4 with the
    # influence values psi, zeta2 = Var over pairs b != c of the kernel (t0_b + t0_c)/2 - M_bc (Hoeffding)
    psi = t0 - 2 * torch.tensor([sum(float(M[b, c]) for c in range(B) if c != b) for b in range(B)], dtype=DT) / (B - 1)
    h = [float((t0[b] + t0[c]) / 2 - M[b, c]) for b in range(B) for c in range(B) if b != c]
    zeta2 = float(np.var(h))
    assert float(se[0, 0]) == pytest.approx(((4 * (B - 2) * float(psi.var()) / 4 + 2 * zeta2) / (B * (B - 1))) ** 0.5)
    for k, x in ((1, t1 - t0), (2, t2 + t0)):
        assert float(se[0, k]) == pytest.approx(float(x.std()) / B**0.5)
    u2 = (t1 - t0).tolist()  # a resample: count-weighted sd over B - 1, / sqrt(B)
    m = sum(wb * u for wb, u in zip(w, u2)) / B
    assert float(se[1, 1]) == pytest.approx((sum(wb * (u - m) ** 2 for wb, u in zip(w, u2)) / (B - 1) / B) ** 0.5)


def test_studentized_interval_is_the_bootstrap_t_formula():
    """lo, hi = point - q(1-a/2) se, point - q(a/2) se with t = (rep - point)/rep_se; clipped at 0; percentile too."""
    rng = np.random.default_rng(3)
    reps = 2.0 + rng.exponential(1.0, 2000) - 1.0       # right-skewed replicates around 2
    rep_se = 0.5 + 0.5 * (reps - reps.min()) / np.ptp(reps)  # SE grows with the replicate (as for a variance)
    e = summarise(2.0, reps, 0.9, "studentized-equal-tailed", 0.7, rep_se)
    t = (reps - 2.0) / rep_se
    sym = summarise(2.0, reps, 0.9, "studentized", 0.7, rep_se)
    half = np.quantile(np.abs(t), 0.9) * 0.7
    assert (sym.ci_low, sym.ci_high) == pytest.approx((2.0 - half, 2.0 + half))
    assert e.ci_low == pytest.approx(max(2.0 - np.quantile(t, 0.95) * 0.7, 0.0))
    assert e.ci_high == pytest.approx(2.0 - np.quantile(t, 0.05) * 0.7)
    p = summarise(2.0, reps, 0.9, "percentile")
    assert (p.ci_low, p.ci_high) == pytest.approx(tuple(np.quantile(reps, [0.05, 0.95])))
    # constant replicate SE = the sample's SE: bootstrap-t is the percentile interval reflected about the point
    # (right-skewed replicates -> an interval that reaches further left than the percentile one)
    b = summarise(2.0, reps, 0.9, "studentized-equal-tailed", 0.7, np.full_like(reps, 0.7))
    q_lo, q_hi = np.quantile(reps, [0.05, 0.95])
    assert (b.ci_low, b.ci_high) == pytest.approx((max(4.0 - q_hi, 0.0), 4.0 - q_lo))
    assert b.ci_low < p.ci_low and b.ci_high < p.ci_high
    assert summarise(0.1, reps - 1.9, 0.9, "studentized", 0.7, rep_se).ci_low == 0.0  # never below the range


def test_log_scale_interval_formula_and_limits():
    """studentized-log: exp(log(x+s) -+ q(|t_u|) se/(x+s)) - s; -> the plain symmetric interval as s -> inf (M39)."""
    rng = np.random.default_rng(4)
    reps = 2.0 + rng.exponential(1.0, 2000) - 1.0
    rep_se = 0.5 + 0.5 * (reps - reps.min()) / np.ptp(reps)
    s = 0.5
    lg = summarise(2.0, reps, 0.9, "studentized-log", 0.7, rep_se, shift=s)
    t_u = (np.log(reps + s) - np.log(2.0 + s)) / (rep_se / (reps + s))
    half = np.quantile(np.abs(t_u), 0.9) * 0.7 / (2.0 + s)
    assert (lg.ci_low, lg.ci_high) == pytest.approx(((2.0 + s) * np.exp(-half) - s, (2.0 + s) * np.exp(half) - s))
    assert lg.ci_high - 2.0 > 2.0 - lg.ci_low  # the log scale reaches further up than down
    sym = summarise(2.0, reps, 0.9, "studentized", 0.7, rep_se)
    far = summarise(2.0, reps, 0.9, "studentized-log", 0.7, rep_se, shift=1e7)  # log(x + s) ~ linear in x
    assert (far.ci_low, far.ci_high) == pytest.approx((sym.ci_low, sym.ci_high), rel=1e-4)
    for shift in (None, -2.0):  # no shift (c2, c3) or x + s <= 0: the plain symmetric interval
        e = summarise(2.0, reps, 0.9, "studentized-log", 0.7, rep_se, shift=shift)
        assert (e.ci_low, e.ci_high) == (sym.ci_low, sym.ci_high)
    r2 = reps - 1.6  # some replicates with x* + s <= 0: t_u = -inf
    low = summarise(2.0, r2, 0.9, "studentized-log", 0.4, rep_se, shift=s)
    t_low = np.where(r2 + s > 0, (r2 + s) * np.log(np.clip(r2 + s, 1e-300, None) / 2.5) / rep_se, -np.inf)
    half = np.quantile(np.abs(t_low), 0.9) * 0.4 / 2.5
    assert (r2 + s <= 0).any() and half <= 1.0
    assert (low.ci_low, low.ci_high) == pytest.approx((max(2.5 * np.exp(-half) - s, 0.0), 2.5 * np.exp(half) - s))
    # a log-scale half-width > 1 (here x + s = 0.01, far below the replicates' spread): the plain interval
    wide = summarise(2.0, reps, 0.9, "studentized-log", 0.7, rep_se, shift=-1.99)
    assert (wide.ci_low, wide.ci_high) == (sym.ci_low, sym.ci_high)


def test_log_scale_interval_scales_with_the_scores():
    """Scores times a: c1 and its shift scale by a^2, so c1's interval scales by a^2, and so do c2's and c3's (log
    scale); where their log-scale half-width exceeds 1 (here: plain intervals reaching below 0) they are the plain
    symmetric ones."""
    b = linear_softmax(6, 3, 5, seed=33)
    _, scores, rewards = sample(b, 16, 8, torch.Generator().manual_seed(34))
    one = estimate_components(rewards, scores=scores, n_boot=300, generator=torch.Generator().manual_seed(35))
    three = estimate_components(rewards, scores=3 * scores, n_boot=300, generator=torch.Generator().manual_seed(35))
    for a, c in ((one.c1, three.c1), (one.c2, three.c2), (one.c3, three.c3)):
        assert (c.ci_low, c.ci_high) == pytest.approx((9 * a.ci_low, 9 * a.ci_high))
    st = estimate_components(rewards, scores=scores, n_boot=300, generator=torch.Generator().manual_seed(35),
                             method="studentized")
    assert st.c2.ci_low == 0.0 and st.c3.ci_low == 0.0  # plain intervals reaching below 0: log half-width > 1
    assert (one.c2, one.c3) == (st.c2, st.c3) and one.c1.estimate == st.c1.estimate
    # the shift: mean_b ||gh_b||^2 - T0'_b, and c1 + shift = half the mean squared distance of the gh_b, the prompts'
    # mean gradients with the leave-one-out baseline (M39 with the centred terms of M67)
    t0, M = centred_c1_terms(rewards, scores, None)
    gh = ((rewards - rewards.mean(1, keepdim=True)).unsqueeze(-1) * scores).sum(1) / 7
    pair = sum(float((gh[i] - gh[j]) @ (gh[i] - gh[j])) for i in range(16) for j in range(16) if i != j)
    assert one.c1_shift == pytest.approx(float((torch.diagonal(M) - t0).mean()))
    assert one.c1.estimate + one.c1_shift == pytest.approx(pair / (2 * 16 * 15))
    assert one.c1.ci_high - one.c1.estimate > one.c1.estimate - one.c1.ci_low or one.c1.ci_low == 0.0


def test_c2_c3_intervals_are_symmetric_bootstrap_t_on_the_log_scale_and_the_draws_carry_them():
    """studentized-log: c2's and c3's intervals are c exp(-+ q_95(|t_u|) se / c), t_u = c*_r log(c*_r / c) / se*_r
    (M39 with s = 0), longer above the estimate than below; the confidence draws' central 95% are the intervals of
    all three constants (the draws use the same t_u); "studentized" keeps the plain symmetric interval."""
    b = linear_softmax(6, 3, 5, seed=33)
    _, scores, rewards = sample(b, 64, 8, torch.Generator().manual_seed(34))
    vc = estimate_components(rewards, scores=scores, n_boot=400, generator=torch.Generator().manual_seed(35))
    st = estimate_components(rewards, scores=scores, n_boot=400, generator=torch.Generator().manual_seed(35),
                             method="studentized")
    reps, rse = vc.replicates.numpy(), vc.replicate_se.numpy()
    draws = vc.confidence_draws()
    for k, (e, plain) in enumerate(((vc.c2, st.c2), (vc.c3, st.c3)), start=1):
        c, se = e.estimate, vc.sample_se[k]
        t_u = reps[:, k] * np.log(reps[:, k] / c) / rse[:, k]
        half = np.quantile(np.abs(t_u), 0.95) * se / c
        assert e.kind == "95% bootstrap studentized-log" and half <= 1.0
        assert (e.ci_low, e.ci_high) == pytest.approx((c * np.exp(-half), c * np.exp(half)), rel=1e-12)
        assert e.ci_high - c > c - e.ci_low
        p_half = np.quantile(np.abs((reps[:, k] - c) / rse[:, k]), 0.95) * se
        assert (plain.ci_low, plain.ci_high) == pytest.approx((c - p_half, c + p_half), rel=1e-12)
        assert (e.ci_low, e.ci_high) != pytest.approx((plain.ci_low, plain.ci_high), rel=1e-3)
    for k, e in enumerate((vc.c1, vc.c2, vc.c3)):
        lo, hi = np.maximum(np.quantile(draws[:, k], [0.025, 0.975]), 0.0)  # the intervals are clipped at 0
        assert (lo, hi) == pytest.approx((e.ci_low, e.ci_high), rel=0.02)


def test_estimate_components_result():
    b = linear_softmax(6, 3, 5, seed=30)
    _, scores, rewards = sample(b, 64, 8, torch.Generator().manual_seed(31))
    rewards[0] = 1.0  # one all-equal group
    vc = estimate_components(rewards, scores=scores, n_boot=500, generator=torch.Generator().manual_seed(32))
    again = estimate_components(rewards, scores=scores, n_boot=500, generator=torch.Generator().manual_seed(32))
    assert torch.equal(vc.replicates, again.replicates) and vc.c1 == again.c1  # seeded: reproducible
    assert vc.n_prompts == 64 and vc.group_size == 8 and vc.replicates.shape == (500, 3)
    assert vc.frac_zero_std >= 1 / 64
    torch.testing.assert_close(torch.tensor([vc.c1.estimate, vc.c2.estimate, vc.c3.estimate], dtype=DT),
                               point_estimates(rewards, scores=scores))
    for e in (vc.c1, vc.c2, vc.c3):
        assert e.ci_low < e.ci_high and e.se > 0
    assert vc.c2.ci_low < vc.c2.estimate < vc.c2.ci_high
    assert vc.c1_distinguishable_from_zero == (vc.c1.ci_low > 0)
    none = estimate_components(rewards, scores=scores, n_boot=0)
    assert none.replicates.shape == (0, 3) and none.c1.ci_low != none.c1.ci_low  # NaN


def test_c1_not_distinguishable_when_prompts_identical():
    b = softmax_bandit(1, 3, seed=40)  # one prompt: c1 = 0 exactly
    _, scores, rewards = sample(b, 8, 8, torch.Generator().manual_seed(41))
    vc = estimate_components(rewards, scores=scores, n_boot=400, generator=torch.Generator().manual_seed(42))
    assert not vc.c1_distinguishable_from_zero
    assert vc.c1.ci_low == 0.0 < vc.c1.ci_high  # clipped to the range of c1 (>= 0)
    pct = estimate_components(rewards, scores=scores, n_boot=400, generator=torch.Generator().manual_seed(42),
                              method="percentile")
    assert pct.c1.ci_low == 0.0 < pct.c1.ci_high and pct.method == "percentile" and vc.method == "studentized-log"
    with pytest.raises(ValueError, match="method = 'bca' is unknown"):
        estimate_components(rewards, scores=scores, method="bca")


def test_errors_name_the_problem():
    S = torch.zeros(4, 4, 2, dtype=DT)
    Z = torch.zeros(4, 4, dtype=DT)
    with pytest.raises(ValueError, match=r"G0 >= 4 needed: the c2 and c3 estimators are U-statistics of order 3"):
        estimate_components(Z[:, :3], scores=S[:, :3])
    with pytest.raises(ValueError, match=r"B0 >= 2 pilot prompts needed"):
        estimate_components(Z[:1], scores=S[:1])
    bad = Z.clone()
    bad[2, 1] = float("nan")
    with pytest.raises(ValueError, match=r"non-finite value\(s\).*\(2, 1\)"):
        estimate_components(bad, scores=S)
    with pytest.raises(ValueError, match=r"scores must have shape rewards.shape \+ \(D,\)"):
        estimate_components(Z, scores=S[:3])
    with pytest.raises(ValueError, match="exactly one of"):
        estimate_components(Z)
    with pytest.raises(ValueError, match=r"gram must have shape \(B0\*G0, B0\*G0\) = \(16, 16\)"):
        estimate_components(Z, gram=torch.zeros(15, 15, dtype=DT))
    asym = torch.eye(16, dtype=DT)
    asym[0, 1] = 1.0
    with pytest.raises(ValueError, match="not symmetric"):
        estimate_components(Z, gram=asym)
    with pytest.raises(ValueError, match="n_boot"):
        estimate_components(Z, scores=S, n_boot=-1)
    with pytest.raises(ValueError, match="sketch dimension k"):
        gaussian_sketch(S, 0)


def test_non_finite_scores_name_the_sample():
    S = torch.ones(4, 4, 2, dtype=DT)
    S[1, 3, 0] = float("inf")
    with pytest.raises(ValueError, match=r"non-finite values.*first at sample index \(1, 3\)"):
        estimate_components(torch.zeros(4, 4, dtype=DT), scores=S)
    S[1, 3, 0] = float("nan")
    with pytest.raises(ValueError, match=r"non-finite values.*\(1, 3\)"):
        point_estimates(torch.zeros(4, 4, dtype=DT), scores=S)
