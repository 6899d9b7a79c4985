"""Policy replay rate: the C simulator's policies vs libcachesim's, each with its ratio.

The olmoe trace (38,272 accesses over 1,024 keys) repeated to at least 10
million accesses, plain mode (libcachesim has no step mode), unit sizes.
Ours: one ``engine.sim.simulate`` call over the key array in memory (for
Belady that includes computing every next use).  libcachesim: the same
trace written once as an oracleGeneral file, replayed by ``process_trace``
with its own reader (the file read is part of its run, as it is of any
libcachesim replay; the file is in the page cache).  Both must report the
same misses.  Best of 3 runs each, at three cache sizes.  The policies:
every oracle policy that names its libCacheSim twin (``LIBCACHESIM`` in
``oracle/policies/<name>.py``), then Belady; ``--policies`` picks some.
Last lines: each policy's smallest ratio over the sizes (goals: LRU >= 5x
libcachesim's rate, every other policy >= 2x).

``--shape kimi`` replays instead the synthetic Kimi-shaped trace of
``bench/scale.py`` (92 layers x 384 experts, top-8, 35,328 keys), so that
sizes up to 16k slots mean something (the olmoe trace has 1,024 keys):

    python bench/policy_replay.py --shape kimi --sizes 128,1024,4096,16384
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import libcachesim as lcs  # noqa: E402
import numpy as np  # noqa: E402

from xcache.engine.sim import simulate  # noqa: E402
from xcache.oracle.policies import LIBCACHESIM  # noqa: E402
from xcache.oracle.traces import (  # noqa: E402
    load_trace,
    write_oracle_general,
    write_oracle_general_keys,
)

TRACES = Path(os.environ.get("XC_TRACES_DIR") or ROOT / "fixtures" / "traces")
TARGET, ROUNDS, SIZES = 10_000_000, 3, (128, 256, 512)
#: Every policy compared: ours -> libcachesim's class name.
SHARED: dict[str, str] = {**LIBCACHESIM, "belady": "Belady"}
#: The ratio each policy must reach (ours / libcachesim's rate).
GOAL: dict[str, float] = {"lru": 5.0}


def best(fn) -> tuple[float, int]:
    """Best wall time of ROUNDS calls of fn, and its (equal every time) misses."""
    times, misses = [], None
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        m = fn()
        times.append(time.perf_counter() - t0)
        assert misses in (None, m)
        misses = m
    return min(times), misses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=("olmoe", "kimi"), default="olmoe",
                    help="the olmoe_299 trace repeated, or bench/scale.py's "
                    "synthetic Kimi-shaped trace (default olmoe)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)),
                    help="comma-separated slot counts (default 128,256,512)")
    ap.add_argument("--policies", default=",".join(SHARED),
                    help=f"comma-separated policies (default {','.join(SHARED)})")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    policies = args.policies.split(",")
    unknown = [p for p in policies if p not in SHARED]
    if unknown:
        ap.error(f"no libcachesim twin for {', '.join(unknown)}; "
                 f"choose from {', '.join(SHARED)}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.oracleGeneral")
        if args.shape == "olmoe":
            trace = load_trace(TRACES / "olmoe_299.jsonl")
            repeat = -(-TARGET // len(trace))
            keys = np.tile(trace.keys(), repeat).astype(np.uint32)
            print(f"olmoe_299 x {repeat} = {len(keys):,} accesses, "
                  f"{trace.n_keys} keys, plain mode")
            write_oracle_general(trace, path, repeat=repeat)
        else:
            sys.path.insert(0, str(ROOT / "bench"))
            from scale import SHAPES, synthetic  # noqa: PLC0415
            keys = synthetic(*SHAPES["kimi"], TARGET, seed=1)
            print(f"kimi-shaped synthetic, {len(keys):,} accesses, "
                  f"{int(keys.max()) + 1:,} keys, plain mode")
            write_oracle_general_keys(keys, path)
        n = len(keys)
        lcs_cls = {p: getattr(lcs, SHARED[p]) for p in policies}
        rates: dict[tuple[str, int], tuple[float, float]] = {}
        for slots in sizes:
            for policy in policies:
                ours_s, ours_m = best(lambda p=policy, s=slots: simulate(
                    keys, p, s, "plain")["misses"])

                def theirs(p=policy, s=slots) -> int:
                    reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
                    ratio, _ = lcs_cls[p](cache_size=s).process_trace(reader)
                    return round(ratio * n)

                lcs_s, lcs_m = best(theirs)
                assert ours_m == lcs_m, (policy, slots, ours_m, lcs_m)
                rates[(policy, slots)] = (n / ours_s, n / lcs_s)
                print(f"{policy:<7} {slots:>4} slots  misses {ours_m:>10,}  "
                      f"ours {n / ours_s / 1e6:7.1f} M/s  libcachesim "
                      f"{n / lcs_s / 1e6:6.1f} M/s  ratio {lcs_s / ours_s:5.1f}x")
    for policy in policies:
        low = min(o / t for (p, _), (o, t) in rates.items() if p == policy)
        goal = GOAL.get(policy, 2.0)
        print(f"ratio: {policy} ours/libcachesim >= {low:.1f}x at every size "
              f"(goal {goal:g}x){'' if low >= goal else '  BELOW GOAL'}")


if __name__ == "__main__":
    main()
