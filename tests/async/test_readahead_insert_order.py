"""Read-ahead whose reads end out of order: the policy is told as getmany tells it.

On mixtral-mini (keys in three shards, one slowed by the C delay fault, or
two by different delays through chained injectors, a third failing), a
drained read-ahead leaves getmany's and the oracle's residents whatever the
completion order; hits on a publish whose insert is held back reach the
policy after that insert; a held-back publish is no eviction candidate until
it is the only one; a stream's inserts reach the policy in the order given;
and on k3-mini an ARC stream inserts only after all its reservations.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.helpers import (
    DELAY_US,
    K3_LAYOUT,
    load_preset,
    open_container,
    open_preset,
    semantic,
)
from xcache import engine
from xcache.faults.io import Fault, IOFaults
from xcache.oracle.cache import CacheModel

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
