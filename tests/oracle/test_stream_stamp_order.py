"""The cache model's stamp order for the queue policies (docs/CACHE.md "Stamp order").

A stream's misses with no readers stay under way until the consumer (or a
claim) reads them, and a stamped publish is told to the policy only once
every reservation stamped before it has ended; until then it is *untold*:
served, but no victim candidate, its hits told after its insert.
"""

from __future__ import annotations

import pytest

from xcache.oracle.cache import CacheModel
from xcache.oracle.cache_types import INFLIGHT, READY
from xcache.oracle.errors import IOFailure


def _arc(n_slots: int = 6) -> CacheModel:
    return CacheModel([0], 16, 2, expert_bytes=100, n_slots=n_slots, policy="arc")


def test_a_hit_between_a_streams_open_and_its_reads_reaches_the_policy_first():
    """A get hit while a stream's misses are unread is in T2 before their inserts."""
    m = _arc()
    m.release(m.get(0, 0))
    opened = m.open_stream([(0, 1), (0, 2)])
    assert opened is not None and opened.misses == [(0, 1), (0, 2)]
    assert [m.slots()[s].state for s in (1, 2)] == [INFLIGHT, INFLIGHT]
    m.release(m.get(0, 0))  # a hit: told now
    assert (m.queue.T1, m.queue.T2) == ([], [0])
    refs = [m.end_read(0, 1), m.end_read(0, 2)]
    assert (m.queue.T1, m.queue.T2) == ([1, 2], [0])
    for r in refs:
        assert r is not None
        m.release(r)
    assert m.check() is None


def test_a_read_ended_out_of_stamp_order_is_untold_until_the_earlier_one_ends():
    """The later stamp published first is untold; its hit follows its insert."""
    m = _arc()
    m.open_stream([(0, 3), (0, 4)])
    r4 = m.end_read(0, 4)  # a claim: out of stamp order
    assert r4 is not None and m.slots()[1].state == READY
    assert (m.queue.T1, m.queue.T2) == ([], [])
    m.release(r4)
    assert 1 not in m._candidates()
    m.release(m.get(0, 4))  # a hit on the untold slot: held back
    assert (m.queue.T1, m.queue.T2) == ([], [])
    assert m.check() is None
    r3 = m.end_read(0, 3)
    assert (m.queue.T1, m.queue.T2) == ([3], [4])
    assert r3 is not None
    m.release(r3)
    assert m.check() is None and m._oq == [] and m._untold == {}


def test_a_failed_earlier_read_lets_the_later_inserts_be_told():
    """An earlier stamped read that fails lets the untold one after it be told."""
    m = _arc()
    m.open_stream([(0, 5), (0, 6)])
    r6 = m.end_read(0, 6)
    assert m.queue.T1 == []
    with pytest.raises(IOFailure):
        m.end_read(0, 5, fail="io")
    assert m.queue.T1 == [6] and m.slots()[0].state == "EMPTY"
    assert r6 is not None
    m.release(r6)
    assert m.check() is None


def test_untold_slots_are_told_first_when_they_are_the_only_candidates():
    """With no told candidate, a victim choice tells the untold slots first."""
    m = _arc(n_slots=3)
    m.open_stream([(0, 7), (0, 8), (0, 9)])  # three misses, all unread
    r9 = m.end_read(0, 9)
    assert r9 is not None
    m.release(r9)
    assert m._candidates() == []
    ref = m.get(0, 10)  # needs a victim: (0, 9) is told, then evicted
    assert m.slot_of(0, 9) is None and m.slot_of(0, 10) == 2
    assert m.stats()["evictions"] == 1 and m.queue.B1 == [9]
    m.release(ref)
    for k in (7, 8):
        r = m.end_read(0, k)
        assert r is not None
        m.release(r)
    assert m.queue.T1 == [10, 7, 8] and m.check() is None


def test_a_stream_run_whole_tells_its_inserts_in_the_order_given():
    """stream() (open, then each read in order) tells the inserts in order."""
    m = _arc()
    refs = m.stream([(0, 11), (0, 12), (0, 13)])
    assert m.queue.T1 == [11, 12, 13] and m._oq == []
    for r in refs:
        m.release(r)
    assert m.check() is None


def test_a_broken_stamp_order_is_named():
    """The model's own check names a stamp order that lost an untold slot."""
    m = _arc()
    m.open_stream([(0, 14), (0, 15)])
    m.end_read(0, 15)
    m._oq.remove(1)  # the untold slot off the order: broken on purpose
    assert m.check() == "INV-ORDER"
