"""Behavioural twins: contracts caught by what the engine does, not by its words.

Each test here pins a contract of docs/CACHE.md that other tests check by an
error message's wording or by a timing threshold, and checks it instead by
the bytes served, the counters, the slot states, the reads asked of io and
``check()``: getmany protecting the batch's own residents, key bounds on
every entry point, pin/unpin nesting, the reader's overlap check, a ``get``
of a key whose read is in flight, and streams whose reservations another
reader claims.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import K3_LAYOUT, load_preset, st_bytes
from xcache import engine
from xcache.faults.io import Fault, IOFaults
from xcache.faults.loops import k3_expected

Key = tuple[int, int]


def snapshot(c: engine.ExpertCache) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Everything observable of a cache's state: its slots and its counters."""
    return c.slots(), c.stats()


def table(c: engine.ExpertCache) -> list[tuple[str, Key | None, int, int]]:
    """Each slot as (state, key, holds, pins)."""
    return [(s["state"], s["key"], s["holds"], s["pins"]) for s in c.slots()]


def counting(faults: IOFaults) -> None:
    """Arm a fault that changes no read, so ``faults.reads`` counts every pread."""
    faults.arm(Fault("partial", nth=1, persistent=True, arg=1 << 30))


@pytest.fixture()
def k3(k3_shard: Path) -> Iterator[Callable[..., tuple[engine.ExpertCache, IOFaults]]]:
    """Make k3-mini caches reading through a counting injector; closed after."""
    made: list[tuple[engine.ExpertCache, engine.Container, IOFaults]] = []

    def make(**kw: Any) -> tuple[engine.ExpertCache, IOFaults]:
        f = IOFaults()
        cont = engine.Container(str(k3_shard), io=f)
        c = engine.ExpertCache(cont, **K3_LAYOUT, **{"n_slots": 3, "top_k": 2, **kw})
        made.append((c, cont, f))
        return c, f

    yield make
    for c, cont, f in made:
        c.close()
        cont.close()
        f.close()


def bounded(fn: Callable[[], None], what: str, limit: float = 120.0) -> None:
    """Run fn in a daemon thread; a hang (no return within limit) fails the test.

    The limit bounds a wait that must never happen (a reader waiting on a
    consumer that will not come); it is no assertion on speed.  A hung
    cache is left open: closing it would wait for the hung call too.
    """
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 -- re-raised below
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    if t.is_alive():
        pytest.fail(f"{what} waited for a reservation nobody else reads")
    if errors:
        raise errors[0]


def fill(c: engine.ExpertCache, experts: list[int]) -> None:
    """get and release (0, e) for each e, in order."""
    for e in experts:
        c.get(0, e).release()


# -- getmany never evicts a resident key the batch names ------------------------

def test_getmany_cannot_evict_the_batchs_own_residents(k3):
    """A full cache whose only victims are the batch's residents loads nothing."""
    c, f = k3()
    fill(c, [0, 1, 2])
    c.reset_stats()
    counting(f)
    assert c.getmany([(0, 0), (0, 1), (0, 2), (0, 5)]) == 0
    assert f.reads == 0
    assert table(c) == [("ready", (0, 0), 0, 0), ("ready", (0, 1), 0, 0),
                        ("ready", (0, 2), 0, 0)]
    st = c.stats()
    assert (st["evictions"], st["prefetch_loads"], st["payload_bytes"],
            st["requests"]) == (0, 0, 0, 0)
    c.check()
    for e in (0, 1, 2):
        with c.get(0, e) as x:
            assert x.data.tobytes() == k3_expected(e)


def test_getmany_evicts_only_residents_the_batch_does_not_name(k3):
    """Residents named before the miss are protected; the victim is the other one."""
    c, f = k3()
    fill(c, [0, 1, 2])  # LRU order: (0, 0) oldest
    counting(f)
    assert c.getmany([(0, 0), (0, 5)]) == 1  # (0, 0) touched and protected
    assert f.reads == 1
    assert table(c) == [("ready", (0, 0), 0, 0), ("ready", (0, 5), 0, 0),
                        ("ready", (0, 2), 0, 0)]
    assert c.stats()["evictions"] == 1
    c.check()
    with c.get(0, 5) as x:
        assert x.data.tobytes() == k3_expected(5)


def test_getmany_protects_a_resident_named_after_a_miss(k3):
    """A resident named later than a miss is protected from the call's start:
    the miss takes another victim, and the resident is not read again."""
    c, f = k3()
    fill(c, [0, 1, 2])  # LRU order: (0, 0) oldest
    counting(f)
    assert c.getmany([(0, 5), (0, 0)]) == 1  # (0, 0) is not the miss's victim
    assert f.reads == 1
    assert table(c) == [("ready", (0, 0), 0, 0), ("ready", (0, 5), 0, 0),
                        ("ready", (0, 2), 0, 0)]
    assert c.stats()["evictions"] == 1
    c.check()


def test_oracle_getmany_protects_a_resident_named_after_a_miss():
    """The oracle's model of the same call: one eviction, (0, 1) the victim."""
    from xcache.oracle.cache import CacheModel

    m = CacheModel([0], 8, 2, expert_bytes=16, n_slots=3)
    for e in (0, 1, 2):
        m.release(m.get(0, e))
    assert m.getmany([(0, 5), (0, 0)]) == 1
    assert m.counters["evictions"] == 1
    assert sorted(m.resident()) == [(0, 0), (0, 2), (0, 5)]


# -- key bounds on every entry point ------------------------------------------

def bad_keys(layers: tuple[int, ...], n_experts: int) -> list[Key]:
    """Keys outside the cache: each would alias a real key if a bound slipped."""
    return [(layers[0], n_experts), (layers[0], -1), (layers[-1], n_experts),
            (layers[-1] + 1, 0), (layers[0] - 1, 0), (1, 0),  # 1: a gap
            (layers[0], 2**31 - 1), (-(2**31), 0)]


ENTRY_POINTS: dict[str, Callable[[engine.ExpertCache, Key], Any]] = {
    "get": lambda c, k: c.get(*k),
    "getmany": lambda c, k: c.getmany([(0, 0), k]),
    "prefetch": lambda c, k: c.prefetch([k, (2, 3)]),
    "speculative": lambda c, k: c.prefetch([(2, 3), k], speculative=True),
    "stream": lambda c, k: list(c.stream([(3, 1), k])),
    "pin": lambda c, k: c.pin(*k),
    "unpin": lambda c, k: c.unpin(*k),
    "contiguous": lambda c, k: c.contiguous(*k),
}


@pytest.mark.parametrize("io_threads", [0, 1])
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_a_key_out_of_bounds_changes_nothing(entry, io_threads):
    """MisuseError naming the key; slots, counters and reads exactly as before."""
    p = load_preset("mixtral-mini")
    layers = (0, 2, 3)  # layer 1 is a gap between two layers of the cache
    kw = {**p.cache_kwargs(), "layers": layers}
    with IOFaults() as f, engine.Container(p.path, io=f) as cont, \
            engine.ExpertCache(cont, n_slots=5, io_threads=io_threads, **kw) as c:
        for k in [(0, 0), (2, 7), (3, 1)]:
            c.get(*k).release()
        c.pin(2, 7)
        counting(f)
        for key in bad_keys(layers, p.n_experts):
            before = snapshot(c)
            with pytest.raises(engine.MisuseError) as ei:
                ENTRY_POINTS[entry](c, key)
            c.drain()
            assert (ei.value.layer, ei.value.expert) == tuple(
                None if v < 0 else v for v in key), entry  # -1: unknown
            assert snapshot(c) == before, f"{entry}{key} changed the cache"
            assert f.reads == 0, f"{entry}{key} read something"
            c.check()
        c.unpin(2, 7)
        for k in [(0, 0), (2, 7), (3, 1)]:
            with c.get(*k) as x:
                assert x.data.tobytes() == p.payload[k]


# -- pin / unpin ----------------------------------------------------------------

def test_pins_nest_and_the_last_unpin_makes_the_slot_a_victim_again(k3):
    """Pinned twice, unpinned once: still protected; unpinned again: the LRU victim."""
    c, _ = k3()
    fill(c, [0, 1, 2])
    c.pin(0, 0)
    c.pin(0, 0)
    assert table(c)[0] == ("ready", (0, 0), 0, 2)
    c.unpin(0, 0)
    fill(c, [5])  # (0, 0) is oldest but pinned once: (0, 1) goes
    assert table(c) == [("ready", (0, 0), 0, 1), ("ready", (0, 5), 0, 0),
                        ("ready", (0, 2), 0, 0)]
    c.unpin(0, 0)
    fill(c, [6])  # now (0, 0), the oldest, is the victim
    assert table(c) == [("ready", (0, 6), 0, 0), ("ready", (0, 5), 0, 0),
                        ("ready", (0, 2), 0, 0)]
    st = c.stats()
    assert (st["requests"], st["misses"], st["evictions"]) == (5, 5, 2)
    c.check()


def test_unpin_of_an_unpinned_key_changes_nothing(k3):
    """unpin with no pin left: MisuseError, pins stay 0, the slot stays a victim."""
    c, _ = k3()
    fill(c, [0, 1, 2])
    c.pin(0, 0)
    c.unpin(0, 0)
    before = snapshot(c)
    with pytest.raises(engine.MisuseError) as ei:
        c.unpin(0, 0)
    assert (ei.value.layer, ei.value.expert) == (0, 0)
    with pytest.raises(engine.NotFoundError):
        c.unpin(0, 9)  # not resident
    assert snapshot(c) == before
    c.check()
    fill(c, [7])  # (0, 0) unprotected and oldest: it is the victim
    assert table(c)[0] == ("ready", (0, 7), 0, 0)
    c.check()


# -- the reader's overlap check ---------------------------------------------------

def entry(name: str, begin: int, end: int) -> str:
    """One U8 header entry of end - begin bytes."""
    return (f'"{name}":{{"dtype":"U8","shape":[{end - begin}],'
            f'"data_offsets":[{begin},{end}]}}')


@pytest.mark.parametrize("a,b", [((0, 4), (3, 7)), ((0, 4), (0, 4)),
                                 ((0, 4), (2, 3)), ((0, 6), (1, 7))])
def test_overlapping_tensors_are_refused_at_the_second(tmp_path, a, b):
    """Two tensors sharing a byte: FormatError 'offsets' at the second's name."""
    h = "{" + entry("a", *a) + "," + entry("b", *b) + "}"
    data_end = max(a[1], b[1])
    path = tmp_path / "t.safetensors"
    path.write_bytes(st_bytes(h, bytes(range(data_end))))
    with pytest.raises(engine.FormatError) as ei:
        engine.Container(str(path))
    assert (ei.value.kind, ei.value.offset) == ("offsets",
                                                8 + h.index('"b"'))


def test_adjacent_tensors_are_not_an_overlap(tmp_path):
    """b beginning where a ends is fine: both read back exactly."""
    h = "{" + entry("a", 0, 4) + "," + entry("b", 4, 7) + "}"
    path = tmp_path / "t.safetensors"
    path.write_bytes(st_bytes(h, bytes(range(7))))
    with engine.Container(str(path)) as c:
        assert c.read_bytes("a") == bytes(range(4))
        assert c.read_bytes("b") == bytes(range(4, 7))
    json.loads(h)  # the header itself is well-formed JSON


# -- get of a key whose read is in flight ------------------------------------------

def test_get_of_a_read_ahead_key_in_flight_is_one_load(k3_shard):
    """get during a slow read-ahead read: its exact bytes, one read, a hit.

    The read is slowed with the delay fault; if the machine is so slow that
    the read ended before the get, the attempt is repeated with a longer
    delay (the counters are the same either way: only the wait differs).
    """
    for delay_us in (200_000, 1_000_000, 5_000_000):
        with IOFaults() as f:
            cont = engine.Container(str(k3_shard), io=f)
            c = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=3, top_k=2,
                                   io_threads=1)
            f.arm(Fault("delay", nth=1, persistent=True, arg=delay_us))
            assert c.prefetch([(0, 5)]) == 1
            in_flight = table(c)[0] == ("inflight", (0, 5), 0, 0)
            with c.get(0, 5) as x:
                assert x.data.tobytes() == k3_expected(5)
                assert table(c) == [("ready", (0, 5), 1, 0),
                                    ("empty", None, 0, 0), ("empty", None, 0, 0)]
            reads = f.reads
            st = c.stats()
            c.check()
            c.close()
            cont.close()
        assert reads == 1  # one load, not two
        assert {k: st[k] for k in ("requests", "hits", "misses", "prefetch_loads",
                                   "prefetch_first_uses", "io_bytes",
                                   "payload_bytes", "load_failures")} == {
            "requests": 1, "hits": 1, "misses": 0, "prefetch_loads": 1,
            "prefetch_first_uses": 1, "io_bytes": 1632, "payload_bytes": 1632,
            "load_failures": 0}
        if in_flight:
            return
    pytest.fail("the read-ahead read ended before get() every time")


# -- stream reservations claimed by another reader -------------------------------

def test_a_stream_of_residents_ended_early_gives_back_no_hold(k3):
    """A stream whose keys are all resident (plain gets in next()) holds
    nothing for its items: ending it early, or closing the cache with it
    open, gives back no hold (it gave back holds of slots it never took)."""
    c, _ = k3(n_slots=4)
    fill(c, [0, 5])
    before = table(c)
    it = c.stream([(0, 5), (0, 0)])
    assert table(c) == before  # the plain mode counts and holds at next()
    first = next(it)
    assert first.key == (0, 5)
    it.close()
    assert [h for _, _, h, _ in table(c)] == [0, 1, 0, 0]
    first.release()
    c.check()
    c.stream([(0, 0)])  # left open: the cache's close ends it
    assert table(c) == before
    c.close()


def test_get_claims_a_stream_reservation_once(k3_shard):
    """get of a stream's unread miss reads it once; the stream then yields it unread."""
    f = IOFaults()
    cont = engine.Container(str(k3_shard), io=f)
    c = engine.ExpertCache(cont, **K3_LAYOUT, top_k=2, n_slots=4)

    def scenario() -> None:
        fill(c, [0])
        c.reset_stats()
        counting(f)
        it = c.stream([(0, 0), (0, 5)])
        first = next(it)
        assert first.key == (0, 0)
        assert table(c)[1] == ("inflight", (0, 5), 0, 0)
        x = c.get(0, 5)  # claims: reads it for the stream, then hits
        assert f.reads == 1
        assert table(c)[1] == ("ready", (0, 5), 2, 0)
        second = next(it)  # already read: yielded without another read
        assert second.key == (0, 5) and f.reads == 1
        assert x.data.tobytes() == second.data.tobytes() == k3_expected(5)
        for e in (first, second, x):
            e.release()
        assert list(it) == []
        st = c.stats()
        # stream: hit (0, 0), miss (0, 5); get: a hit after the claim
        assert (st["requests"], st["hits"], st["misses"], st["io_bytes"],
                st["payload_bytes"]) == (3, 2, 1, 1632, 1632)
        assert table(c) == [("ready", (0, 0), 0, 0), ("ready", (0, 5), 0, 0),
                            ("empty", None, 0, 0), ("empty", None, 0, 0)]
        c.check()

    bounded(scenario, "get claims a stream reservation once")
    c.close()
    cont.close()
    f.close()


def test_a_stream_claims_another_streams_reservation_once(k3_shard):
    """A second stream reads the first one's unread miss; neither reads it again."""
    f = IOFaults()
    cont = engine.Container(str(k3_shard), io=f)
    c = engine.ExpertCache(cont, **K3_LAYOUT, top_k=2, n_slots=5)

    def scenario() -> None:
        counting(f)
        a = c.stream([(0, 1), (0, 2)])  # two misses, no readers: both kept
        first = next(a)
        assert first.key == (0, 1) and f.reads == 1
        b = list(c.stream([(0, 2), (0, 3)]))  # (0, 2) in flight for a: claimed
        assert sorted(x.key for x in b) == [(0, 2), (0, 3)]
        assert f.reads == 3
        rest = list(a)
        assert [x.key for x in rest] == [(0, 2)] and f.reads == 3
        for x in [first, *b, *rest]:
            assert x.data.tobytes() == k3_expected(x.key[1])
            x.release()
        st = c.stats()
        # a: misses (0, 1), (0, 2); b: (0, 2) a hit once claimed, (0, 3) a miss
        assert (st["requests"], st["hits"], st["misses"], st["io_bytes"],
                st["payload_bytes"]) == (4, 1, 3, 3 * 1632, 3 * 1632)
        assert all(s["holds"] == 0 and s["state"] != "inflight" for s in c.slots())
        c.check()

    bounded(scenario, "a stream claims another streams reservation once")
    c.close()
    cont.close()
    f.close()


def test_a_stream_yields_a_reservation_a_get_served_after_its_read(k3_shard):
    """A get that claimed and released the expert leaves the stream's hold intact."""
    f = IOFaults()
    cont = engine.Container(str(k3_shard), io=f)
    c = engine.ExpertCache(cont, **K3_LAYOUT, top_k=2, n_slots=3)

    def scenario() -> None:
        counting(f)
        it = c.stream([(0, 4), (0, 6)])
        c.get(0, 6).release()  # claimed and served before the consumer got to it
        assert f.reads == 1
        assert table(c)[1] == ("ready", (0, 6), 1, 0)  # the stream's own hold
        got = list(it)
        assert [x.key for x in got] == [(0, 6), (0, 4)] or \
            [x.key for x in got] == [(0, 4), (0, 6)]
        assert f.reads == 2
        for x in got:
            assert x.data.tobytes() == k3_expected(x.key[1])
            x.release()
        st = c.stats()
        assert (st["requests"], st["hits"], st["misses"], st["io_bytes"]) == (
            3, 1, 2, 2 * 1632)
        assert table(c) == [("ready", (0, 4), 0, 0), ("ready", (0, 6), 0, 0),
                            ("empty", None, 0, 0)]
        c.check()


    bounded(scenario, "a stream yields a reservation a get served after its read")
    c.close()
    cont.close()
    f.close()
