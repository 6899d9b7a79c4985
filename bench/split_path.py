"""Split-path what-if: ``stream()`` at every ``split_min_misses`` on a real trace, live.

A decode loop replays a real routing trace (``fixtures/traces``, read by
``oracle.traces.load_trace``) through the live :class:`engine.ExpertCache`
over a fixture container written here by ``fixtures.generate`` with the
trace's shape (its layers, experts per layer and top-k; each expert three
BF16 projections of ``--hidden`` x ``--ffn``, OLMoE's 2:1 ratio scaled
down).  Token by token, layer by layer, the layer's experts go through
``cache.stream(keys)`` on a cache opened with ``split_min_misses = T``, for
every T from 1 to top-k: a layer with at least T experts not resident
streams (hits first, then misses as their reads on the ``--io-threads``
readers complete), any other layer is a plain run of ``get``s.  Each expert
is consumed as it is yielded by a compute model -- a float32 numpy matmul
of ``--size`` x ``--size`` (default) or a calibrated busy loop of
``--spin-us`` -- after touching one byte per page of its payload, and held
until its layer is done (as ``hold_layer`` holds a layer).  The baseline
arm, ``get``, is a plain loop of ``get``s (the same holds) in the same run.

Because every expert of a layer is held until the layer ends, a stream
counts exactly as the ``get`` loop (docs/CACHE.md "stream", for the tick
policies lru, fifo, lfu, lfru, hotness), so the misses must be identical at
every T: the bench asserts it and prints the check.  ``s3fifo`` and ``arc``
are not offered: a stream tells a queue policy of all its reservations
before any insert, so its victims, and the misses after them, may differ
from the ``get`` loop's (docs/CACHE.md "stream"; on olmoe_299 by a few
tens of 6,600 misses).

A fresh cache per arm and round; within a round the arms take turns every
``--chunk`` tokens (the order rotating, each arm's cache kept), so bursts
of other work on a shared machine fall on all arms alike; every round does
the same work, so an arm's figure is the sum over chunks of its fastest
round at each chunk.  The container is read once before timing, so misses are
loads from the page cache (the source counters are printed); with
``--direct`` the container is opened with O_DIRECT and every miss is a
device read.

Usage: ``python bench/split_path.py [--trace olmoe_299.jsonl] [--tokens N]
[--slots S] [--policy lru] [--compute matmul|spin] [--size N] [--spin-us U]
[--io-threads N] [--rounds R] [--chunk C] [--direct]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core for compute
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from xcache import fixtures  # noqa: E402
from xcache.engine import Container, ExpertCache  # noqa: E402
from xcache.engine.hold import Expert  # noqa: E402
from xcache.oracle.traces import Trace, load_trace  # noqa: E402

TRACES = Path(os.environ.get("XC_TRACES_DIR") or ROOT / "fixtures" / "traces")
TEMPLATE = "model.layers.{layer}.mlp.experts.{expert}.{tensor}"
PARTS = ("gate_proj.weight", "up_proj.weight", "down_proj.weight")
#: the policies under which a stream counts as the same gets (docs/CACHE.md)
TICK_POLICIES = ("lru", "fifo", "lfu", "lfru", "hotness")

#: one token of a plan: its (layer, experts) steps in layer order
Token = list[tuple[int, list[int]]]


def plan_of(trace: Trace, tokens: int) -> list[Token]:
    """The first ``tokens`` tokens of the trace as (layer, experts) steps."""
    plan: list[Token] = [[] for _ in range(min(tokens, trace.n_tokens))]
    for t, layer, e in zip(trace.token.tolist(), trace.layer.tolist(),
                           trace.expert.tolist(), strict=True):
        if t >= len(plan):
            break
        steps = plan[t]
        if not steps or steps[-1][0] != layer:
            steps.append((layer, []))
        steps[-1][1].append(e)
    return plan


def fixture_spec(trace: Trace, hidden: int, ffn: int) -> fixtures.Spec:
    """A contiguous single-shard container spec with the trace's shape."""
    return fixtures.load_spec({
        "name": f"split-path-{trace.name}", "seed": 17,
        "layers": trace.n_layers, "experts": trace.n_experts,
        "top_k": trace.top_k, "expert_template": TEMPLATE,
        "expert_tensors": [
            {"name": PARTS[0], "dtype": "BF16", "shape": [ffn, hidden]},
            {"name": PARTS[1], "dtype": "BF16", "shape": [ffn, hidden]},
            {"name": PARTS[2], "dtype": "BF16", "shape": [hidden, ffn]},
        ],
        "layout": "contiguous", "shards": 1})


def open_cache(container: Container, trace: Trace, *, slots: int,
               policy: str, io_threads: int, split: int) -> ExpertCache:
    """A cache of the trace's experts over the fixture container."""
    return ExpertCache(container, n_slots=slots, policy=policy,
                       top_k=trace.top_k, layers=range(trace.n_layers),
                       n_experts=trace.n_experts, expert_template=TEMPLATE,
                       tensors=PARTS, io_threads=io_threads, batch_threads=1,
                       split_min_misses=split)


def matmul_model(size: int) -> Callable[[Expert], None]:
    """Compute per expert: touch a byte per page, then a size x size float32 matmul."""
    rng = np.random.default_rng(17)
    a = rng.standard_normal((size, size), np.float32)
    b = rng.standard_normal((size, size), np.float32)
    out = np.empty((size, size), np.float32)

    def consume(x: Expert) -> None:
        int(x.data[::4096].sum())
        np.matmul(a, b, out=out)
    return consume


def spin_model(seconds: float) -> Callable[[Expert], None]:
    """Compute per expert: touch a byte per page, then busy-wait ``seconds``."""
    def consume(x: Expert) -> None:
        int(x.data[::4096].sum())
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    return consume


@dataclass
class Run:
    """One arm's pass over the plan: its counters and wall seconds per token."""

    misses: int
    hits: int
    page_cache_loads: int
    device_loads: int
    unknown_loads: int
    s_per_token: float


def drive(cache: ExpertCache, tokens: list[Token],
          consume: Callable[[Expert], None], *, streamed: bool) -> float:
    """Drive tokens through the cache (streams or plain gets); wall seconds."""
    t0 = time.perf_counter()
    for steps in tokens:
        for layer, experts in steps:
            keys = [(layer, e) for e in experts]
            held = []
            if streamed:
                for x in cache.stream(keys):
                    consume(x)
                    held.append(x)
            else:
                for k in keys:
                    x = cache.get(*k)
                    consume(x)
                    held.append(x)
            for x in held:
                x.release()
    return time.perf_counter() - t0


def finish(cache: ExpertCache, seconds: float, n_tokens: int) -> Run:
    """Check and close the cache; its counters and seconds per token."""
    cache.check()
    s = cache.stats()
    cache.close()
    return Run(int(s["misses"]), int(s["hits"]), int(s["page_cache_loads"]),
               int(s["device_loads"]), int(s["unknown_loads"]),
               seconds / max(n_tokens, 1))


def misses_per_step(cache: ExpertCache, plan: list[Token]) -> list[int]:
    """Each step's misses in a plain get loop (untimed); the cache is closed."""
    out = []
    for steps in plan:
        for layer, experts in steps:
            before = cache.stats()["misses"]
            held = [cache.get(layer, e) for e in experts]
            for x in held:
                x.release()
            out.append(int(cache.stats()["misses"] - before))
    cache.close()
    return out


def what_if(container: Container, trace: Trace, plan: list[Token],
            consume: Callable[[Expert], None], *, slots: int, policy: str = "lru",
            io_threads: int = 2, rounds: int = 1, chunk: int = 5) -> dict[str, Run]:
    """Per arm ("get", "T=1".."T=top-k") its counters and best time; misses checked.

    In a round every arm has its own cache, and the arms take turns every
    ``chunk`` tokens (the order rotating per chunk and per round), so a
    burst of other work on the machine falls on all of them alike, and no
    arm is always the first to run the first chunk (which costs more:
    measured on O_DIRECT).  Every round does the same work
    (the same misses at the same points), so an arm's time is the sum over
    chunks of its fastest round at that chunk.  Raises AssertionError
    naming the arms whose misses or hits differ from the get loop's, or
    from their own in another round.
    """
    arms = ["get"] + [f"T={t}" for t in range(1, trace.top_k + 1)]
    starts = range(0, len(plan), chunk)
    fastest = {arm: [float("inf")] * len(starts) for arm in arms}
    best: dict[str, Run] = {}
    for rnd in range(rounds):
        caches = {arm: open_cache(container, trace, slots=slots, policy=policy,
                                  io_threads=io_threads,
                                  split=int(arm[2:]) if arm != "get" else 1)
                  for arm in arms}
        for i, start in enumerate(starts):
            part = plan[start:start + chunk]
            turn = (i + rnd) % len(arms)  # who goes first moves every round too
            for arm in arms[turn:] + arms[:turn]:
                s = drive(caches[arm], part, consume, streamed=arm != "get")
                fastest[arm][i] = min(fastest[arm][i], s)
        for arm in arms:
            run = finish(caches[arm], sum(fastest[arm]), len(plan))
            if arm in best and ((run.misses, run.hits)
                                != (best[arm].misses, best[arm].hits)):
                raise AssertionError(
                    f"{arm}: misses/hits {run.misses}/{run.hits} in one round, "
                    f"{best[arm].misses}/{best[arm].hits} in another")
            best[arm] = run
    base = best["get"]
    differ = [f"{a}: {r.misses} misses, {r.hits} hits" for a, r in best.items()
              if (r.misses, r.hits) != (base.misses, base.hits)]
    if differ:  # not an assert: the check stays under python -O
        raise AssertionError(f"misses differ from the get loop's {base.misses} "
                             f"misses, {base.hits} hits: " + "; ".join(differ))
    return best


def _positive(name: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = 0
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be a positive integer, "
                                             f"got {text!r}")
        return v
    return parse


def main(argv: list[str] | None = None) -> None:
    """Run the what-if and print one row per arm."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default="olmoe_299.jsonl",
                    help="a routing trace: a path, or a file of fixtures/traces")
    ap.add_argument("--tokens", type=_positive("--tokens"), default=100)
    ap.add_argument("--slots", type=_positive("--slots"), default=256)
    ap.add_argument("--policy", default="lru", choices=TICK_POLICIES)
    ap.add_argument("--compute", default="matmul", choices=("matmul", "spin"))
    ap.add_argument("--size", type=_positive("--size"), default=96,
                    help="matmul side (float32 size x size @ size x size)")
    ap.add_argument("--spin-us", type=_positive("--spin-us"), default=50,
                    help="busy loop per expert, microseconds (--compute spin)")
    ap.add_argument("--hidden", type=_positive("--hidden"), default=256)
    ap.add_argument("--ffn", type=_positive("--ffn"), default=128)
    ap.add_argument("--io-threads", type=_positive("--io-threads"), default=2)
    ap.add_argument("--rounds", type=_positive("--rounds"), default=3)
    ap.add_argument("--chunk", type=_positive("--chunk"), default=5,
                    help="tokens each arm runs before the next arm's turn")
    ap.add_argument("--direct", action="store_true",
                    help="open the container with O_DIRECT: misses read the device")
    ns = ap.parse_args(argv)
    path = Path(ns.trace)
    if not path.is_file():
        path = TRACES / ns.trace
    if not path.is_file():
        ap.error(f"--trace: no file {ns.trace!r} (nor {path})")
    trace = load_trace(path)
    plan = plan_of(trace, ns.tokens)
    consume = (matmul_model(ns.size) if ns.compute == "matmul"
               else spin_model(ns.spin_us * 1e-6))
    model = (f"matmul {ns.size}x{ns.size} float32" if ns.compute == "matmul"
             else f"busy loop {ns.spin_us} us")
    tmp = Path(tempfile.mkdtemp(prefix="xc-split-", dir=os.environ.get("TMPDIR")))
    try:
        spec = fixture_spec(trace, ns.hidden, ns.ffn)
        layout = fixtures.generate(spec, tmp / "model")
        for f in layout.files:  # warm: every miss is a page-cache load
            with open(tmp / "model" / f.name, "rb") as fh:
                while fh.read(1 << 24):
                    pass
        cont = Container(str(tmp / "model"), direct=ns.direct)
        if ns.direct and not cont.direct_active:
            print(f"--direct: O_DIRECT is not available here ({cont.direct_note})")
            cont.close()
            raise SystemExit(2)
        accesses = sum(len(e) for steps in plan for _, e in steps)
        print(f"trace {trace.name}: {len(plan)} tokens, {accesses} accesses, "
              f"{trace.n_layers} layers x {trace.n_experts} experts, "
              f"top-{trace.top_k}; experts {spec.expert_nbytes // 1024} KiB; "
              f"{ns.slots} slots, {ns.policy}, io_threads {ns.io_threads}; "
              f"compute {model} per expert; arms in turns of {ns.chunk} tokens, "
              f"fastest of {ns.rounds} rounds per chunk")
        # time of the compute model alone, per token, for scale
        probe = open_cache(cont, trace, slots=ns.slots, policy=ns.policy,
                           io_threads=0, split=1)
        x = probe.get(plan[0][0][0], plan[0][0][1][0])
        batches = []
        for _ in range(20):
            t0 = time.perf_counter()
            for _ in range(10):
                consume(x)
            batches.append((time.perf_counter() - t0) / 10)
        compute_s = min(batches) * accesses / len(plan)
        x.release()
        probe.close()
        step_misses = misses_per_step(
            open_cache(cont, trace, slots=ns.slots, policy=ns.policy,
                       io_threads=0, split=1), plan)
        best = what_if(cont, trace, plan, consume, slots=ns.slots,
                       policy=ns.policy, io_threads=ns.io_threads, rounds=ns.rounds,
                       chunk=ns.chunk)
        base, top = best["get"], best[f"T={trace.top_k}"]
        src = best["T=1"]
        origin = ("the device (O_DIRECT)" if ns.direct
                  else "the page cache (file read once before)")
        print(f"misses from {origin}: page_cache_loads "
              f"{src.page_cache_loads}, device_loads {src.device_loads}, "
              f"unknown {src.unknown_loads}; compute alone "
              f"{compute_s * 1e3:.2f} ms/token")
        print(f"{'arm':5s} {'misses':>7s} {'hits':>7s} {'split steps':>12s} "
              f"{'ms/token':>9s} {'/ get':>7s} {'/ T=' + str(trace.top_k):>7s}")
        for arm, r in best.items():
            split = (sum(m >= int(arm[2:]) for m in step_misses)
                     if arm != "get" else 0)
            print(f"{arm:5s} {r.misses:7d} {r.hits:7d} "
                  f"{split:5d} of {len(step_misses):4d} "
                  f"{r.s_per_token * 1e3:9.2f} {r.s_per_token / base.s_per_token:7.3f} "
                  f"{r.s_per_token / top.s_per_token:7.3f}")
        print(f"check: misses identical at every T and in the get loop: "
              f"{base.misses} (hits {base.hits}) -- ok")
        cont.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
