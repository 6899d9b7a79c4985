"""Miss throughput from the page cache: getmany batches vs raw pread.

Writes a container of 64 experts x 3 tensors of 256 KiB (768 KiB per
expert, one contiguous run each), reads it once so the page cache is warm,
then (a) streams every expert through an 8-slot cache as getmany batches of
top-k 4 (64 > 8 slots under LRU, so every key is a miss) with
batch_threads=T, (b) reads the same byte ranges with pread(2) from C into
preallocated buffers on T threads, one batch of 4 at a time
(``bench/pread_batch.c``: the floor), and (c) the same with os.preadv on T
Python threads, for reference.  Best of 5 rounds each.  Last line: the
ratio of the cache to the C floor.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import Container, ExpertCache  # noqa: E402

N_EXPERTS, TOP_K, THREADS, ROUNDS, SLOTS = 64, 4, 2, 5, 8
TENSOR_BYTES = 256 * 1024
TENSORS = ("w1", "w2", "w3")
TEMPLATE = "layers.{layer}.experts.{expert}.{tensor}"


def write(path):
    header, off = {}, 0
    for e in range(N_EXPERTS):
        for t in TENSORS:
            header[TEMPLATE.format(layer=0, expert=e, tensor=t)] = {
                "dtype": "U8", "shape": [TENSOR_BYTES],
                "data_offsets": [off, off + TENSOR_BYTES]}
            off += TENSOR_BYTES
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        f.write(os.urandom(off))
    return 8 + len(text)


def main():
    path = Path(tempfile.mkdtemp()) / "bench.safetensors"
    data_start = write(path)
    path.read_bytes()  # warm the page cache
    expert_bytes = len(TENSORS) * TENSOR_BYTES
    batches = [list(range(b, b + TOP_K)) for b in range(0, N_EXPERTS, TOP_K)]
    total = N_EXPERTS * expert_bytes

    cache = ExpertCache(Container(str(path)), n_slots=SLOTS, top_k=TOP_K,
                        expert_template=TEMPLATE, tensors=TENSORS,
                        n_experts=N_EXPERTS, batch_threads=THREADS)
    best_cache = 1e9
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for b in batches:
            assert cache.getmany([(0, e) for e in b]) == TOP_K
        best_cache = min(best_cache, time.perf_counter() - t0)
    cache.check()

    fd = os.open(path, os.O_RDONLY)
    bufs = [bytearray(expert_bytes) for _ in range(TOP_K)]

    def read(i, e):
        n = os.preadv(fd, [bufs[i]], data_start + e * expert_bytes)
        assert n == expert_bytes

    best_raw = 1e9
    with ThreadPoolExecutor(THREADS) as pool:
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            for b in batches:
                list(pool.map(read, range(TOP_K), b))
            best_raw = min(best_raw, time.perf_counter() - t0)
    os.close(fd)
    cache.close()

    exe = path.parent / "pread_batch"
    subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-fopenmp",
                    str(ROOT / "bench" / "pread_batch.c"), "-o", str(exe)],
                   check=True)
    best_c = float(subprocess.run(
        [str(exe), str(path), str(data_start), str(expert_bytes),
         str(N_EXPERTS), str(TOP_K), str(THREADS), str(ROUNDS), str(SLOTS)],
        check=True, capture_output=True, text=True).stdout)
    shutil.rmtree(path.parent)

    mib = total / 2**20
    print(f"experts {N_EXPERTS} x {expert_bytes} bytes, batches of {TOP_K}, "
          f"{THREADS} threads, page cache warm")
    print(f"cache getmany:      {mib / best_cache:8.0f} MiB/s")
    print(f"raw pread from C:   {mib / best_c:8.0f} MiB/s (baseline)")
    print(f"os.preadv, Python:  {mib / best_raw:8.0f} MiB/s (reference)")
    print(f"ratio cache/raw pread: {best_c / best_cache:.2f} (goal >= 0.9)")


if __name__ == "__main__":
    main()
