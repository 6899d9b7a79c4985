"""The lab's curves at every cache size (``--curve``, ``--curve-sweep``).

LRU and Belady are stack algorithms, so the C simulator's one-pass curve
(``engine.sim.curve``, ``engine/csrc/xc_curve.c``) gives each one's misses
at every size from 1 to the working set exactly -- each point what a
replay at that size gives.  ``--curve-sweep`` adds every other policy the
run names, which no one pass serves (FIFO, LFU, ARC, S3-FIFO, SIEVE and the
rest are not stack algorithms): their curves are the per-size sweep, one
replay at each size, exact too (docs/LABS.md says why no sampled curve
stands in for it on expert traces).  Every curve is cells on the lab's
executor (a process pool, threads, dask, or the running cluster of
``--scheduler``, the trace's arrays scattered once as for the sweep): one
cell per one-pass curve, and a swept curve's sizes in chunks of
:data:`SWEEP_CHUNK`; a cell reports its accesses as it goes.  Every size
the run replayed is checked against the curves before anything is written
(for LRU and Belady they are the same numbers by two roads).

Files, in the lab's result set: ``curve.csv`` (one row per size: misses and
miss ratio of each policy, and each one's gap to Belady), ``curve.json``
(each policy's misses as arrays, with the counts, the method and the
sizes the run named) and ``curve.png`` (every size: Belady's curve as the floor with the
region below it out of reach, LRU's gap to it shaded, the other policies'
curves drawn, the named sizes marked).
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
#: Sizes one cell of a swept curve replays, one after another.
SWEEP_CHUNK = 32


def columns(policies: Sequence[str]) -> tuple[str, ...]:
    """curve.csv's columns for curves of ``policies`` (Belady last): each
    policy's misses and miss ratio, then each other policy's gap to Belady."""
    out = ["slots"]
    for p in policies:
        out += [f"{p}_misses", f"{p}_miss_ratio"]
    return (*out, *(f"{p}_gap" for p in policies if p != "belady"))


#: Columns of curve.csv for the one-pass curves alone, in order.
CURVE_COLUMNS = columns(CURVE_POLICIES)
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
#: How a swept curve is computed, as curve.json records it.
SWEPT = ("one replay of the simulator at every size (no one pass serves a "
         "policy that is not a stack algorithm)")


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


def _sweep_cell(keys: np.ndarray, starts: np.ndarray, n_experts: int,
                policy: str, mode: str, per_layer: bool, lo: int, hi: int,
                reporter: Reporter, index: int) -> np.ndarray:
    """``policy``'s misses at each size ``lo..hi``, one replay each, reporting
    the accesses replayed after every size.

    Top-level, so process pools and dask workers can load it by name.
    """
    from xcache.engine.sim import simulate  # noqa: PLC0415

    out = np.empty(hi - lo + 1, dtype=np.int64)
    for i, c in enumerate(range(lo, hi + 1)):
        out[i] = simulate(keys, policy, c, mode, per_layer, n_experts=n_experts,
                          step_starts=starts)["misses"]
        reporter(index, (i + 1) * len(keys))
    return out


def run_curves(trace: Trace, mode: str, per_layer: bool,
               executor: Executor | None = None, quiet: bool = True,
               swept: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Misses at every size of LRU and Belady (``engine.sim.curve``) and of
    each policy of ``swept`` (one replay per size), as cells.

    Keys in order: ``lru``, the ``swept`` ones, ``belady``.  Index ``c - 1``
    is the size of ``c`` slots (per layer with ``per_layer``), up to the
    working set; a size the mode refuses is -1.
    """
    from xcache.engine.sim import trace_arrays  # noqa: PLC0415

    keys, starts, _, n_experts = trace_arrays(trace)
    done = run_cells(executor, _curve_cell, [keys, starts],
                     [(n_experts, p, mode, per_layer) for p in CURVE_POLICIES],
                     [len(keys)] * len(CURVE_POLICIES), quiet, unit="access")
    one_pass = dict(zip(CURVE_POLICIES, done, strict=True))
    others = [p for p in dict.fromkeys(swept) if p not in CURVE_POLICIES]
    lo, w = first_size(one_pass), len(one_pass["lru"])
    chunks = [(lo_c, min(lo_c + SWEEP_CHUNK - 1, w))
              for lo_c in range(lo, w + 1, SWEEP_CHUNK)]
    cells = [(n_experts, p, mode, per_layer, a, b)
             for p in others for a, b in chunks]
    got = run_cells(executor, _sweep_cell, [keys, starts], cells,
                    [len(keys) * (b - a + 1) for *_, a, b in cells], quiet,
                    unit="access") if cells else []
    out = {"lru": one_pass["lru"]}
    for n, p in enumerate(others):
        parts = got[n * len(chunks):(n + 1) * len(chunks)]
        out[p] = np.concatenate([np.full(lo - 1, -1, dtype=np.int64), *parts])
    out["belady"] = one_pass["belady"]
    return out


def at(curve: np.ndarray, slots: int) -> int:
    """The misses of ``curve`` at ``slots`` (past the working set: its last)."""
    return int(curve[min(slots, len(curve)) - 1])


def check_rows(curves: dict[str, np.ndarray], rows: Sequence[dict[str, Any]]) -> None:
    """Each sweep row of a policy with a curve, and Belady's misses beside
    every row, equal the curves at that size; RuntimeError naming the first
    that does not."""
    for r in rows:
        p = r["policy"]
        want = {p: r["misses"]} if p in curves and p != "belady" else {}
        want["belady"] = r["misses"] - r["belady_gap"]
        for policy, misses in want.items():
            got = at(curves[policy], r["slots"])
            if got != misses:
                road = ("one-pass" if policy in CURVE_POLICIES
                        else "swept")
                raise RuntimeError(
                    f"curve: {policy} at {r['slots']} slots is {got} misses in "
                    f"the {road} curve but {misses} in the replay")


def first_size(curves: dict[str, np.ndarray]) -> int:
    """The least size every curve holds (step mode refuses those below a step)."""
    return 1 + max(int(np.count_nonzero(c < 0)) for c in curves.values())


def curve_rows(curves: dict[str, np.ndarray], requests: int) -> list[dict[str, Any]]:
    """One row per size from :func:`first_size` to the working set (curve.csv):
    :func:`columns` of the curves' policies, in their order."""
    opt = curves["belady"]
    rows = []
    for c in range(first_size(curves), len(opt) + 1):
        row: dict[str, Any] = {"slots": c}
        for p, m in curves.items():
            row[f"{p}_misses"] = int(m[c - 1])
            row[f"{p}_miss_ratio"] = int(m[c - 1]) / requests if requests else 0.0
        for p, m in curves.items():
            if p != "belady":
                row[f"{p}_gap"] = int(m[c - 1]) - int(opt[c - 1])
        rows.append(row)
    return rows


def policies_of(rows: list[dict[str, Any]]) -> list[str]:
    """The policies of :func:`curve_rows`' rows, in their order (none: no rows)."""
    return [k[:-len("_misses")] for k in (rows[0] if rows else {})
            if k.endswith("_misses")]


def write_csv(path: str, rows: list[dict[str, Any]]) -> None:
    """curve.csv: the rows' :func:`columns`, one row per size."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=columns(policies_of(rows)
                                                 or CURVE_POLICIES))
        w.writeheader()
        w.writerows(rows)


def document(info: dict[str, Any], curves: dict[str, np.ndarray], mode: str,
             per_layer: bool, sizes: Sequence[int]) -> dict[str, Any]:
    """curve.json's content: the curves as arrays from ``first_slots``."""
    lo = first_size(curves)
    w = len(curves["lru"])
    swept = [p for p in curves if p not in CURVE_POLICIES]
    method = {**METHOD, **{p: SWEPT for p in swept}}
    return {"trace": info["name"], "mode": mode, "per_layer": per_layer,
            "requests": info["accesses"],
            "compulsory": int(curves["lru"][-1]) if w else 0,
            "working_set": w, "first_slots": lo,
            "refused_below": lo if mode == "step" else None,
            "marked_sizes": list(sizes), "method": method, "swept": swept,
            "slots": list(range(lo, w + 1)),
            "misses": {p: [int(x) for x in m[lo - 1:]]
                       for p, m in curves.items()}}


def write_json(path: str, doc: dict[str, Any]) -> None:
    """curve.json: :func:`document`'s content."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)


def largest_gap(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The row where LRU is furthest above Belady (the smallest such size)."""
    return max(rows, key=lambda r: (r["lru_gap"], -r["slots"]), default=None)


def summary_line(rows: list[dict[str, Any]]) -> str:
    """What the run printed about the curves: their sizes and the largest gap
    (and, with swept curves, a second line naming them and their replays)."""
    if not rows:
        return "exact curves: no accesses"
    top = largest_gap(rows)
    line = (f"exact curves (one pass each): lru and belady at every size "
            f"{rows[0]['slots']}..{rows[-1]['slots']}; ")
    line += (f"lru's gap to belady is largest at {top['slots']} slots: "
             f"{top['lru_misses']:,} against {top['belady_misses']:,} misses"
             if top["lru_gap"] else "lru misses as few as belady at every size")
    swept = [p for p in policies_of(rows) if p not in CURVE_POLICIES]
    if swept:
        line += (f"\nswept curves (one replay per size): {', '.join(swept)} "
                 f"at every size {rows[0]['slots']}..{rows[-1]['slots']} "
                 f"({len(swept) * len(rows):,} replays)")
    return line


def curve_figure(rows: list[dict[str, Any]], sizes: Sequence[int],
                 title: str) -> Any:
    """The curves' figure (a ``matplotlib.figure.Figure``, Agg canvas).

    Belady's miss ratio is the floor: the region under it is shaded as out
    of reach; LRU's gap to it is shaded between the two; each swept
    policy's curve is a line in its lab style; each named size is a dotted
    line with LRU's and Belady's points on it, labelled where the label
    hides no other label, point or line (``lab.plot.place_labels``).
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
    from xcache.lab.plot import (  # noqa: PLC0415
        coincident,
        place_labels,
        settle,
        style_for,
    )

    names = policies_of(rows)
    same = coincident([{"policy": p, "slots": r["slots"],
                        "misses": r[f"{p}_misses"]} for p in names for r in rows])

    def label(p: str, how: str) -> str:  # curves equal at every size say so
        return f"{p} ({how})" + (f" (= {', '.join(same[p])})" if same.get(p)
                                 else "")

    ax.plot(xs, opt, color=grey, linewidth=1.6,
            label=label("belady", "every size"), zorder=2)
    ax.plot(xs, lru, color=blue, linewidth=1.6, label=label("lru", "every size"),
            zorder=2.1)
    swept = [p for p in names if p not in CURVE_POLICIES]
    top = max(lru, default=1.0)
    for n, p in enumerate(swept):
        colour, _, dash = style_for(p)
        ys = [r[f"{p}_miss_ratio"] for r in rows]
        top = max(top, *ys)
        ax.plot(xs, ys, color=colour, linestyle=dash, linewidth=1.1,
                label=label(p, "every size, swept"), zorder=2.2 + n / 100)
    by_size = {r["slots"]: r for r in rows}
    marked = [s for s in sizes if s in by_size]
    labels = []
    for n, s in enumerate(marked):
        r = by_size[s]
        ax.axvline(s, color="#444444", linewidth=0.8, linestyle=":", zorder=2.5,
                   label="the run's sizes" if n == 0 else None)
        ax.plot([s, s], [r["belady_miss_ratio"], r["lru_miss_ratio"]],
                linestyle="none", marker="o", markersize=5,
                markerfacecolor="white", color="#222222", zorder=3)
        labels.append((f"{s}: lru {r['lru_miss_ratio']:.3f}, belady "
                       f"{r['belady_miss_ratio']:.3f}",
                       (s, r["lru_miss_ratio"]), "#222222"))
    ax.set_ylim(0, min(1.05, max(top, 0.01) * 1.08))
    if xs and xs[0] < xs[-1]:
        ax.set_xlim(xs[0], xs[-1])
    elif xs:  # one size: a slot either side of it
        ax.set_xlim(xs[0] - 1, xs[0] + 1)
    ax.set_xlabel("cache size (slots)")
    ax.set_ylabel("miss ratio")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0,
              frameon=False)
    settle(fig)  # the layout final: each label clear of the others and the lines
    place_labels(ax, labels, fontsize=8)
    return fig


def plot_curve(rows: list[dict[str, Any]], sizes: Sequence[int], path: str,
               title: str) -> None:
    """Draw :func:`curve_figure` into a PNG at ``path``."""
    curve_figure(rows, sizes, title).savefig(path, format="png")
