"""ugrpo.report: generic plots and markdown helpers (doctests + edge cases)."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

import ugrpo.report.markdown as markdown
import ugrpo.report.plots as plots
from ugrpo.report.markdown import fmt, fmt_ci, md_table, read_run, text_table
from ugrpo.report.plots import Marker, Panel, Series, line_plot, panel_plot
from ugrpo.runs import RunDir

from .conftest import assert_png


@pytest.mark.parametrize("mod", [markdown, plots])
def test_doctests(mod):
    res = doctest.testmod(mod)
    assert res.attempted > 0 and res.failed == 0


def test_fmt():
    assert fmt(None) == "-" and fmt(3) == "3" and fmt(0.5) == "0.5" and fmt(2.5e-6) == "2.500e-06"
    assert fmt(math.inf) == "inf" and fmt(math.nan) == "-" and fmt(True) == "True"
    assert fmt_ci(0.1, None) == "[0.1, -]"


def test_tables_reject_ragged_rows():
    with pytest.raises(ValueError, match="row .* has 1 cells, expected 2"):
        md_table(["a", "b"], [[1]])
    t = text_table(["G", "mse"], [[2, 0.25], [64, None]])
    assert t.splitlines()[0].split() == ["G", "mse"] and t.splitlines()[3].split() == ["64", "-"]


def test_series_length_mismatch():
    with pytest.raises(ValueError, match="Series 'x': y has 2 points but x has 3"):
        Series("x", [1, 2, 3], [1.0, 2.0])


def test_plots_skip_nulls_and_nonpositive_on_log(tmp_path):
    s = Series("a", [2, 4, 8], [1.0, None, 0.0], low=[0.5, None, None], high=[2.0, None, None])
    p = line_plot(tmp_path / "a.png", [s, Series("e", [2, 8], [1.0, 0.1], dashed=True)], xlabel="G", ylabel="y",
                  logx=True, logy=True, markers=[Marker(4, "G*", 2, 8)], xticks=[2, 4, 8])
    assert_png(p)
    q = panel_plot(tmp_path / "b.png", [Panel("N=8", [s]), Panel("N=16", [s], [Marker(2, "m")])], xlabel="G",
                   ylabel="gap", logx=True)
    assert_png(q)
    with pytest.raises(ValueError, match="at least one panel"):
        panel_plot(tmp_path / "c.png", [], xlabel="G", ylabel="y")


def test_bars_levels_and_shaded_bands_in_the_legend():
    """Error bars instead of a band (mse.png), a value independent of x as a horizontal line with its interval
    (allocation.png), and every shaded band named in the legend (plan.png)."""
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    fig, ax = plt.subplots()
    try:
        plots._draw(ax, [Series("mc", [2, 4], [1.0, 0.5], [0.9, 0.4], [1.1, 0.6], bars=True),
                         Series("bound", [2, 4], [1.0, 0.5], [0.8, 0.3], [1.2, 0.7], band_label="95% band")],
                    [Marker(4, "G to use", 2, 8, band_label="near-optimal G")], logx=True, logy=False,
                    levels=[plots.Level(0.7, "ustat", 0.65, 0.75)])
        labels = ax.get_legend_handles_labels()[1]
        assert labels == ["mc", "bound", "95% band", "ustat", "G to use", "near-optimal G"], labels
        (bars,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]  # one set, the "mc" series'
        segments = bars.lines[2][0].get_segments()
        assert [tuple(map(tuple, seg)) for seg in segments] == [((2, 0.9), (2, 1.1)), ((4, 0.4), (4, 0.6))]
        level = next(line for line in ax.lines if line.get_label() == "ustat")
        assert list(level.get_ydata()) == [0.7, 0.7] and list(level.get_xdata()) == [0, 1]  # the whole axis
    finally:
        plt.close(fig)


def test_an_interval_clipped_at_0_reaches_the_bottom_of_a_log_axis():
    """A 95% interval whose lower end is 0 (clipped: an MSE or a gap is >= 0) is drawn down to the bottom of a log
    axis, at half the smallest positive value plotted, not dropped (before: 12 of 16 error bars of a 3-rep mse.png
    were missing, the noisiest points looking exact)."""
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    fig, ax = plt.subplots()
    try:
        plots._draw(ax, [Series("mc", [2, 4], [0.1, 0.05], [0.0, 0.02], [0.3, 0.08], bars=True)], [], logx=True,
                    logy=True)
        (bars,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        segments = [tuple(map(tuple, seg)) for seg in bars.lines[2][0].get_segments()]
        assert np.allclose(segments, [((2, 0.01), (2, 0.3)), ((4, 0.02), (4, 0.08))])  # floor: half of 0.02
        assert ax.get_ylim()[0] == pytest.approx(0.01)
    finally:
        plt.close(fig)


def test_read_run(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        read_run(tmp_path / "none")
    rd = RunDir(tmp_path / "r")
    rd.write_config({"a": 1})
    rd.append_metrics({"x": 1.5})
    assert read_run(tmp_path / "r") == ({"a": 1}, [{"x": 1.5}], None)


def test_report_sentences_name_values_not_python_lists():
    """'at G in []' was a raw Python list in a sentence: the readings name the values, or say 'no G'."""
    from ugrpo.report.sweep import lm_reading
    from ugrpo.report.sweep import reading as sweep_reading

    best = {"budget": 8, "checkpoint": 5, "metric": "eval_accuracy", "G": 4, "mean": 0.5, "tied": [8],
            "overlapping": [2, 8], "seeds": 3, "ci_low": 0.4, "ci_high": 0.6}
    text = " ".join(lm_reading({"best_G": [best], "checkpoints": [0, 5]}))
    assert "tied with G = 8" in text and "G = 2, 8 have overlapping 95% intervals" in text and "[" not in text
    rows = [{"budget": 8, "G": G, "checkpoint": 5, "gap_mean": m, "ci_low": m - 0.1, "ci_high": m + 0.1, "seeds": 4}
            for G, m in ((2, 0.3), (4, 0.2), (8, 0.25))]
    text = " ".join(sweep_reading({"rows": rows, "best_G": [{"budget": 8, "checkpoint": 5, "G": 4}]}))
    assert "G = 2, 8 have overlapping 95% intervals" in text and "[" not in text


def test_mse_reading_names_the_g_where_vanilla_is_not_above_grpo_and_why():
    """The demo's G = 2 (vanilla 0.15180 vs GRPO 0.15183 exact, vanilla lower by Monte Carlo) is a tie, said so
    in words without a Python list; a clear exact gap is GRPO's residual; an exact order the other way is noise."""
    from ugrpo.report.mse import reading

    def results(vanilla_exact, grpo_exact):
        values = {  # (estimator, G) -> (MC mse, exact)
            ("vanilla", 2): (0.1513, vanilla_exact), ("grpo", 2): (0.1537, grpo_exact),
            ("vanilla", 4): (0.0775, 0.0766), ("grpo", 4): (0.0524, 0.0513),
            ("grpo_mean", 2): (0.0385, 0.0381), ("oracle", 2): (0.0764, 0.0759),
            ("grpo_mean", 4): (0.0295, 0.0289), ("oracle", 4): (0.0392, 0.0387)}
        rows = [{"estimator": e, "G": G, "mse": m, "exact": x, "se": 0.002, "ci_low": m - 0.004, "ci_high": m + 0.004}
                for (e, G), (m, x) in values.items()]
        split = [{"G": G, "residual_share": 0.5 / G} for G in (2, 4)]
        return {"rows": rows, "hoeffding_grpo": split}

    text = " ".join(reading(results(0.15180, 0.15183)))
    assert "Vanilla is above GRPO at G = 4 but not at G = 2; at G = 2 the exact MSEs are within 1%" in text, text
    assert "[" not in text and "outweighs" not in text
    text = " ".join(reading(results(0.140, 0.150)))
    assert "at G = 2 the exact values agree: GRPO's O(1/G^2) residual outweighs" in text, text
    text = " ".join(reading(results(0.160, 0.150)))
    assert "at G = 2 the exact values do not: Monte-Carlo noise" in text, text
    # few repetitions: a Monte-Carlo order whose intervals overlap is said to be one, and the GRPO-oracle gap is led
    # by its exact value (before: "GRPO's Monte-Carlo MSE is -11.5% relative to the oracle's ... the gap is the
    # O(1/G^2) residual", a verdict from 3 repetitions' noise)
    wide = results(0.160, 0.150)
    for r in wide["rows"]:
        r["ci_low"], r["ci_high"] = 0.0, r["mse"] + 0.1
    text = " ".join(reading(wide))
    assert "at G = 4 their 95% intervals overlap, so these repetitions alone cannot order them there" in text, text
    assert "At G=4, GRPO's exact MSE is +32.56% relative to the oracle's, the O(1/G^2) residual of Theorem 2; Monte " \
           "Carlo gives +33.7% (the Monte-Carlo difference is within its noise" in text, text


def test_lm_sweep_best_g_table_says_none_not_python_none():
    """A pilot that cannot tell c1 from 0 has no G*: the table says 'none (c1 ~ 0)', not 'None (c1 ~ 0)'."""
    from ugrpo.report.sweep import best_g_table

    best = {"budget": 8, "checkpoint": 2, "metric": "eval_accuracy", "G": 2, "mean": 0.0, "overlapping": None,
            "ci_low": None, "ci_high": None}
    _, rows = best_g_table({"best_G": [best], "planner": {"g_star": None, "g_star_swept": None}}, "eval_accuracy")
    assert rows == [[8, 2, 2, 0.0, "-", "-", "none (c1 ~ 0)"]]
