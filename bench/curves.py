"""Exact curves in one pass against replays: LRU and Belady at every size.

For each trace, mode (plain, step) and policy (lru, belady) it times
``engine.sim.curve`` -- the misses at every size 1..W (W the working set) in
one pass -- against one single-size replay of the same policy
(``engine.sim.simulate`` at the lab's middle default size, a quarter of the
working set) and against the per-size sweep the curve replaces (one replay
at every size the mode accepts).  The curve and the single replay are the
best of ``--rounds`` rounds over the key arrays in memory, the two calls
alternating in each round; the sweep runs once, and every one of its
points must equal the curve's (checked, so the run is also an exactness
test).  Printed beside each figure: its ratio (curve / single replay: the
goal is at most 2x; sweep / curve: what one pass saves).

The traces: the shipped ones (``fixtures/traces``), and with ``--also DIR``
the largest trace in DIR (by accesses) when it is larger than every shipped
one (it is named and skipped otherwise).  The first and last lines give the
date and the load average (``uptime``); docs/BENCHMARKS.md records a run.

With ``--sampled`` the same run goes on to bench/sampled_curves.py: the
other policies' curves drawn from less work (keys, layers or sizes
sampled), each one's time and largest miss-ratio error against the full
sweep at every size.

    python bench/curves.py [--also ../shared/traces] [--rounds 7] [--sampled]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from xcache.engine.sim import CURVE_POLICIES, curve, simulate, trace_arrays  # noqa: E402
from xcache.oracle.traces import load_trace  # noqa: E402

SHIPPED = ROOT / "fixtures" / "traces"
#: The goal: the exact curve at every size in at most this many single replays.
GOAL = 2.0


def uptime() -> str:
    """``uptime``'s line (load averages), or the load from os when it is missing."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except OSError:
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def best(fns: list[Callable[[], object]], rounds: int) -> list[float]:
    """The least wall time (s) of each of ``fns`` over ``rounds`` rounds, the
    calls alternating within each round (a load change hits them alike)."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, kept in zip(fns, times, strict=True):
            t0 = time.perf_counter()
            fn()
            kept.append(time.perf_counter() - t0)
    return [min(kept) for kept in times]


def traces(also: str | None) -> list[Path]:
    """The shipped traces, and DIR's largest when it is larger than all of them."""
    found = sorted(SHIPPED.glob("*.jsonl"))
    if also is None:
        return found
    extra = [p for p in sorted(Path(also).iterdir())
             if p.suffix in (".jsonl", ".csv", ".oracleGeneral") and p.is_file()]
    if not extra:
        print(f"--also {also}: no trace there")
        return found
    sizes = {p: len(load_trace(p)) for p in extra}
    largest = max(extra, key=lambda p: sizes[p])
    shipped = max(len(load_trace(p)) for p in found)
    if sizes[largest] <= shipped:
        print(f"--also {also}: its largest trace, {largest.name} "
              f"({sizes[largest]:,} accesses), is no larger than the shipped "
              f"ones ({shipped:,}); not added")
        return found
    return [*found, largest]


def one(path: Path, rounds: int) -> list[dict[str, object]]:
    """Every (mode, policy) of one trace: the curve, one replay, the sweep."""
    trace = load_trace(path)
    keys, starts, _, n_experts = trace_arrays(trace)
    w = len(np.unique(keys))
    rows = []
    for mode in ("plain", "step"):
        for policy in CURVE_POLICIES:
            def run_curve(policy: str = policy, mode: str = mode) -> np.ndarray:
                return curve(keys, policy, mode, n_experts=n_experts,
                             step_starts=starts)

            m = run_curve()
            first = 1 + int(np.count_nonzero(m < 0))
            middle = max(first, round(0.25 * w))
            t_curve, t_one = best([run_curve, lambda policy=policy, mode=mode,
                                   middle=middle: simulate(
                keys, policy, middle, mode, n_experts=n_experts,
                step_starts=starts)], rounds)
            t0 = time.perf_counter()
            for c in range(first, w + 1):
                got = simulate(keys, policy, c, mode, n_experts=n_experts,
                               step_starts=starts)["misses"]
                if got != m[c - 1]:
                    raise SystemExit(f"{path.name} {mode} {policy}: {c} slots "
                                     f"replay {got} misses, curve {m[c - 1]}")
            t_sweep = time.perf_counter() - t0
            rows.append({"trace": path.name, "accesses": len(keys), "w": w,
                         "mode": mode, "policy": policy, "middle": middle,
                         "sizes": w - first + 1, "curve": t_curve,
                         "single": t_one, "sweep": t_sweep})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--also", metavar="DIR", default=None,
                    help="also time the largest trace in DIR when it is larger "
                         "than every shipped one (e.g. ../shared/traces)")
    ap.add_argument("--rounds", type=int, default=7,
                    help="best of this many calls for the curve and the single "
                         "replay (default 7)")
    ap.add_argument("--sampled", action="store_true",
                    help="then, in the same run, the sampled curves of every "
                         "other policy against the full sweep "
                         "(bench/sampled_curves.py)")
    ns = ap.parse_args()
    start = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    print(f"start {start}; {uptime()}")
    print(f"{'trace':<28} {'mode':<5} {'policy':<6} {'W':>5} {'curve ms':>9} "
          f"{'1 replay ms (size)':>19} {'curve/1':>8} {'sweep ms (sizes)':>17} "
          f"{'sweep/curve':>11}")
    worst: dict[str, float] = {}
    for path in traces(ns.also):
        for r in one(path, ns.rounds):
            ratio = r["curve"] / r["single"]
            worst[r["policy"]] = max(worst.get(r["policy"], 0.0), ratio)
            print(f"{r['trace']:<28} {r['mode']:<5} {r['policy']:<6} "
                  f"{r['w']:>5} {r['curve'] * 1e3:>9.3f} "
                  f"{r['single'] * 1e3:>11.3f} ({r['middle']:>4}) "
                  f"{ratio:>7.2f}x {r['sweep'] * 1e3:>9.1f} ({r['sizes']:>4}) "
                  f"{r['sweep'] / r['curve']:>10.0f}x")
    for policy, ratio in worst.items():
        verdict = "met" if ratio <= GOAL else "not met"
        print(f"{policy}: the curve at every size takes at most {ratio:.2f}x one "
              f"replay (goal <= {GOAL:g}x: {verdict})")
    if ns.sampled:
        from bench import sampled_curves  # noqa: PLC0415

        sampled_curves.main([])
    end = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    print(f"end {end}; {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
