"""Each policy's victims on one short trace, computed by hand.

Cache: k3-mini, 3 slots, top-k 2; every get is released at once.  Trace of
experts (layer 0): 0 1 2 0 0 1 3 4 0 2 4.  Ticks: each get touches, so the
first six gets stamp last_use 1..6 and leave
    slot0 = e0 (freq 3, last_use 5, insert 1)
    slot1 = e1 (freq 2, last_use 6, insert 2)
    slot2 = e2 (freq 1, last_use 3, insert 3)
and the remaining five gets evict as worked out per policy below.
"""

from __future__ import annotations

import pytest

from tests.helpers import K3_LAYOUT, expert_bytes, open_container
from xcache import engine

TRACE = [0, 1, 2, 0, 0, 1, 3, 4, 0, 2, 4]

EXPECTED = {
    # min last_use: get3 -> e2 (3); get4 -> e0 (5; e1 6, e3 7);
    # get0 -> e1 (6); get2 -> e3 (7); get4 hits.
    "lru": [2, 0, 1, 3],
    # min insert: e0 (1), e1 (2), e2 (3), then e3 (7); get4 hits.
    "fifo": [0, 1, 2, 3],
    # min (freq, last_use): get3 -> e2 (1,3); get4 -> e3 (1,7); get0 hits
    # (e0 freq 4); get2 -> e4 (1,8); get4 -> e2 (1,10) beats e1 (2,6).
    "lfu": [2, 3, 4, 2],
    # sample 4 >= 3 candidates: every candidate is looked at, so LFU's answer.
    "lfru": [2, 3, 4, 2],
    # sample 2 of 3, seed 7.  Indices h(7, e*2+i) % 3 into the candidates in
    # slot order, from splitmix64((7 << 32) ^ x): e=0 -> [1, 0], e=1 -> [2, 1],
    # e=2 -> [1, 2].  get3: slots 1,0 = e1 (2,6), e0 (3,5) -> e1.
    # get4: slots 2,1 = e2 (1,3), e3 (1,7) -> e2.  get0 hits.
    # get2: slots 1,2 = e3 (1,7), e4 (1,8) -> e3.  get4 hits.
    "lfru:sample=2,seed=7": [1, 2, 3],
    # counts before each miss's own increment: get3 -> e2 (1; e0 3, e1 2);
    # get4 -> e3 (1); get0 hits (e0 4); get2 -> e4 (1); get2 makes count[e2]
    # 2 (it survived eviction), so get4 ties e1 and e2 at 2 -> older last_use
    # e1 (6 < 10).
    "hotness": [2, 3, 4, 1],
    # halving after requests 4 and 8: after req 4 counts e0 1, e1 0, e2 0;
    # req 5, 6 -> e0 2, e1 1.  get3 -> e2 (0).  get4: e1 1 (lu 6) vs e3 1
    # (lu 7) -> e1; req 8 halves to e0 1, others 0.  get0 hits (e0 2).
    # get2: e3 0 (lu 7), e4 0 (lu 8) -> e3.  get4 hits.
    "hotness:period=4": [2, 1, 3],
}


@pytest.mark.parametrize("policy", list(EXPECTED))
def test_victim_sequence(k3_shard, policy):
    """The keys evicted, in order, are the hand-computed ones."""
    path = k3_shard
    c = engine.ExpertCache(open_container(path), **K3_LAYOUT, n_slots=3, top_k=2,
                           policy=policy)
    victims = []
    for e in TRACE:
        before = c.resident()
        with c.get(0, e) as x:
            assert bytes(x.data) == expert_bytes(path, e)
        c.check()
        victims += sorted(k[1] for k in before - c.resident())
    assert victims == EXPECTED[policy]
    s = c.stats()
    assert s["evictions"] == len(victims)
    assert s["misses"] == 3 + len(victims)


def test_lfu_evicts_an_unconsumed_prefetch_first(k3_shard):
    """A batch publish starts at freq 0, below any demand-loaded expert."""
    path = k3_shard
    c = engine.ExpertCache(open_container(path), **K3_LAYOUT, n_slots=3, top_k=2,
                           policy="lfu")
    for e in (0, 1):
        c.get(0, e).release()
    assert c.getmany([(0, 2)]) == 1  # freq 0, newest
    c.get(0, 3).release()
    c.check()
    assert c.resident() == {(0, 0), (0, 1), (0, 3)}
    assert c.stats()["prefetch_evicted_unused"] == 1
