"""Every series shows: crowded markers are spread sideways in mrc.png and
predict.png, predict.png explains k = 1..K and draws the --budget what-if.
The tests read the drawn artists (marker positions on screen, labels,
annotations), not a picture."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from xcache.lab.plot import SPREAD_PT, crowd_offsets, mrc_figure
from xcache.lab.predict.plot import note, predict_figure, what_if_label

pytest.importorskip("matplotlib")


def rows_of(table: dict[str, list[float]], sizes: list[int]) -> list[dict[str, Any]]:
    """Lab rows from miss ratios per policy at ``sizes`` (1000 requests each)."""
    return [{"policy": p, "slots": n, "miss_ratio": r, "misses": round(r * 1000)}
            for p, ratios in table.items() for n, r in zip(sizes, ratios, strict=True)]


def shown_markers(fig: Any) -> dict[str, list[tuple[float, float]]]:
    """Series -> screen (x, y) of every marker drawn on top, in curve order."""
    fig.canvas.draw()
    out: dict[str, list[tuple[float, float]]] = {}
    for line in fig.axes[0].get_lines():
        if line.get_marker() in ("None", "", None) or \
                not line.get_label().endswith(" (markers)"):
            continue
        name = line.get_label().lstrip("_").split(" (")[0]
        pts = line.get_transform().transform(line.get_xydata())
        out[name] = [(float(x), float(y)) for x, y in pts]
    return out


def curve_lines(fig: Any) -> dict[str, Any]:
    """Series -> its labelled line (the one the legend shows)."""
    return {ln.get_label().split(" (")[0]: ln for ln in fig.axes[0].get_lines()
            if not ln.get_label().startswith("_")}


def test_four_policies_missing_everything_at_the_smallest_size_all_show():
    """lru, fifo, lfu, arc at (2, 1.0): four markers SPREAD_PT apart, lru leftmost."""
    rows = rows_of({"lru": [1.0, 0.8, 0.4], "fifo": [1.0, 0.7, 0.3],
                    "lfu": [1.0, 0.6, 0.2], "arc": [1.0, 0.5, 0.1]}, [2, 4, 8])
    fig = mrc_figure(rows, "t")
    shown = shown_markers(fig)
    assert sorted(shown) == ["arc", "fifo", "lfu", "lru"]
    step = SPREAD_PT * fig.dpi / 72
    centre = fig.axes[0].transData.transform((2, 1.0))
    for rank, p in enumerate(["lru", "fifo", "lfu", "arc"]):
        assert shown[p][0] == pytest.approx(
            (centre[0] + (rank - 1.5) * step, centre[1]))
    # apart, every marker sits on its point
    table = {"lru": [0.8, 0.4], "fifo": [0.7, 0.3], "lfu": [0.6, 0.2],
             "arc": [0.5, 0.1]}
    for p, pts in shown.items():
        assert len(pts) == 3, p
        for (sx, sy), x, y in zip(pts[1:], (4, 8), table[p], strict=True):
            want = fig.axes[0].transData.transform((x, y))
            assert (sx, sy) == pytest.approx(tuple(want))


def test_every_marker_sits_on_its_own_line():
    """A spread marker moves its line's vertex with it: the line runs through it."""
    rows = rows_of({"lru": [1.0, 0.8, 0.4], "fifo": [1.0, 0.7, 0.3],
                    "arc": [1.0, 0.5, 0.1]}, [2, 4, 8])
    fig = mrc_figure(rows, "t")
    shown = shown_markers(fig)
    for name, line in curve_lines(fig).items():
        if name == "belady":
            continue
        assert line.get_markevery() is None  # a marker at every vertex
        vertices = line.get_transform().transform(line.get_xydata())
        assert vertices.ravel().tolist() == pytest.approx(
            [c for xy in shown[name] for c in xy])


def test_no_two_markers_of_a_real_sweep_overlap():
    """A sweep of the synthetic trace: two policies' markers 9 px apart or more."""
    from tests.helpers import synthetic
    from xcache.lab.sweep import run_sweep

    rows = run_sweep(synthetic(), ["lru", "fifo", "lfu", "lfru", "hotness",
                                   "s3fifo", "arc", "belady"], [2, 3, 5, 8], "step")
    fig = mrc_figure(rows, "t")
    shown = shown_markers(fig)
    assert len(shown) == 7
    for (p, a), (q, b) in itertools.combinations(
            [(p, pt) for p, pts in shown.items() for pt in pts], 2):
        if p != q:
            assert (a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2 >= 9 ** 2, (p, q, a, b)


def test_crowd_offsets_keep_one_series_together_and_apart_from_others():
    """A series' own nearby points are no crowd; two series' are, one offset each."""
    got = crowd_offsets({"a": [(0, 0), (0, 0), (5, 0.5)], "b": [(1, 0.001), (9, 0.9)]},
                        100, 1.0)
    assert got == {("a", 0): -SPREAD_PT / 2, ("a", 1): -SPREAD_PT / 2,
                   ("b", 0): SPREAD_PT / 2}
    assert crowd_offsets({"a": [(0, 0), (0, 0)]}, 100, 1.0) == {}


def report() -> dict[str, Any]:
    """A predict report: previous all at (0, 0) under ewma's first points."""
    def curve(points: list[tuple[int, float]]) -> list[dict[str, Any]]:
        return [{"k": k, "spec_reads": x, "demand_miss_recall": y,
                 "predicted_misses": 0} for k, (x, y) in enumerate(points, 1)]

    return {"k": 3, "budget": 2, "base_misses": 1000, "curves": {
        "previous": curve([(0, 0.0)] * 3),
        "ewma": curve([(0, 0.0), (16, 0.002), (40, 0.004)]),
        "oracle": curve([(300, 0.3), (600, 0.6), (900, 0.9)])},
        "rows": [{"predictor": "previous", "spec_issued": 0, "misses_saved": 0},
                 {"predictor": "ewma", "spec_issued": 30, "misses_saved": -50},
                 {"predictor": "oracle", "spec_issued": 500, "misses_saved": 450}]}


def test_predict_previous_shows_beside_ewma_at_the_origin():
    """previous' markers at (0, 0) sit SPREAD_PT left of ewma's crowded ones."""
    fig = predict_figure(report(), "t")
    shown = shown_markers(fig)
    origin = fig.axes[0].transData.transform((0, 0))
    step = SPREAD_PT * fig.dpi / 72
    assert len(shown["previous"]) == 3
    for sx, sy in shown["previous"]:
        assert (sx, sy) == pytest.approx((origin[0] - step / 2, origin[1]))
    assert shown["ewma"][0] == pytest.approx((origin[0] + step / 2, origin[1]))
    ax = fig.axes[0]
    want = ax.transData.transform(report_points("oracle"))
    assert [c for xy in shown["oracle"] for c in xy] == pytest.approx(
        want.ravel().tolist())


def report_points(name: str) -> list[tuple[float, float]]:
    """The (reads, recall) points of ``name`` in :func:`report`."""
    return [(p["spec_reads"], p["demand_miss_recall"])
            for p in report()["curves"][name]]


def test_predict_explains_k_and_draws_the_budget_what_if():
    """Legend title, k=1 / k=K end labels, the note, a star per predictor."""
    fig = predict_figure(report(), "t")
    ax = fig.axes[0]
    assert ax.get_legend().get_title().get_text() == "predictor (a point per k = 1..3)"
    texts = [t.get_text() for t in ax.texts]
    # oracle's ends apart; ewma's 40 reads are a few pixels: one label;
    # previous' points are one: none
    assert texts.count("k=1") == 1 and texts.count("k=3") == 1
    assert texts.count("ewma k=1..3") == 1
    assert note(3, 2) in texts and "k = 1" in note(3, 2) and "--budget 2" in note(3, 2)
    stars = [ln for ln in ax.get_lines() if ln.get_marker() == "*"]
    assert [tuple(ln.get_xydata()[0]) for ln in stars] == [
        (0, 0.0), (30, -0.05), (500, 0.45)]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["previous", "ewma", "oracle", what_if_label(2)]
    assert ax.get_ylim()[0] < -0.05  # the star below 0 is inside the axes
