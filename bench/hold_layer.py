"""ns per expert of an all-hit hold_layer of top-8, beside an empty cffi call.

Opens k3-mini (made by fixtures) with 12 slots, makes experts 0-7 of layer
0 resident, then times, in the same run and with the arms alternated
round by round (best of 150 short rounds each, so that the best falls in
a quiet moment of a shared machine):

- the floor: one empty cffi call (xc_policy_count, no arguments);
- the raw C pair: xc_cache_hold_layer + xc_cache_unhold_many on buffers
  made once (what the two C calls cost from Python);
- ``with cache.hold_layer(0, experts) as views:`` -- the API, views included;
- eight ``cache.get(0, e).release()`` -- the per-expert API it replaces;
- and the steps between the raw pair and the API, each adding one thing:
  the experts given as a Python list (cffi converts it per call), then the
  per-hold view mappings (each tensor's array is made when first read, and
  keeps the hold; not timed here), then hold and release through the
  API's objects without the ``with`` statement.

Each arm is timed by wall time and by the thread's CPU time (which leaves
out the time other work on a shared machine held the core).  Last line of
each: each per expert, in multiples of the floor (goal for the API:
<= 3x per expert, docs/BENCHMARKS.md).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # idle BLAS threads spin

from xcache import fixtures  # noqa: E402
from xcache.engine import Container, ExpertCache, _lib  # noqa: E402
from xcache.engine.hold import HeldTensors, _Grip, _Source  # noqa: E402

TOP_K = 8
ROUNDS = 150


def with_hold(cache: ExpertCache, experts: list[int]) -> None:
    """One all-hit hold of the layer's experts, views yielded, then released."""
    with cache.hold_layer(0, experts) as views:
        views[0]


def gets(cache: ExpertCache, experts: list[int]) -> None:
    """The same experts by get().release(), one at a time."""
    for e in experts:
        cache.get(0, e).release()


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    fixtures.generate("k3-mini", tmp / "k3")
    shard = tmp / "k3" / "model-00001-of-00001.safetensors"
    k3 = fixtures.preset("k3-mini")
    cache = ExpertCache(Container(str(shard)), n_slots=12, top_k=TOP_K,
                        **k3.cache_layout())
    experts = list(range(TOP_K))
    with_hold(cache, experts)  # resident: every arm below is all hits
    lib, ffi = _lib.lib(), _lib.ffi()
    ptr = cache._ptr
    hs, offs = ffi.new("int64_t[]", TOP_K), ffi.new("uint64_t[]", TOP_K)
    ex = ffi.new("int32_t[]", experts)

    hv = cache._hold_views
    bufs = hv.buffers(TOP_K)

    def raw() -> None:
        lib.xc_cache_hold_layer(ptr, 0, ex, TOP_K, hs, offs)
        lib.xc_cache_unhold_many(ptr, hs, TOP_K)

    def raw_list() -> None:
        lib.xc_cache_hold_layer(ptr, 0, experts, TOP_K, bufs[0], bufs[1])
        lib.xc_cache_unhold_many(ptr, bufs[0], TOP_K)

    def raw_views() -> None:
        lib.xc_cache_hold_layer(ptr, 0, experts, TOP_K, bufs[0], bufs[1])
        grip = _Grip(hv, bufs, [], TOP_K)  # what a LayerHold's views hang on
        src = _Source(grip, hv.arena)
        [HeldTensors(src, o) for o in bufs[2].tolist()]
        lib.xc_cache_unhold_many(ptr, bufs[0], TOP_K)
        del grip._live  # given back just above

    arms = {
        "floor": (lib.xc_policy_count, 1, 8000),
        "raw": (raw, TOP_K, 1000),
        "raw_list": (raw_list, TOP_K, 1000),
        "raw_views": (raw_views, TOP_K, 1000),
        "no_with": (lambda: cache.hold_layer(0, experts).release(), TOP_K, 1000),
        "hold_layer": (lambda: with_hold(cache, experts), TOP_K, 1000),
        "gets": (lambda: gets(cache, experts), TOP_K, 200),
    }
    best = {k: float("inf") for k in arms}
    cpu = {k: float("inf") for k in arms}
    for _ in range(ROUNDS):
        for name, (fn, per, n) in arms.items():
            t = timeit.timeit(fn, number=n) / n / per * 1e9
            best[name] = min(best[name], t)
            t = timeit.Timer(fn, timer=time.thread_time).timeit(n) / n / per * 1e9
            cpu[name] = min(cpu[name], t)
    st = cache.stats()
    cache.check()
    cache.close()
    shutil.rmtree(tmp)
    for label, fig in (("wall", best), ("thread CPU", cpu)):
        report(label, fig, st)


def report(label: str, best: dict[str, float], st: dict[str, float]) -> None:
    """Print one set of figures (wall or CPU time) and its ratios."""
    print(f"-- {label} time, best of {ROUNDS} rounds")
    f = best["floor"]
    print(f"empty cffi call (floor):            {f:8.1f} ns")
    print(f"raw hold_layer+unhold_many, top-{TOP_K}: {best['raw']:8.1f} ns "
          f"per expert")
    print(f"  + experts as a list:               {best['raw_list']:8.1f} ns "
          f"per expert")
    print(f"  + views of the hold:               {best['raw_views']:8.1f} ns "
          f"per expert")
    print(f"  hold_layer(...).release():         {best['no_with']:8.1f} ns "
          f"per expert")
    print(f"with cache.hold_layer(...), top-{TOP_K}: "
          f"{best['hold_layer']:8.1f} ns per expert")
    print(f"get().release() x {TOP_K}:               {best['gets']:8.1f} ns "
          f"per expert")
    print(f"(hits counted: {st['hits']:.0f}, misses {st['misses']:.0f})")
    print(f"ratio per expert vs floor: raw {best['raw'] / f:.2f}x, "
          f"hold_layer {best['hold_layer'] / f:.2f}x (goal <= 3x), "
          f"get().release() {best['gets'] / f:.2f}x")
    print("steps per expert vs floor: "
          f"list {(best['raw_list'] - best['raw']) / f:.2f}x, "
          f"views {(best['raw_views'] - best['raw_list']) / f:.2f}x, "
          f"objects {(best['no_with'] - best['raw_views']) / f:.2f}x, "
          f"with {(best['hold_layer'] - best['no_with']) / f:.2f}x")


if __name__ == "__main__":
    main()
