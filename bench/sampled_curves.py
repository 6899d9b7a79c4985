"""Sampled miss-ratio curves against the full per-size sweep, on MoE traces.

Spatially hashed sampling (a miniature cache fed the accesses of a hashed
fraction R of the keys, at R times each size; after SHARDS, FAST '15, and
miniature simulation, ATC '17) is the usual way to draw the curve of a
policy that is not a stack algorithm.  This bench measures what it gives
on expert traces: for each trace, sampling rate and policy it replays the
full trace at every size of a grid (the baseline) and the sampled trace at
the scaled sizes, and prints the largest absolute miss-ratio error over the
grid (percentage points) beside the speed-up over the baseline (same run,
``engine.sim.simulate`` in plain mode both ways).  The goal the labs set
is at most 0.5 points at 10x or more.

Each key's hash is a fixed 64-bit mix of its key number, so a run is
repeatable; ``--seeds`` draws that many different hash salts and prints
the worst and the median error over them.

    python bench/sampled_curves.py [--rates 0.1,0.25,0.5] [--seeds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from xcache.engine.sim import simulate  # noqa: E402
from xcache.oracle.traces import load_trace  # noqa: E402

POLICIES = ("fifo", "lfu", "arc", "s3fifo", "lru")
M64 = np.uint64((1 << 64) - 1)


def unit_hash(keys: np.ndarray, salt: int) -> np.ndarray:
    """Each key's place in [0, 1): a 64-bit mix (splitmix64's finaliser) of
    the key plus ``salt``, its top 24 bits as a fraction."""
    with np.errstate(over="ignore"):
        step = (0x9E3779B97F4A7C15 * (salt + 1)) & int(M64)
        x = keys.astype(np.uint64) + np.uint64(step)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(40)).astype(np.float64) / float(1 << 24)


def ratios(keys: np.ndarray, policy: str,
           sizes: list[int]) -> tuple[list[float], float]:
    """The miss ratio at each size, and the seconds the replays took."""
    t0 = time.perf_counter()
    got = [simulate(keys, policy, c, "plain")["misses"] / len(keys) for c in sizes]
    return got, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    """Print, per trace, rate and policy, the error and the speed-up."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="0.1,0.25,0.5",
                    help="sampling rates, comma-separated (default 0.1,0.25,0.5)")
    ap.add_argument("--seeds", type=int, default=5,
                    help="hash salts per rate (default 5)")
    a = ap.parse_args(argv)
    rates = [float(r) for r in a.rates.split(",")]
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, load "
          f"{os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    for path in sorted((ROOT / "fixtures" / "traces").glob("*.jsonl")):
        keys = np.asarray(load_trace(path).keys(), dtype=np.int64)
        w = len(np.unique(keys))
        sizes = sorted({max(1, round(w * f / 20)) for f in range(1, 20)})
        print(f"{path.name}: {len(keys):,} accesses, {w} keys, sizes "
              f"{sizes[0]}..{sizes[-1]} ({len(sizes)})")
        for policy in POLICIES:
            full, base_s = ratios(keys, policy, sizes)
            for rate in rates:
                errs, took = [], []
                for salt in range(a.seeds):
                    part = keys[unit_hash(keys, salt) < rate]
                    # sizes scaled by the keys the sample holds (with a few
                    # hundred keys their share is far from the rate)
                    share = len(np.unique(part)) / w
                    got, s = ratios(part, policy,
                                    [max(1, round(c * share)) for c in sizes])
                    errs.append(100 * max(abs(x - y) for x, y in
                                          zip(full, got, strict=True)))
                    took.append(s)
                print(f"  {policy:7s} R={rate:<5g} error worst {max(errs):5.2f} "
                      f"median {statistics.median(errs):5.2f} pp; "
                      f"{base_s / statistics.median(took):5.1f}x the sweep's "
                      f"speed ({base_s * 1e3:.1f} ms)")
    print(f"load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
