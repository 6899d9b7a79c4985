"""Streams and read-ahead reservations: who reads, what counts, how they end.

A stream reserves its misses when it begins and reads them as it is
consumed; a reservation nobody has read yet must not block another reader
(a get in any thread, another stream), must count in the counter window it
was made in, must pass ``check()``, and a failed read must not end the stream
(docs/CACHE.md is the contract).  Counters are exact values worked out by
hand from the get/stream rules there.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import K3_LAYOUT, expert_bytes, open_container
from xcache import engine


@pytest.fixture
def truth(k3_shard: Path) -> list[bytes]:
    return [expert_bytes(k3_shard, e) for e in range(24)]


def make(path: Path, io_threads: int = 0, **kw: Any) -> engine.ExpertCache:
    return engine.ExpertCache(open_container(path), n_slots=8, top_k=4,
                              io_threads=io_threads,
                              **{**K3_LAYOUT, **kw})


def in_thread(fn: Any, timeout: float = 10.0) -> list[Any]:
    """Run fn in a daemon thread; [result] if it returned in time, else []."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(timeout)
    return out


# -- an unread reservation does not block other readers ------------------

def test_get_claims_a_stream_reservation_in_the_consumers_own_thread(k3_shard,
                                                                     truth):
    """get() of a key a stream reserved but has not read returns at once."""
    c = make(k3_shard)
    c.get(0, 0).release()

    def scenario() -> tuple[Any, ...]:
        it = c.stream([(0, 0), (0, 5)])
        first = next(it)
        first.release()
        x = c.get(0, 5)  # same thread as the stream's consumer
        holds = c.slots()[1]["holds"]  # the stream's hold plus the get's
        second = next(it)
        return first.key, x, holds, second, it

    out = in_thread(scenario)
    assert out, "get() of a stream's unread reservation hung"
    first_key, x, holds, second, it = out[0]
    assert first_key == (0, 0) and second.key == (0, 5)
    assert holds == 2
    assert bytes(x.data) == bytes(second.data) == truth[5]
    x.release()
    second.release()
    assert list(it) == []
    c.get(0, 0).release()
    s = c.stats()
    # get miss, stream hit, stream miss, get hit (after its own read), get hit
    assert (s["requests"], s["hits"], s["misses"], s["payload_bytes"]) == (
        5, 3, 2, 2 * 1632)
    c.check()
    assert all(sl["holds"] == 0 for sl in c.slots())


def test_get_from_another_thread_and_another_stream_claim_the_read(k3_shard,
                                                                   truth):
    """Another thread's get and another stream read the reservation themselves."""
    c = make(k3_shard)
    it = c.stream([(0, 1), (0, 2), (0, 4)])  # three misses, no readers
    first = next(it)  # the consumer reads (0, 1); (0, 2), (0, 4) stay unread
    got = in_thread(lambda: c.get(0, 2), timeout=10.0)
    assert got, "get() from another thread waited for the stream's consumer"
    other = c.stream([(0, 4), (0, 3)])  # (0, 4) is in flight for `it`
    ys = in_thread(lambda: list(other), timeout=10.0)
    assert ys, "a second stream waited for the first one's consumer"
    xs = [first, *it]
    assert sorted(x.key for x in xs) == [(0, 1), (0, 2), (0, 4)]
    assert sorted(y.key for y in ys[0]) == [(0, 3), (0, 4)]
    for x in [got[0], *xs, *ys[0]]:
        assert bytes(x.data) == truth[x.key[1]]
        x.release()
    s = c.stats()
    # stream: 3 misses; get: hit; other stream: (0,4) hit, (0,3) miss
    assert (s["requests"], s["hits"], s["misses"], s["payload_bytes"]) == (
        6, 2, 4, 4 * 1632)
    c.check()
    assert all(sl["holds"] == 0 and sl["state"] != "inflight"
               for sl in c.slots())


# -- a load reserved before reset_stats belongs to the closed window -------

def test_stream_read_straddling_reset_stats_stays_in_the_closed_window(
        k3_shard, truth):
    """A stream miss reserved before reset_stats and read after it counts nowhere."""
    c = make(k3_shard)
    it = c.stream([(0, 2), (0, 3)])  # both reserved (and counted) now
    first = next(it)
    c.reset_stats()
    first.release()
    second = next(it)  # read now: its miss was in the closed window
    assert bytes(second.data) == truth[3]
    second.release()
    assert list(it) == []
    s = c.stats()
    assert (s["requests"], s["misses"], s["payload_bytes"], s["io_bytes"],
            s["unknown_loads"] + s["page_cache_loads"] + s["device_loads"]) \
        == (0, 0, 0, 0, 0)
    c.check()
    c.get(0, 3).release()
    s = c.stats()
    assert (s["requests"], s["hits"], s["misses"], s["payload_bytes"]) == (
        1, 1, 0, 0)
    c.check()


def test_prefetch_straddling_reset_stats_publishes_without_mark(k3_shard,
                                                               truth):
    """A read-ahead published after reset_stats is resident, unmarked, uncounted."""
    from xcache.faults.io import Fault, IOFaults
    with IOFaults() as f:
        cont = engine.Container(str(k3_shard), io=f)
        c = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, io_threads=1)
        f.arm(Fault("delay", nth=1, persistent=True, arg=100_000))
        assert c.prefetch([(0, 4), (0, 5)]) == 2
        c.reset_stats()
        c.drain()
        f.disarm()
        s = c.stats()
        assert (s["prefetch_loads"], s["payload_bytes"], s["io_bytes"],
                s["prefetch_unused_resident"]) == (0, 0, 0, 0)
        assert c.resident() == {(0, 4), (0, 5)}
        c.check()
        with c.get(0, 4) as x:
            assert bytes(x.data) == truth[4]
        s = c.stats()
        assert (s["hits"], s["prefetch_first_uses"]) == (1, 0)
        c.check()
        c.close()
        cont.close()


# -- a failed read does not end the stream; a stream begins at the call -----

@pytest.mark.parametrize("io_threads", [0, 1])  # reads in key order
def test_stream_goes_on_after_a_failed_read_and_raises_it_last(k3_shard, truth,
                                                               io_threads):
    """The other experts are yielded, then the first failure is raised."""
    from xcache.faults.io import Fault, IOFaults
    with IOFaults() as f:
        cont = engine.Container(str(k3_shard), io=f)
        c = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                               io_threads=io_threads)
        f.arm(Fault("eio", nth=1))  # the first read, (0, 1)'s, fails
        got = []
        with pytest.raises(engine.EngineIOError) as ei:
            for x in c.stream([(0, 1), (0, 2), (0, 3)]):
                assert bytes(x.data) == truth[x.key[1]]
                got.append(x.key)
                x.release()
        assert sorted(got) == [(0, 2), (0, 3)]
        assert (ei.value.layer, ei.value.expert) == (0, 1)
        assert c.resident() == {(0, 2), (0, 3)}
        s = c.stats()
        assert (s["requests"], s["misses"], s["load_failures"],
                s["io_errors"], s["payload_bytes"]) == (3, 3, 1, 1, 2 * 1632)
        c.check()
        c.close()
        cont.close()


def test_stream_begins_at_call_and_ends_on_close(k3_shard):
    """stream() validates and reserves at once; close/with-exit give holds back."""
    c = make(k3_shard)
    c.get(0, 0).release()
    with pytest.raises(engine.MisuseError, match="named twice"):
        c.stream([(0, 1), (0, 1)])
    with c.stream([(0, 0), (0, 4), (0, 5)]) as it:
        s = c.stats()  # begun without a next(): 1 hit, 2 misses reserved
        assert (s["requests"], s["hits"], s["misses"]) == (4, 1, 3)
        assert [sl["state"] for sl in c.slots()[:3]] == [
            "ready", "inflight", "inflight"]
        assert c.slots()[0]["holds"] == 1
    assert all(sl["holds"] == 0 and sl["state"] != "inflight"
               for sl in c.slots())
    assert list(it) == []
    it2 = c.stream([(0, 6), (0, 7)])
    c.close()  # ends the open stream first
    with pytest.raises(engine.MisuseError, match="the cache is closed"):
        c.stream([(0, 1)])
    assert list(it2) == []


# -- a stream's failed read reports the file, byte and cause --------------

@pytest.mark.parametrize("io_threads", [0, 1])
def test_stream_error_names_file_and_byte_like_get(k3_shard, io_threads):
    """A streamed short read carries the loader's record, as a plain get does."""
    from xcache.faults.io import Fault, IOFaults
    with IOFaults() as f:
        cont = engine.Container(str(k3_shard), io=f)
        c = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                               io_threads=io_threads)
        f.arm(Fault("eof", nth=1))
        with pytest.raises(engine.ShortReadError) as ei:
            for x in c.stream([(0, 7), (0, 8)]):
                x.release()
        e = ei.value
        # expert 7 starts at 20,608 + 7 * 1,632 = 32,032 (DESIGN.md section 3)
        assert (e.offset, e.layer, e.expert) == (32032, 0, 7)
        assert str(k3_shard) in str(e)
        assert "short read: 0 of 1632 bytes at byte 32032" in str(e)
        c.check()
        c.close()
        cont.close()


# -- check() accounts for every reservation --------------------------------

def test_check_is_clean_with_stream_owned_and_stamped_reservations(k3_shard):
    """Unread, claimed and queued stream reads each pass the stronger check."""
    c = make(k3_shard)
    c.get(0, 0).release()
    it = c.stream([(0, 0), (0, 5), (0, 6)])  # two unread, ticks stamped
    c.check()
    assert [sl["state"] for sl in c.slots()[:3]] == [
        "ready", "inflight", "inflight"]
    c.get(0, 6).release()  # claims (0, 6)
    c.check()
    xs = list(it)
    assert sorted(x.key for x in xs) == [(0, 0), (0, 5), (0, 6)]
    for x in xs:
        x.release()
    c.check()
    c.close()
