"""The cache on k3-mini (8 slots, top-k 4): exact bytes and exact counters.

Every deterministic step is followed by ``check()``.  Golden values come
from docs/CACHE.md (the worked example) or are derived in the comments.
"""

from __future__ import annotations

import os

import pytest

from tests.helpers import (
    DATA_START,
    FILE_BYTES,
    K3_LAYOUT,
    SHAPES,
    expert_bytes,
    open_container,
    tensor_bytes,
    write_reversed_k3_mini,
)
from xcache import engine
from xcache.engine import AllPinnedError, BudgetError, MisuseError, NotFoundError

STRIDE = 12288  # round_up(1632 + 8192, 4096), docs/CACHE.md


def make(path, **kw):
    kw.setdefault("n_slots", 8)
    kw.setdefault("top_k", 4)
    c = engine.ExpertCache(open_container(path), **{**K3_LAYOUT, **kw})
    c.check()
    return c


def get_check(c, path, e):
    """get + byte comparison with the file + release, then check()."""
    with c.get(0, e) as x:
        ok = bytes(x.data) == expert_bytes(path, e)
    c.check()
    return ok


def counters(c, *names):
    s = c.stats()
    return {n: s[n] for n in names}


def test_geometry(k3_shard):
    """Stride and expert size are docs/CACHE.md's k3-mini figures."""
    c = make(k3_shard)
    assert (c.stride, c.expert_bytes, c.n_slots) == (STRIDE, 1632, 8)
    assert all(c.contiguous(0, e) for e in range(24))
    assert [s["state"] for s in c.slots()] == ["empty"] * 8


def test_views_have_dtype_shape_and_bytes(k3_shard):
    """Each tensor view is read-only, of its dtype and shape, and the file's bytes."""
    c = make(k3_shard)
    with c.get(0, 5) as x:
        for name, arr in x.tensors.items():
            assert arr.dtype.name == "uint8"
            assert list(arr.shape) == SHAPES[name.split(".")[1]]
            assert arr.tobytes() == tensor_bytes(5, name)
            assert not arr.flags.writeable
    c.check()


def test_serial_three_passes_lru(k3_shard):
    """72 gets over 24 experts in 8 slots: every one a miss, 64 evictions."""
    c = make(k3_shard)
    wrong = sum(not get_check(c, k3_shard, e) for _ in range(3) for e in range(24))
    assert wrong == 0
    assert counters(c, "requests", "hits", "misses", "evictions",
                    "payload_bytes", "io_bytes") == {
        "requests": 72, "hits": 0, "misses": 72, "evictions": 64,
        "payload_bytes": 72 * 1632, "io_bytes": 72 * 1632}
    assert c.resident() == {(0, e) for e in range(16, 24)}


def test_batches_then_gets(k3_shard):
    """6 batches of 4 by getmany, each then got: all byte-exact, all hits."""
    c = make(k3_shard)
    c.reset_stats()
    wrong = 0
    for b in range(6):
        keys = [(0, 4 * b + i) for i in range(4)]
        assert c.getmany(keys) == 4
        c.check()
        wrong += sum(not get_check(c, k3_shard, e) for _, e in keys)
    s = c.stats()
    assert wrong == 0
    assert (s["requests"], s["hits"], s["prefetch_loads"]) == (24, 24, 24)
    assert s["prefetch_loads"] <= s["hits"]
    assert s["prefetch_first_uses"] == 24 and s["adjusted_hits_exact"] == 0


def test_mixed_batch_and_serial(k3_shard):
    """Batches interleaved with serial gets of other experts: 0 wrong."""
    c = make(k3_shard, batch_threads=3)
    wrong = 0
    for b in range(4):
        assert c.getmany([(0, 6 * b + i) for i in range(3)]) == 3
        c.check()
        wrong += sum(not get_check(c, k3_shard, 6 * b + i) for i in range(6))
    s = c.stats()
    assert wrong == 0 and s["requests"] == 24
    # three of each six were prefetched (hits), three missed
    assert (s["hits"], s["misses"], s["prefetch_loads"]) == (12, 12, 12)


def test_worked_example(k3_shard):
    """docs/CACHE.md's worked example, counter by counter."""
    c = make(k3_shard)
    keys = [(0, e) for e in range(4)]
    assert c.getmany(keys) == 4
    c.check()
    s = c.stats()
    assert (s["requests"], s["prefetch_loads"], s["payload_bytes"]) == (0, 4, 6528)
    assert [(i, sl["key"]) for i, sl in enumerate(c.slots()) if
            sl["state"] == "ready"] == [(i, (0, i)) for i in range(4)]
    for e in range(4):
        assert get_check(c, k3_shard, e)
    s = c.stats()
    assert (s["hits"], s["adjusted_hits_aggregate"], s["adjusted_hits_exact"]) \
        == (4, 0, 0)
    for e in range(4):
        assert get_check(c, k3_shard, e)
    s = c.stats()
    assert (s["hits"], s["adjusted_hits_aggregate"], s["adjusted_hits_exact"]) \
        == (8, 4, 4)
    assert s["adjusted_hit_rate_exact"] == 0.5
    c.reset_stats()
    c.check()
    for e in range(4):
        assert get_check(c, k3_shard, e)
    s = c.stats()
    assert (s["hits"], s["prefetch_loads"], s["payload_bytes"],
            s["adjusted_hits_exact"]) == (4, 0, 0, 4)


def test_unconsumed_schedule(k3_shard):
    """From cold: getmany([0..3]) then get(0) four times (docs/CACHE.md)."""
    c = make(k3_shard)
    assert c.getmany([(0, e) for e in range(4)]) == 4
    for _ in range(4):
        assert get_check(c, k3_shard, 0)
    s = c.stats()
    assert (s["hits"], s["adjusted_hits_aggregate"], s["adjusted_hits_exact"],
            s["prefetch_unused_resident"]) == (4, 0, 3, 3)
    # reset_stats clears the marks with the counters: two windows never mix
    c.reset_stats()
    assert c.stats()["prefetch_unused_resident"] == 0
    assert not any(sl["unused_mark"] for sl in c.slots())
    c.check()


def test_getmany_skips_duplicates_and_residents(k3_shard):
    """Duplicates and residents are skipped; residents cannot be evicted by it."""
    c = make(k3_shard)
    for e in range(8):
        assert get_check(c, k3_shard, e)
    # LRU order is 0..7; a batch naming 0 protects it and touches it, so the
    # four victims are 1, 2, 3, 4 (not 0).
    assert c.getmany([(0, 0), (0, 8), (0, 8), (0, 9), (0, 10), (0, 11)]) == 4
    c.check()
    assert c.resident() == {(0, e) for e in (0, 5, 6, 7, 8, 9, 10, 11)}
    s = c.stats()
    assert (s["evictions"], s["prefetch_loads"], s["requests"]) == (4, 4, 8)
    assert all(sl["holds"] == 0 for sl in c.slots())


def test_held_and_pinned_are_never_evicted(k3_shard):
    """A held expert and a pinned expert survive a full sweep, bytes intact."""
    c = make(k3_shard)
    held = c.get(0, 0)
    with c.get(0, 1):
        c.pin(0, 1)
    c.check()
    for e in range(2, 24):
        assert get_check(c, k3_shard, e)
        assert c.getmany([(0, (e + 7) % 22 + 2)]) in (0, 1)
        c.check()
    assert {(0, 0), (0, 1)} <= c.resident()
    assert bytes(held.data) == expert_bytes(k3_shard, 0)
    held.release()
    c.unpin(0, 1)
    c.check()


def test_all_protected_changes_nothing(k3_shard):
    """Every slot held: get is AllPinnedError and no counter or slot moves."""
    c = make(k3_shard)
    refs = [c.get(0, e) for e in range(7)]
    with c.get(0, 7):
        c.pin(0, 7)
    before_stats, before_slots = c.stats(), c.slots()
    with pytest.raises(AllPinnedError) as ei:
        c.get(0, 8)
    assert ei.value.layer == 0 and ei.value.expert == 8
    assert c.getmany([(0, 8), (0, 9)]) == 0
    assert c.stats() == before_stats and c.slots() == before_slots
    c.check()
    for r in refs:
        r.release()
    c.unpin(0, 7)
    assert get_check(c, k3_shard, 8)


def test_pins_nest_and_misuse(k3_shard):
    """Pins nest; unpinning too often, or pinning a non-resident, fails cleanly."""
    c = make(k3_shard)
    assert get_check(c, k3_shard, 3)
    c.pin(0, 3)
    c.pin(0, 3)
    c.unpin(0, 3)
    assert [s["pins"] for s in c.slots() if s["key"] == (0, 3)] == [1]
    c.unpin(0, 3)
    with pytest.raises(MisuseError):
        c.unpin(0, 3)
    with pytest.raises(NotFoundError):
        c.pin(0, 4)
    c.check()
    assert c.stats()["requests"] == 1  # pin/unpin are not requests


def test_unpin_of_non_resident_key_is_not_found(k3_shard):
    """unpin of a non-READY key is NOT_FOUND; of a READY unpinned key, MISUSE."""
    cache = make(k3_shard, n_slots=5)
    with pytest.raises(NotFoundError):
        cache.unpin(0, 0)
    with cache.get(0, 0):
        with pytest.raises(MisuseError):  # READY without a pin: misuse
            cache.unpin(0, 0)
    cache.check()


@pytest.mark.parametrize("key", [(1, 0), (0, 24), (0, -1), (-1, 0)])
def test_keys_outside_the_cache_are_misuse(k3_shard, key):
    """Bad layer or expert: MisuseError, nothing changed, nothing aliased."""
    c = make(k3_shard)
    before = c.stats()
    for call in (c.get, c.pin, c.unpin):
        with pytest.raises(MisuseError):
            call(*key)
    with pytest.raises(MisuseError):
        c.getmany([(0, 0), key])  # the valid first key is not loaded either
    assert c.stats() == before and c.resident() == set()
    c.check()


def test_double_release_is_misuse(k3_shard):
    """Releasing one reference twice is MisuseError; the hold count is right."""
    c = make(k3_shard)
    x = c.get(0, 2)
    x.release()
    with pytest.raises(MisuseError):
        x.release()
    with pytest.raises(MisuseError):
        x.data  # noqa: B018 - views of a released expert are refused
    assert all(s["holds"] == 0 for s in c.slots())
    c.check()


def test_second_release_of_an_expert_is_refused_while_another_hold_exists(k3_shard):
    """An Expert's second release is misuse even when its slot has another hold."""
    cache = make(k3_shard, n_slots=5)
    first, second = cache.get(0, 3), cache.get(0, 3)
    first.release()
    with pytest.raises(MisuseError):
        first.release()
    # the other holder's hold is intact
    assert [s["holds"] for s in cache.slots() if s["key"] == (0, 3)] == [1]
    second.release()
    cache.check()


def test_bad_policy_is_misuse(k3_shard):
    """Unknown policy or parameter: MisuseError listing the valid ones."""
    with pytest.raises(MisuseError, match="lru, fifo, lfu"):
        make(k3_shard, policy="clock")
    with pytest.raises(MisuseError, match="valid parameters: sample, seed"):
        make(k3_shard, policy="lfru:samples=3")
    with pytest.raises(MisuseError):
        make(k3_shard, policy="hotness:period=0")


def test_budget_too_small_says_what_works(k3_shard):
    """Fewer than top_k + 1 slots: BudgetError naming slots and bytes that work."""
    with pytest.raises(BudgetError) as ei:
        make(k3_shard, n_slots=4)
    assert "5 slots" in str(ei.value) and str(5 * STRIDE) in str(ei.value)
    with pytest.raises(BudgetError) as ei:
        make(k3_shard, n_slots=None, budget_bytes=5 * STRIDE - 1)
    msg = str(ei.value)
    assert "holds 4 slots" in msg and f"works is {5 * STRIDE}" in msg
    c = make(k3_shard, n_slots=None, budget_bytes=8 * STRIDE + 100)
    assert c.n_slots == 8


def test_chunked_reads(k3_shard):
    """chunk_bytes=4096 serves the same bytes and asks io for the same total."""
    c = make(k3_shard, chunk_bytes=4096)
    assert all(get_check(c, k3_shard, e) for e in range(24))
    assert c.stats()["io_bytes"] == 24 * 1632  # no widening without O_DIRECT
    # docs/CACHE.md: 8 of the 24 experts cross a multiple of 4096
    spans = [(DATA_START + 1632 * e, DATA_START + 1632 * (e + 1) - 1)
             for e in range(24)]
    assert sum(a // 4096 != b // 4096 for a, b in spans) == 8


def test_per_tensor_reads(tmp_path):
    """Tensors stored out of list order: one read each, packed in list order."""
    path = write_reversed_k3_mini(tmp_path)
    c = make(path, chunk_bytes=4096)
    assert not any(c.contiguous(0, e) for e in range(24))
    for e in (0, 7, 23):
        with c.get(0, e) as x:
            for name, arr in x.tensors.items():
                assert arr.tobytes() == tensor_bytes(e, name)
        c.check()
    assert c.stats()["io_bytes"] == 3 * 1632


def test_short_read_empties_the_slot(k3_copy):
    """A file cut short under the cache: ShortReadError naming the key, slot EMPTY."""
    c = make(k3_copy)
    assert get_check(c, k3_copy, 0)
    os.truncate(k3_copy, FILE_BYTES - 100)
    with pytest.raises(engine.ShortReadError) as ei:
        c.get(0, 23)
    assert (ei.value.layer, ei.value.expert) == (0, 23)
    assert "layer 0 expert 23" in str(ei.value)
    c.check()
    s = c.stats()
    assert (s["requests"], s["misses"], s["load_failures"], s["short_reads"],
            s["payload_bytes"]) == (2, 2, 1, 1, 1632)
    assert c.resident() == {(0, 0)}
    assert c.getmany([(0, 22), (0, 23)]) == 1  # 22 is whole, 23 is cut
    c.check()
    s = c.stats()
    assert (s["load_failures"], s["prefetch_loads"]) == (2, 1)
    assert get_check(c, k3_copy, 0)  # earlier residents intact
