"""The cross-check breaks (xc_testhook_break_cross) name their test and undo every poke.

The gate applies each break (gate/scenarios/check-cross-*.json); these
tests pin what the hook itself promises: the cache is exactly as before
after any break, and a break the cache lacks the structure for is refused
with nothing changed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import K3_LAYOUT
from xcache import engine
from xcache.engine import _lib


def open_cache(k3_shard: Path, policy: str, keys: list[int]) -> engine.ExpertCache:
    """A cache of 8 slots, io_threads 0, with layer 0's ``keys`` requested in order."""
    cont = engine.Container(str(k3_shard))
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                               policy=policy, io_threads=0)
    for e in keys:
        cache.get(0, e).release()
    return cache


def cross(cache: engine.ExpertCache, what: str, a: int, b: int) -> tuple[int, str]:
    """Run one cross break: (check()'s INV number, the recorded message)."""
    lib = _lib.lib()
    rc = int(lib.xc_testhook_break_cross(cache._ptr, getattr(lib, "XC_TH_" + what),
                                         a, b))
    return rc, _lib.last_error()[4]


def slot_of(cache: engine.ExpertCache, expert: int) -> int:
    """The slot holding (0, expert)."""
    return [s["key"] for s in cache.slots()].index((0, expert))


@pytest.mark.parametrize("variant", range(18))
def test_every_heap_break_is_undone(k3_shard, variant):
    """After each heap-bucket break the slots, counters and check() are as before."""
    cache = open_cache(k3_shard, "hotness", [4, 3, 1, 0, 2, 2])
    before = (cache.slots(), cache.stats())
    rc, _ = cross(cache, "HEAPS", slot_of(cache, 0), variant)
    # bucket 0 is the first and a chain: no bucket before it, no root heap
    assert rc == (-7 if variant in (1, 3) else 8)
    assert (cache.slots(), cache.stats()) == before
    cache.check()
    with cache.get(0, 4) as ex:  # the policy still serves hits
        assert ex.data.nbytes == 1632


def test_a_chain_broken_at_its_tail_names_the_chain_not_the_heap(k3_shard):
    """The tail's parent link cut: the chain walk names it, not the heap walk."""
    cache = open_cache(k3_shard, "hotness", [4, 3, 1, 0, 2, 2])
    assert cross(cache, "HEAPS", slot_of(cache, 0), 8) == (
        8, "INV-POLICY: [heaps.chain_up] hotness: bucket 0's chain is broken "
           "at key 0")


def test_a_stream_item_break_names_the_item(k3_shard):
    """A hit item made a pending read of another's slot: INV-INFLIGHT names item 0."""
    cache = open_cache(k3_shard, "lru", [0])
    st = cache.stream([(0, 0), (0, 5)])
    a = slot_of(cache, 5)
    assert cross(cache, "STREAM_ITEM", a, 3) == (
        4, f"INV-INFLIGHT: [stream.key] a stream's item 0 (state 2) names slot "
           f"{a}, not in flight for it")
    cache.check()
    got = []
    for ex in st:
        got.append(ex.key)
        ex.release()
    assert got == [(0, 0), (0, 5)]


def test_a_break_the_cache_lacks_the_structure_for_is_refused(k3_shard):
    """Heap breaks on lru, a stream break with no stream: misuse, nothing changed."""
    cache = open_cache(k3_shard, "lru", [0, 1])
    before = cache.slots()
    assert cross(cache, "HEAPS", 0, 0) == (
        -7, "test hook: bad corruption 108 (a 0, b 0) for this cache")
    assert cross(cache, "STREAM_OWNER", 0, 0)[0] == -7
    assert cross(cache, "QUEUE_ENTRY", 0, 3)[0] == -7
    assert cache.slots() == before
    cache.check()
