"""The one interval module (stats/intervals.py), the budget check and the seed convention, against closed forms."""

from __future__ import annotations

import math

import pytest
import torch

from ugrpo.stats.budget import check_divides, divisors
from ugrpo.stats.intervals import (
    Z95,
    difference_interval,
    mean_interval,
    ratio_interval,
    satterthwaite_df,
    t_interval,
    t_quantile,
)
from ugrpo.stats.mc_mse import corrected_row
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


def test_ratio_interval_with_a_constant_denominator_is_a_scaled_t_interval():
    """b constant: (a - r b) = a - mean(a), so the delta method is exact: t_interval(a) / b (R - 1 = 3 df)."""
    a, b = torch.tensor([1.0, 4.0, 2.0, 7.0], dtype=DT), torch.full((4,), 2.0, dtype=DT)
    r, m = ratio_interval(a, b), t_interval(a.tolist())
    assert r.estimate == pytest.approx(m.estimate / 2) and r.ci_high == pytest.approx(m.ci_high / 2)
    assert r.ci_low == max(0.0, m.ci_low / 2)  # a ratio of MSEs is cut at 0
    assert ratio_interval(a, b, 0.0, 2.0).estimate is None  # corrected denominator 0: no ratio
    wider = ratio_interval(a, b, common_sd=0.5, b_sd=0.5)  # more error: a larger SE (and more degrees of freedom)
    assert wider.se > r.se


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
    assert r.ci_high == pytest.approx(1.0 + t_quantile(3) * float(a.std()) / 2)
    neg = ratio_interval(a, b, a_sub=1.5)  # corrected numerator -0.5: unbiased point below the cut interval
    assert neg.estimate == pytest.approx(-0.5) and neg.ci_low == 0.0 and neg.ci_high >= 0.0


def test_satterthwaite_degrees_of_freedom_and_the_t_quantile():
    """df = (n - 1) (SE^2 / s^2)^2: n - 1 without a known term, more with one, inf when only the known term is left."""
    assert satterthwaite_df(2.0, 5) == 4.0 and satterthwaite_df(1.0, 5, 1.0) == 16.0
    assert satterthwaite_df(0.0, 5, 1.0) == math.inf and t_quantile(math.inf) == pytest.approx(1.959964, abs=1e-6)
    assert t_quantile(2) == pytest.approx(4.302652729696142, rel=1e-9)
    with pytest.raises(ValueError, match="n >= 2"):
        satterthwaite_df(1.0, 1)


def test_corrected_row_uses_the_t_quantile_over_few_repetitions():
    """`ugrpo mse --model` rows: at R = 3 repetitions and no correction the interval is mse -+ t_{0.975, 2} SE = 4.30 SE
    (it was 1.96 SE); a correction of known spread adds degrees of freedom (Satterthwaite)."""
    err = torch.tensor([1.0, 2.0, 6.0], dtype=DT)
    row = corrected_row(err, 0.0, 0.0)
    se = math.sqrt(7 / 3)
    assert row["se"] == pytest.approx(se)
    assert row["ci_high"] - row["mse"] == pytest.approx(4.302652729696142 * se, rel=1e-9)
    wide = corrected_row(err, 0.5, se)  # SE^2 doubles: df = 2 * 4 = 8
    assert wide["ci_high"] - wide["mse"] == pytest.approx(t_quantile(8) * math.sqrt(2) * se)


def test_few_repetition_intervals_cover_at_their_level():
    """Seeded Monte Carlo, exact truth: 2,000 studies of R = 3 normal repetitions; the printed intervals of
    corrected_row (a mean) and ratio_interval (a ratio with a constant denominator) hold the true value in 95% of
    them (within 4 binomial SEs: +-1.9 points), also with a shared error of known sd added (Satterthwaite df); mean -+
    1.96 SE held it in about 80%."""
    gen = torch.Generator().manual_seed(2024)
    x = 2.0 + torch.randn(2000, 3, generator=gen, dtype=DT)
    rows = [corrected_row(v, 0.0, 0.0) for v in x]
    cover = sum(r["ci_low"] <= 2.0 <= r["ci_high"] for r in rows) / len(rows)
    ratio = [ratio_interval(v, torch.full((3,), 4.0, dtype=DT)) for v in x]
    cover_r = sum(r.ci_low <= 0.5 <= r.ci_high for r in ratio) / len(ratio)
    shared = 0.6 * torch.randn(2000, 1, generator=gen, dtype=DT)  # a shared error of known sd 0.6 (the reference's)
    mixed = [corrected_row(v, 0.0, 0.6) for v in x + shared]
    cover_m = sum(r["ci_low"] <= 2.0 <= r["ci_high"] for r in mixed) / len(mixed)
    band = 4 * math.sqrt(0.95 * 0.05 / len(rows))
    assert abs(cover - 0.95) < band and abs(cover_r - 0.95) < band and abs(cover_m - 0.95) < band
    normal = sum(abs(float(v.mean()) - 2.0) <= Z95 * float(v.std()) / math.sqrt(3) for v in x) / len(x)
    assert normal < 0.85  # the old interval: far below its level at 3 repetitions
