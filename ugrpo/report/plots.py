"""Generic PNG plots for run folders (matplotlib, Agg backend; no GUI, no network).

The functions take plain numbers (lists of floats), never models or environments, so every
command (synthetic or LM) can reuse them. A ``Series`` is one line with an optional 95%
band; ``None`` values (JSON nulls) are skipped.

Examples
--------
>>> import tempfile, os
>>> s = Series("grpo", x=[2, 4, 8], y=[1.0, 0.5, 0.25], low=[0.9, 0.4, 0.2], high=[1.1, 0.6, 0.3])
>>> with tempfile.TemporaryDirectory() as d:
...     p = line_plot(os.path.join(d, "a.png"), [s], xlabel="G", ylabel="MSE", logx=True, logy=True)
...     os.path.getsize(p) > 0
True
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ugrpo.fileio import atomic_save  # noqa: E402

__all__ = ["Series", "Marker", "Level", "line_plot", "panel_plot"]


@dataclass(frozen=True)
class Series:
    """One line on a plot.

    Attributes
    ----------
    label : legend text
    x, y : the points; ``None`` in y (a JSON null) skips that point
    low, high : optional band (e.g. a 95% interval), same length as ``x``
    dashed : draw a dashed line without markers (used for exact / theoretical curves)
    color : a matplotlib colour, or None for the default cycle
    bars : draw ``low``..``high`` as error bars at the points instead of a shaded band (narrow intervals on a log
        axis stay visible)
    band_label : the legend entry of the shaded band (None: the band has none)
    """

    label: str
    x: Sequence[float]
    y: Sequence[float | None]
    low: Sequence[float | None] | None = None
    high: Sequence[float | None] | None = None
    dashed: bool = False
    color: str | None = None
    bars: bool = False
    band_label: str | None = None

    def __post_init__(self) -> None:
        n = len(self.x)
        for name in ("y", "low", "high"):
            v = getattr(self, name)
            if v is not None and len(v) != n:
                raise ValueError(f"Series {self.label!r}: {name} has {len(v)} points but x has {n}")


@dataclass(frozen=True)
class Marker:
    """A vertical line at ``x`` (e.g. the planner's G*), with an optional shaded interval (legend: ``band_label``)."""

    x: float
    label: str
    low: float | None = None
    high: float | None = None
    color: str = "black"
    band_label: str | None = None


@dataclass(frozen=True)
class Level:
    """A horizontal reference line at ``y`` across the whole x axis, for a value that does not depend on x (an
    allocation rule's MSE beside uniform G's curve), with an optional shaded interval ``low``..``high``."""

    y: float
    label: str
    low: float | None = None
    high: float | None = None
    dashed: bool = False
    color: str = "black"


def _finite(v: float | None, log: bool) -> bool:
    return v is not None and math.isfinite(v) and (not log or v > 0)


def _log_floor(series: Sequence[Series]) -> float | None:
    """On a log y axis, where an interval's lower end of 0 (an interval clipped at 0) is drawn: half the smallest
    positive value plotted (so it reaches the bottom of the axis instead of vanishing); None when nothing is > 0."""
    vals = [v for s in series for v in (*s.y, *(s.low or ()), *(s.high or ()))
            if v is not None and math.isfinite(v) and v > 0]
    return 0.5 * min(vals) if vals else None


def _draw(ax, series: Sequence[Series], markers: Sequence[Marker], *, logx: bool, logy: bool,
          levels: Sequence[Level] = ()) -> None:
    floor = _log_floor(series) if logy else None
    if floor is not None:  # an interval clipped at 0 reaches the bottom of the log axis rather than being dropped
        series = [replace(s, low=[floor if lo is not None and math.isfinite(lo) and lo <= 0 else lo for lo in s.low])
                  if s.low is not None else s for s in series]
    for i, s in enumerate(series):
        color = s.color or f"C{i % 10}"
        pts = [(x, y) for x, y in zip(s.x, s.y) if _finite(x, logx) and _finite(y, logy)]
        if pts:
            xs, ys = zip(*pts)
            if s.dashed:
                ax.plot(xs, ys, "--", color=color, label=s.label, linewidth=1.2)
            else:
                ax.plot(xs, ys, "o-", color=color, label=s.label, markersize=4)
        if s.low is not None and s.high is not None:
            band = [
                (x, y, lo, hi)
                for x, y, lo, hi in zip(s.x, s.y, s.low, s.high)
                if _finite(x, logx) and _finite(lo, logy) and _finite(hi, logy)
            ]
            bars = [b for b in band if _finite(b[1], logy)] if s.bars else []
            if bars:
                bx, by, bl, bh = zip(*bars)
                ax.errorbar(bx, by, yerr=[[y - lo for y, lo in zip(by, bl)], [hi - y for y, hi in zip(by, bh)]],
                            fmt="none", ecolor=color, elinewidth=1.0, capsize=3)
            elif band and not s.bars:
                bx, _, bl, bh = zip(*band)
                ax.fill_between(bx, bl, bh, color=color, alpha=0.18, linewidth=0, label=s.band_label)
    for lv in levels:
        ax.axhline(lv.y, color=lv.color, linestyle="--" if lv.dashed else "-", linewidth=1.2, label=lv.label)
        if lv.low is not None and lv.high is not None and lv.high > lv.low:
            ax.axhspan(lv.low, lv.high, color=lv.color, alpha=0.12, linewidth=0)
    for m in markers:
        ax.axvline(m.x, color=m.color, linestyle=":", linewidth=1.2, label=m.label)
        if m.low is not None and m.high is not None and m.high > m.low:
            ax.axvspan(m.low, m.high, color=m.color, alpha=0.08, label=m.band_label)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
        if floor is not None:
            ax.set_ylim(bottom=floor)
    ax.grid(True, which="both", alpha=0.3)


def line_plot(
    path: str | os.PathLike,
    series: Sequence[Series],
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
    markers: Sequence[Marker] = (),
    xticks: Sequence[float] | None = None,
    levels: Sequence[Level] = (),
) -> Path:
    """One panel: lines with 95% bands or bars, dashed exact curves, horizontal reference levels, vertical markers;
    writes a PNG.

    Returns the path written.
    """
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=110)
    try:
        _draw(ax, series, markers, logx=logx, logy=logy, levels=levels)
        if xticks is not None:
            ax.set_xticks(list(xticks))
            ax.set_xticklabels([f"{t:g}" for t in xticks])
        elif xlabel == "step":  # steps are whole: no tick at 2.5
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title("\n".join(textwrap.wrap(title, 70)), fontsize=10)  # a long title wraps, never cut off
        handles = ax.get_legend_handles_labels()[0]
        if len(handles) > 4:  # many entries: beside the axes, where they hide no line or band
            fig.set_size_inches(6.4 + 2.6, 4.4)
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
        elif handles:  # no empty legend (and no matplotlib warning) for a plot without lines
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_save(path, lambda f: fig.savefig(f, format=path.suffix[1:]))  # a full disk names the file
    finally:
        plt.close(fig)
    return path


@dataclass(frozen=True)
class Panel:
    """One panel of :func:`panel_plot`."""

    title: str
    series: Sequence[Series]
    markers: Sequence[Marker] = field(default_factory=tuple)


def panel_plot(
    path: str | os.PathLike,
    panels: Sequence[Panel],
    *,
    xlabel: str,
    ylabel: str,
    suptitle: str = "",
    logx: bool = False,
    logy: bool = False,
    xticks: Sequence[float] | None = None,
) -> Path:
    """Several panels side by side (e.g. one per budget N), sharing the y axis; writes a PNG."""
    if not panels:
        raise ValueError("panel_plot needs at least one panel")
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(4.6 * n, 4.2), dpi=110, sharey=True, squeeze=False)
    try:
        for ax, panel in zip(axes[0], panels):
            _draw(ax, panel.series, panel.markers, logx=logx, logy=logy)
            if xticks is not None:
                ax.set_xticks(list(xticks))
                ax.set_xticklabels([f"{t:g}" for t in xticks])
            ax.set_title(panel.title)
            ax.set_xlabel(xlabel)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        axes[0][0].set_ylabel(ylabel)
        if suptitle:
            fig.suptitle(suptitle)
        fig.tight_layout()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_save(path, lambda f: fig.savefig(f, format=path.suffix[1:]))  # a full disk names the file
    finally:
        plt.close(fig)
    return path


__all__.append("Panel")


def estimator_series(rows: Sequence[dict], estimators: Sequence[str], *, label: str = "{est}",
                     cell: Callable[[dict], dict] = lambda r: r, reference: str | None = None,
                     reference_label: str = "{est}") -> list[Series]:
    """One line per estimator over G from result rows (``estimator``, ``G`` and, in ``cell(row)``, ``mse``,
    ``ci_low``, ``ci_high``: drawn as error bars), each followed by a dashed line of ``row[reference]`` (exact or
    predicted values) in the same colour when ``reference`` is given; the paper's Fig. 4 layout."""
    out = []
    for i, est in enumerate(estimators):
        rs = sorted((r for r in rows if r["estimator"] == est), key=lambda r: r["G"])
        x, cs = [r["G"] for r in rs], [cell(r) for r in rs]
        out.append(Series(label.format(est=est), x, [c["mse"] for c in cs], [c["ci_low"] for c in cs],
                          [c["ci_high"] for c in cs], color=f"C{i}", bars=True))
        if reference is not None:
            out.append(Series(reference_label.format(est=est), x, [r[reference] for r in rs], dashed=True,
                              color=f"C{i}"))
    return out


__all__.append("estimator_series")
