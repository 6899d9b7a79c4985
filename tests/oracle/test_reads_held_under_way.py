"""The cache model's reads held under way (``begin_read`` / ``end_read``).

docs/CACHE.md: a key whose read is under way is INFLIGHT; a batch skips it
untouched, a stream leaves it for later (counting nothing for it at its
begin), and the read counts in the window it was reserved in.
"""

from __future__ import annotations

import pytest

from xcache.oracle.cache import CacheModel
from xcache.oracle.cache_types import INFLIGHT, READY, UNDER_WAY
from xcache.oracle.errors import AllPinned, IOFailure, Misuse
from xcache.oracle.trace_model import TracingCacheModel


def _model(cls: type[CacheModel] = CacheModel, n_slots: int = 4) -> CacheModel:
    return cls([0], 8, 2, expert_bytes=100, n_slots=n_slots, policy="lru")


def test_a_demand_read_held_is_counted_at_once_and_published_at_its_end():
    """begin_read counts the miss, the slot INFLIGHT; end_read publishes and holds."""
    m = _model()
    m.get(0, 0)  # slot 0
    m.begin_read(0, 1)
    assert m.in_flight(0, 1)
    s = m.slots()[1]
    assert (s.state, s.key, s.holds, s.last_use) == (INFLIGHT, (0, 1), 0, -1)
    st = m.stats()
    assert (st["requests"], st["misses"], st["payload_bytes"], st["io_bytes"]) == (
        2, 2, 100, 100)
    ref = m.end_read(0, 1)
    assert ref is not None and not m.in_flight(0, 1)
    s = m.slots()[1]
    assert (s.state, s.holds, s.freq, s.last_use, s.insert_tick) == (READY, 1, 1, 2, 2)
    st = m.stats()
    assert (st["payload_bytes"], st["io_bytes"]) == (200, 200)
    m.release(ref)
    assert m.check() is None


def test_a_batch_skips_a_key_in_flight_untouched():
    """getmany over a key held under way reserves the others, its clock untouched."""
    m = _model()
    m.begin_read(0, 1)
    tick = m.tick
    assert m.getmany([(0, 1), (0, 2)]) == 1
    assert m.tick == tick + 1  # only (0, 2)'s publish
    assert m.slots()[0].state == INFLIGHT and m.slots()[0].last_use == -1
    assert m.stats()["prefetch_loads"] == 1


def test_a_batch_read_left_under_way_keeps_its_stamp():
    """A batch read left under way is stamped now, published (marked) later."""
    m = _model()
    assert m.getmany([(0, 3)], read=lambda k: UNDER_WAY) == 0
    assert m.in_flight(0, 3) and m.slots()[0].last_use == 1
    m.get(0, 4)  # tick 2
    assert m.end_read(0, 3) is None
    s = m.slots()[0]
    assert (s.state, s.last_use, s.insert_tick, s.freq, s.mark) == (
        READY, 1, 1, 0, True)
    st = m.stats()
    assert (st["prefetch_loads"], st["payload_bytes"], st["io_bytes"]) == (1, 200, 200)
    assert m.check() is None


def test_a_stream_leaves_a_key_in_flight_for_later():
    """A stream over a key held under way is not plain, counts its hit and miss only."""
    m = _model()
    m.get(0, 0)
    m.begin_read(0, 1)
    refs = m.stream([(0, 0), (0, 1)])  # (0, 0) READY: a hit; (0, 1) left
    assert [(r.layer, r.expert) for r in refs] == [(0, 0)]
    st = m.stats()
    assert (st["requests"], st["hits"], st["misses"]) == (3, 1, 2)
    for r in refs:
        m.release(r)


def test_a_read_reserved_before_reset_counts_in_no_window():
    """end_read after reset_stats publishes, but counts no bytes, load or mark."""
    m = _model()
    m.getmany([(0, 5)], read=lambda k: UNDER_WAY)
    m.reset_stats()
    m.end_read(0, 5)
    st = m.stats()
    assert (st["prefetch_loads"], st["payload_bytes"], st["io_bytes"],
            st["prefetch_unused_resident"]) == (0, 0, 0, 0)
    assert m.resident() == {(0, 5)}


def test_a_failed_read_held_is_counted_and_raised():
    """end_read with a failure empties the slot, counts it, raises for a demand."""
    m = _model()
    m.begin_read(0, 6)
    with pytest.raises(IOFailure):
        m.end_read(0, 6, fail="io")
    st = m.stats()
    assert (st["load_failures"], st["io_errors"], st["payload_bytes"]) == (1, 1, 0)
    assert m.slots()[0].state == "EMPTY" and m.check() is None


def test_begin_read_refuses_what_it_cannot_hold():
    """A resident key is misuse; no free slot is AllPinned with nothing counted."""
    m = _model(n_slots=3)
    m.get(0, 0)
    with pytest.raises(Misuse):
        m.begin_read(0, 0)
    refs = [m.get(0, e) for e in (1, 2)]
    with pytest.raises(AllPinned):
        m.begin_read(0, 3)
    assert m.stats()["requests"] == 3
    with pytest.raises(Misuse):
        m.end_read(0, 3)
    for r in refs:
        m.release(r)


def test_a_traced_batch_records_a_key_in_flight():
    """The trace model records ``inflight`` for a batch key whose read is held."""
    m = _model(TracingCacheModel)
    m.begin_read(0, 1)
    m.getmany([(0, 1), (0, 2)])
    assert m.records == [(0, 1, "get", "miss"), (0, 1, "prefetch", "inflight"),
                         (0, 2, "prefetch", "issued")]
