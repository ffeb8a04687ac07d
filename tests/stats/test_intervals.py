"""The one interval module (stats/intervals.py), the budget check and the seed convention, against closed forms."""

from __future__ import annotations

import math

import pytest
import torch

from ugrpo.stats.budget import check_divides, divisors
from ugrpo.stats.intervals import Z95, difference_interval, mean_interval, ratio_interval, t_interval
from ugrpo.stats.seeds import derive_seed

DT = torch.float64


def test_mean_interval_closed_form_and_single_value():
    r = mean_interval([2.0, 4.0, 9.0])  # mean 5, s^2 = 13, se = sqrt(13/3)
    assert r.estimate == 5.0 and r.se == pytest.approx(math.sqrt(13 / 3), rel=1e-14)
    assert (r.ci_low, r.ci_high) == pytest.approx((5 - Z95 * r.se, 5 + Z95 * r.se), rel=1e-14)
    assert mean_interval(torch.tensor([2.0, 4.0, 9.0], dtype=DT)) == r
    one = mean_interval([3.0]).to_dict("mean", "se", "ci_low", "ci_high", "n")
    assert one == {"mean": 3.0, "se": None, "ci_low": None, "ci_high": None, "n": 1}
    with pytest.raises(ValueError, match="at least one value"):
        mean_interval([])


def test_t_interval_uses_the_student_quantile():
    r = t_interval([1.0, 2.0, 6.0])  # s = sqrt(7), t_{0.975, 2} = 4.302652729696142
    assert r.ci_high - r.estimate == pytest.approx(4.302652729696142 * math.sqrt(7 / 3), rel=1e-9)


def test_difference_interval_is_the_mean_interval_of_the_differences():
    a, b = torch.tensor([1.0, 4.0, 2.0, 7.0], dtype=DT), torch.tensor([0.5, 1.0, 2.5, 3.0], dtype=DT)
    d, m = difference_interval(a, b, shift=0.25), mean_interval(a - b)
    assert d.estimate == pytest.approx(m.estimate + 0.25) and d.ci_high - d.estimate == pytest.approx(
        m.ci_high - m.estimate)


def test_ratio_interval_with_a_constant_denominator_is_a_scaled_mean_interval():
    """b constant: (a - r b) = a - mean(a), so the delta method is exact: mean_interval(a) / b."""
    a, b = torch.tensor([1.0, 4.0, 2.0, 7.0], dtype=DT), torch.full((4,), 2.0, dtype=DT)
    r, m = ratio_interval(a, b), mean_interval(a)
    assert r.estimate == pytest.approx(m.estimate / 2) and r.ci_low == pytest.approx(m.ci_low / 2)
    assert ratio_interval(a, b, 0.0, 2.0).estimate is None  # corrected denominator 0: no ratio
    wider = ratio_interval(a, b, common_sd=0.5, b_sd=0.5)
    assert wider.ci_high - wider.estimate > r.ci_high - r.estimate


def test_budget_check_and_divisors():
    assert divisors(1) == [1] and divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36]
    check_divides(64, 8)
    with pytest.raises(ValueError, match=r"budget.group_size G=6 does not divide budget.samples_per_step N=64 .*"
                                         r"from 2 up: \[2, 4, 8, 16, 32, 64\]"):
        check_divides(64, 6, n_name="budget.samples_per_step N", g_name="budget.group_size G")


def test_derived_seeds_are_distinct_and_keep_the_published_streams():
    assert derive_seed(3, 5, stride=7_919, offset=17) == (3 * 1_000_003 + 5 * 7_919 + 17) % 2**62
    seeds = {derive_seed(s, i, stride=104_729, offset=1) for s in range(5) for i in range(200)}
    assert len(seeds) == 1000


def test_ratio_interval_of_mses_is_cut_at_zero():
    """A ratio of mean squared errors is >= 0: a normal interval reaching below 0 is cut there, the point kept."""
    a = torch.tensor([0.0, 0.0, 0.0, 4.0], dtype=torch.float64)  # mean 1, very skewed
    b = torch.ones(4, dtype=torch.float64)
    r = ratio_interval(a, b)
    assert r.estimate == pytest.approx(1.0) and r.ci_low == 0.0
    assert r.ci_high == pytest.approx(1.0 + Z95 * float(a.std()) / 2)
    neg = ratio_interval(a, b, a_sub=1.5)  # corrected numerator -0.5: unbiased point below the cut interval
    assert neg.estimate == pytest.approx(-0.5) and neg.ci_low == 0.0 and neg.ci_high >= 0.0
