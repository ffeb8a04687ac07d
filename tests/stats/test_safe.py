"""The safe rule (ugrpo.stats.safe, docs/math.md M50): its two guarantees under the draws it is given, the plug-in
choice when the moments are certain, the fall-back to uniform G, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from ugrpo.stats.allocation import PromptStats, allocate
from ugrpo.stats.exact_mse import prompt_error
from ugrpo.stats.predict import posterior
from ugrpo.stats.safe import check_safety, choose_sizes, safe_sizes


def _stats(c2, c3) -> PromptStats:
    c2, c3 = np.asarray(c2, float), np.asarray(c3, float)
    return PromptStats(value=np.full(len(c2), 0.5), c2=c2, c3=c3)


def test_certain_moments_give_the_plugin_sizes():
    rng = np.random.default_rng(0)
    for _ in range(20):
        st = _stats(rng.gamma(0.5, size=8), rng.gamma(0.5, size=8))
        c = safe_sizes(st, st.c2[None], st.c3[None], 48, 6)
        np.testing.assert_array_equal(c.sizes, allocate("ustat", st, 48).sizes)  # never worse than uniform: R <= 1
        assert c.upper <= 1.0 and (c.blend == 0.0 or (c.sizes == 6).all())


def test_a_posterior_split_between_two_opposite_worlds_falls_back_to_uniform():
    """Half the draws say prompt 0 is the noisy one, half prompt 1: any unequal split loses in half the draws."""
    c2 = np.array([[1.0, 0.01]] * 50 + [[0.01, 1.0]] * 50)
    st = _stats(c2.mean(0), c2.mean(0))
    c = safe_sizes(st, c2, c2, 12, 6)
    assert c.fallback and c.blend is None and (c.sizes == 6).all() and c.upper == 1.0
    assert c.plugin_upper == 1.0  # the posterior-mean prompts are equal: the plug-in is uniform already


def test_the_guarantees_hold_under_the_draws():
    """For random draws: the chosen sizes' level-quantile of R is <= 1 + tol, and their posterior mean error is at
    most uniform's (the chooser's objective is the posterior mean, M50)."""
    rng = np.random.default_rng(1)
    for trial in range(30):
        B, D = 6, 200
        scale = rng.gamma(1.0, size=B)
        c2 = scale * rng.gamma(2.0, size=(D, B)) / 2
        c3 = scale * rng.gamma(2.0, size=(D, B)) / 2
        st = _stats(c2.mean(0), c3.mean(0))
        tol, level = (0.0, 0.9) if trial % 2 else (0.05, 0.75)
        c = safe_sizes(st, c2, c3, 6 * B, 6, tol=tol, level=level)
        r = prompt_error(c2, c3, c.sizes.astype(float)).sum(1) / prompt_error(c2, c3, np.full(B, 6.0)).sum(1)
        assert np.quantile(r, level) <= 1 + tol + 1e-12
        assert prompt_error(c2, c3, c.sizes.astype(float)).sum(1).mean() <= \
            prompt_error(c2, c3, np.full(B, 6.0)).sum(1).mean() + 1e-12
        assert c.sizes.sum() == 6 * B


def test_a_robust_guard_must_pass_under_every_set_of_draws():
    st = _stats([4.0, 0.1], [4.0, 0.1])
    good = (st.c2[None], st.c3[None])
    bad = (np.array([[0.1, 4.0]]), np.array([[0.1, 4.0]]))
    assert not safe_sizes(st, *good, 12, 6).fallback
    assert safe_sizes(st, [good[0], bad[0]], [good[1], bad[1]], 12, 6).fallback


def test_choose_sizes_per_rule_and_from_a_posterior():
    n = 32.0
    p = np.array([0.1, 0.3, 0.5, 0.7, 0.9, 0.5])
    s = {"visits": np.full(6, 8.0), "samples": np.full(6, n), "successes": n * p, "w2_success": n * p * 2.0,
         "w2_failure": n * (1 - p), "t0_sum": np.zeros(6)}
    post = posterior(s)
    for rule in ("uniform", "vip", "knapsack", "ustat"):
        sizes, choice = choose_sizes(rule, post, 24, 4, rng=np.random.default_rng(0))
        assert sizes.sum() == 24 and (sizes >= 2).all()
        assert (choice is not None) == (rule == "ustat")
    a = choose_sizes("ustat", post, 24, 4, rng=np.random.default_rng(5))[0]
    b = choose_sizes("ustat", post, 24, 4, rng=np.random.default_rng(5))[0]
    np.testing.assert_array_equal(a, b)  # seeded
    with pytest.raises(ValueError, match="unknown allocation rule 'ustatt'"):
        choose_sizes("ustatt", post, 24, 4)
    with pytest.raises(ValueError, match="budget must be B G = 24"):
        safe_sizes(_stats(np.ones(6), np.ones(6)), np.ones((1, 6)), np.ones((1, 6)), 25, 4)


@pytest.mark.parametrize("tol,level,match", [
    (1.0, 0.9, "safe_tol=1.0 must be a number in \\[0, 1\\)"),
    (-0.1, 0.9, "safe_tol=-0.1"),
    (float("nan"), 0.9, "safe_tol=nan"),
    (0.0, 1.0, "safe_level=1.0 must be a number in \\[0.5, 1\\)"),
    (0.0, 0.3, "safe_level=0.3"),
])
def test_an_impossible_tolerance_is_an_error_naming_the_field(tol, level, match):
    with pytest.raises(ValueError, match=match):
        check_safety(tol, level)
