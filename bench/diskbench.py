"""Whole-expert read throughput through the cache: sequential and random, 1/2/4 threads.

Writes a container of 256 experts of 1 MiB (one contiguous run each), then
for each order (sequential expert ids, a seeded random permutation) and each
thread count T loads every expert once through an ExpertCache of 16 slots
with io_threads=T (prefetch in batches of 8, drained).  Rows are labelled by
where the bytes came from, from the cache's own source counters: the page
cache (file warm), or the device (pages dropped with
``engine.drop_page_cache`` before the run).  Best of 3 rounds.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xcache.engine import Container, ExpertCache, drop_page_cache  # noqa: E402

N_EXPERTS, EXPERT_BYTES, BATCH, ROUNDS = 256, 1 << 20, 8, 3
TEMPLATE = "layers.{layer}.experts.{expert}.{tensor}"


def write(path: Path) -> None:
    """One shard of N_EXPERTS contiguous 1 MiB experts."""
    header = {TEMPLATE.format(layer=0, expert=e, tensor="w"): {
        "dtype": "U8", "shape": [EXPERT_BYTES],
        "data_offsets": [e * EXPERT_BYTES, (e + 1) * EXPERT_BYTES]}
        for e in range(N_EXPERTS)}
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 4096)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        block = os.urandom(EXPERT_BYTES)
        for _ in range(N_EXPERTS):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())


def one(cont: Container, order: list[int], threads: int) -> tuple[float, dict]:
    """Seconds to load every expert once in ``order``; and the counters."""
    c = ExpertCache(cont, n_slots=2 * BATCH, top_k=BATCH, layers=(0,),
                    n_experts=N_EXPERTS, expert_template=TEMPLATE,
                    tensors=("w",), io_threads=threads, io_depth=BATCH,
                    batch_threads=threads)
    t0 = time.perf_counter()
    for i in range(0, len(order), BATCH):
        c.prefetch([(0, e) for e in order[i:i + BATCH]])
        c.drain()
    dt = time.perf_counter() - t0
    s = c.stats()
    c.close()
    return dt, s


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="xc-disk-", dir=os.environ.get("TMPDIR")))
    try:
        path = tmp / "model.safetensors"
        write(path)
        cont = Container(str(path))
        orders = {"sequential": list(range(N_EXPERTS)),
                  "random": random.Random(0).sample(range(N_EXPERTS), N_EXPERTS)}
        print(f"{N_EXPERTS} experts x {EXPERT_BYTES >> 20} MiB, batches of "
              f"{BATCH}, best of {ROUNDS}")
        print(f"{'order':10s} {'threads':>7s} {'source':>10s} {'MiB/s':>8s}  "
              "(page_cache/device/unknown loads)")
        for drop in (False, True):
            for name, order in orders.items():
                for threads in (1, 2, 4):
                    best, stats = 1e9, {}
                    for _ in range(ROUNDS):
                        if drop:
                            drop_page_cache(path)
                        dt, s = one(cont, order, threads)
                        if dt < best:
                            best, stats = dt, s
                    pc, dev = stats["page_cache_loads"], stats["device_loads"]
                    unk = stats["unknown_loads"]
                    label = ("page-cache" if pc == N_EXPERTS else
                             "device" if dev == N_EXPERTS else "mixed")
                    mib = N_EXPERTS * EXPERT_BYTES / best / (1 << 20)
                    print(f"{name:10s} {threads:7d} {label:>10s} {mib:8.0f}  "
                          f"({pc}/{dev}/{unk})")
        cont.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
