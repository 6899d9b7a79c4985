"""The prefetch lab's plot, ``predict.png`` (matplotlib, drawn off screen).

One curve per predictor: demand-miss recall against the speculative reads
it would issue, one point per k = 1..K (the predictor's first k guesses
per step; k = 1 is the curve's left end, K its right, and the two ends are
labelled where they hide no marker, no other label and stay inside the
axes: :func:`lab.plot.place_labels`).  Points of different predictors that
would hide one another are spread sideways, each line through its own
markers (:func:`lab.plot.crowd_offsets`, :func:`lab.plot.settle`), so a predictor whose
every point is (0, 0), as ``previous`` when the cache already holds what it
guesses, still shows beside the others.  The ``--budget`` what-if is drawn
too: per predictor, a hollow star at the reads the budgeted run issued and
the share of the no-prefetch misses it saved (below 0 when it cost misses).
A note under the axes says what a point is.
"""

from __future__ import annotations

import textwrap
from typing import Any

from xcache.lab.plot import crowd_offsets, draw_series, place_labels, settle

#: The figure's size in pixels (width, height) at DPI.
WIDTH_PX, HEIGHT_PX, DPI = 1200, 650, 100
#: A curve shorter than this on screen (pixels) gets one label, not two.
SHORT_PX = 40
#: Markers of the predictors, in the order they are drawn.
MARKERS = "osD^vP*X"
#: Colours of the predictors, in the order they are drawn.
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
           "#e377c2", "#17becf")


def what_if_label(budget: int) -> str:
    """The legend entry of the what-if stars."""
    return f"what-if, --budget {budget}: misses saved (share)"


def note(k_max: int, budget: int) -> str:
    """The text under the axes: what a point and a star are."""
    return textwrap.fill(
        f"A point is a predictor's first k guesses per step, from k = 1 (its "
        f"curve's left end) to K = {k_max} (its right end): x the reads they "
        f"would start, y the share of the cache's demand misses they name. A "
        f"star is the what-if run with --budget {budget} speculative reads "
        f"per step: x the reads it issued, y the share of the no-prefetch "
        f"misses it saved (below 0: it cost misses).", 150)


def predict_figure(report: dict[str, Any], title: str) -> Any:
    """The figure of a predict ``report`` (a ``matplotlib.figure.Figure``)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI,
                 layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    curves = {name: [(p["spec_reads"], p["demand_miss_recall"] or 0.0)
                     for p in pts] for name, pts in report["curves"].items()}
    base = report["base_misses"]
    stars = {r["predictor"]: (r["spec_issued"],
                              r["misses_saved"] / base if base else 0.0)
             for r in report["rows"]}
    xs_all = [x for pts in curves.values() for x, _ in pts] + [
        x for x, _ in stars.values()]
    ys_all = [y for pts in curves.values() for _, y in pts] + [
        y for _, y in stars.values()]
    bottom = min(0.0, min(ys_all, default=0.0) - 0.03)
    x_span = max(xs_all, default=1) or 1
    spread = crowd_offsets(curves, x_span, 1.02 - bottom)
    k_max = report["k"]
    ends: list[tuple[str, Any, str, str]] = []  # name, line, colour, its ends
    for i, (name, pts) in enumerate(curves.items()):
        colour = COLOURS[i % len(COLOURS)]
        xs, ys = zip(*pts, strict=True)
        line = draw_series(ax, fig, xs, ys,
                    {j: o for (q, j), o in spread.items() if q == name},
                    color=colour, marker=MARKERS[i % len(MARKERS)],
                    markersize=7, linewidth=1.8, label=name, zorder=2)
        if len(pts) > 1 and pts[0] != pts[-1]:  # the ends: k = 1 and k = K
            ends.append((name, line, colour, ""))
    first = True
    for i, (name, (x, y)) in enumerate(stars.items()):
        colour = COLOURS[list(curves).index(name) % len(COLOURS)] \
            if name in curves else COLOURS[i % len(COLOURS)]
        ax.plot([x], [y], linestyle="none", marker="*", markersize=15,
                markerfacecolor="none", markeredgecolor=colour,
                markeredgewidth=1.5, zorder=3,
                label=what_if_label(report["budget"]) if first else
                f"_what-if {name}")
        first = False
    ax.axhline(0, color="#999999", linewidth=0.8, zorder=1)
    ax.set_xlabel("speculative reads (predicted experts not resident before "
                  "their step)")
    ax.set_ylabel("demand-miss recall (share of the misses predicted)")
    ax.set_ylim(bottom, 1.02)
    ax.set_xlim(left=-0.02 * x_span)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False,
              title=f"predictor (a point per k = 1..{k_max})")
    ax.annotate(note(k_max, report["budget"]),
                xy=(0, 0), xycoords="axes fraction", xytext=(0, -40),
                textcoords="offset points", va="top", ha="left", fontsize=8,
                annotation_clip=False)
    settle(fig)
    place_labels(ax, end_labels(ax, ends, k_max))
    return fig


def end_labels(ax: Any, ends: list[tuple[str, Any, str, str]], k_max: int
               ) -> list[tuple[str, tuple[float, float], str]]:
    """The labels of the curves' ends, at their drawn (settled) vertices.

    ``k=1`` at a curve's first point and ``k=K`` at its last; a curve whose
    ends are less than :data:`SHORT_PX` apart on screen gets one label,
    ``NAME k=1..K``, at its last point instead (two would sit on each other).
    """
    out = []
    for name, line, colour, _ in ends:
        xy = line.get_xydata()
        a, b = (line.get_transform().transform(xy[i]) for i in (0, -1))
        first, last = tuple(xy[0]), tuple(xy[-1])
        if ((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) ** 0.5 < SHORT_PX:
            out.append((f"{name} k=1..{k_max}", last, colour))
        else:
            out += [("k=1", first, colour), (f"k={k_max}", last, colour)]
    return out


def plot_predict(report: dict[str, Any], path: str, title: str) -> None:
    """Draw the predict figure of ``report`` into a PNG at ``path``."""
    predict_figure(report, title).savefig(path, format="png")
