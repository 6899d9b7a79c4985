"""The cache model against docs/CACHE.md: the worked example, k3-mini numbers,
hand-computed victim sequences per policy, holds, pins, batches and failures."""

from __future__ import annotations

import pytest

from xcache.oracle.cache import (
    CacheModel,
    lfru_sample,
    parse_policy,
    splitmix64,
)
from xcache.oracle.cache_types import stride_bytes
from xcache.oracle.errors import (
    AllPinned,
    Budget,
    IOFailure,
    Misuse,
    NotFound,
    ShortRead,
)

K3_EXPERT_BYTES = 1632  # DESIGN §3: 3 x (512 + 32)


def k3(policy: str = "lru", n_slots: int = 8) -> CacheModel:
    """A k3-mini-shaped cache: layer 0, 24 experts, top-k 4."""
    return CacheModel([0], 24, 4, expert_bytes=K3_EXPERT_BYTES, n_slots=n_slots,
                      policy=policy)


def small(policy: str, n_slots: int) -> CacheModel:
    """A tiny cache for hand-computed sequences: layer 0, 8 experts, top-k 1."""
    return CacheModel([0], 8, 1, expert_bytes=100, n_slots=n_slots, policy=policy)


def run(cache: CacheModel, experts: list[int]) -> list[int]:
    """Get-and-release each expert of layer 0; return the experts evicted, in order."""
    victims = []
    for e in experts:
        before = cache.resident()
        cache.release(cache.get(0, e))
        victims += [x for _, x in before - cache.resident()]
        assert cache.check() is None
    return victims


def test_worked_example():
    """The worked example of docs/CACHE.md, number for number."""
    c = k3()
    assert c.getmany([(0, e) for e in range(4)]) == 4
    s = c.stats()
    assert (s["requests"], s["prefetch_loads"], s["payload_bytes"]) == (0, 4, 6528)
    assert [(v.state, v.key) for v in c.slots()[:4]] == [("READY", (0, e))
                                                         for e in range(4)]
    run(c, [0, 1, 2, 3])
    s = c.stats()
    assert (s["hits"], s["adjusted_hits_aggregate"],
            s["adjusted_hits_exact"]) == (4, 0, 0)
    run(c, [0, 1, 2, 3])
    s = c.stats()
    assert (s["hits"], s["adjusted_hits_aggregate"],
            s["adjusted_hits_exact"]) == (8, 4, 4)
    c.reset_stats()
    run(c, [0, 1, 2, 3])
    s = c.stats()
    assert (s["hits"], s["prefetch_loads"], s["payload_bytes"],
            s["adjusted_hits_exact"]) == (4, 0, 0, 4)
    cold = k3()
    cold.getmany([(0, e) for e in range(4)])
    run(cold, [0, 0, 0, 0])
    s = cold.stats()
    assert (s["hits"], s["adjusted_hits_aggregate"], s["adjusted_hits_exact"],
            s["prefetch_unused_resident"]) == (4, 0, 3, 3)
    assert s["adjusted_hit_rate_exact"] == 3 / 4


def test_k3_mini_three_serial_passes_under_lru():
    """Three passes over 24 experts with 8 slots: 72 misses, 64 evictions (LRU)."""
    c = k3()
    run(c, list(range(24)) * 3)
    s = c.stats()
    assert (s["requests"], s["misses"], s["hits"], s["evictions"]) == (72, 72, 0, 64)
    assert s["payload_bytes"] == 72 * K3_EXPERT_BYTES
    assert c.resident() == {(0, e) for e in range(16, 24)}


def test_budget_and_stride():
    """Budgets below top_k + 1 slots fail and say what works; bytes use the stride."""
    assert stride_bytes(K3_EXPERT_BYTES) == 12288
    for n in (5, 8):
        c = CacheModel([0], 24, 4, expert_bytes=1632, budget_bytes=n * 12288 + 1)
        assert c.n_slots == n
    with pytest.raises(Budget, match="needs 5 slots.*holds 4.*61440"):
        CacheModel([0], 24, 4, expert_bytes=1632, budget_bytes=5 * 12288 - 1)
    with pytest.raises(Budget):
        k3(n_slots=4)
    with pytest.raises(Misuse):
        CacheModel([0], 24, 4, expert_bytes=1632)


# Hand-computed victim sequences on the trace 0 1 2 0 3 1 4 with 3 slots.
# Notation: slot=(key, freq, last_use, insert_tick). After 0 1 2: s0=(0,1,1,1),
# s1=(1,1,2,2), s2=(2,1,3,3); the hit on 0 makes s0=(0,2,4,1).

def test_lru_victims():
    """LRU, min last_use: 3 takes s1 (lu 2), 1 takes s2 (lu 3), 4 takes s0 (lu 4)."""
    c = small("lru", 3)
    assert run(c, [0, 1, 2, 0, 3, 1, 4]) == [1, 2, 0]
    assert [v.key[1] for v in c.slots()] == [4, 3, 1]


def test_fifo_victims():
    """FIFO, min insert_tick: 3 takes s0 (ins 1) despite its hit; 1 hits; 4 takes s1."""
    c = small("fifo", 3)
    assert run(c, [0, 1, 2, 0, 3, 1, 4]) == [0, 1]
    assert [v.key[1] for v in c.slots()] == [3, 4, 2]


def test_lfu_victims():
    """LFU, min (freq, lu): 3 takes s1 (1,2); 1 takes s2 (1,3); 4 takes s1 (1,5)."""
    c = small("lfu", 3)
    assert run(c, [0, 1, 2, 0, 3, 1, 4]) == [1, 2, 3]
    assert [v.key[1] for v in c.slots()] == [0, 4, 1]


def test_splitmix64_golden():
    """splitmix64 matches the reference sequence seeded 0 (outputs 1 and 2)."""
    assert splitmix64(0) == 0xE220A8397B1DCDAF
    assert splitmix64(0x9E3779B97F4A7C15) == 0x6E789E6AA1B965F4


def test_lfru_victims():
    """LFRU (sample 2, seed 0) picks min (freq, last_use) among the sampled slots.

    h(0, x) % 4 for x = 0..5 is 3, 1, 2, 1, 2, 2 (splitmix64(x) mod 4). After
    0 1 2 3 3 1: s0=(0,f1,lu1) s1=(1,f2,lu6) s2=(2,f1,lu3) s3=(3,f2,lu5).
    Miss 4, e=0: sample s3, s1 -> s3 (2,5). Miss 5, e=1: s2, s1 -> s2 (1,3).
    Miss 6, e=2: s2, s2 -> s2, now holding 5. Plain LFU would take s0 first.
    """
    assert [splitmix64(x) % 4 for x in range(6)] == [3, 1, 2, 1, 2, 2]
    assert lfru_sample(0, 1, 2, 4) == [2, 1]
    c = small("lfru:sample=2,seed=0", 4)
    assert run(c, [0, 1, 2, 3, 3, 1, 4, 5, 6]) == [3, 2, 5]
    full = small("lfru", 4)  # sample 4 >= 4 candidates: all considered
    assert run(full, [0, 1, 2, 3, 3, 1, 4]) == [0]


def test_hotness_halving_changes_the_victim():
    """Hotness: 0 0 0 1 1 gives counts 3 and 2; halving at 5 requests ties them at 1.

    With period 5 the tie goes to the older last_use (key 0, lu 3 vs 5);
    with the default period 256, key 1 (count 2) goes.
    """
    assert run(small("hotness:period=5", 2), [0, 0, 0, 1, 1, 2]) == [0]
    assert run(small("hotness", 2), [0, 0, 0, 1, 1, 2]) == [1]


def test_hotness_counts_after_the_victim_is_chosen():
    """The 6th request is counted (and halves, period 6) after its victim is chosen."""
    c = small("hotness:period=6", 2)
    assert run(c, [0, 0, 0, 1, 1, 2]) == [1]  # chosen with counts 3 and 2
    assert c.hot == {0: 1, 1: 1, 2: 0}  # then 2 counted, then all halved


def test_hotness_counts_survive_eviction_and_reset():
    """Counts belong to keys: key 0 comes back hot after eviction and reset_stats."""
    c = small("hotness", 2)
    run(c, [0, 0, 0, 1, 2])  # 2 evicts 1 (count 1 < 3)
    c.reset_stats()
    assert run(c, [1, 3]) == [2, 1]
    assert c.hot[0] == 3


def test_policy_specs():
    """Policy specs parse with defaults; unknown names and parameters are misuse."""
    assert parse_policy("lfru:sample=3,seed=7") == ("lfru", {"sample": 3, "seed": 7})
    assert parse_policy("hotness") == ("hotness", {"period": 256})
    assert parse_policy("s3fifo") == ("s3fifo", {"small": 10, "ghost": 90,
                                                 "promote": 2})
    assert parse_policy("s3fifo:small=0,promote=1") == (
        "s3fifo", {"small": 0, "ghost": 90, "promote": 1})
    assert parse_policy("arc") == ("arc", {})
    for bad in ("arc:p=1", "s3fifo:small=101", "s3fifo:ghost=101",
                "s3fifo:promote=0", "s3fifo:promote=4", "lru:x=1", "lfru:sample=0",
                "lfru:sample=x", "hotness:period"):
        with pytest.raises(Misuse):
            parse_policy(bad)
    with pytest.raises(Misuse) as e:
        parse_policy("nope")
    assert str(e.value) == ("unknown policy 'nope'; valid: arc, fifo, "
                            "hotness:period=N, lfru:sample=N,seed=N, lfu, lru, "
                            "s3fifo:small=N,ghost=N,promote=N, sieve")


def test_holds_and_pins_protect_and_all_pinned_changes_nothing():
    """Held and pinned slots are never victims; ALL_PINNED changes nothing."""
    c = small("lru", 2)
    ref = c.get(0, 0)
    c.release(c.get(0, 1))
    c.pin(0, 1)
    c.pin(0, 1)
    before = (c.stats(), c.slots(), c.tick, dict(c.hot))
    with pytest.raises(AllPinned):
        c.get(0, 2)
    assert (c.stats(), c.slots(), c.tick, dict(c.hot)) == before
    c.unpin(0, 1)
    with pytest.raises(AllPinned):
        c.get(0, 2)
    c.unpin(0, 1)
    c.release(c.get(0, 2))  # 0 is still held, so 1 goes
    assert c.resident() == {(0, 0), (0, 2)}
    c.release(ref)
    assert c.check() is None


def test_misuse_and_not_found():
    """Bad keys, double releases, foreign refs and unpinning unpinned keys: misuse."""
    c, other = small("lru", 2), small("lru", 2)
    for layer, expert in ((1, 0), (0, 8), (0, -1), (0, True)):
        with pytest.raises(Misuse):
            c.get(layer, expert)
    ref = c.get(0, 0)
    c.release(ref)
    with pytest.raises(Misuse):
        c.release(ref)
    with pytest.raises(Misuse):
        c.release(other.get(0, 0))
    with pytest.raises(NotFound):
        c.pin(0, 5)
    with pytest.raises(Misuse):
        c.unpin(0, 0)
    before = (c.stats(), c.slots(), c.tick)
    with pytest.raises(Misuse):
        c.getmany([(0, 1), (0, 99), (0, 2)])
    assert (c.stats(), c.slots(), c.tick) == before


def test_keys_use_layer_positions():
    """Key ids use the position of the layer, so sparse layer lists never alias."""
    c = CacheModel([3, 7], 4, 1, expert_bytes=10, n_slots=4)
    assert c.key_id(7, 2) == 6 and c.key_of(6) == (7, 2)
    with pytest.raises(Misuse):
        c.get(4, 0)


def test_getmany_protects_resident_batch_keys():
    """A resident key named in the batch is touched and cannot be evicted by the batch.

    Slots hold 0 1 2 (lu 1 2 3). Batch 0 5 6 7: 0 is touched and protected;
    5 takes s1 (lu 2), 6 takes s2, 7 finds no candidate (short count).
    """
    c = small("lru", 3)
    run(c, [0, 1, 2])
    assert c.getmany([(0, 0), (0, 5), (0, 0), (0, 6), (0, 7)]) == 2
    assert [v.key[1] for v in c.slots()] == [0, 5, 6]
    assert [v.last_use for v in c.slots()] == [4, 5, 6]
    s = c.stats()
    assert (s["evictions"], s["prefetch_loads"], s["requests"]) == (2, 2, 3)  # run's 3
    assert [v.freq for v in c.slots()] == [1, 0, 0]


def test_prefetch_marks_and_evicted_unused():
    """Evicting an unused prefetch counts prefetch_evicted_unused; a hit clears it."""
    c = small("lru", 2)
    c.getmany([(0, 0), (0, 1)])
    run(c, [0, 2])  # 0 first-used; 2 evicts 1, still marked
    s = c.stats()
    assert (s["prefetch_first_uses"], s["prefetch_evicted_unused"], s["evictions"]) == (
        1, 1, 1)
    assert s["prefetch_unused_resident"] == 0


def test_injected_failures_in_getmany():
    """A failed batch read leaves its slot EMPTY and counts the failure and bytes."""
    c = small("lru", 3)
    assert c.getmany([(0, 0), (0, 1), (0, 2)], failures={(0, 1): "short"}) == 2
    s = c.stats()
    assert (s["prefetch_loads"], s["load_failures"], s["short_reads"], s["io_errors"],
            s["io_bytes"], s["payload_bytes"]) == (2, 1, 1, 0, 300, 200)
    assert [v.state for v in c.slots()] == ["READY", "EMPTY", "READY"]
    run(c, [5])  # the lowest EMPTY slot is taken before any victim
    assert c.slot_of(0, 5) == 1 and c.stats()["evictions"] == 0


def test_injected_failure_in_get():
    """A failed demand read counts as request and miss; the victim stays evicted."""
    c = small("lru", 2)
    run(c, [0, 1])
    with pytest.raises(IOFailure) as info:
        c.get(0, 2, fail="io")
    assert (info.value.layer, info.value.expert) == (0, 2)
    assert not isinstance(info.value, ShortRead)
    s = c.stats()
    assert (s["requests"], s["misses"], s["evictions"], s["load_failures"],
            s["io_errors"], s["io_bytes"], s["payload_bytes"]) == (
                3, 3, 1, 1, 1, 300, 200)
    assert c.resident() == {(0, 1)}
    with pytest.raises(ShortRead):
        c.get(0, 0, fail="short")
    assert c.stats()["short_reads"] == 1 and c.check() is None


def test_s3fifo_victims():
    """S3-FIFO, 4 slots, small=50: warm-up, S pass, ghost re-entry, M pass first.

    By docs/CACHE.md "S3-FIFO": s = 2, M's share c - s = 2, G holds at most
    4 * 90 // 100 = 3 keys, promote = 2; every insert enters with freq 0.
    0 1: S=[0,1].  2 3: S is full before any eviction, so they enter M
       (warm-up): M=[2,3].  0: hit, f0=1.
    4: |M| = 2 is not above 2 and S is not empty: S pass: 0 (f1 < 2) goes,
       G=[0]; S=[1,4].
    5: S pass: 1 goes, G=[0,1]; S=[4,5].  2, 4: hits, f2=1, f4=1.
    0: its request takes it out of G (G=[1]); S pass: 4 (f1) goes, G=[1,4];
       0 enters M: M=[2,3,0]; S=[5].
    6: |M| = 3 > 2: M pass first: 2 (f1) rotates to the back at f0, 3 (f0)
       goes, dropped not ghosted: M=[0,2]; S=[5,6].
    7: S pass: 5 goes, G=[1,4,5]; S=[6,7].
    3: no ghost: S pass: 6 goes; G is full, 1 dropped, G=[4,5,6]; S=[7,3].
    """
    c = small("s3fifo:small=50", 4)
    assert run(c, [0, 1, 2, 3, 0, 4, 5, 2, 4, 0, 6, 7, 3]) == [0, 1, 4, 3, 5, 6]
    assert [v.key[1] for v in c.slots()] == [0, 7, 2, 3]
    q = c.queue
    assert (q.S, q.M, q.G, q.freq) == ([7, 3], [0, 2], [4, 5, 6],
                                       {0: 0, 2: 0, 3: 0, 7: 0})


def test_s3fifo_protected_entries():
    """Protected S entries: promoted at freq >= promote, left in place below it.

    3 slots, small=67: s = 2, M's share 1, G holds 2.  0 1 fill S=[0,1], 2
    enters M (warm-up); 0 is hit three times (f0=3) and held; 1 is pinned
    (f1=0).
    3: S pass: 0 (f3, held) moves to M=[2,0] at f0; 1 (f0, pinned) stays;
       S gives no victim, so the M pass: 2 (f0) goes, not ghosted; S=[1,3].
    4: |M| = 1: S pass: 1 stays, 3 goes, G=[3]; S=[1,4].  Unpin 1, release 0.
    5: S pass: 1 goes, G=[3,1]; S=[4,5].
    6: S pass: 4 goes; G full, 3 dropped: G=[1,4]; S=[5,6].
    """
    c = small("s3fifo:small=67", 3)
    run(c, [0, 1, 2, 0, 0])
    ref = c.get(0, 0)
    c.pin(0, 1)
    assert run(c, [3]) == [2]
    assert (c.queue.S, c.queue.M, c.queue.G) == ([1, 3], [0], [])
    assert run(c, [4]) == [3]
    c.unpin(0, 1)
    c.release(ref)
    assert run(c, [5]) == [1]
    assert (c.queue.S, c.queue.M, c.queue.G) == ([4, 5], [0], [3, 1])
    assert run(c, [6]) == [4]
    assert c.queue.G == [1, 4]


def test_arc_victims():
    """ARC, 3 slots: a ghost hit adapts p before its victim; B1 is trimmed on evictions.

    By docs/CACHE.md "ARC" (c = 3, p = 0.0; REPLACE(q): oldest candidate of
    T1 if |T1| > q (or == q for a B2 hit) or T2 is empty, else of T2):
    0 1 2: T1=[0,1,2].  0: hit, T1=[1,2], T2=[0].
    3: |T1| + |B1| = 2 < 3: REPLACE(0): 1 goes, B1=[1]; T1=[2,3].
    1: in B1: p = min(3, 0 + max(1, 0 / 1)) = 1 first, then REPLACE(1):
       |T1| = 2 > 1, 2 goes; B1=[2], T2=[0,1], T1=[3].
    4: REPLACE(1): |T1| = 1 is not > 1: T2's oldest, 0, goes, B2=[0];
       T1=[3,4].
    0: in B2: p = max(0, 1 - max(1, 1 / 1)) = 0, REPLACE(0, from B2): 3 goes,
       B1=[2,3]; T2=[1,0], T1=[4].
    5: |T1| + |B1| = 3 >= 3: B1's oldest, 2, is dropped; REPLACE(0): 4 goes,
       B1=[3,4]; T1=[5].
    2: no ghost: 3 is dropped, 5 goes, B1=[4,5]; T1=[2].
    4: in B1: p = min(3, 0 + max(1, 0 / 2)) = 1, REPLACE(1): |T1| = 1: T2's
       oldest, 1, goes, B2=[1]; B1=[5], T2=[0,4].
    6: REPLACE(1): 0 goes, B2=[1,0]; T1=[2,6], T2=[4].
    """
    c = small("arc", 3)
    assert run(c, [0, 1, 2, 0, 3, 1, 4, 0, 5, 2, 4, 6]) == [1, 2, 0, 3, 4, 5, 1, 0]
    assert [v.key[1] for v in c.slots()] == [2, 6, 4]
    q = c.queue
    assert (q.p, q.T1, q.T2, q.B1, q.B2) == (1.0, [2, 6], [4], [5], [1, 0])


def test_a_copy_of_a_released_reference_is_refused_as_its_slot_allows() -> None:
    """release_copy: refused once the slot is republished or holds nothing; the
    copy of a still-held reference and one that would take another holder's
    hold are not modelled."""
    from xcache.oracle.errors import NotModelled  # noqa: PLC0415

    c = small("lru", 2)
    a = c.get(0, 0)
    with pytest.raises(NotModelled, match="still held"):
        c.release_copy(a)
    c.release(a)
    with pytest.raises(Misuse, match="no hold left"):
        c.release_copy(a)
    b = c.get(0, 0)  # the same publish as a: a's copy would take b's hold
    assert (b.slot, b.generation) == (a.slot, a.generation) == (0, 1)
    with pytest.raises(NotModelled, match="same publish"):
        c.release_copy(a)
    c.release(b)
    c.release(c.get(0, 1))
    c.release(c.get(0, 2))  # 0 is the LRU: slot 0 is republished with 2
    held = c.get(0, 2)
    assert (held.slot, held.generation) == (0, 2)
    with pytest.raises(Misuse, match="republished since"):
        c.release_copy(a)
    assert [s.holds for s in c.slots()] == [1, 0]
    assert c.check() is None
    other = small("lru", 2)
    with pytest.raises(Misuse, match="another cache"):
        other.release_copy(a)


def test_a_stream_into_a_full_cache_gets_its_no_slot_keys_last_or_leaves_them():
    """A stream whose keys find no slot: a consumer holding every expert gets
    them at the end (refused: every slot held); one giving each back first is
    handed them to get later, nothing counted for them yet."""
    for keep_all in (True, False):
        m = small("lru", 2)
        held = [m.get(0, 1), m.get(0, 2)]
        no_slot: list[tuple[int, int]] = []
        if keep_all:
            with pytest.raises(AllPinned):
                m.stream([(0, 3), (0, 4)])
            continue
        assert m.stream([(0, 3), (0, 4)], no_slot=no_slot) == []
        assert no_slot == [(0, 3), (0, 4)]
        assert (m.counters["requests"], m.counters["misses"]) == (2, 2)
        for ref in held:
            m.release(ref)
        ref = m.get(*no_slot[0])  # given back first: a victim now
        assert (ref.layer, ref.expert) == (0, 3)
        assert m.resident() == {(0, 2), (0, 3)}
