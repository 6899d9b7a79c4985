"""Read-ahead, streams and speculation: byte-identical to the synchronous path.

The differential test drives the same seeded operation sequences through
caches with 0, 1, 2 and 4 read-ahead threads (chunked reads on and off) and
through the oracle model, draining after every prefetch; everything but the
timing counters must agree.  The timing tests slow reads down with the C
delay fault under the io seam.  Also here: speculative counters, a full
queue, closing with reads in flight, stream order, thresholds and
abandonment, load sources, mlock and option checks.  Reads that end out of
order on mixtral-mini, and the order the policy is told of their inserts,
are in ``test_readahead_insert_order.py``.
"""

from __future__ import annotations

import gc
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    DELAY_US,
    K3_LAYOUT,
    SANITIZED,
    expert_bytes,
    open_container,
    semantic,
)
from xcache import engine
from xcache.engine import _lib
from xcache.faults.io import Fault, IOFaults
from xcache.oracle.cache import CacheModel

KEYS = [(0, e) for e in range(24)]


class FaultContainer:
    """A k3-mini container whose reads go through a fault injector."""

    def __init__(self, path: Path, faults: IOFaults) -> None:
        ffi, lib = _lib.ffi(), _lib.lib()
        opts = ffi.new("xc_st_opts *")
        opts.io = faults.io
        opts.direct = 0
        out = ffi.new("xc_st **")
        _lib.check(lib.xc_st_open(os.fsencode(str(path)), opts, out))
        self._faults = faults  # the vtable's owner outlives the container
        self._ptr: Any = ffi.gc(out[0], lib.xc_st_close)
        self.shards = [str(path)]

    def close(self) -> None:
        """Close the C container now (before its injector goes away)."""
        if self._ptr is not None:
            _lib.ffi().release(self._ptr)
            self._ptr = None


@pytest.fixture
def faulty(k3_shard):
    """(container, injector); the container is closed before the injector."""
    with IOFaults() as f:
        cont = FaultContainer(k3_shard, f)
        yield cont, f
        cont.close()


@pytest.fixture
def truth(k3_shard):
    return [expert_bytes(k3_shard, e) for e in range(24)]


def run_ops(c: Any, model: CacheModel | None, seed: int, truth: list[bytes],
            n_ops: int) -> list[Any]:
    """One seeded random sequence on cache c (and the model); returns a log."""
    rnd = random.Random(seed)
    held: list[tuple[Any, Any]] = []
    pinned: list[tuple[int, int]] = []
    log: list[Any] = []
    for _ in range(n_ops):
        op = rnd.random()
        if op < 0.3:
            k = rnd.choice(KEYS)
            x = c.get(*k)
            assert bytes(x.data) == truth[k[1]]
            ref = model.get(*k) if model else None
            if len(held) < 1 and rnd.random() < 0.3:
                held.append((x, ref))
            else:
                x.release()
                if model:
                    model.release(ref)
        elif op < 0.5:
            keys = [rnd.choice(KEYS) for _ in range(rnd.randrange(1, 6))]
            spec = rnd.random() < 0.3
            n = c.prefetch(keys, speculative=spec)
            c.drain()
            if model:
                model.prefetch(keys, speculative=spec)
            log.append(("prefetch", n if c._io_threads == 0 else None))
        elif op < 0.55:
            keys = [rnd.choice(KEYS) for _ in range(4)]
            log.append(("getmany", c.getmany(keys)))
            if model:
                model.getmany(keys)
        elif op < 0.8:
            keys = rnd.sample(KEYS, 4)
            refs = []
            got = []
            for x in c.stream(keys):
                assert bytes(x.data) == truth[x.key[1]]
                got.append(x)
            assert sorted(x.key for x in got) == sorted(keys)
            if model:  # a stream's inserts follow all its reservations
                refs = model.stream(keys)
            for x in got:
                x.release()
            for r in refs:
                model.release(r)
        elif op < 0.87 and held:
            x, ref = held.pop()
            assert bytes(x.data) == truth[x.key[1]]
            x.release()
            if model:
                model.release(ref)
        elif op < 0.92 and len(pinned) < 1:
            k = rnd.choice(sorted(c.resident()) or KEYS[:1])
            if k in c.resident():
                c.pin(*k)
                if model:
                    model.pin(*k)
                pinned.append(k)
        elif op < 0.96 and pinned:
            k = pinned.pop()
            c.unpin(*k)
            if model:
                model.unpin(*k)
        else:
            c.reset_stats()
            if model:
                model.reset_stats()
        c.check()
        log.append((semantic(c.stats()), sorted(c.resident())))
        if model:
            m = model.stats()
            s = c.stats()
            assert {k: s[k] for k in m if k in s} == {k: m[k] for k in m if k in s}
            assert c.resident() == model.resident()
    for x, _ref in held:
        x.release()
    for k in pinned:
        c.unpin(*k)
    return log


#: Caches opened by ``make`` in the running test, closed after it.
_OPENED: list[Any] = []


@pytest.fixture(autouse=True)
def _close_made_caches():
    """Close every cache a test made, so no reader thread or arena outlives it."""
    yield
    while _OPENED:
        _OPENED.pop().close()


def make(path: Path, io_threads: int, chunk_bytes: int = 0, **kw: Any) -> Any:
    c = engine.ExpertCache(open_container(path), n_slots=8, top_k=4,
                           io_threads=io_threads, chunk_bytes=chunk_bytes,
                           **{**K3_LAYOUT, **kw})
    c._io_threads = io_threads
    _OPENED.append(c)
    return c


@pytest.mark.parametrize("policy", ["lru", "lfu", "fifo", "hotness:period=16",
                                    "lfru:sample=3,seed=7", "s3fifo",
                                    "s3fifo:small=30", "arc"])
def test_threads_serve_what_the_synchronous_path_serves(k3_shard, truth, policy):
    """0, 1, 2, 4 readers, chunked or not: same bytes, same counters, = oracle."""
    n_ops = 60 if SANITIZED else 250
    for seed in range(2):
        logs = []
        for io_threads in (0, 1, 2, 4):
            for chunk in (0, 4096):
                c = make(k3_shard, io_threads, chunk, policy=policy)
                model = (CacheModel([0], 24, 4, expert_bytes=1632, n_slots=8,
                                    policy=policy) if io_threads == 0 else None)
                log = run_ops(c, model, seed, truth, n_ops)
                logs.append([e for e in log if e[0] != "prefetch"])
                c.close()
        assert all(log == logs[0] for log in logs[1:])


def test_prefetch_without_readers_is_getmany(k3_shard, truth):
    """io_threads=0: prefetch returns what getmany returns and counts the same."""
    a, b = make(k3_shard, 0), make(k3_shard, 0)
    for keys in ([(0, 0), (0, 1), (0, 1), (0, 2)], [(0, e) for e in range(3, 12)]):
        assert a.prefetch(keys) == b.getmany(keys)
    a.drain()
    assert semantic(a.stats()) == semantic(b.stats()) and a.slots() == b.slots()
    a.check()


def test_speculative_counters_worked_example(k3_shard, truth):
    """Two guesses, one used twice, one evicted unused: exact spec counters."""
    for io_threads in (0, 2):
        c = make(k3_shard, io_threads)
        assert c.prefetch([(0, 0), (0, 1)], speculative=True) == 2
        c.drain()
        for _ in range(2):
            with c.get(0, 0) as x:
                assert bytes(x.data) == truth[0]
        for e in range(2, 9):  # 7 demand misses fill and evict (0, 1) first
            c.get(0, e).release()
        s = c.stats()
        assert {k: s[k] for k in ("spec_issued", "spec_loads", "spec_used",
                                  "spec_evicted_unused", "spec_unused_resident",
                                  "prefetch_loads", "requests", "hits",
                                  "misses", "evictions")} == {
            "spec_issued": 2, "spec_loads": 2, "spec_used": 1,
            "spec_evicted_unused": 1, "spec_unused_resident": 0,
            "prefetch_loads": 0, "requests": 9, "hits": 2, "misses": 7,
            "evictions": 1}
        c.check()
        c.close()


def test_get_of_an_inflight_key_waits_for_that_read(faulty, truth):
    """prefetch returns at once; get waits for the slow read and gets exact bytes."""
    cont, f = faulty
    c = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, io_threads=1)
    f.arm(Fault("delay", nth=1, persistent=True, arg=DELAY_US))
    assert c.prefetch([(0, 5)]) == 1
    assert c.slots()[0]["state"] == "inflight"  # returned before its read ended
    c.check()
    with c.get(0, 5) as x:
        assert c.slots()[0]["state"] == "ready"
        assert bytes(x.data) == truth[5]
    s = c.stats()
    assert (s["requests"], s["hits"], s["misses"], s["prefetch_loads"],
            s["prefetch_first_uses"]) == (1, 1, 0, 1, 1)
    c.check()
    c.close()


def test_full_queue_reads_in_the_caller(faulty, truth):
    """io_depth 1: one read queued, three read by the caller, none dropped."""
    cont, f = faulty
    c = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, io_threads=1,
                           io_depth=1)
    f.arm(Fault("delay", nth=1, persistent=True, arg=50_000))
    assert c.prefetch(KEYS[:4]) == 4
    assert c.stats()["queue_fallbacks"] == 3  # the caller read three
    c.drain()
    s = c.stats()
    assert (s["queue_fallbacks"], s["prefetch_loads"]) == (3, 4)
    for e in range(4):
        with c.get(0, e) as x:
            assert bytes(x.data) == truth[e]
    c.check()
    c.close()


@pytest.mark.parametrize("policy", ["lru", "arc"])
def test_close_with_reads_in_flight_is_clean(k3_shard, policy):
    """Closing while slow reads are queued (and inserts held back) finishes them."""
    gc.collect()
    live = _lib.lib().xc_alloc_live()
    with IOFaults() as f:
        cont = FaultContainer(k3_shard, f)
        c = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, io_threads=2,
                               io_depth=8, policy=policy)
        f.arm(Fault("delay", nth=1, persistent=True, arg=20_000))
        assert c.prefetch(KEYS[:6]) == 6
        c.close()
        cont.close()
        gc.collect()
        assert f.open_handles == 0
    assert _lib.lib().xc_alloc_live() == live


def test_stream_yields_residents_first_then_completion_order(faulty, truth):
    """Residents in the order given, then the fast local read, then the slow one."""
    cont, f = faulty
    c = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, io_threads=1,
                           io_depth=1)
    c.get(0, 1).release()
    c.get(0, 2).release()
    f.arm(Fault("delay", nth=1, persistent=False, arg=DELAY_US))
    it = c.stream([(0, 1), (0, 5), (0, 6), (0, 2)])
    got = [next(it)]
    time.sleep(0.05)  # the reader has issued the delayed read of (0, 5)
    got += list(it)
    assert [x.key for x in got] == [(0, 1), (0, 2), (0, 6), (0, 5)]
    for x in got:
        assert bytes(x.data) == truth[x.key[1]]
        x.release()
    s = c.stats()
    assert (s["requests"], s["hits"], s["misses"], s["queue_fallbacks"]) == (
        6, 2, 4, 1)
    c.check()
    c.close()


@pytest.mark.parametrize("io_threads", [0, 2])
def test_stream_threshold_and_abandon(k3_shard, truth, io_threads):
    """Below split_min_misses a stream is gets; an abandoned one gives holds back."""
    c = make(k3_shard, io_threads, split_min_misses=3)
    c.get(0, 0).release()
    got = list(c.stream([(0, 3), (0, 0), (0, 4)]))  # 2 misses < 3: gets
    assert [x.key for x in got] == [(0, 3), (0, 0), (0, 4)]
    for x in got:
        assert bytes(x.data) == truth[x.key[1]]
        x.release()
    assert all(s["holds"] == 0 for s in c.slots())
    c.check()
    c2 = make(k3_shard, io_threads)
    c2.get(0, 0).release()
    it = c2.stream([(0, 0), (0, 7), (0, 8)])
    first = next(it)
    assert first.key == (0, 0)
    it.close()  # abandon: the unyielded misses' holds go back
    first.release()
    c2.check()
    assert all(s["holds"] == 0 and s["state"] != "inflight" for s in c2.slots())
    assert c2.resident() == {(0, 0), (0, 7), (0, 8)}
    with pytest.raises(engine.MisuseError):
        list(c2.stream([(0, 1), (0, 1)]))
    c2.check()
    c2.close()


def test_stream_counts_like_holding_gets(k3_shard, truth):
    """A stream's counters and residents equal a run of gets that hold, in order."""
    rnd = random.Random(3)
    a, b = make(k3_shard, 2), make(k3_shard, 0)
    for _ in range(40):
        keys = rnd.sample(KEYS, 4)
        xs = list(a.stream(keys))
        ys = [b.get(*k) for k in keys]
        for x in xs + ys:
            assert bytes(x.data) == truth[x.key[1]]
            x.release()
        assert semantic(a.stats()) == semantic(b.stats())
        assert a.resident() == b.resident()
        a.check()


def test_load_sources_add_up(k3_shard):
    """Every published load is page cache, device or unknown; dropping pages shows."""
    c = make(k3_shard, 0)
    c.get(0, 0).release()
    s = c.stats()
    assert s["page_cache_loads"] + s["device_loads"] + s["unknown_loads"] == 1
    if s["page_cache_loads"] == 1:  # the platform can tell
        assert s["page_cache_bytes"] == 1632
        assert engine.drop_page_cache(k3_shard) == 1
        c.get(0, 23).release()
        s = c.stats()
        assert s["device_loads"] + s["page_cache_loads"] == 2
    c.check()


def test_mlock_reports_either_way(k3_shard):
    """lock_memory: active with the arena size, or refused with the reason."""
    c = make(k3_shard, 0, lock_memory=True)
    if c.mlock_active:
        assert c.mlock_note == "mlock active on 98304 bytes"
    else:
        assert c.mlock_note.startswith("mlock of 98304 bytes refused: ")
    assert make(k3_shard, 0).mlock_note == "mlock not requested"


def test_bad_async_options_are_misuse(k3_shard):
    """io_threads outside 0..64 or a negative depth is MisuseError."""
    for kw in ({"io_threads": -1}, {"io_threads": 65}, {"io_depth": -1}):
        with pytest.raises(engine.MisuseError):
            make(k3_shard, **{"io_threads": 0, **kw})
