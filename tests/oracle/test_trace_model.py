"""The oracle's model of the engine's recorded trace (oracle.trace_model)."""

from __future__ import annotations

import pytest

from xcache.oracle.cache import CacheModel
from xcache.oracle.errors import AllPinned, Misuse, ShortRead
from xcache.oracle.trace_model import TracingCacheModel

pytestmark = pytest.mark.nosan  # pure Python


def model(n_slots: int = 5, policy: str = "lru") -> TracingCacheModel:
    """One layer of 24 experts, top-4, ``n_slots`` slots."""
    return TracingCacheModel([0], 24, 4, expert_bytes=1632, n_slots=n_slots,
                             policy=policy)


def test_gets_record_miss_then_hit():
    """A first get is a miss, a second a hit, each of kind get."""
    m = model()
    for e in (3, 3, 4):
        m.release(m.get(0, e))
    assert m.records == [(0, 3, "get", "miss"), (0, 3, "get", "hit"),
                         (0, 4, "get", "miss")]


def test_a_failed_load_keeps_its_miss():
    """The miss is recorded when the slot is reserved, so a failed read keeps it."""
    m = model()
    with pytest.raises(ShortRead):
        m.get(0, 1, fail="short")
    assert m.records == [(0, 1, "get", "miss")]
    assert m.stats()["requests"] == 1


def test_no_slot_and_bad_keys_record_nothing():
    """A get that finds every slot held, or names a bad key, writes no record."""
    m = model()
    refs = [m.get(0, e) for e in range(5)]
    with pytest.raises(AllPinned):
        m.get(0, 9)
    with pytest.raises(Misuse):
        m.get(0, 24)
    assert [r[3] for r in m.records] == ["miss"] * 5
    for r in refs:
        m.release(r)


def test_batch_outcomes_in_the_order_named():
    """A batch records duplicate, resident, issued and no_slot per key named."""
    m = model()
    m.release(m.get(0, 0))
    held = m.get(0, 0)
    m.records.clear()
    # 5 slots: 0 resident and held; 1..4 take the four free slots; 5 finds none
    n = m.getmany([(0, 1), (0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (0, 5)])
    assert n == 4
    assert m.records == [
        (0, 1, "prefetch", "issued"), (0, 0, "prefetch", "resident"),
        (0, 1, "prefetch", "duplicate"), (0, 2, "prefetch", "issued"),
        (0, 3, "prefetch", "issued"), (0, 4, "prefetch", "issued"),
        (0, 5, "prefetch", "no_slot")]
    m.release(held)


def test_a_resident_key_named_after_a_miss_stays_resident():
    """A key resident at the call is protected before the miss takes a victim."""
    m = model()
    for e in range(5):
        m.release(m.get(0, e))
    m.records.clear()
    m.getmany([(0, 7), (0, 0)])  # 7 cannot evict 0, the LRU key: 1 goes
    assert m.records == [(0, 7, "prefetch", "issued"),
                         (0, 0, "prefetch", "resident")]
    assert sorted(m.resident()) == [(0, 0), (0, 2), (0, 3), (0, 4), (0, 7)]


def test_speculative_prefetch_kind():
    """A speculative prefetch's records are of kind speculative."""
    m = model()
    m.prefetch([(0, 2), (0, 2)], speculative=True)
    assert m.records == [(0, 2, "speculative", "issued"),
                         (0, 2, "speculative", "duplicate")]


def test_stream_records_hits_and_misses_in_the_order_given():
    """A stream's keys are of kind stream: hits and misses in the order given."""
    m = model()
    m.release(m.get(0, 1))
    m.records.clear()
    for r in m.stream([(0, 4), (0, 1), (0, 5)]):
        m.release(r)
    assert m.records == [(0, 4, "stream", "miss"), (0, 1, "stream", "hit"),
                         (0, 5, "stream", "miss")]
    m.release(m.get(0, 1))
    assert m.records[-1] == (0, 1, "get", "hit")


def test_a_stream_of_resident_keys_is_recorded_as_stream_hits():
    """A stream with nothing to read (plain gets) still records kind stream."""
    m = model()
    for e in (1, 2):
        m.release(m.get(0, e))
    m.records.clear()
    for r in m.stream([(0, 2), (0, 1)]):
        m.release(r)
    assert m.records == [(0, 2, "stream", "hit"), (0, 1, "stream", "hit")]


@pytest.mark.parametrize("policy", ["lru", "fifo", "lfu", "s3fifo", "arc"])
def test_the_tracing_model_decides_as_the_model(policy):
    """Recording changes no decision: counters, slots and resident keys match."""
    plain = CacheModel([0], 24, 4, expert_bytes=1632, n_slots=6, policy=policy)
    traced = model(6, policy)
    calls = [("get", 0), ("get", 1), ("many", [2, 3, 2, 9]), ("get", 2),
             ("stream", [4, 0, 5]), ("many", list(range(10, 18))), ("get", 0)]
    for m in (plain, traced):
        for op, arg in calls:
            if op == "get":
                m.release(m.get(0, arg))
            elif op == "many":
                m.getmany([(0, e) for e in arg])
            else:
                for r in m.stream([(0, e) for e in arg]):
                    m.release(r)
    assert traced.stats() == plain.stats()
    assert traced.slots() == plain.slots()
    demand = [r for r in traced.records if r[2] in ("get", "stream")]
    assert len(demand) == traced.stats()["requests"]
    assert sum(r[3] == "miss" for r in demand) == traced.stats()["misses"]
