"""Theorem 7 scaling law and the group-size planner (docs/math.md M21-M24)."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar

from ugrpo.stats.band import _FACTORS, bootstrap_band, pilot_size_needed
from ugrpo.stats.bootstrap_ci import Estimate
from ugrpo.stats.components import VarianceComponents, estimate_components
from ugrpo.stats.planner import bound, candidate_groups, group_cost, plan_group_size

from ._enumerate import linear_softmax, policy_moments_exact, sample


def _brute_argmin(c1, c2, c3, N):
    return min((g for g in range(2, N + 1) if N % g == 0), key=lambda g: bound(c1, c2, c3, N, g))


@settings(max_examples=60, deadline=None)
@given(c1=st.floats(1e-4, 10), c2=st.floats(0, 10), c3=st.floats(0, 1e3), N=st.sampled_from([12, 60, 64, 96, 1024,
                                                                                             360]))
def test_plan_equals_brute_force_argmin(c1, c2, c3, N):
    plan = plan_group_size((c1, c2, c3), N)
    assert plan.g_star == _brute_argmin(c1, c2, c3, N)
    assert [row[0] for row in plan.candidates] == [g for g in range(2, N + 1) if N % g == 0]
    for G, B, mse in plan.candidates:
        assert B * G == N and mse == pytest.approx(c1 * G / N + c2 / N + c3 / (N * (G - 1)))


@pytest.mark.parametrize("c1,c3", [(1.0, 49.0), (0.01, 3.0), (2.0, 0.5)])
def test_continuous_optimum_is_the_minimiser_and_universal(c1, c3):
    plans = [plan_group_size((c1, 1.0, c3), N) for N in (64, 1000, 4096, 12_345 * 2)]
    assert len({p.g_star_continuous for p in plans}) == 1
    p = plans[0]
    assert p.g_star_continuous == pytest.approx(1 + math.sqrt(c3 / c1))
    assert p.g_star_paper == pytest.approx(math.sqrt(c3 / c1))
    res = minimize_scalar(lambda G: bound(c1, 1.0, c3, 64, G), bounds=(1.0001, 1e4), method="bounded",
                          options={"xatol": 1e-10})
    assert res.x == pytest.approx(p.g_star_continuous, rel=1e-5)


def test_same_candidates_same_argmin_for_every_N():
    cands = [2, 4, 8, 16, 32, 64]
    for c1, c3 in [(1.0, 49.0), (0.05, 300.0), (3.0, 1.0)]:
        stars = {plan_group_size((c1, 2.0, c3), N, candidates=cands).g_star for N in (64, 128, 1024, 4096, 64 * 3)}
        assert len(stars) == 1


def test_exact_constants_from_policy_moments():
    pm = policy_moments_exact(linear_softmax(4, 3, 5, seed=50))
    plan = plan_group_size(pm, 1024)
    assert plan.g_star == _brute_argmin(pm.c1, pm.c2, pm.c3, 1024)
    assert plan.g_star_ci is None and plan.level is None and plan.c1_distinguishable_from_zero


def test_c1_zero_exact_takes_largest_candidate():
    plan = plan_group_size((0.0, 1.0, 5.0), 64, candidates=[4, 8, 16])
    assert plan.g_star == 16 and math.isinf(plan.g_star_continuous)


def _vc(c1, c3, reps, n_prompts=16):
    e = lambda est, lo, hi: Estimate(est, lo, hi, (hi - lo) / 4)  # noqa: E731
    return VarianceComponents(c1=e(*c1), c2=e(1.0, 0.8, 1.2), c3=e(*c3), n_prompts=n_prompts, group_size=8,
                              frac_zero_std=0.0, replicates=torch.tensor(reps, dtype=torch.float64))


def test_not_distinguishable_gives_lower_bound_and_message():
    reps = [[0.01, 1.0, 40.0], [-0.01, 1.0, 50.0], [0.02, 1.0, 45.0], [0.0, 1.0, 60.0]]
    vc = _vc((0.005, -0.01, 0.02), (50.0, 40.0, 60.0), reps, n_prompts=16)
    plan = plan_group_size(vc, 1024)
    assert plan.g_star is None and not plan.c1_distinguishable_from_zero
    assert plan.g_star_lower_bound == pytest.approx(1 + math.sqrt(40.0 / 0.02))
    assert plan.message.startswith(f"use G = {plan.g_recommended} ") and not plan.decided
    assert "the pilot cannot tell which G is best" in plan.message and "B0" not in plan.message.split(";")[0]
    assert plan.g_band[1] == 1024 and plan.band_open_ended and f"G of at least {plan.g_band[0]}" in plan.message
    assert "c1's estimate" not in plan.message  # the estimate is >= 0
    # a band that holds every candidate is "any G", in the plan's words and in the report's
    from dataclasses import replace

    from ugrpo.report.plan import band_words
    from ugrpo.stats.planner import band_text

    smallest = plan.candidates[0][0]
    everything = replace(plan, g_band=(smallest, 1024))
    assert band_text(everything) == "any G" and band_text(plan) == f"G of at least {plan.g_band[0]}" != "any G"
    band = {"low": smallest, "high": 1024, "open_ended": True, "probability": {str(c[0]): 0.5 for c in plan.candidates}}
    assert band_words(band) == "any G" and band_words(band, "num_generations") == "any num_generations"
    assert band_words({**band, "low": 16}) == "G of at least 16"
    assert band_words({**band, "open_ended": False, "high": 64}) == f"G from {smallest} to 64"
    negative = plan_group_size(_vc((-0.004, 0.0, 0.02), (50.0, 40.0, 60.0), reps), 1024)
    assert "c1's estimate -0.004 is below 0 (the true c1 is >= 0; taken as 0 in the plan)" in negative.message


def test_ci_from_replicates_is_percentile_of_argmins():
    rng = np.random.default_rng(0)
    reps = np.column_stack([rng.uniform(0.5, 2, 400), np.ones(400), rng.uniform(20, 80, 400)])
    vc = _vc((1.0, 0.6, 1.9), (49.0, 22.0, 78.0), reps.tolist())
    plan = plan_group_size(vc, 1024)
    stars = [_brute_argmin(a, 1.0, c, 1024) for a, c in reps[:, [0, 2]]]
    assert plan.g_star_ci == (int(np.quantile(stars, 0.025, method="inverted_cdf")),
                              int(np.quantile(stars, 0.975, method="inverted_cdf")))
    assert plan.g_star == 8 and plan.g_star_ci[0] <= 8 <= plan.g_star_ci[1]


def test_end_to_end_from_pilot():
    b = linear_softmax(64, 3, 5, seed=51)
    _, scores, rewards = sample(b, 256, 8, torch.Generator().manual_seed(52))
    vc = estimate_components(rewards, scores=scores, n_boot=300, generator=torch.Generator().manual_seed(53))
    plan = plan_group_size(vc, 1024, candidates=[2, 4, 8, 16, 32, 64, 128])
    pm = policy_moments_exact(b)
    assert plan.c1_distinguishable_from_zero  # 256 pilot prompts resolve c1 here
    assert plan.g_star == _brute_argmin_over(pm, [2, 4, 8, 16, 32, 64, 128])  # same G as the exact constants
    assert plan.g_star_ci[0] <= plan.g_star <= plan.g_star_ci[1]
    assert plan.g_star_continuous_ci[0] <= 1 + math.sqrt(pm.c3 / pm.c1) <= plan.g_star_continuous_ci[1]


def _brute_argmin_over(pm, cands):
    return min(cands, key=lambda g: bound(pm.c1, pm.c2, pm.c3, 1024, g))


def test_errors_name_N():
    with pytest.raises(ValueError, match="N = 7 has no divisor G with 2 <= G <= 6"):
        candidate_groups(7, max_g=6)
    with pytest.raises(ValueError, match="candidate G = 3 does not divide N = 1024"):
        plan_group_size((1.0, 1.0, 1.0), 1024, candidates=[2, 3, 4])
    with pytest.raises(ValueError, match="N must be an int >= 2"):
        plan_group_size((1.0, 1.0, 1.0), 1)
    with pytest.raises(ValueError, match="exact constants must be >= 0"):
        plan_group_size((-1.0, 1.0, 1.0), 64)
    with pytest.raises(TypeError, match="components must be"):
        plan_group_size("abc", 64)
    with pytest.raises(ValueError, match="G must be > 1"):
        bound(1.0, 1.0, 1.0, 64, 1)
    no_boot = _vc((1.0, 0.5, 1.5), (4.0, 3.0, 5.0), np.zeros((0, 3)).tolist())
    with pytest.raises(ValueError, match="n_boot=0"):
        plan_group_size(no_boot, 64)


@settings(max_examples=40, deadline=None)
@given(c1=st.floats(1e-5, 10), c2=st.floats(0, 10), c3=st.floats(0, 1e3), tol=st.sampled_from([0.01, 0.05, 0.2]),
       N=st.sampled_from([64, 96, 1024]))
def test_band_from_exact_constants_is_a_brute_force_scan(c1, c2, c3, tol, N):
    plan = plan_group_size((c1, c2, c3), N, tolerance=tol)
    divisors = [g for g in range(2, N + 1) if N % g == 0]
    best = min(bound(c1, c2, c3, N, g) for g in divisors)
    scan = [g for g in divisors if bound(c1, c2, c3, N, g) <= (1 + tol) * best * (1 + 1e-12)]
    assert list(plan.band) == scan and plan.g_recommended == plan.g_star and plan.g_band == (scan[0], scan[-1])
    worst = max(divisors, key=lambda g: bound(c1, c2, c3, N, g))
    assert plan.worst[0] == worst and plan.worst[1] == pytest.approx(bound(c1, c2, c3, N, worst) / best)
    assert group_cost(plan, plan.g_star) == 1.0


def _ratios(rows, cands):
    return np.array([[bound(*np.maximum(c, 0), 1024, g) / min(bound(*np.maximum(c, 0), 1024, h) for h in cands)
                      for g in cands] for c in rows])


def test_band_probabilities_recommendation_and_band_by_brute_force():
    """Probabilities and expected ratios over the draws of c1, c2 and c3 at the estimates (M80); the worst ratio over
    c1's range on a grid; the G to use is the robust G with the smallest expected ratio; the band is every G
    near-optimal for some c1 in the range."""
    rng = np.random.default_rng(1)
    c1_draws = rng.uniform(-0.02, 0.2, 300)
    cands = candidate_groups(1024)
    for c1_range in [(0.0, 0.2), (0.04, 0.06), (0.01, 0.03)]:
        r = bootstrap_band((0.05, 1.0, 1.2), c1_draws, 1024, cands, c1_range=c1_range)
        ratios = _ratios([[c, 1.0, 1.2] for c in c1_draws], cands)
        assert np.allclose(r.probability, (ratios <= 1.05).mean(0)) and np.allclose(r.expected_ratio, ratios.mean(0))
        grid = _ratios([[c, 1.0, 1.2] for c in np.linspace(*c1_range, 401)], cands)
        assert np.allclose(r.worst_case, grid.max(0), rtol=1e-9)  # the maximum is at an end (quasi-convexity)
        robust = [k for k, g in enumerate(cands) if grid[:, k].max() <= 1.05]
        pool = robust or list(range(len(cands)))
        assert r.recommended == cands[min(pool, key=lambda k: ratios.mean(0)[k])] and r.decided == bool(robust)
        near = {g for k, g in enumerate(cands) if grid[:, k].min() <= 1.05}
        assert set(r.confidence_band) == set(range(min(near), max(near) + 1)) & set(cands) | {r.recommended}


def test_recommendation_uses_every_draw_not_only_those_with_positive_c1():
    """Half the draws have c1 < 0: clipped to 0 they count (c1 = 0 favours large G), as c1's confidence distribution
    says; conditioning on c1 > 0 (the previous rule) would give the G* of c1 = 0.01."""
    draws = np.array([[0.01, 1.0, 1.0]] * 50 + [[-0.01, 1.0, 1.0]] * 50)
    cands = candidate_groups(1024)
    r = bootstrap_band((0.0, 1.0, 1.0), draws[:, 0], 1024, cands, c1_range=(0.0, 0.02))
    ratios = _ratios(draws, cands)
    assert r.recommended == cands[int(np.argmin(ratios.mean(0)))] != plan_group_size((0.01, 1.0, 1.0), 1024).g_star
    assert r.probability[-1] == pytest.approx(0.5) and r.high == 1024 and r.open_ended


def test_ratio_has_a_pole_where_c1_and_c2_are_0():
    """M80: at c1 = c2 = 0 the bound is c3/(N(G-1)), so every G's ratio to the best is (G_max - 1)/(G - 1) (146 at
    G = 8 of the divisors of 1024), whatever c3 > 0; at c1 = 0 alone it stays below (c2 + c3)/c2."""
    cands = candidate_groups(1024)
    r = bootstrap_band((0.0, 0.0, 0.3), np.zeros(4), 1024, cands, c1_range=(0.0, 0.0))
    assert np.allclose(r.expected_ratio, [1023 / (g - 1) for g in cands])
    r = bootstrap_band((0.0, 0.2, 0.3), np.zeros(4), 1024, cands, c1_range=(0.0, 0.0))
    assert max(r.expected_ratio) <= (0.2 + 0.3) / 0.2


def test_recommendation_reads_c1_draws_with_c2_c3_at_their_estimates():
    """M80: 5 of 100 replicates with c2 and c1 below 0 (a resample that drops a pilot's rare heavy prompt) do not
    move the G to use: it is the argmin of the expected ratio over c1's draws with c2, c3 at the estimates (brute
    force). Over the joint draws, clipped at 0, those 5 rows sit on the pole at c1 = c2 = 0 and carry the mean to
    G = 64 (as on a bandit-rare-hard pilot of the planner benchmark)."""
    rng = np.random.default_rng(3)
    reps = [[c, 1.0 + 0.05 * rng.standard_normal(), 1.0] for c in rng.uniform(0.0, 0.03, 95)]
    reps += [[-0.002, -0.05, 0.9]] * 5
    vc = _vc((0.012, 0.0, 0.03), (1.0, 0.9, 1.1), reps, n_prompts=64)
    plan = plan_group_size(vc, 1024)
    cands = candidate_groups(1024)
    mine = _ratios([[c, 1.0, 1.0] for c, _, _ in reps], cands).mean(0)
    joint = _ratios(reps, cands).mean(0)
    assert plan.g_recommended == cands[int(np.argmin(mine))] and np.allclose(plan.expected_ratio, mine)
    assert 8 <= plan.g_recommended <= 16 and cands[int(np.argmin(joint))] == 64


@pytest.mark.parametrize("rng, below", [((0.005, 0.08), 0.015), ((0.0, 0.08), 0.06)], ids=["inside", "cut-at-0"])
def test_pilot_size_needed_decides_wherever_c1_lies_in_its_interval(rng, below):
    """M68: the size returned is the largest over centres c in [lo, hi] of the smallest f B0 at which the interval
    [c - (est - lo)/sqrt(f), c + (hi - est)/sqrt(f)] decides (checked on a 401-point grid of c1 in each interval);
    an interval cut at 0 has lost its lower half-width, and the upper one (hi - est) stands in for it."""
    cands = [4, 8, 16, 32, 64]
    c, hi = 0.02, rng[1]
    need = pilot_size_needed(c, rng, 1.0, 1.0, 32, 1024, cands)
    assert need is not None and need > 32
    f = need / 32

    def decides(f, centre):
        s = 1 / math.sqrt(f)
        grid = _ratios([[x, 1.0, 1.0] for x in np.linspace(max(centre - below * s, 0.0), centre + (hi - c) * s, 401)],
                       cands)
        return grid.max(0).min() <= 1.05

    centres = np.linspace(rng[0], hi, 41)
    assert all(decides(f, x) for x in centres)  # enough wherever the estimate lands in the interval
    prev = max(x for x in _FACTORS if x < f)  # the factor tried before the one returned
    assert not all(decides(prev, x) for x in centres)
    assert pilot_size_needed(c, (0.0199, 0.0201), 1.0, 1.0, 32, 1024, cands) == 32  # already decided
    # a negative estimate is taken as 0
    assert pilot_size_needed(-0.01, (0.0, 0.01), 1.0, 1.0, 32, 1024, cands) is not None
    # c2 small next to c3: near c1 = 0 only a very large G is near-optimal, and no 64x pilot pins it down
    assert pilot_size_needed(0.001, (0.0, 0.01), 0.1, 1.0, 32, 1024, candidate_groups(1024)) is None


