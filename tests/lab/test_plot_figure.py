"""The miss-ratio plot as figure objects: y from 0, ticks at the measured
sizes, Belady as a shaded lower bound, one style per policy in every run,
coincident curves all visible and labelled, the legend outside, 1200 px."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from tests.helpers import synthetic
from xcache.lab.plot import NUDGE_PT, STYLES, mrc_figure, plot_mrc, style_for
from xcache.lab.sweep import run_sweep

pytest.importorskip("matplotlib")

BELADY_LABEL = "belady (lower bound: below is out of reach)"


def sweep(policies: list[str], sizes: list[int], mode: str = "plain"
          ) -> list[dict[str, Any]]:
    """The lab's rows for the synthetic trace (4 layers, top-2 of 8)."""
    return run_sweep(synthetic(), policies, sizes, mode)


def lines_by_label(fig: Any) -> dict[str, Any]:
    """The labelled curves of the figure's axes, by legend label."""
    return {ln.get_label(): ln for ln in fig.axes[0].get_lines()
            if not ln.get_label().startswith("_")}


def test_y_axis_starts_at_zero():
    """The y-axis runs from exactly 0 even when every miss ratio is far above it."""
    fig = mrc_figure(sweep(["lru", "fifo"], [2, 4]), "t")
    assert fig.axes[0].get_ylim()[0] == 0.0
    assert fig.axes[0].get_ylim()[1] == 1.05


def test_x_ticks_are_the_measured_sizes():
    """The x ticks and their labels are the swept sizes, linear and log scale alike."""
    fig = mrc_figure(sweep(["lru"], [3, 5, 8, 13]), "t")
    ax = fig.axes[0]
    assert ax.get_xscale() == "linear"
    assert list(ax.get_xticks()) == [3, 5, 8, 13]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["3", "5", "8", "13"]
    assert list(ax.xaxis.get_minorticklocs()) == []
    fig = mrc_figure(sweep(["lru"], [2, 7, 32]), "t")
    assert fig.axes[0].get_xscale() == "log"
    assert list(fig.axes[0].get_xticks()) == [2, 7, 32]


def test_belady_is_a_filled_region_not_a_policy_curve():
    """Belady is one shaded polygon from 0 up to its miss ratios, not a curve."""
    from matplotlib.collections import PolyCollection  # noqa: PLC0415

    rows = sweep(["lru", "belady"], [2, 4, 8])
    fig = mrc_figure(rows, "t")
    ax = fig.axes[0]
    fills = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert [c.get_label() for c in fills] == [BELADY_LABEL]
    verts = {tuple(v) for v in fills[0].get_paths()[0].vertices}
    ratios = {r["slots"]: r["miss_ratio"] for r in rows if r["policy"] == "belady"}
    assert ratios == {2: 1045 / 1200, 4: 776 / 1200, 8: 432 / 1200}
    for n, y in ratios.items():
        assert (n, 0.0) in verts and (n, y) in verts
    assert "belady" not in lines_by_label(fig)
    assert list(lines_by_label(fig)) == ["lru"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [BELADY_LABEL, "lru"]


def test_colours_markers_styles_are_stable_across_runs():
    """A policy keeps its colour, marker and line style whatever else the run draws."""
    one = lines_by_label(mrc_figure(sweep(["lru", "hotness", "arc"], [4, 8]), "a"))
    two = lines_by_label(mrc_figure(sweep(["arc", "lru"], [4, 8]), "b"))
    for p in ("lru", "arc"):
        a, b = one[p], two[p]
        assert a.get_color() == b.get_color() == STYLES[p][0]
        assert a.get_marker() == b.get_marker() == STYLES[p][1]
        assert a.get_linestyle() == b.get_linestyle()
    assert one["lru"].get_color() == "#1f77b4"
    assert one["arc"].get_color() == "#e377c2"
    assert one["hotness"].get_color() == "#9467bd"
    colours = [c for c, _, _ in STYLES.values()]
    markers = [m for _, m, _ in STYLES.values() if m]
    assert len(set(colours)) == len(colours) and len(set(markers)) == len(markers)


def test_a_spec_with_parameters_keeps_its_name_colour_and_marker():
    """hotness:period=4: hotness's colour and marker, hollow, its own line style."""
    assert style_for("hotness:period=4")[:2] == ("#9467bd", "D")
    assert style_for("hotness:period=4") == style_for("hotness:period=4")
    assert style_for("hotness:period=4")[2] != STYLES["hotness"][2]
    line = lines_by_label(mrc_figure(sweep(["hotness:period=4"], [4, 8]), "t"))
    assert line["hotness:period=4"].get_markerfacecolor() == "white"


def test_coincident_curves_are_labelled_and_all_visible():
    """hotness:period=4 equals LRU here: both drawn, both labels say so."""
    rows = sweep(["lru", "hotness:period=4", "fifo"], [2, 4, 7, 8, 12])
    lru = [r["misses"] for r in rows if r["policy"] == "lru"]
    hot = [r["misses"] for r in rows if r["policy"] == "hotness:period=4"]
    assert lru == hot == [1200, 1200, 1090, 728, 503]
    fig = mrc_figure(rows, "t")
    fig.canvas.draw()
    lines = lines_by_label(fig)
    # all three miss everything at sizes 2 and 4: fifo runs over both there
    assert list(lines) == ["lru (= hotness:period=4; under fifo where close)",
                           "hotness:period=4 (= lru; under fifo where close)",
                           "fifo"]
    first = lines["lru (= hotness:period=4; under fifo where close)"]
    second = lines["hotness:period=4 (= lru; under fifo where close)"]
    assert first.get_linestyle() != second.get_linestyle()
    assert first.get_marker() != second.get_marker()
    assert second.get_zorder() > first.get_zorder()
    assert first.get_linewidth() > second.get_linewidth()
    a = first.get_transform().transform((7, 1090 / 1200))
    b = second.get_transform().transform((7, 1090 / 1200))
    assert b[0] - a[0] == pytest.approx(NUDGE_PT * fig.dpi / 72)
    assert b[1] == pytest.approx(a[1])
    assert lines["fifo"].get_transform().transform((7, 0.5))[0] == \
        pytest.approx(fig.axes[0].transData.transform((7, 0.5))[0])


def test_legend_is_outside_the_axes():
    """The legend sits right of the axes, so it covers no curve."""
    fig = mrc_figure(sweep(["lru", "fifo", "lfu", "arc", "belady"], [4, 8]), "t")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    assert ax.get_legend().get_window_extent(renderer).x0 > \
        ax.get_window_extent(renderer).x1


def test_figure_is_1200_pixels_wide(tmp_path):
    """The figure is 1200 x 600 pixels, and so is the PNG the lab writes."""
    rows = sweep(["lru", "belady"], [4, 8])
    fig = mrc_figure(rows, "t")
    assert tuple(fig.get_size_inches() * fig.dpi) == (1200.0, 600.0)
    out = tmp_path / "mrc.png"
    plot_mrc(rows, str(out), "t", ["size 2 slots is only one step's 2 accesses"])
    head = out.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    assert struct.unpack(">II", head[16:24]) == (1200, 600)


def test_warnings_are_written_under_the_axes():
    """Each warning is one line of text under the plot, prefixed ``warning:``."""
    fig = mrc_figure(sweep(["lru"], [4, 8]), "t", ["one", "two"])
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts == ["warning: one\nwarning: two"]
    assert list(mrc_figure(sweep(["lru"], [4, 8]), "t").axes[0].texts) == []
