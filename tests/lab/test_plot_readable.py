"""The three labs' plots read at a glance: every curve shows, no label hides
another or leaves its axes, and no legend sits on the data.  The cases are
the shipped olmoe trace's own numbers (the runs that hid LRU under ARC and
hotness, put predict.png's labels on one another and clipped one, and laid
time.png's legend over its worst bar); the tests read the drawn artists'
boxes through matplotlib's renderer, and the pixels where curves meet."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from xcache.lab.plot import HALO_PT, LINE_PT, STYLES, mrc_figure
from xcache.lab.predict.plot import predict_figure
from xcache.lab.timing.plot import time_figure

pytest.importorskip("matplotlib")

#: olmoe_299.jsonl, step mode, global capacity: misses of 38,272 accesses.
OLMOE_MISSES = {
    "lru": (38272, 17184, 9128), "fifo": (38272, 19266, 10101),
    "lfu": (38272, 22231, 11706), "lfru": (31391, 18310, 8841),
    "hotness": (32164, 17255, 9128), "s3fifo": (27163, 17912, 7906),
    "arc": (38272, 17302, 9004), "belady": (18448, 9422, 3693)}
OLMOE_SIZES = (97, 244, 487)


def olmoe_rows() -> list[dict[str, Any]]:
    """The policy lab's rows of the shipped olmoe trace at its default sizes."""
    return [{"policy": p, "slots": n, "misses": m, "miss_ratio": m / 38272}
            for p, ms in OLMOE_MISSES.items()
            for n, m in zip(OLMOE_SIZES, ms, strict=True)]


def labelled(fig: Any) -> dict[str, Any]:
    """Policy -> its legend line."""
    return {ln.get_label().split(" (")[0]: ln for ln in fig.axes[0].get_lines()
            if not ln.get_label().startswith("_")}


def colour_near(pixels: np.ndarray, at: tuple[float, float], colour: str,
                radius: int = 3) -> bool:
    """Whether a pixel within ``radius`` of screen point ``at`` is ``colour``."""
    from matplotlib.colors import to_rgb  # noqa: PLC0415

    want = np.array(to_rgb(colour)) * 255
    h = pixels.shape[0]
    x, y = round(at[0]), round(h - at[1])  # screen y runs up, rows down
    box = pixels[max(0, y - radius):y + radius + 1,
                 max(0, x - radius):x + radius + 1, :3].astype(float)
    return bool((np.abs(box - want).max(axis=2) <= 12).any())


def test_lru_shows_where_arc_and_hotness_run_over_it():
    """LRU is the widest band under hotness and ARC; each colour shows on its line."""
    fig = mrc_figure(olmoe_rows(), "olmoe_299.jsonl (step, global)")
    lines = labelled(fig)
    assert lines["lru"].get_label() == "lru (under hotness, arc where close)"
    assert lines["hotness"].get_label() == "hotness (under arc where close)"
    assert lines["arc"].get_label() == "arc"
    assert lines["lru"].get_linewidth() == pytest.approx(LINE_PT + 2 * HALO_PT)
    assert lines["hotness"].get_linewidth() == pytest.approx(LINE_PT + HALO_PT)
    assert lines["arc"].get_linewidth() == pytest.approx(LINE_PT)
    assert lines["lru"].get_zorder() < lines["hotness"].get_zorder() \
        < lines["arc"].get_zorder()
    fig.canvas.draw()
    pixels = np.asarray(fig.canvas.buffer_rgba())
    for p in ("lru", "hotness", "arc"):  # each along its own 244 -> 487 segment
        xy = lines[p].get_transform().transform(lines[p].get_xydata())
        along = [xy[1] + (xy[2] - xy[1]) * t for t in np.linspace(0.1, 0.9, 17)]
        seen = sum(colour_near(pixels, tuple(pt), STYLES[p][0], 1) for pt in along)
        assert seen >= 12, (p, seen)


def test_every_policy_marker_is_drawn_on_top():
    """Each policy's markers are an artist above every line (zorder 4)."""
    fig = mrc_figure(olmoe_rows(), "t")
    tops = [ln for ln in fig.axes[0].get_lines()
            if ln.get_label().endswith(" (markers)")]
    assert sorted(ln.get_label() for ln in tops) == sorted(
        f"_{lab.get_label()} (markers)" for p, lab in labelled(fig).items())
    lines = max(ln.get_zorder() for ln in labelled(fig).values())
    assert all(ln.get_zorder() == 4 > lines for ln in tops)


def olmoe_report() -> dict[str, Any]:
    """The shipped olmoe trace's predict report, k = 1..8 (its run's own numbers)."""
    reads = {"previous": [0] * 8,
             "popularity": [747, 1525, 3078, 4534, 6262, 8009, 9746, 11590],
             "ewma": [16, 32, 48, 64, 80, 96, 112, 128],
             "pair": [590, 1364, 2408, 3658, 5083, 6570, 8135, 9692],
             "oracle": [921, 1861, 2900, 3953, 4918, 5939, 6929, 8018]}
    recall = {"previous": [0.0] * 8,
              "popularity": [0.015, 0.032, 0.049, 0.07, 0.087, 0.106, 0.126, 0.144],
              "ewma": [0.001, 0.002, 0.002, 0.003, 0.003, 0.004, 0.004, 0.004],
              "pair": [0.024, 0.059, 0.106, 0.159, 0.213, 0.26, 0.302, 0.34],
              "oracle": [0.114, 0.231, 0.36, 0.49, 0.608, 0.736, 0.862, 1.0]}
    issued = {"previous": (0, 0), "popularity": (7279, -481), "ewma": (128, 29),
              "pair": (7992, 1508), "oracle": (8018, 7994)}
    return {"k": 8, "budget": 8, "base_misses": 8066, "curves": {
        n: [{"k": k, "spec_reads": x, "demand_miss_recall": y, "predicted_misses": 0}
            for k, (x, y) in enumerate(zip(reads[n], recall[n], strict=True), 1)]
        for n in reads},
        "rows": [{"predictor": n, "spec_issued": i, "misses_saved": s}
                 for n, (i, s) in issued.items()]}


def boxes(fig: Any, artists: list[Any]) -> list[Any]:
    """The display boxes of ``artists`` (after a draw)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [a.get_window_extent(renderer) for a in artists]


def test_predict_labels_do_not_overlap_and_stay_inside_the_axes():
    """predict.png's k labels: apart, inside the axes, off the legend and markers."""
    fig = predict_figure(olmoe_report(), "olmoe_299.jsonl: 240 slots, lru")
    ax = fig.axes[0]
    texts = [t for t in ax.texts if t.get_text().startswith(("k=", "ewma k"))]
    assert sorted(t.get_text() for t in texts) == [
        "ewma k=1..8", "k=1", "k=1", "k=1", "k=8", "k=8", "k=8"]
    got = boxes(fig, texts)
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    legend = ax.get_legend().get_window_extent(renderer)
    for t, b in zip(texts, got, strict=True):
        assert frame.x0 <= b.x0 and b.x1 <= frame.x1, t.get_text()
        assert frame.y0 <= b.y0 and b.y1 <= frame.y1, t.get_text()
        assert not b.overlaps(legend)
    for a, b in itertools.combinations(got, 2):
        assert not a.overlaps(b), (a, b)
    px = fig.dpi / 72
    for line in ax.get_lines():
        if not line.get_label().endswith(" (markers)"):
            continue
        half = line.get_markersize() * px / 2
        for sx, sy in line.get_transform().transform(line.get_xydata()):
            for t, b in zip(texts, got, strict=True):
                assert not (b.x0 < sx + half and sx - half < b.x1
                            and b.y0 < sy + half and sy - half < b.y1), (
                    t.get_text(), line.get_label())


def test_predict_labels_stay_inside_the_figure():
    """Every text of predict.png, the note under the axes too, is inside the figure."""
    fig = predict_figure(olmoe_report(), "t")
    whole = fig.bbox
    for b in boxes(fig, [t for t in fig.axes[0].texts if t.get_text()]):
        assert whole.x0 <= b.x0 and b.x1 <= whole.x1
        assert whole.y0 <= b.y0 and b.y1 <= whole.y1


def time_rows() -> list[dict[str, Any]]:
    """Time-lab rows of olmoe at 244 slots: the worst (sync) bar the widest."""
    def row(config: str, compute: float, wait: float, hidden: float,
            ratio: float) -> dict[str, Any]:
        return {"config": config, "s_per_token": (compute + wait) / 1e3,
                "compute_s": compute / 1e3, "wait_s": wait / 1e3,
                "hidden_s": hidden / 1e3, "wasted_s": 0.0, "miss_ratio": ratio,
                "page_cache_share": 0.0}

    return [row("lru 244 sync", 8.256, 2.742, 0.0, 0.449),
            row("lru 244 ra1 T=1", 8.256, 0.017, 2.726, 0.449),
            row("lru 244 ra1 T=3", 8.256, 0.331, 2.411, 0.449),
            row("lru 244 ra1 T=1 +oracle", 8.370, 0.0, 2.750, 0.003),
            row("lru 244 ra1 T=3 +oracle", 8.370, 0.017, 2.733, 0.003)]


def test_time_legend_is_off_the_bars_and_every_value_is_written():
    """time.png: the legend is off both axes; every total and miss ratio is written."""
    fig = time_figure(time_rows(), "t")
    ax, axm = fig.axes
    legend = fig.legends[0]
    got = boxes(fig, [legend, ax, axm])
    assert not got[0].overlaps(got[1]) and not got[0].overlaps(got[2])
    assert fig.bbox.x0 <= got[0].x0 and got[0].x1 <= fig.bbox.x1
    assert fig.bbox.y0 <= got[0].y0
    assert [t.get_text() for t in ax.texts] == [
        "8.273", "8.370", "8.387", "8.587", "10.998"]
    assert [t.get_text() for t in axm.texts] == [
        "0.449", "0.003", "0.003", "0.449", "0.449"]
    written = boxes(fig, [*ax.texts, *axm.texts])
    renderer = fig.canvas.get_renderer()
    for frame, texts in ((ax, written[:5]), (axm, written[5:])):
        f = frame.get_window_extent(renderer)
        for b in texts:
            assert f.x0 <= b.x0 and b.x1 <= f.x1
    for a, b in itertools.combinations(written, 2):
        assert not a.overlaps(b)
