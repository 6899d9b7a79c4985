"""The policy lab: replay a routing trace through every policy and cache size.

``trace_main(argv)`` is the driver of ``python replay.py --trace FILE ...``
(kept in this standalone file until it moves into ``replay.py``)::

    --trace FILE [--format jsonl|text|int32|csv] [--top-k K] [--layers L]
    [--experts E] [--mode plain|step] [--policies lru,fifo,...,belady]
    [--slots N,N,... | --fractions 0.1,0.25,0.5] [--per-layer]
    [--executor process|thread|dask] [--workers N]
    [--export-csv PATH] [--export-oracle-general PATH] [--quiet] OUTDIR

It prints a table of misses and hit rates per policy and size and writes
``results.csv``, ``results.json`` (with the trace's reuse-distance
histogram and median in tokens and its adjacent-token overlap) and
``mrc.png`` into OUTDIR. Each (policy, size) cell is one
``engine.sim.simulate`` call submitted to a ``concurrent.futures.Executor``;
Belady runs at every size so each row carries its ``belady_gap``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import numpy as np

from engine.sim import POLICIES, simulate, trace_arrays
from oracle.traces import (
    FORMATS,
    Trace,
    adjacent_overlap,
    median_reuse_distance,
    read_trace,
    reuse_histogram,
    write_csv,
    write_oracle_general,
)

__all__ = ["COLUMNS", "run_sweep", "sizes_for", "trace_main", "analyse"]

#: Columns of results.csv, in order.
COLUMNS = ("policy", "slots", "mode", "per_layer", "requests", "hits", "misses",
           "hit_rate", "miss_ratio", "compulsory", "reloads", "evictions",
           "belady_gap")
EXECUTORS = ("process", "thread", "dask")


def _cell(keys: np.ndarray, starts: np.ndarray, n_experts: int, policy: str,
          slots: int, mode: str, per_layer: bool) -> dict[str, Any]:
    """One (policy, size) replay (top-level, so process pools can pickle it)."""
    return simulate(keys, policy, slots, mode, per_layer, n_experts=n_experts,
                    step_starts=starts)


class _Bar:
    """A plain stderr progress bar (tqdm when installed)."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.done, self.quiet = total, 0, quiet
        self._tqdm = None
        if not quiet:
            try:
                from tqdm import tqdm

                self._tqdm = tqdm(total=total, file=sys.stderr, unit="cell",
                                  leave=False)
            except ImportError:
                pass

    def step(self) -> None:
        """One more cell done."""
        self.done += 1
        if self._tqdm is not None:
            self._tqdm.update(1)
        elif not self.quiet:
            filled = 30 * self.done // self.total
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] "
                             f"{self.done}/{self.total} cells")
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()

    def close(self) -> None:
        """Finish the bar."""
        if self._tqdm is not None:
            self._tqdm.close()


def run_sweep(trace: Trace, policies: Sequence[str], sizes: Sequence[int],
              mode: str = "step", per_layer: bool = False,
              executor: Executor | None = None, quiet: bool = True
              ) -> list[dict[str, Any]]:
    """Replay every (policy, size) cell on ``executor``; rows ordered by policy, size.

    Belady runs at every size (its rows are kept only when asked for) and
    each row gets ``belady_gap = misses - belady misses``. Without an
    executor the cells run here, one after another.
    """
    keys, starts, _, n_experts = trace_arrays(trace)
    run = list(dict.fromkeys([*policies, "belady"]))
    cells = [(p, n) for p in run for n in sizes]
    bar = _Bar(len(cells), quiet)
    results: dict[tuple[str, int], dict[str, Any]] = {}
    try:
        if executor is None:
            for p, n in cells:
                results[(p, n)] = _cell(keys, starts, n_experts, p, n, mode,
                                        per_layer)
                bar.step()
        else:
            futures = {executor.submit(_cell, keys, starts, n_experts, p, n, mode,
                                       per_layer): (p, n) for p, n in cells}
            for fut, cell in futures.items():
                results[cell] = fut.result()
                bar.step()
    finally:
        bar.close()
    rows = []
    for p in policies:
        for n in sizes:
            row = dict(results[(p, n)])
            row["belady_gap"] = row["misses"] - results[("belady", n)]["misses"]
            rows.append(row)
    return rows


def sizes_for(trace: Trace, slots: str | None, fractions: str | None,
              mode: str, per_layer: bool) -> list[int]:
    """Cache sizes from ``--slots`` or ``--fractions`` of the working set.

    The working set is the distinct keys of the trace (per layer: the most
    distinct experts any layer uses). Step mode raises sizes below top_k to
    top_k (a step must fit).
    """
    if slots:
        sizes = [int(x) for x in slots.split(",") if x.strip()]
    else:
        keys = trace.keys()
        if per_layer:
            ws = max(len(np.unique(keys[trace.layer == layer]))
                     for layer in np.unique(trace.layer))
        else:
            ws = len(np.unique(keys))
        fr = [float(x) for x in (fractions or "0.1,0.25,0.5").split(",")]
        sizes = [max(1, round(f * ws)) for f in fr]
    if any(n < 1 for n in sizes):
        raise ValueError("cache sizes must be at least 1 slot")
    if mode == "step":
        sizes = [max(n, trace.top_k) for n in sizes]
    return sorted(set(sizes))


def analyse(trace: Trace) -> dict[str, Any]:
    """Shape, reuse-distance histogram and median (tokens), adjacent overlap."""
    dist, count = reuse_histogram(trace)
    med = median_reuse_distance(trace)
    ov = adjacent_overlap(trace)
    return {"name": trace.name, "accesses": len(trace), "tokens": trace.n_tokens,
            "layers": trace.n_layers, "experts": trace.n_experts,
            "top_k": trace.top_k, "distinct_keys": int(len(np.unique(trace.keys()))),
            "median_reuse_tokens": None if np.isnan(med) else med,
            "reuse_histogram": {int(d): int(c) for d, c in zip(dist, count,
                                                                strict=True)},
            "adjacent_overlap": None if np.isnan(ov) else ov}


def _plot(rows: list[dict[str, Any]], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for p in dict.fromkeys(r["policy"] for r in rows):
        pts = [(r["slots"], r["miss_ratio"]) for r in rows if r["policy"] == p]
        ax.plot(*zip(*pts, strict=True), marker="o", label=p)
    ax.set_xlabel("cache size (slots)")
    ax.set_ylabel("miss ratio")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _executor(kind: str, workers: int, stack: ExitStack) -> Executor:
    if kind == "process":
        return stack.enter_context(ProcessPoolExecutor(max_workers=workers))
    if kind == "thread":
        return stack.enter_context(ThreadPoolExecutor(max_workers=workers))
    from distributed import Client, LocalCluster  # the `lab` extra

    cluster = stack.enter_context(LocalCluster(n_workers=1, processes=False,
                                               threads_per_worker=workers,
                                               dashboard_address=None))
    client = stack.enter_context(Client(cluster))
    return client.get_executor()


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="replay.py --trace",
        description="Replay a routing trace through cache policies and sizes.")
    ap.add_argument("--trace", required=True, help="trace file")
    ap.add_argument("--format", choices=FORMATS, default=None,
                    help="trace format (default: from the extension)")
    ap.add_argument("--top-k", type=int, default=None,
                    help="experts per routed call (int32 traces; text dumps "
                         "with integer weights)")
    ap.add_argument("--layers", type=int, default=None,
                    help="MoE layers (int32 traces: calls cycle through them)")
    ap.add_argument("--experts", type=int, default=None, help="experts per layer")
    ap.add_argument("--mode", choices=("plain", "step"), default="step")
    ap.add_argument("--policies", default=",".join(POLICIES))
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--slots", default=None, help="sizes in slots, N,N,...")
    size.add_argument("--fractions", default=None,
                      help="sizes as fractions of the working set (default "
                           "0.1,0.25,0.5)")
    ap.add_argument("--per-layer", action="store_true",
                    help="the size is per layer, one cache per layer")
    ap.add_argument("--executor", choices=EXECUTORS, default="process")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--export-csv", default=None, help="also write the trace as CSV")
    ap.add_argument("--export-oracle-general", default=None,
                    help="also write the trace as libCacheSim oracleGeneral")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("outdir")
    return ap


def trace_main(argv: Sequence[str] | None = None) -> int:
    """Run the lab; 0 on success, 2 when the trace or the options are unusable."""
    ns = _parser().parse_args(argv)
    policies = [p for p in ns.policies.split(",") if p]
    try:
        trace = read_trace(ns.trace, ns.format, ns.top_k, ns.layers, ns.experts)
        sizes = sizes_for(trace, ns.slots, ns.fractions, ns.mode, ns.per_layer)
    except (OSError, ValueError) as exc:
        print(f"replay --trace: {exc}", file=sys.stderr)
        return 2
    if ns.export_csv:
        write_csv(trace, ns.export_csv)
    if ns.export_oracle_general:
        write_oracle_general(trace, ns.export_oracle_general)
    os.makedirs(ns.outdir, exist_ok=True)
    with ExitStack() as stack:
        try:
            executor = _executor(ns.executor, max(1, ns.workers), stack)
        except ImportError as exc:
            print(f"replay --trace: executor {ns.executor}: {exc} (pip install "
                  "-e '.[lab]')", file=sys.stderr)
            return 2
        try:
            rows = run_sweep(trace, policies, sizes, ns.mode, ns.per_layer,
                             executor, quiet=ns.quiet)
        except Exception as exc:  # engine errors name the bad policy or size
            print(f"replay --trace: {exc}", file=sys.stderr)
            return 2
    info = analyse(trace)
    scope = "per layer" if ns.per_layer else "global"
    ov = info["adjacent_overlap"]
    print(f"{info['name']}: {info['accesses']} accesses, {info['tokens']} tokens, "
          f"{info['layers']} layers x {info['experts']} experts, top-{info['top_k']}; "
          f"mode {ns.mode}, {scope} capacity; median reuse "
          f"{info['median_reuse_tokens']} tokens, adjacent overlap "
          f"{ov if ov is None else round(ov, 3)}")
    print(f"{'policy':<10} {'slots':>6} {'misses':>8} {'hit rate':>9} "
          f"{'reloads':>8} {'belady gap':>10}")
    for r in rows:
        print(f"{r['policy']:<10} {r['slots']:>6} {r['misses']:>8} "
              f"{r['hit_rate']:>9.4f} {r['reloads']:>8} {r['belady_gap']:>10}")
    with open(os.path.join(ns.outdir, "results.csv"), "w", newline="",
              encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(ns.outdir, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"trace": info, "mode": ns.mode, "per_layer": ns.per_layer,
                   "sizes": sizes, "policies": policies, "results": rows}, f,
                  indent=1)
    _plot(rows, os.path.join(ns.outdir, "mrc.png"),
          f"{info['name']} ({ns.mode}, {scope})")
    return 0


if __name__ == "__main__":
    sys.exit(trace_main())
