"""Read-ahead, streams and speculation: byte-identical to the synchronous path.

The differential test drives the same seeded operation sequences through
caches with 0, 1, 2 and 4 read-ahead threads (chunked reads on and off) and
through the oracle model, draining after every prefetch; everything but the
timing counters must agree.  The timing tests slow reads down with the C
delay fault under the io seam.
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
    K3_LAYOUT,
    expert_bytes,
    load_preset,
    open_container,
    open_preset,
)
from xcache import engine
from xcache.engine import _lib
from xcache.engine.cache import TIMING_COUNTERS
from xcache.faults.io import Fault, IOFaults
from xcache.oracle.cache import CacheModel

SANITIZED = bool(os.environ.get("XC_ENGINE_LIB"))
KEYS = [(0, e) for e in range(24)]
DELAY_US = 300_000


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


def semantic(stats: dict[str, float]) -> dict[str, float]:
    """The counters that must not depend on threads or timing."""
    return {k: v for k, v in stats.items() if k not in TIMING_COUNTERS}


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


#: The read-ahead order tests: one tick policy and both queue policies.
ORDER_POLICIES = ["lru", "s3fifo", "arc"]

#: mixtral-mini keys by shard: layers 0 and 1 live in shard 1, 2 in 2, 3 in 3.
SHARD_OF_LAYER = {0: "00001-of", 1: "00001-of", 2: "00002-of", 3: "00003-of"}


def mixtral(n_slots: int, policy: str, io: Any = None,
            **kw: Any) -> tuple[Any, Any, Any, CacheModel]:
    """(preset, container, cache, model) of mixtral-mini with n_slots slots."""
    p = load_preset("mixtral-mini")
    cont = engine.Container(p.path, io=io)
    c = engine.ExpertCache(cont, n_slots=n_slots, policy=policy,
                           **p.cache_kwargs(), **kw)
    model = CacheModel(p.layers, p.n_experts, p.top_k, expert_bytes=p.expert_bytes,
                       n_slots=n_slots, policy=policy)
    return p, cont, c, model


def end_order(c: Any, keys: list[tuple[int, int]], timeout: float = 10.0
              ) -> list[tuple[int, int]]:
    """The order in which the reads of keys end (their slots leave INFLIGHT).

    Polls the slots, running check() at every step, so the invariants are
    walked while publishes are held back.
    """
    order: list[tuple[int, int]] = []
    t_end = time.perf_counter() + timeout
    while len(order) < len(keys) and time.perf_counter() < t_end:
        inflight = {s["key"] for s in c.slots() if s["state"] == "inflight"}
        order += [k for k in keys if k not in inflight and k not in order]
        c.check()
        time.sleep(0.002)
    return order


@pytest.mark.parametrize("policy", ORDER_POLICIES)
def test_drained_prefetch_equals_getmany_whatever_the_completion_order(policy):
    """A drained read-ahead whose later read completed first leaves getmany's victims.

    mixtral-mini, 3 slots, one reader and io_depth 1: (0, 0) is queued on the
    reader and slowed (its shard only), (3, 0) finds the queue full and is
    read by the caller, so it completes first.  Two more gets then evict one
    of the two; getmany (and the oracle) evict (0, 0), the older reservation.
    """
    p = load_preset("mixtral-mini")
    keys = [(0, 0), (3, 0)]
    model = CacheModel(p.layers, p.n_experts, p.top_k, expert_bytes=p.expert_bytes,
                       n_slots=3, policy=policy)
    with IOFaults() as f:
        cont = engine.Container(p.path, io=f)
        c = engine.ExpertCache(cont, n_slots=3, policy=policy, io_threads=1,
                               io_depth=1, **p.cache_kwargs())
        sync_cont = open_preset(p)
        sync = engine.ExpertCache(sync_cont, n_slots=3, policy=policy,
                                  **p.cache_kwargs())
        f.arm(Fault("delay", nth=1, arg=DELAY_US, path_filter="00001-of-00003"))
        assert c.prefetch(keys) == 2
        c.drain()
        assert c.stats()["queue_fallbacks"] == 1
        assert sync.getmany(keys) == model.getmany(keys) == 2
        for k in [(3, 1), (3, 2)]:
            for cache in (c, sync):
                cache.get(*k).release()
            model.release(model.get(*k))
        got, want = c.resident(), sync.resident()
        c.check()
        c.close()
        sync.close()
        sync_cont.close()
        cont.close()
    assert want == model.resident() == {(3, 0), (3, 1), (3, 2)}
    assert got == want, f"{policy}: read-ahead left {sorted(got)}"


@pytest.mark.parametrize("fail", [None, 1, 0])
@pytest.mark.parametrize("policy", ORDER_POLICIES)
def test_drained_prefetch_equals_getmany_in_reverse_completion_order(policy, fail):
    """Three reads ending last-stamped first, one of them failing: getmany's state.

    mixtral-mini, 4 slots, 3 readers: (0, 0), (2, 0), (3, 0) live in shards
    1, 2, 3; two chained injectors slow shard 1 by 2 D and shard 2 by D, so
    the reads end in reverse order, and a third fails the read of key
    ``fail`` (after its delay).  A failure in the middle must not hold the
    later insert back; the first read failing last must release both.  After
    drain() three gets evict the survivors oldest-reservation first, exactly
    as after getmany with the same failure (and the oracle): (3, 0) stays.
    """
    keys = [(0, 0), (2, 0), (3, 0)]
    failures = {} if fail is None else {keys[fail]: "io"}
    with IOFaults() as f_err, IOFaults(f_err) as f_mid, IOFaults(f_mid) as f_slow:
        p, cont, c, model = mixtral(4, policy, io=f_slow, io_threads=3)
        with IOFaults() as sf:
            sync_cont = engine.Container(p.path, io=sf)
            sync = engine.ExpertCache(sync_cont, n_slots=4, policy=policy,
                                      **p.cache_kwargs())
            if fail is not None:
                for inj in (f_err, sf):
                    inj.arm(Fault("eio", path_filter=SHARD_OF_LAYER[keys[fail][0]]))
            f_slow.arm(Fault("delay", arg=2 * DELAY_US, path_filter="00001-of"))
            f_mid.arm(Fault("delay", arg=DELAY_US, path_filter="00002-of"))
            assert c.prefetch(keys) == 3
            assert end_order(c, keys) == keys[::-1]
            c.drain()
            assert sync.getmany(keys) == model.getmany(keys, failures) == 3 - bool(
                failures)
            assert semantic(c.stats()) == semantic(sync.stats())
            for k in [(3, 1), (3, 2), (3, 3)]:
                for cache in (c, sync):
                    cache.get(*k).release()
                model.release(model.get(*k))
            got, want = c.resident(), sync.resident()
            s, m = c.stats(), model.stats()
            c.check()
            c.close()
            sync.close()
            sync_cont.close()
        cont.close()
    # s3fifo (s = 1) with all three published: (0, 0) fills S, so before any
    # eviction (2, 0), (3, 0) and (3, 1) enter M (warm-up) and the S pass
    # evicts (0, 0), then (3, 2)
    stays = ({(2, 0), (3, 0), (3, 1), (3, 3)} if policy == "s3fifo" and fail is None
             else {(3, 0), (3, 1), (3, 2), (3, 3)})
    assert want == model.resident() == stays
    assert got == want, f"{policy}: read-ahead left {sorted(got)}"
    assert {k: s[k] for k in m if k in s} == {k: m[k] for k in m if k in s}
    assert (s["load_failures"], s["io_errors"]) == (len(failures), len(failures))


@pytest.mark.parametrize("policy", ORDER_POLICIES)
def test_hits_on_a_held_back_publish_reach_the_policy_after_its_insert(policy):
    """Two hits on (3, 0) while the earlier (0, 0) is still read: as after getmany.

    One reader, io_depth 1: the caller reads (3, 0) (published, its insert held
    back behind the slow (0, 0)) and then hits it twice.  The policy must see
    the insert of (0, 0), that of (3, 0), then the two hits -- getmany's order
    followed by the gets.  ARC then keeps (3, 0) in T2 and S3-FIFO promotes it
    (freq 2), so gets of (3, 1), (3, 2), (3, 3) leave (3, 0) resident; hits told
    before the insert would be lost (S3-FIFO) or undone (ARC).
    """
    keys = [(0, 0), (3, 0)]
    with IOFaults() as f:
        p, cont, c, model = mixtral(3, policy, io=f, io_threads=1, io_depth=1)
        _, sync_cont, sync, _ = mixtral(3, policy)
        f.arm(Fault("delay", arg=DELAY_US, path_filter="00001-of"))
        assert c.prefetch(keys) == 2
        for _ in range(2):
            with c.get(3, 0) as x:  # a hit on the held-back publish
                assert x.key == (3, 0)
        assert c.slots()[0]["state"] == "inflight"  # (0, 0) still read
        c.check()
        c.drain()
        sync.getmany(keys)
        model.getmany(keys)
        for k in [(3, 0), (3, 0), (3, 1), (3, 2), (3, 3)]:
            if k != (3, 0):
                c.get(*k).release()
            sync.get(*k).release()
            model.release(model.get(*k))
        got, want = c.resident(), sync.resident()
        assert semantic(c.stats()) == semantic(sync.stats())
        c.check()
        c.close()
        sync.close()
        sync_cont.close()
        cont.close()
    assert want == model.resident() and len(want) == 3
    assert ((3, 0) in want) == (policy != "lru")  # LRU: the hits are old by then
    assert got == want, f"{policy}: read-ahead left {sorted(got)}"


@pytest.mark.parametrize("held", [False, True])
def test_a_held_back_publish_is_no_candidate_until_it_is_the_only_one(held):
    """ARC: a victim comes from the slots the policy knows, else all inserts go first.

    mixtral-mini, 3 slots: (1, 0) is hit once (ARC's T2).  A read-ahead of the
    slow (0, 0) and the fast (3, 0) follows; (3, 0) is published but its
    insert held back.  A get of (3, 1) then needs a victim.  (3, 0) is not a
    candidate, so (1, 0) goes -- though ARC would take the T1 key (3, 0)
    first if it knew it.  With (1, 0) held there is no other candidate: every
    held-back insert is told, and (3, 0) goes (rather than ALL_PINNED).
    """
    with IOFaults() as f:
        _, cont, c, _ = mixtral(3, "arc", io=f, io_threads=1, io_depth=1)
        c.get(1, 0).release()
        h = c.get(1, 0)
        if not held:
            h.release()
        f.arm(Fault("delay", arg=DELAY_US, path_filter="00001-of"))
        assert c.prefetch([(0, 0), (3, 0)]) == 2
        c.get(3, 1).release()
        c.check()
        gone = (3, 0) if held else (1, 0)
        assert gone not in c.resident()
        c.drain()
        if held:
            h.release()
        assert c.resident() == {(0, 0), (1, 0), (3, 0), (3, 1)} - {gone}
        s = c.stats()
        assert (s["evictions"], s["prefetch_evicted_unused"]) == (1, int(held))
        c.check()
        c.close()
        cont.close()


@pytest.mark.parametrize("how", ["readers", "claim"])
@pytest.mark.parametrize("policy", ORDER_POLICIES)
def test_stream_inserts_reach_the_policy_in_the_order_given(policy, how):
    """A stream whose second miss is published first: the oracle's stream, exactly.

    mixtral-mini, 3 slots; stream [(0, 0), (3, 0)], both misses.  "readers": two
    readers, (0, 0) slowed, so (3, 0) is read, published and yielded first.
    "claim": no readers; a get of (3, 0) from the consumer's thread reads it
    before the consumer has read (0, 0).  Either way the policy is told (0, 0)
    then (3, 0) (then the get's hit), as the oracle's stream does, so gets of
    (3, 1), (3, 2) evict (0, 0) first.
    """
    keys = [(0, 0), (3, 0)]
    with IOFaults() as f:
        io_threads = 2 if how == "readers" else 0
        _, cont, c, model = mixtral(3, policy, io=f, io_threads=io_threads)
        if how == "readers":
            f.arm(Fault("delay", arg=DELAY_US, path_filter="00001-of"))
        it = c.stream(keys)
        refs = model.stream(keys)
        if how == "claim":
            c.get(3, 0).release()
            model.release(model.get(3, 0))
        got = list(it)
        assert [x.key for x in got] == [(3, 0), (0, 0)]
        for x in got:
            x.release()
        for r in refs:
            model.release(r)
        for k in [(3, 1), (3, 2)]:
            c.get(*k).release()
            model.release(model.get(*k))
        s, m = c.stats(), model.stats()
        assert {k: s[k] for k in m if k in s} == {k: m[k] for k in m if k in s}
        assert c.resident() == model.resident()
        assert (0, 0) not in c.resident()
        c.check()
        c.close()
        cont.close()


@pytest.mark.parametrize("io_threads", [0, 1])
def test_stream_of_a_queue_policy_inserts_after_all_reservations(k3_shard, io_threads):
    """ARC: a stream's second victim is chosen before its first miss is inserted.

    k3-mini, 5 slots (docs/CACHE.md "ARC", p = 0).  0..4 fill T1 and 0 is
    hit: T2=[0].  5 evicts 1 (B1=[1]); 1 is a B1 hit: p = 1 first, then
    |T1| = 4 > 1 evicts 2, and 1 enters T2.  3 is hit: T2=[0,1,3], T1=[4,5].
    stream [6, 7]: the first reservation evicts 4 (|T1| = 2 > 1); the second
    sees |T1| = 1 (6 is inserted only after both), not above p, and evicts
    T2's oldest, 0.  Holding gets would insert 6 first (|T1| = 2: protected
    entries count), so 7 would evict 5 from T1 and keep 0: docs/CACHE.md's
    "a stream counts exactly like gets of its keys in the order given" holds
    for the tick policies only.
    """
    policy = "arc"
    c = engine.ExpertCache(open_container(k3_shard), **K3_LAYOUT, n_slots=5, top_k=4,
                           io_threads=io_threads, policy=policy)
    model = CacheModel([0], 24, 4, expert_bytes=1632, n_slots=5, policy=policy)
    gets = CacheModel([0], 24, 4, expert_bytes=1632, n_slots=5, policy=policy)
    for e in [0, 1, 2, 3, 4, 0, 5, 1, 3]:
        c.get(0, e).release()
        model.release(model.get(0, e))
        gets.release(gets.get(0, e))
    xs = list(c.stream([(0, 6), (0, 7)]))
    refs = model.stream([(0, 6), (0, 7)])
    held = [gets.get(0, 6), gets.get(0, 7)]
    for x in xs:
        x.release()
    for m, rs in ((model, refs), (gets, held)):
        for r in rs:
            m.release(r)
    assert c.resident() == model.resident() == {(0, e) for e in (1, 3, 5, 6, 7)}
    assert gets.resident() == {(0, e) for e in (0, 1, 3, 6, 7)}
    s, m = c.stats(), model.stats()
    assert {k: s[k] for k in m if k in s} == {k: m[k] for k in m if k in s}
    assert (s["requests"], s["hits"], s["misses"], s["evictions"]) == (11, 2, 9, 4)
    c.check()
    c.close()
