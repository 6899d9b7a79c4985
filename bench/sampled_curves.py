"""Sampled miss-ratio curves against the full per-size sweep, on MoE traces.

A policy that is not a stack algorithm (FIFO, LFU, ARC, S3-FIFO, SIEVE)
has no one-pass curve; the exact curve is a replay at every size (``lab
--curve-sweep``).  This bench measures three ways of drawing it from less
work, each against that sweep at every size 1..W on both shipped traces:

* **keys**: spatially hashed sampling, a miniature cache fed the accesses
  of a hashed fraction R of the keys at R times each size (after SHARDS,
  FAST '15, and miniature simulation, ATC '17); ``--seeds`` hash salts,
  worst and median error over them;
* **layers**: the same with whole layers sampled (every 4th layer, each
  offset), which keeps a layer's experts together;
* **sizes**: a replay at every k-th size only, the sizes between drawn by
  linear interpolation (k = 2 and 10).

Each line prints the largest absolute miss-ratio error over every size
(percentage points) beside the speed-up over the sweep, in the same run
(``engine.sim.simulate`` in plain mode throughout).  The goal the labs set
is at most 0.5 points at 10x or more.  Last per policy: the curve's largest
rise from one size to the next (a non-increasing estimate is off by at least
half of it at one of the two sizes) and the sweep's own time.

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

POLICIES = ("fifo", "lfu", "arc", "s3fifo", "sieve")
M64 = np.uint64((1 << 64) - 1)
LAYER_STRIDE = 4
SIZE_STEPS = (2, 10)


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
           sizes: list[int]) -> tuple[np.ndarray, float]:
    """The miss ratio at each size, and the seconds the replays took."""
    t0 = time.perf_counter()
    got = [simulate(keys, policy, c, "plain")["misses"] / len(keys) for c in sizes]
    return np.asarray(got), time.perf_counter() - t0


def miniature(keys: np.ndarray, part: np.ndarray, policy: str,
              sizes: list[int]) -> tuple[np.ndarray, float]:
    """The sampled accesses ``part`` replayed at each size scaled by the share
    of the keys they hold (with a few hundred keys it is far from the rate)."""
    share = len(np.unique(part)) / len(np.unique(keys))
    return ratios(part, policy, [max(1, round(c * share)) for c in sizes])


def worst(full: np.ndarray, got: np.ndarray) -> float:
    """The largest absolute difference, in percentage points."""
    return float(100 * np.max(np.abs(full - got)))


def main(argv: list[str] | None = None) -> int:
    """Print, per trace, policy and way of sampling, the error and the speed-up."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="0.1,0.25,0.5",
                    help="key sampling rates, comma-separated (default 0.1,0.25,0.5)")
    ap.add_argument("--seeds", type=int, default=5,
                    help="hash salts per rate (default 5)")
    a = ap.parse_args(argv)
    rates = [float(r) for r in a.rates.split(",")]
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, load "
          f"{os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    for path in sorted((ROOT / "fixtures" / "traces").glob("*.jsonl")):
        trace = load_trace(path)
        keys = np.asarray(trace.keys(), dtype=np.int64)
        layer = np.asarray(trace.layer)
        w = len(np.unique(keys))
        sizes = list(range(1, w + 1))
        print(f"{path.name}: {len(keys):,} accesses, {w} keys, every size "
              f"1..{w}")
        for policy in POLICIES:
            full, base_s = ratios(keys, policy, sizes)
            for rate in rates:
                errs, took = [], []
                for salt in range(a.seeds):
                    got, s = miniature(keys, keys[unit_hash(keys, salt) < rate],
                                       policy, sizes)
                    errs.append(worst(full, got))
                    took.append(s)
                print(f"  {policy:7s} keys R={rate:<5g} error worst "
                      f"{max(errs):5.2f} median {statistics.median(errs):5.2f} "
                      f"pp; {base_s / statistics.median(took):5.1f}x")
            layers = np.unique(layer)
            errs, took = [], []
            for off in range(LAYER_STRIDE):
                part = keys[np.isin(layer, layers[off::LAYER_STRIDE])]
                got, s = miniature(keys, part, policy, sizes)
                errs.append(worst(full, got))
                took.append(s)
            print(f"  {policy:7s} layers 1/{LAYER_STRIDE}  error worst "
                  f"{max(errs):5.2f} median {statistics.median(errs):5.2f} pp; "
                  f"{base_s / statistics.median(took):5.1f}x")
            for k in SIZE_STEPS:
                at = sorted({*range(1, w + 1, k), w})
                got, s = ratios(keys, policy, at)
                drawn = np.interp(sizes, at, got)
                print(f"  {policy:7s} sizes 1/{k:<4d} error       "
                      f"{worst(full, drawn):5.2f} pp; {base_s / s:5.1f}x")
            rise = float(100 * np.max(np.diff(full)))
            print(f"  {policy:7s} largest rise from one size to the next "
                  f"{max(rise, 0.0):.2f} pp; the sweep took {base_s * 1e3:.0f} ms")
    print(f"load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
