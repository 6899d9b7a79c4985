"""hold_layer: one layer's experts held in one C call, all or none (docs/CACHE.md).

k3-mini (one layer, 24 experts of 1,632 bytes, data at byte 20,608, expert
e at 20,608 + 1,632 e).  Every deterministic step ends with ``check()``.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.helpers import K3_LAYOUT, SHAPES, expert_bytes, tensor_bytes
from xcache import engine
from xcache.engine import AllPinnedError, EngineIOError, MisuseError
from xcache.engine.cache import TIMING_COUNTERS
from xcache.faults.io import Fault, IOFaults


def make(path, io=None, **kw):
    """A k3-mini cache of 8 slots, top-k 4, unless kw says otherwise."""
    kw.setdefault("n_slots", 8)
    kw.setdefault("top_k", 4)
    cont = engine.Container(str(path), io=io) if io else engine.Container(str(path))
    c = engine.ExpertCache(cont, **{**K3_LAYOUT, **kw})
    c.check()
    return c


def holds(c):
    """Holds per slot."""
    return [s["holds"] for s in c.slots()]


def counters(c, *names):
    """The named counters of this window."""
    s = c.stats()
    return {n: s[n] for n in names}


def payload(views):
    """An expert's payload re-assembled from its tensor views, in slot order."""
    return b"".join(v.tobytes() for v in views.values())


@pytest.fixture()
def faults():
    """A fresh I/O fault injector, closed after the test."""
    f = IOFaults()
    yield f
    f.close()


def test_views_are_the_files_bytes(k3_shard):
    """Each tensor view is read-only, of its dtype and shape, and the file's bytes."""
    c = make(k3_shard)
    experts = [3, 7, 11, 19]
    with c.hold_layer(0, experts) as views:
        assert len(views) == 4
        for e, v in zip(experts, views, strict=True):
            assert payload(v) == expert_bytes(k3_shard, e)
            for name, arr in v.items():
                assert arr.dtype.name == "uint8"
                assert list(arr.shape) == SHAPES[name.split(".")[1]]
                assert arr.tobytes() == tensor_bytes(e, name)
                assert not arr.flags.writeable
        assert sorted(holds(c)) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert holds(c) == [0] * 8
    c.check()


def test_counters_of_a_cold_then_a_warm_hold(k3_shard):
    """Cold: four misses; then two hits and one miss -- the counts of gets."""
    c = make(k3_shard)
    with c.hold_layer(0, [1, 2, 3, 4]):
        assert counters(c, "requests", "hits", "misses", "payload_bytes",
                        "io_bytes") == {
            "requests": 4, "hits": 0, "misses": 4, "payload_bytes": 4 * 1632,
            "io_bytes": 4 * 1632}
    c.check()
    with c.hold_layer(0, [4, 3, 9]):
        assert holds(c) == [0, 0, 1, 1, 1, 0, 0, 0]  # 9 took slot 4
    assert counters(c, "requests", "hits", "misses", "evictions") == {
        "requests": 7, "hits": 2, "misses": 5, "evictions": 0}
    assert c.resident() == {(0, e) for e in (1, 2, 3, 4, 9)}
    c.check()


def test_views_belong_to_their_hold(k3_shard):
    """A second hold of the same slots has its own views; the first's refuse reads."""
    c = make(k3_shard)
    with c.hold_layer(0, [5, 6]) as first:
        pass
    with c.hold_layer(0, [6, 5]) as second:
        assert second[0] is not first[1]
        assert payload(second[0]) == expert_bytes(k3_shard, 6)
        with pytest.raises(MisuseError, match="the hold of these views was"):
            first[0]["w1.weight_packed"]
    c.check()


def test_misses_read_in_parallel_hold_the_right_bytes(k3_shard):
    """Eight misses on two batch readers: every payload is its own expert's."""
    c = make(k3_shard, n_slots=12, top_k=8, batch_threads=2)
    for rnd in range(3):
        experts = [(rnd * 8 + i) % 24 for i in range(8)]
        with c.hold_layer(0, experts) as views:
            got = [payload(v) for v in views]
        assert got == [expert_bytes(k3_shard, e) for e in experts]
        c.check()
    assert counters(c, "requests", "misses", "load_failures") == {
        "requests": 24, "misses": 24, "load_failures": 0}


@pytest.mark.parametrize("policy", ["lru", "fifo", "lfu", "lfru", "hotness"])
def test_counts_and_slots_are_those_of_held_gets(k3_shard, policy):
    """Under every tick policy, hold_layer leaves what a run of held gets leaves."""
    rng = random.Random(7)
    a = make(k3_shard, policy=policy)
    b = make(k3_shard, policy=policy)
    for _ in range(60):
        experts = rng.sample(range(24), 4)
        with a.hold_layer(0, experts):
            pass
        held = [b.get(0, e) for e in experts]
        for x in held:
            x.release()
    sa, sb = a.stats(), b.stats()
    for k in TIMING_COUNTERS:
        sa.pop(k), sb.pop(k)
    assert sa == sb
    assert a.slots() == b.slots()
    a.check()
    b.check()


def test_a_failing_load_in_the_middle_leaves_nothing_held(k3_shard, faults):
    """An EIO on the second of three misses: raised, holds 0, residents intact."""
    c = make(k3_shard, io=faults, batch_threads=1)
    for e in (0, 1):
        c.get(0, e).release()
    faults.arm(Fault("eio", nth=2))  # reads in order: 5, 6, 7
    with pytest.raises(EngineIOError) as ei:
        c.hold_layer(0, [0, 5, 6, 7, 1])
    offset = 20608 + 1632 * 6
    assert str(ei.value) == (
        f"layer 0 expert 6: {k3_shard}: read of 1632 bytes at byte {offset} "
        f"failed after 0 bytes: Input/output error (errno 5)")
    assert (ei.value.layer, ei.value.expert) == (0, 6)
    assert holds(c) == [0] * 8
    assert c.resident() == {(0, 0), (0, 1), (0, 5), (0, 7)}
    assert counters(c, "requests", "hits", "misses", "load_failures",
                    "io_errors") == {
        "requests": 7, "hits": 2, "misses": 5, "load_failures": 1,
        "io_errors": 1}
    c.check()
    faults.disarm()
    with c.hold_layer(0, [0, 5, 6, 7]) as views:  # and it works again
        assert payload(views[2]) == expert_bytes(k3_shard, 6)
    c.check()
    c.close()
    c._container.close()


def test_a_failing_load_on_parallel_readers_leaves_nothing_held(k3_shard, faults):
    """Every read failing on two batch readers: the first in order is reported."""
    c = make(k3_shard, io=faults, batch_threads=2)
    c.get(0, 9).release()
    faults.arm(Fault("eio", nth=1, persistent=True))
    with pytest.raises(EngineIOError) as ei:
        c.hold_layer(0, [9, 2, 3, 4])
    assert ei.value.expert == 2
    assert holds(c) == [0] * 8
    assert c.resident() == {(0, 9)}
    assert counters(c, "load_failures", "io_errors") == {
        "load_failures": 3, "io_errors": 3}
    c.check()
    c.close()
    c._container.close()


def test_no_slot_gives_back_the_holds_taken(k3_shard):
    """All five slots held by gets: the hit is given back; the error names the key."""
    c = make(k3_shard, n_slots=5)
    held = [c.get(0, e) for e in range(5)]
    with pytest.raises(AllPinnedError) as ei:
        c.hold_layer(0, [0, 9])
    assert str(ei.value) == ("hold_layer: layer 0 expert 9: all 5 slots are "
                             "held, pinned or in flight")
    assert holds(c) == [1] * 5
    assert counters(c, "requests", "hits", "misses") == {
        "requests": 6, "hits": 1, "misses": 5}
    c.check()
    for x in held:
        x.release()
    c.check()


def test_an_exception_in_the_block_releases(k3_shard):
    """Leaving the block by an exception gives every hold back and re-raises it."""
    c = make(k3_shard)
    with pytest.raises(KeyError), c.hold_layer(0, [1, 2]):
        raise KeyError("router")
    assert holds(c) == [0] * 8
    c.check()


def test_no_experts_does_nothing(k3_shard):
    """An empty list holds nothing and counts nothing."""
    c = make(k3_shard)
    with c.hold_layer(0, []) as views:
        assert views == []
    assert c.stats()["requests"] == 0
    c.check()


def test_experts_may_be_a_numpy_row(k3_shard):
    """A router's top-k row (a numpy int64 array) is accepted as it is."""
    c = make(k3_shard)
    with c.hold_layer(0, np.array([4, 2], dtype=np.int64)) as views:
        assert payload(views[1]) == expert_bytes(k3_shard, 2)
    c.check()


@pytest.mark.parametrize("layer,experts,message", [
    (0, [1, 1], "hold_layer: layer 0 expert 1 is named twice"),
    (0, [1, 24], "(layer 0, expert 24) is not a key of this cache (1 layers "
                 "from 0 to 0, 24 experts each)"),
    (1, [1], "(layer 1, expert 1) is not a key of this cache (1 layers from "
             "0 to 0, 24 experts each)"),
    (0, [1, 2**40], "experts[1] must be from -2147483648 to 2147483647, got "
                    "1099511627776"),
    (2**31, [1], "layer must be from -2147483648 to 2147483647, got 2147483648"),
    (0, ["a"], "experts[0] must be an integer, got str 'a'"),
    (0, 5, "experts must be an iterable of integers, got int 5"),
    (0, np.zeros((2, 2), dtype=np.int64),
     "experts must be one-dimensional, got shape (2, 2)"),
    (0, list(range(9)), "hold_layer: 9 experts cannot be held at once in 8 "
                        "slots"),
])
def test_misuse_changes_nothing(k3_shard, layer, experts, message):
    """Each bad argument is a MisuseError with its own message; nothing changed."""
    c = make(k3_shard)
    with pytest.raises(MisuseError) as ei:
        c.hold_layer(layer, experts)
    assert str(ei.value) == message
    assert c.stats()["requests"] == 0
    assert holds(c) == [0] * 8
    c.check()


def test_release_twice_is_misuse(k3_shard):
    """The second release raises and gives back nothing more."""
    c = make(k3_shard)
    other = c.get(0, 1)
    h = c.hold_layer(0, [1, 2])
    h.release()
    with pytest.raises(MisuseError, match=r"layer 0 experts \[1, 2\] were released"):
        h.release()
    assert holds(c) == [1, 0, 0, 0, 0, 0, 0, 0]  # the get's hold is untouched
    assert h.released
    other.release()
    c.check()


def test_after_close_hold_and_release_are_misuse(k3_shard):
    """Once the cache is closed both calls raise; views stay readable."""
    c = make(k3_shard)
    h = c.hold_layer(0, [3])
    view = h.views[0]
    c.close()
    with pytest.raises(MisuseError, match="the cache is closed"):
        h.release()
    with pytest.raises(MisuseError, match="the cache is closed"):
        c.hold_layer(0, [3])
    assert payload(view) == expert_bytes(k3_shard, 3)


def test_unhold_many_twice_takes_no_other_holders_hold(k3_shard):
    """The same handles given back twice are refused while a get holds the
    same publish (the second unhold_many took that get's hold)."""
    from xcache.engine import _lib
    ffi, lib = _lib.ffi(), _lib.lib()
    c = make(k3_shard)
    hs, offs = ffi.new("int64_t[1]"), ffi.new("uint64_t[1]")
    assert lib.xc_cache_hold_layer(c._ptr, 0, [1], 1, hs, offs) == 0
    h = lib.xc_cache_hold(c._ptr, 0, 1)  # a hit: the same slot and publish
    assert holds(c)[0] == 2
    assert lib.xc_cache_unhold_many(c._ptr, hs, 1) == 0
    assert lib.xc_cache_unhold_many(c._ptr, hs, 1) == lib.XC_E_MISUSE
    assert holds(c)[0] == 1 and list(hs) == [-1]
    assert lib.xc_cache_unhold(c._ptr, h) == 0
    c.check()


def test_unhold_many_is_all_or_none(k3_shard):
    """A batch release with one stale handle gives nothing back (C boundary)."""
    from xcache.engine import _lib
    ffi, lib = _lib.ffi(), _lib.lib()
    c = make(k3_shard)
    hs, offs = ffi.new("int64_t[2]"), ffi.new("uint64_t[2]")
    assert lib.xc_cache_hold_layer(c._ptr, 0, [1, 2], 2, hs, offs) == 0
    assert list(offs) == [0, 12288]  # slot * stride, payload at 0 (buffered)
    bad = ffi.new("int64_t[2]", [hs[0], hs[1] + (5 << 32)])
    assert lib.xc_cache_unhold_many(c._ptr, bad, 2) == lib.XC_E_MISUSE
    assert holds(c)[:2] == [1, 1]
    assert lib.xc_cache_unhold_many(c._ptr, hs, 2) == 0
    assert holds(c)[:2] == [0, 0]
    c.check()


def test_no_memory_for_read_records_still_names_the_key(k3_shard, faults):
    """With the per-read error records refused, a failed read is named by key."""
    from xcache.engine import alloc
    c = make(k3_shard, io=faults, batch_threads=1)
    faults.arm(Fault("eio", nth=1))
    alloc.fail_alloc(1, False)  # the call's one allocation: the records
    try:
        with pytest.raises(EngineIOError) as ei:
            c.hold_layer(0, [4, 8])
    finally:
        alloc.disarm()
    assert str(ei.value) == "layer 0 expert 4: read failed (io)"
    assert holds(c) == [0] * 8
    assert c.resident() == {(0, 8)}
    c.check()
    c.close()
    c._container.close()


def test_all_hits_allocate_nothing(k3_shard):
    """A hold of resident experts makes no engine allocation (the hit path)."""
    from xcache.engine import alloc
    c = make(k3_shard)
    c.hold_layer(0, [1, 2, 3]).release()
    before = alloc.stats()
    c.hold_layer(0, [1, 2, 3]).release()
    assert alloc.stats() == before
    c.check()


def test_a_streams_unread_reservation_is_read_then_hit(k3_shard):
    """A key a stream reserved but nobody reads is read here, then counted a hit."""
    c = make(k3_shard)
    st = c.stream([(0, 5)])  # no readers: the miss waits for its consumer
    assert [s["state"] for s in c.slots()][0] == "inflight"
    with c.hold_layer(0, [5, 6]) as views:
        assert payload(views[0]) == expert_bytes(k3_shard, 5)
        assert holds(c)[:2] == [2, 1]  # the stream's hold and ours
    assert counters(c, "requests", "hits", "misses") == {
        "requests": 3, "hits": 1, "misses": 2}
    c.check()
    (x,) = list(st)
    assert x.key == (0, 5) and bytes(x.data) == expert_bytes(k3_shard, 5)
    x.release()
    st.close()
    assert holds(c) == [0] * 8
    c.check()


def test_threads_hold_overlapping_layers(k3_shard):
    """Four threads holding overlapping top-4s: every view right, nothing left held."""
    import threading
    c = make(k3_shard, n_slots=20, batch_threads=2)
    wrong = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(200):
            experts = rng.sample(range(24), 4)
            with c.hold_layer(0, experts) as views:
                for e, v in zip(experts, views, strict=True):
                    if payload(v) != expert_bytes(k3_shard, e):
                        wrong.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
    assert holds(c) == [0] * 20
    assert c.stats()["requests"] == 4 * 200 * 4
    c.check()


# GCC's AddressSanitizer allocator is not fork-safe: a lock one of the
# parent's threads held at fork() stays held in the child, whose next
# allocation of that size (a new thread's start) then waits forever
# (seen under load in CI); glibc's malloc resets its locks at fork
@pytest.mark.nosan
def test_a_fork_child_refuses_hold_and_release(k3_shard):
    """In a fork() child, hold_layer and a parent's hold's release are MisuseError."""
    import os
    c = make(k3_shard)
    h = c.hold_layer(0, [1, 2])
    pid = os.fork()
    if pid == 0:  # the child: report by exit code, never by pytest
        code = 0
        for call in (lambda: c.hold_layer(0, [3]), h.release):
            try:
                call()
                code = code * 2 + 1
            except MisuseError as e:
                code = code * 2 + ("child process" not in str(e))
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    h.release()  # the parent's hold is intact
    assert holds(c) == [0] * 8
    c.check()


@pytest.mark.parametrize("policy", ["s3fifo", "arc"])
def test_queue_policies_keep_every_invariant(k3_shard, policy):
    """Under the queue policies (inserts in stamp order) every step checks clean."""
    rng = random.Random(11)
    c = make(k3_shard, policy=policy, batch_threads=2)
    for _ in range(80):
        experts = rng.sample(range(24), 4)
        with c.hold_layer(0, experts) as views:
            assert [payload(v) for v in views] == [
                expert_bytes(k3_shard, e) for e in experts]
        c.check()
    s = c.stats()
    assert (s["requests"], s["hits"] + s["misses"]) == (320, 320)


@pytest.mark.parametrize("policy", ["lru", "fifo", "lfu", "hotness", "s3fifo",
                                    "arc"])
def test_agrees_with_the_oracles_stream(k3_shard, policy):
    """Every policy: hold_layer leaves the counters and slot keys of oracle.stream."""
    from xcache.oracle.cache import CacheModel
    rng = random.Random(5)
    c = make(k3_shard, policy=policy)
    m = CacheModel([0], 24, 4, expert_bytes=1632, n_slots=8, policy=policy)
    names = ("requests", "hits", "misses", "evictions", "payload_bytes")
    for step in range(60):
        experts = rng.sample(range(24), 4)
        with c.hold_layer(0, experts):
            pass
        for ref in m.stream([(0, e) for e in experts]):
            m.release(ref)
        assert [s["key"] for s in c.slots()] == [s.key for s in m.slots()], step
    ms = m.stats()
    assert counters(c, *names) == {n: ms[n] for n in names}
    c.check()
