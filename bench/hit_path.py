"""ns per get+release hit: from C, from Python, beside an empty cffi call.

Builds bench/hit_path.c with the engine sources, runs it on a k3-mini made
by fixtures, then times the same hit from Python through ExpertCache.get
and through the raw bindings (xc_ref get/release, and the integer handles
xc_cache_hold/unhold the Python API uses), beside two floors: one empty cffi
call (xc_policy_count, no arguments) and two one-argument calls
(xc_cache_n_slots twice), since a get+release is two calls, and a third:
the smallest object API over the same two C calls (a method that calls
xc_cache_hold and returns a two-field slotted object whose release method
calls xc_cache_unhold), which is what ExpertCache.get().release() costs at
best in CPython.  Best of 5 rounds each.  Last line: the ratios against the
one-call floor.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xcache import fixtures  # noqa: E402
from xcache.engine import Container, ExpertCache, _lib  # noqa: E402
from xcache.engine._build import SEAM_SOURCES  # noqa: E402


def best_ns(stmt, n, **names):
    return min(timeit.repeat(stmt, number=n, repeat=5, globals=names)) / n * 1e9


class _MinExpert:
    """The smallest held reference: the cache and the handle."""

    __slots__ = ("c", "h")

    def __init__(self, c: _MinCache, h: int) -> None:
        self.c = c
        self.h = h

    def release(self) -> None:
        c = self.c
        if c.unhold(c.ptr, self.h):
            raise RuntimeError("unhold failed")


class _MinCache:
    """The smallest object API over xc_cache_hold / xc_cache_unhold."""

    def __init__(self, lib, ptr) -> None:
        self.ptr, self.hold, self.unhold = ptr, lib.xc_cache_hold, lib.xc_cache_unhold

    def get(self, layer: int, expert: int) -> _MinExpert:
        h = self.hold(self.ptr, layer, expert)
        if h < 0:
            raise RuntimeError("hold failed")
        return _MinExpert(self, h)


def main():
    tmp = Path(tempfile.mkdtemp())
    fixtures.generate("k3-mini", tmp / "k3")
    shard = tmp / "k3" / "model-00001-of-00001.safetensors"
    exe = tmp / "hit_path"
    csrc = ROOT / "engine" / "csrc"
    subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-pthread",
                    "-I", str(csrc), str(ROOT / "bench" / "hit_path.c"),
                    *(str(p) for p in sorted(csrc.glob("*.c"))
                      if p.name not in SEAM_SOURCES), "-o", str(exe)],
                   check=True)
    c_ns = float(subprocess.run([str(exe), str(shard), "2000000"], check=True,
                                capture_output=True, text=True).stdout)

    k3 = fixtures.preset("k3-mini")
    cache = ExpertCache(Container(str(shard)), n_slots=8, top_k=k3.top_k,
                        **k3.cache_layout())
    cache.get(0, 3).release()
    lib, ffi = _lib.lib(), _lib.ffi()
    ptr, ref = cache._ptr, ffi.new("xc_ref *")
    n = 200000
    floor = best_ns("f()", n, f=lib.xc_policy_count)
    floor2 = best_ns("f(p); f(p)", n, f=lib.xc_cache_n_slots, p=ptr)
    raw = best_ns("g(p, 0, 3, r); rel(p, r)", n, g=lib.xc_cache_get,
                  rel=lib.xc_cache_release, p=ptr, r=ref)
    hold = best_ns("u(p, h(p, 0, 3))", n, h=lib.xc_cache_hold,
                   u=lib.xc_cache_unhold, p=ptr)
    smallest = best_ns("c.get(0, 3).release()", n, c=_MinCache(lib, ptr))
    api = best_ns("c.get(0, 3).release()", n, c=cache)
    cache.close()
    shutil.rmtree(tmp)
    print(f"C get+release hit:                {c_ns:8.1f} ns (goal < 100)")
    print(f"empty cffi call (floor):          {floor:8.1f} ns")
    print(f"two 1-arg cffi calls (floor x2):  {floor2:8.1f} ns "
          f"({floor2 / floor:.2f}x floor)")
    print(f"Python raw xc_ref get+release:    {raw:8.1f} ns")
    print(f"Python raw hold+unhold (ints):    {hold:8.1f} ns")
    print(f"smallest object API, same calls:  {smallest:8.1f} ns")
    print(f"Python ExpertCache.get().release: {api:8.1f} ns")
    print(f"ratio: C {c_ns:.1f} ns; Python raw {raw / floor:.2f}x floor, "
          f"hold+unhold {hold / floor:.2f}x, smallest object API "
          f"{smallest / floor:.2f}x, ExpertCache {api / floor:.2f}x floor "
          f"(goal <= 3x), {api / smallest:.2f}x the smallest object API")


if __name__ == "__main__":
    main()
