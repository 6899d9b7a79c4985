"""Overlap of expert reads with compute: sync vs read-ahead vs read-ahead + stream.

A synthetic decode loop over a real routing trace (olmoe_299: 16 layers,
top-8 of 64 experts; ``oracle.traces.load_trace``) on a container of that
shape written here (128 KiB per expert, one contiguous run).  Per layer the
consumer needs the trace's experts; each expert costs a calibrated busy loop
of compute.  The cache has 64 slots, so almost every access misses.  Arms,
alternated within each round:

- ``sync``: get each expert (a miss reads in the caller), compute, release;
- ``ahead``: prefetch the *next* layer's experts (the trace's, i.e. a perfect
  predictor) on the read-ahead threads, then get/compute/release this layer;
- ``ahead+stream``: the same prefetch, and this layer through ``stream`` so
  compute starts on whatever is ready first.

Misses come from the page cache (file warm) or from the device (an
O_DIRECT container: every miss is a device read; the source counters label
each row).  ``io`` is the sync arm's time per token with zero compute,
``compute`` the busy-loop time per token; the ideal is max(io, compute).
Usage: ``python bench/overlap.py [--tokens N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xcache.engine import Container, ExpertCache  # noqa: E402
from xcache.oracle.traces import load_trace  # noqa: E402

TRACES = Path(os.environ.get("XC_TRACES_DIR") or ROOT / "fixtures" / "traces")
EXPERT_BYTES = 128 * 1024
TEMPLATE = "layers.{layer}.experts.{expert}.{tensor}"
N_SLOTS, IO_THREADS = 64, 2


def write(path: Path, n_layers: int, n_experts: int) -> None:
    """One shard, every expert one contiguous 128 KiB run, 4 KiB-aligned data."""
    header, off = {}, 0
    for layer in range(n_layers):
        for e in range(n_experts):
            header[TEMPLATE.format(layer=layer, expert=e, tensor="w")] = {
                "dtype": "U8", "shape": [EXPERT_BYTES],
                "data_offsets": [off, off + EXPERT_BYTES]}
            off += EXPERT_BYTES
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 4096)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        block = os.urandom(1 << 20)
        for _ in range(off // len(block)):
            f.write(block)


def spin(seconds: float) -> None:
    """Busy compute for ``seconds`` (holds the GIL, as a Python kernel would)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def run(cache: ExpertCache, plan: list[list[list[int]]], arm: str,
        cost_s: float) -> float:
    """Wall seconds per token of one arm over the plan (token -> layer -> experts)."""
    t0 = time.perf_counter()
    n_layers = len(plan[0])
    for t, layers in enumerate(plan):
        for layer, experts in enumerate(layers):
            keys = [(layer, e) for e in experts]
            if arm != "sync":
                nxt = (layers[layer + 1] if layer + 1 < n_layers
                       else plan[t + 1][0] if t + 1 < len(plan) else [])
                nl = layer + 1 if layer + 1 < n_layers else 0
                cache.prefetch([(nl, e) for e in nxt])
            if arm == "ahead+stream":
                for x in cache.stream(keys):
                    spin(cost_s)
                    x.release()
            else:
                for k in keys:
                    x = cache.get(*k)
                    spin(cost_s)
                    x.release()
    cache.drain()
    return (time.perf_counter() - t0) / len(plan)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ns = ap.parse_args()
    trace = load_trace(TRACES / "olmoe_299.jsonl")
    plan: list[list[list[int]]] = [[[] for _ in range(trace.n_layers)]
                                   for _ in range(ns.tokens)]
    for t, layer, e in zip(trace.token.tolist(), trace.layer.tolist(),
                           trace.expert.tolist(), strict=True):
        if t < ns.tokens:
            plan[t][layer].append(e)
    per_token = sum(len(x) for x in plan[0])
    tmp = Path(tempfile.mkdtemp(prefix="xc-overlap-", dir=os.environ.get("TMPDIR")))
    try:
        path = tmp / "model.safetensors"
        write(path, trace.n_layers, trace.n_experts)
        print(f"trace {trace.name}: {ns.tokens} tokens, {per_token} experts/token, "
              f"{EXPERT_BYTES // 1024} KiB each, {N_SLOTS} slots, "
              f"io_threads {IO_THREADS}, best of {ns.rounds}")
        for source, direct in (("page-cache", False), ("device", True)):
            cont = Container(str(path), direct=direct)
            if direct and not cont.direct_active:
                print(f"device: skipped ({cont.direct_note})")
                continue

            def cache(io: int, c: Container = cont) -> ExpertCache:
                return ExpertCache(c, n_slots=N_SLOTS, top_k=8,
                                   layers=range(trace.n_layers),
                                   n_experts=trace.n_experts,
                                   expert_template=TEMPLATE, tensors=("w",),
                                   io_threads=io, batch_threads=1)
            with open(path, "rb") as f:  # warm the page cache
                while f.read(1 << 24):
                    pass
            c0 = cache(0)
            io_s = min(run(c0, plan, "sync", 0.0) for _ in range(ns.rounds))
            src = c0.stats()
            cost = io_s / per_token  # balanced: compute == io, the hard case
            best = {"sync": 1e9, "ahead": 1e9, "ahead+stream": 1e9}
            for _ in range(ns.rounds):
                for arm in best:
                    c = cache(0 if arm == "sync" else IO_THREADS)
                    best[arm] = min(best[arm], run(c, plan, arm, cost))
                    c.close()
            compute_s = cost * per_token
            ideal = max(io_s, compute_s)
            label = (f"{source} (page_cache_loads {src['page_cache_loads']}, "
                     f"device_loads {src['device_loads']}, "
                     f"unknown {src['unknown_loads']})")
            print(f"{label}: io {io_s * 1e3:.2f} ms/token, compute "
                  f"{compute_s * 1e3:.2f} ms/token, ideal {ideal * 1e3:.2f}")
            for arm, s in best.items():
                print(f"  {arm:13s} {s * 1e3:7.2f} ms/token  {s / ideal:5.2f}x ideal")
            c0.close()
            cont.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
