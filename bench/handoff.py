"""The hand-off to a reader, live: as the calibration times it and as a decode meets it.

The time lab (docs/LABS.md) charges a read handed to a reader ``queue_s``
at the hand-off and ``wake_s`` on top of the read when the consumer waits
for it, both calibrated by ``lab.timing.calibrate.call_costs`` from a
``prefetch`` and a ``get`` of one missing key right after a ``drain``.  A
decode step meets the readers otherwise: idle for a step's compute, then a
split stream of the step's missing keys.  This bench times both on one
container of 128 KiB experts in the page cache (a cache of 16 slots over
128 experts, every key a miss):

* **steps**: ``--steps`` decode steps of top-2 (``spin`` of 40 us of
  non-expert work, a stream of two missing keys, 40 us per expert, held
  until the next step), for a split stream (``split_min_misses`` 1 with 1
  and 2 readers) against the plain path (``split_min_misses`` 3: the
  consumer's own reads, the baseline); per arm the step, the stream's
  begin and the wait for its first expert, medians in microseconds;
* **idle**: ``prefetch`` then ``get`` of one missing key after the readers
  have idled 0 to 1,000 us (one reader), the wait's median, beside the
  consumer's own read of a missing key (no readers) as the baseline.

The difference between a waited hand-off and the plain read is what the
consumer loses to the hand-off (reader start, read, consumer wake-up).

    python bench/handoff.py [--steps 400] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xcache.lab.timing.calibrate import TEMPLATE, spin, write_container  # noqa: E402

N_EXPERTS = 128
EXPERT_BYTES = 131072
SLOTS = 16
US = 1e6


def open_cache(cont: object, threads: int, split: int) -> object:
    """A top-2 cache of :data:`SLOTS` over the one-layer container."""
    from xcache.engine import ExpertCache

    return ExpertCache(cont, n_slots=SLOTS, policy="lru", top_k=2, layers=(0,),
                       n_experts=N_EXPERTS, expert_template=TEMPLATE,
                       tensors=("w",), io_threads=threads, io_depth=64,
                       split_min_misses=split, batch_threads=1)


def steps(cont: object, threads: int, split: int,
          n: int) -> tuple[float, float, float]:
    """Medians (us) of a decode step, its stream's begin and first expert's wait."""
    c = open_cache(cont, threads, split)
    held: list = []
    step, begin, first = [], [], []
    try:
        for i in range(n):
            t0 = time.perf_counter()
            for x in held:
                x.release()
            held = []
            spin(40e-6)
            e = (2 * i) % N_EXPERTS
            t1 = time.perf_counter()
            s = c.stream([(0, e), (0, e + 1)])
            t2 = time.perf_counter()
            for j, x in enumerate(s):
                if j == 0:
                    first.append(time.perf_counter() - t2)
                held.append(x)
                spin(40e-6)
            begin.append(t2 - t1)
            step.append(time.perf_counter() - t0)
        for x in held:
            x.release()
    finally:
        c.close()
    return (statistics.median(step) * US, statistics.median(begin) * US,
            statistics.median(first) * US)


def idle_wait(cont: object, idle_s: float, threads: int, n: int = 200) -> float:
    """Median us from a ``prefetch`` of a missing key (or none, with no
    readers) to the end of its ``get``, the readers idle ``idle_s`` before."""
    c = open_cache(cont, threads, 1)
    waits = []
    try:
        for i in range(n):
            key = (0, i % N_EXPERTS)
            c.drain()
            spin(idle_s)
            if threads:
                c.prefetch([key], speculative=True)
            t0 = time.perf_counter()
            c.get(*key).release()
            waits.append(time.perf_counter() - t0)
    finally:
        c.close()
    return statistics.median(waits) * US


def main(argv: list[str] | None = None) -> int:
    """Print both tables, each figure beside its baseline."""
    from xcache.engine import Container

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400, help="decode steps per arm")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of every arm")
    a = ap.parse_args(argv)
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} UTC, load "
          f"{os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "experts.safetensors"
        write_container(path, N_EXPERTS, EXPERT_BYTES)
        cont = Container(str(path))
        try:
            for r in range(a.rounds):
                plain = steps(cont, 1, 3, a.steps)
                print(f"round {r + 1}: plain path (T=3, the consumer's reads): step "
                      f"{plain[0]:.1f} us, begin {plain[1]:.1f}, first expert "
                      f"{plain[2]:.1f}")
                for threads, split in ((1, 1), (2, 1), (2, 2)):
                    got = steps(cont, threads, split, a.steps)
                    print(f"  split stream, {threads} reader(s), T={split}: step "
                          f"{got[0]:.1f} us ({got[0] / plain[0]:.2f}x), begin "
                          f"{got[1]:.1f}, first expert {got[2]:.1f} "
                          f"({got[2] / plain[2]:.2f}x the own read)")
                own = idle_wait(cont, 0.0, 0)
                print(f"  own read of a missing key (no readers): {own:.1f} us")
                for idle in (0, 10, 20, 40, 100, 1000):
                    w = idle_wait(cont, idle * 1e-6, 1)
                    print(f"  prefetch then get after {idle:4d} us idle: "
                          f"{w:5.1f} us ({w / own:.2f}x the own read)")
        finally:
            cont.close()
    print(f"load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
