"""The lab's exact curves (``--curve``): LRU and Belady at every cache size.

Both are stack algorithms, so the C simulator's one-pass curve
(``engine.sim.curve``, ``engine/csrc/xc_curve.c``) gives each policy's
misses at every size from 1 to the working set exactly -- each point what a
replay at that size gives.  The two curves are two cells on the lab's
executor (a process pool, threads, dask, or the running cluster of
``--scheduler``, the trace's arrays scattered once as for the sweep); a
cell reports its accesses when it ends.  Every size the sweep replayed is
checked against the curves before anything is written (they are the same
numbers by two roads).

Files, in the lab's result set: ``curve.csv`` (one row per size: misses and
miss ratio of each, and LRU's gap to Belady), ``curve.json`` (the same as
arrays, with the counts, the method and the sizes the run named) and
``curve.png`` (every size: Belady's curve as the floor with the region
below it out of reach, LRU's gap to it shaded, the named sizes marked).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

import numpy as np

from xcache.lab.cluster import Reporter
from xcache.lab.plot import DPI, HEIGHT_PX, STYLES, WIDTH_PX
from xcache.lab.sweep import run_cells
from xcache.oracle.traces import Trace

#: The files ``--curve`` adds to the lab's result set.
CURVE_FILES = ("curve.csv", "curve.json", "curve.png")
#: The policies with an exact one-pass curve, in the files' order.
CURVE_POLICIES = ("lru", "belady")
#: Columns of curve.csv, in order.
CURVE_COLUMNS = ("slots", "lru_misses", "lru_miss_ratio", "belady_misses",
                 "belady_miss_ratio", "lru_gap")
#: How the curves are computed, as curve.json records it.
METHOD = {
    "lru": "Mattson's stack distances, one pass: each access's distance is the "
           "distinct keys since its key's last use (live stamps counted by a "
           "tree over bit words, O(n log W))",
    "belady": "Mattson's priority stack with next-use priorities (a key the "
              "current step holds ranks first in step mode), one pass, O(n D) "
              "with D the mean stack depth of an access",
    "exact": "every point equals the simulator's replay at that size",
}


def _curve_cell(keys: np.ndarray, starts: np.ndarray, n_experts: int,
                policy: str, mode: str, per_layer: bool, reporter: Reporter,
                index: int) -> np.ndarray:
    """One policy's curve, reported as all of its accesses when done.

    Top-level, so process pools and dask workers can load it by name.
    """
    from xcache.engine.sim import curve  # noqa: PLC0415

    out = curve(keys, policy, mode, per_layer, n_experts=n_experts,
                step_starts=starts)
    reporter(index, len(keys))
    return out


def run_curves(trace: Trace, mode: str, per_layer: bool,
               executor: Executor | None = None,
               quiet: bool = True) -> dict[str, np.ndarray]:
    """LRU's and Belady's misses at every size (``engine.sim.curve``), as cells.

    Index ``c - 1`` is the size of ``c`` slots (per layer with
    ``per_layer``), up to the working set; a size the mode refuses is -1.
    """
    from xcache.engine.sim import trace_arrays  # noqa: PLC0415

    keys, starts, _, n_experts = trace_arrays(trace)
    done = run_cells(executor, _curve_cell, [keys, starts],
                     [(n_experts, p, mode, per_layer) for p in CURVE_POLICIES],
                     [len(keys)] * len(CURVE_POLICIES), quiet, unit="access")
    return dict(zip(CURVE_POLICIES, done, strict=True))


def at(curve: np.ndarray, slots: int) -> int:
    """The misses of ``curve`` at ``slots`` (past the working set: its last)."""
    return int(curve[min(slots, len(curve)) - 1])


def check_rows(curves: dict[str, np.ndarray], rows: Sequence[dict[str, Any]]) -> None:
    """Each sweep row of LRU, and Belady's misses beside every row, equal the
    curves at that size; RuntimeError naming the first that does not."""
    for r in rows:
        want = {"lru": r["misses"]} if r["policy"] == "lru" else {}
        want["belady"] = r["misses"] - r["belady_gap"]
        for policy, misses in want.items():
            got = at(curves[policy], r["slots"])
            if got != misses:
                raise RuntimeError(
                    f"curve: {policy} at {r['slots']} slots is {got} misses in "
                    f"the one-pass curve but {misses} in the replay")


def first_size(curves: dict[str, np.ndarray]) -> int:
    """The least size both curves hold (step mode refuses those below a step)."""
    return 1 + max(int(np.count_nonzero(c < 0)) for c in curves.values())


def curve_rows(curves: dict[str, np.ndarray], requests: int) -> list[dict[str, Any]]:
    """One row per size from :func:`first_size` to the working set (curve.csv)."""
    lru, opt = curves["lru"], curves["belady"]
    rows = []
    for c in range(first_size(curves), len(lru) + 1):
        a, b = int(lru[c - 1]), int(opt[c - 1])
        rows.append({"slots": c, "lru_misses": a,
                     "lru_miss_ratio": a / requests if requests else 0.0,
                     "belady_misses": b,
                     "belady_miss_ratio": b / requests if requests else 0.0,
                     "lru_gap": a - b})
    return rows


def write_csv(path: str, rows: list[dict[str, Any]]) -> None:
    """curve.csv: :data:`CURVE_COLUMNS`, one row per size."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CURVE_COLUMNS)
        w.writeheader()
        w.writerows(rows)


def document(info: dict[str, Any], curves: dict[str, np.ndarray], mode: str,
             per_layer: bool, sizes: Sequence[int]) -> dict[str, Any]:
    """curve.json's content: the curves as arrays from ``first_slots``."""
    lo = first_size(curves)
    w = len(curves["lru"])
    return {"trace": info["name"], "mode": mode, "per_layer": per_layer,
            "requests": info["accesses"],
            "compulsory": int(curves["lru"][-1]) if w else 0,
            "working_set": w, "first_slots": lo,
            "refused_below": lo if mode == "step" else None,
            "marked_sizes": list(sizes), "method": METHOD,
            "slots": list(range(lo, w + 1)),
            "misses": {p: [int(x) for x in curves[p][lo - 1:]]
                       for p in CURVE_POLICIES}}


def write_json(path: str, doc: dict[str, Any]) -> None:
    """curve.json: :func:`document`'s content."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)


def largest_gap(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The row where LRU is furthest above Belady (the smallest such size)."""
    return max(rows, key=lambda r: (r["lru_gap"], -r["slots"]), default=None)


def summary_line(rows: list[dict[str, Any]]) -> str:
    """What the run printed about the curves: their sizes and the largest gap."""
    if not rows:
        return "exact curves: no accesses"
    top = largest_gap(rows)
    return (f"exact curves (one pass each): lru and belady at every size "
            f"{rows[0]['slots']}..{rows[-1]['slots']}; lru's gap to belady is "
            f"largest at {top['slots']} slots: {top['lru_misses']:,} against "
            f"{top['belady_misses']:,} misses")


def curve_figure(rows: list[dict[str, Any]], sizes: Sequence[int],
                 title: str) -> Any:
    """The curves' figure (a ``matplotlib.figure.Figure``, Agg canvas).

    Belady's miss ratio is the floor: the region under it is shaded as out
    of reach; LRU's gap to it is shaded between the two; each named size
    is a dotted line with both curves' points on it, labelled.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI,
                 layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    xs = [r["slots"] for r in rows]
    lru = [r["lru_miss_ratio"] for r in rows]
    opt = [r["belady_miss_ratio"] for r in rows]
    grey, blue = STYLES["belady"][0], STYLES["lru"][0]
    ax.fill_between(xs, 0, opt, color=grey, alpha=0.18, linewidth=0,
                    label="below belady: out of reach", zorder=1)
    ax.fill_between(xs, opt, lru, color=blue, alpha=0.22, linewidth=0,
                    label="lru's gap to belady", zorder=1.5)
    ax.plot(xs, opt, color=grey, linewidth=1.6, label="belady (every size)",
            zorder=2)
    ax.plot(xs, lru, color=blue, linewidth=1.6, label="lru (every size)",
            zorder=2.1)
    by_size = {r["slots"]: r for r in rows}
    marked = [s for s in sizes if s in by_size]
    for n, s in enumerate(marked):
        r = by_size[s]
        ax.axvline(s, color="#444444", linewidth=0.8, linestyle=":", zorder=2.5,
                   label="the run's sizes" if n == 0 else None)
        ax.plot([s, s], [r["belady_miss_ratio"], r["lru_miss_ratio"]],
                linestyle="none", marker="o", markersize=5,
                markerfacecolor="white", color="#222222", zorder=3)
        ax.annotate(f"{s}: lru {r['lru_miss_ratio']:.3f}, belady "
                    f"{r['belady_miss_ratio']:.3f}",
                    (s, r["lru_miss_ratio"]), xytext=(4, 6),
                    textcoords="offset points", fontsize=8, color="#222222",
                    zorder=3)
    top = max(lru, default=1.0)
    ax.set_ylim(0, min(1.05, max(top, 0.01) * 1.08))
    if xs:
        ax.set_xlim(xs[0], xs[-1])
    ax.set_xlabel("cache size (slots)")
    ax.set_ylabel("miss ratio")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0,
              frameon=False)
    return fig


def plot_curve(rows: list[dict[str, Any]], sizes: Sequence[int], path: str,
               title: str) -> None:
    """Draw :func:`curve_figure` into a PNG at ``path``."""
    curve_figure(rows, sizes, title).savefig(path, format="png")
