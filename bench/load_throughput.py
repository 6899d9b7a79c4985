"""Miss throughput from the page cache: getmany batches vs raw pread from C.

Writes a container of 64 experts x 3 tensors of 256 KiB (768 KiB per
expert, one contiguous run each) and reads it once so the page cache is
warm.  For each thread count T (``--threads``, default 1,2) it then
alternates, ``--outer`` times, (a) a best-of-3 pass of the cache: every
expert streamed through an 8-slot cache as getmany batches of top-k 4 (64 >
8 slots under LRU, so every key is a miss) with batch_threads=T, the key
lists built before the clock starts, and (b) a best-of-3 pass of the floor,
``bench/pread_batch.c``: the same byte ranges read with pread(2) into 8
rotating preallocated buffers on T OpenMP threads, one batch of 4 at a
time.  Alternating the arms keeps a burst of load on the shared machine
from landing on one arm only.  (c) os.preadv on T Python threads is printed
for reference.  Figures are the best of all passes.  Last line: the
cache's throughput as a fraction of the floor's, per T.

With ``--evidence`` the alternation gains three more arms of the same C
program, to tell the cache's own cost from the machine's: ``spin``, the
cache's batch pool rebuilt in C (the caller reads beside T - 1 pthreads
that poll 100 us plus their last read's time, then sleep on a condition
variable); ``cond``, that pool
woken through the condition variable for every batch; and ``spin+gap``,
the pool with the caller busy, before every batch, for as long as an
all-hit ``getmany`` of 4 keys takes from Python (measured in the same run:
the per-batch cost a batch of misses pays besides its reads).

OpenBLAS (loaded with numpy) is limited to one thread unless the caller set
OPENBLAS_NUM_THREADS: its idle server threads spin on this 2-core machine
and took a core share from the cache's readers that the floor, a plain C
program, never pays (perf: 7.7 % of the cache arm's samples).
"""

from __future__ import annotations

import argparse
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
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads

from xcache.engine import Container, ExpertCache  # noqa: E402

N_EXPERTS, TOP_K, SLOTS, INNER = 64, 4, 8, 3
TENSOR_BYTES = 256 * 1024
TENSORS = ("w1", "w2", "w3")
TEMPLATE = "layers.{layer}.experts.{expert}.{tensor}"
EXPERT_BYTES = len(TENSORS) * TENSOR_BYTES


def write(path: Path) -> int:
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


def cache_pass(cache: ExpertCache, batches: list[list[tuple[int, int]]]
               ) -> float:
    best = 1e9
    for _ in range(INNER):
        t0 = time.perf_counter()
        for b in batches:
            assert cache.getmany(b) == TOP_K
        best = min(best, time.perf_counter() - t0)
    return best


def hit_cost(cache: ExpertCache, keys: list[tuple[int, int]]) -> float:
    """Seconds per all-hit getmany of keys from Python (best of 5 x 2000)."""
    cache.getmany(keys)
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(2000):
            cache.getmany(keys)
        best = min(best, (time.perf_counter() - t0) / 2000)
    return best


def floor_pass(exe: Path, path: Path, data_start: int, threads: int,
               mode: str = "omp", gap_ns: int = 0) -> float:
    out = subprocess.run(
        [str(exe), str(path), str(data_start), str(EXPERT_BYTES),
         str(N_EXPERTS), str(TOP_K), str(threads), str(INNER), str(SLOTS),
         mode, str(gap_ns)],
        check=True, capture_output=True, text=True).stdout
    return float(out)


def preadv_pass(path: Path, data_start: int, threads: int,
                batches: list[list[int]]) -> float:
    fd = os.open(path, os.O_RDONLY)
    bufs = [bytearray(EXPERT_BYTES) for _ in range(TOP_K)]

    def read(i: int, e: int) -> None:
        n = os.preadv(fd, [bufs[i]], data_start + e * EXPERT_BYTES)
        assert n == EXPERT_BYTES

    best = 1e9
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(INNER):
            t0 = time.perf_counter()
            for b in batches:
                list(pool.map(read, range(TOP_K), b))
            best = min(best, time.perf_counter() - t0)
    os.close(fd)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2",
                    help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--outer", type=int, default=5,
                    help="alternations of the arms (default 5)")
    ap.add_argument("--evidence", action="store_true",
                    help="also the floor's spin, cond and spin+gap arms")
    args = ap.parse_args()
    thread_counts = [int(t) for t in args.threads.split(",")]

    tmp = Path(tempfile.mkdtemp())
    path = tmp / "bench.safetensors"
    data_start = write(path)
    path.read_bytes()  # warm the page cache
    exe = tmp / "pread_batch"
    subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-fopenmp",
                    str(ROOT / "bench" / "pread_batch.c"), "-o", str(exe),
                    "-lpthread"], check=True)
    batches = [list(range(b, b + TOP_K)) for b in range(0, N_EXPERTS, TOP_K)]
    key_batches = [[(0, e) for e in b] for b in batches]
    mib = N_EXPERTS * EXPERT_BYTES / 2**20
    n_batches = len(batches)

    print(f"experts {N_EXPERTS} x {EXPERT_BYTES} bytes, batches of {TOP_K}, "
          f"{SLOTS} slots, page cache warm, best of {args.outer} x {INNER}")
    ratios = []
    for t in thread_counts:
        cache = ExpertCache(Container(str(path)), n_slots=SLOTS, top_k=TOP_K,
                            expert_template=TEMPLATE, tensors=TENSORS,
                            layers=(0,), n_experts=N_EXPERTS, batch_threads=t)
        best = {"cache": 1e9, "omp": 1e9}
        hit = 1e9
        if args.evidence:
            best.update({"spin": 1e9, "cond": 1e9, "spin+gap": 1e9})
        for _ in range(args.outer):
            best["cache"] = min(best["cache"], cache_pass(cache, key_batches))
            best["omp"] = min(best["omp"],
                              floor_pass(exe, path, data_start, t))
            if not args.evidence:
                continue
            hit = min(hit, hit_cost(cache, key_batches[-1]))
            for mode in ("spin", "cond"):
                best[mode] = min(best[mode],
                                 floor_pass(exe, path, data_start, t, mode))
            best["spin+gap"] = min(best["spin+gap"], floor_pass(
                exe, path, data_start, t, "spin", round(hit * 1e9)))
        cache.check()
        cache.close()
        best_py = preadv_pass(path, data_start, t, batches)
        ratios.append(f"{t} threads {best['omp'] / best['cache']:.2f}")
        print(f"[{t} threads] cache getmany:    "
              f"{mib / best['cache']:8.0f} MiB/s")
        print(f"[{t} threads] raw pread from C: {mib / best['omp']:8.0f} "
              f"MiB/s (baseline)")
        print(f"[{t} threads] os.preadv, Python:{mib / best_py:8.0f} MiB/s "
              f"(reference)")
        if args.evidence:
            per_batch = best["cache"] / n_batches * 1e6
            print(f"[{t} threads] all-hit getmany of {TOP_K} from Python: "
                  f"{hit * 1e6:.1f} us per batch ({per_batch:.0f} us per "
                  f"batch of misses)")
            for mode in ("spin", "cond", "spin+gap"):
                print(f"[{t} threads] floor, {mode:8s}      "
                      f"{mib / best[mode]:8.0f} MiB/s, ratio to the omp "
                      f"floor {best['omp'] / best[mode]:.2f}, cache / it "
                      f"{best[mode] / best['cache']:.2f}")
    shutil.rmtree(tmp)
    print(f"ratio cache/raw pread: {', '.join(ratios)} (goal >= 0.9)")


if __name__ == "__main__":
    main()
