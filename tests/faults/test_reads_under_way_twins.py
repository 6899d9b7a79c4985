"""Calls racing a read under way, checked by what the engine does.

A ``delay`` fault holds one pread; the test waits until the injector has met
it (``fired``: the read has begun, its slot is reserved and INFLIGHT), then
makes the racing call.  The outcome is checked by counters, residents,
victims, served bytes and the trace's outcomes (docs/CACHE.md, "get",
"reset_stats", "prefetch", "stream"; docs/TRACE_FORMAT.md) -- never by
time or an error message.  A call that should be woken is given a bound; if
it never returns the test fails naming it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import K3_LAYOUT
from xcache import engine
from xcache.faults.io import Fault, IOFaults
from xcache.faults.loops import k3_expected
from xcache.oracle.traces import ENGINE_TRACE_OUTCOMES, read_engine_trace

#: The held pread's delay (microseconds) and the bound on a woken call (s).
DELAY_US = 300_000
BOUND_S = 10.0

#: Caches with a call stuck in them: never closed (close waits for the call).
ABANDONED: list[Any] = []


def _await_fired(faults: IOFaults, n: int = 1) -> None:
    """Wait until the injector met ``n`` armed preads (the read is held)."""
    end = time.monotonic() + BOUND_S
    while faults.fired < n:
        assert time.monotonic() < end, "the delayed read never began"
        time.sleep(0.001)


def _get_bytes(cache: engine.ExpertCache, key: tuple[int, int]) -> bytes:
    with cache.get(*key) as ex:
        return bytes(ex.data)


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return t, out


@pytest.fixture()
def rig(k3_shard: Path, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Open (faults, cache) pairs over k3-mini; all closed after the test."""
    made: list[tuple[IOFaults, engine.Container, engine.ExpertCache]] = []

    def make(**kw: Any) -> tuple[IOFaults, engine.ExpertCache]:
        faults = IOFaults()
        cont = engine.Container(str(k3_shard.parent), io=faults)
        cache = engine.ExpertCache(cont, **{**K3_LAYOUT, "top_k": 4,
                                            "batch_threads": 1,
                                            **kw})
        made.append((faults, cont, cache))
        return faults, cache

    yield make
    for faults, cont, cache in made:
        if cache in ABANDONED:
            continue  # a call is stuck in it: closing would wait forever
        cache.close()
        cont.close()
        faults.close()


def test_a_waiter_on_a_demand_read_is_woken_and_hits(rig, tmp_path):
    """A second thread's get of a key another thread is reading wakes when it ends."""
    trace = tmp_path / "t.bin"
    faults, cache = rig(n_slots=8, trace_path=str(trace))
    faults.arm(Fault("delay", nth=1, arg=DELAY_US))
    first, got_first = _in_thread(lambda: _get_bytes(cache, (0, 5)))
    _await_fired(faults)
    second, got_second = _in_thread(lambda: _get_bytes(cache, (0, 5)))
    second.join(BOUND_S)
    if second.is_alive():
        ABANDONED.append(cache)
        pytest.fail("the get waiting on another thread's read was never woken")
    first.join(BOUND_S)
    assert got_first == got_second == [k3_expected(5)]
    s = cache.stats()
    assert (s["requests"], s["hits"], s["misses"]) == (2, 1, 1)
    assert s["payload_bytes"] == 1632 and faults.reads == 1
    cache.trace_flush()
    _, rec = read_engine_trace(trace)
    outcomes = [ENGINE_TRACE_OUTCOMES[o] for o in rec["outcome"]]
    assert outcomes == ["miss", "wait_hit"]
    cache.check()


def test_a_get_of_a_key_read_ahead_under_way_is_a_hit_after_waiting(rig, tmp_path):
    """The get waits for the read-ahead read; the trace says hit after waiting."""
    trace = tmp_path / "t.bin"
    faults, cache = rig(n_slots=8, io_threads=1, trace_path=str(trace))
    faults.arm(Fault("delay", nth=1, arg=DELAY_US))
    assert cache.prefetch([(0, 7)]) == 1
    _await_fired(faults)
    assert _get_bytes(cache, (0, 7)) == k3_expected(7)
    s = cache.stats()
    assert (s["requests"], s["hits"], s["prefetch_loads"],
            s["prefetch_first_uses"]) == (1, 1, 1, 1)
    cache.trace_flush()
    _, rec = read_engine_trace(trace)
    kinds = [(int(r["kind"]), ENGINE_TRACE_OUTCOMES[r["outcome"]]) for r in rec]
    assert kinds == [(1, "issued"), (0, "wait_hit")]


@pytest.mark.parametrize("how", ["prefetch", "get"])
def test_reset_stats_closes_the_window_of_a_load_under_way(rig, how):
    """A load reserved before reset_stats counts in neither window; it is resident."""
    faults, cache = rig(n_slots=8, io_threads=1)
    faults.arm(Fault("delay", nth=1, arg=DELAY_US))
    if how == "prefetch":
        cache.prefetch([(0, 9)])
        _await_fired(faults)
        cache.reset_stats()
        cache.drain()
    else:
        t, got = _in_thread(lambda: _get_bytes(cache, (0, 9)))
        _await_fired(faults)
        cache.reset_stats()
        t.join(BOUND_S)
        assert got == [k3_expected(9)]
    s = cache.stats()
    assert (s["requests"], s["misses"], s["prefetch_loads"], s["payload_bytes"],
            s["io_bytes"], s["prefetch_unused_resident"]) == (0, 0, 0, 0, 0, 0)
    assert cache.resident() == {(0, 9)}
    assert _get_bytes(cache, (0, 9)) == k3_expected(9)
    s = cache.stats()
    assert (s["hits"], s["prefetch_first_uses"], s["adjusted_hits_exact"]) == (1, 0, 1)
    cache.check()


def test_read_ahead_reads_ending_out_of_order_keep_the_reservation_order(rig):
    """The first key reserved is the LRU victim though its read ended last."""
    faults, cache = rig(n_slots=5, io_threads=2)
    faults.arm(Fault("delay", nth=1, arg=DELAY_US))
    cache.prefetch([(0, 0)])
    _await_fired(faults)
    cache.prefetch([(0, 1)])  # the other reader reads it while (0, 0) is held
    cache.drain()
    for e in (2, 3, 4, 5):
        cache.get(0, e).release()
    assert cache.resident() == {(0, 1), (0, 2), (0, 3), (0, 4), (0, 5)}
    s = cache.stats()
    assert (s["evictions"], s["prefetch_evicted_unused"]) == (1, 1)
    cache.check()


def test_a_claimed_stream_read_is_a_demand_load(rig):
    """A get claiming a stream miss publishes it as the stream's: no prefetch."""
    _, cache = rig(n_slots=8, policy="lfu")
    with cache.stream([(0, 0), (0, 1), (0, 2)]) as st:
        assert _get_bytes(cache, (0, 2)) == k3_expected(2)
        got = {}
        for ex in st:
            with ex:
                got[tuple(ex.key)] = bytes(ex.data)
    assert got == {(0, e): k3_expected(e) for e in range(3)}
    s = cache.stats()
    assert (s["requests"], s["hits"], s["misses"]) == (4, 1, 3)
    assert (s["prefetch_loads"], s["prefetch_first_uses"],
            s["prefetch_unused_resident"]) == (0, 0, 0)
    for e in (3, 4, 5, 6, 7, 0, 1, 3, 4, 5, 6, 7, 8):
        cache.get(0, e).release()
    # every key used twice: lfu evicts the least recent, the claimed one
    assert cache.resident() == {(0, e) for e in (0, 1, 3, 4, 5, 6, 7, 8)}
    cache.check()
