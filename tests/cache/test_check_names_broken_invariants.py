"""check() names each broken INV-*: the checker verified on a corrupted cache.

The corruption comes from the test hook ``xc_testhook_break_check``
(``engine/csrc/xc_testhooks.c``): it breaks one field, runs
``xc_cache_check`` and restores the field, so each test also proves the
cache is sound again afterwards.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import K3_LAYOUT
from xcache import engine
from xcache.engine import _lib

KEY_BASE = 0  # layer 0: key == expert


def open_cache(k3_shard: Path, policy: str = "lru") -> engine.ExpertCache:
    """A cache of 8 slots with experts 0, 1, 2 resident and released."""
    cont = engine.Container(str(k3_shard))
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, policy=policy)
    for e in (0, 1, 2):
        cache.get(0, e).release()
    return cache


def slot_of(cache: engine.ExpertCache, expert: int) -> int:
    """The slot index holding (0, expert)."""
    return [s["key"] for s in cache.slots()].index((0, expert))


def empty_slot(cache: engine.ExpertCache) -> int:
    """The first EMPTY slot."""
    return [s["state"] for s in cache.slots()].index("empty")


def brk(cache: engine.ExpertCache, what: str, a: int = -1,
        b: int = -1) -> tuple[int, str]:
    """Run the hook: (check()'s INV number, the recorded message)."""
    lib = _lib.lib()
    rc = lib.xc_testhook_break_check(cache._ptr, getattr(lib, "XC_TH_" + what), a, b)
    return int(rc), _lib.last_error()[4]


def test_an_intact_cache_checks_clean_and_the_hook_restores_every_field(k3_shard):
    """Before and after any corruption check() is clean and the slots are unchanged."""
    cache = open_cache(k3_shard)
    before = cache.slots()
    assert brk(cache, "READS")[0] == 4
    assert cache.slots() == before
    cache.check()
    with cache.get(0, 1) as ex:  # still serves, byte-exact
        assert ex.data.nbytes == 1632
    assert cache.stats()["hits"] == 1


def test_key_unique_bad_state(k3_shard):
    """A slot in no known state is INV-KEY-UNIQUE naming the slot and state."""
    cache = open_cache(k3_shard)
    s = slot_of(cache, 1)
    assert brk(cache, "SLOT_STATE", s) == (
        1, f"INV-KEY-UNIQUE: [key.state] slot {s} has state 7")


def test_key_unique_key_out_of_range(k3_shard):
    """A key past n_keys (24) is INV-KEY-UNIQUE."""
    cache = open_cache(k3_shard)
    s = slot_of(cache, 2)
    assert brk(cache, "SLOT_KEY_RANGE", s) == (
        1, f"INV-KEY-UNIQUE: [key.range] slot {s} key 24 out of range")


def test_key_unique_same_key_in_two_slots(k3_shard):
    """Two slots with one key: INV-KEY-UNIQUE names the key and both slots."""
    cache = open_cache(k3_shard)
    a, b = slot_of(cache, 0), slot_of(cache, 2)
    lo, hi = sorted((a, b))
    assert brk(cache, "KEY_TWICE", a, b) == (
        1, f"INV-KEY-UNIQUE: [key.twice] key 0 in slots {lo} and {hi}")


def test_index_points_nowhere(k3_shard):
    """A resident key the index does not map is INV-INDEX."""
    cache = open_cache(k3_shard)
    s = slot_of(cache, 1)
    assert brk(cache, "INDEX", s) == (
        2, f"INV-INDEX: [index.slot] key 1 maps to slot -1 but is in slot {s}")


_FIELDS = [(0, "holds", "holds 1 pins 0 mark 0 spec 0"),
           (1, "pins", "holds 0 pins 1 mark 0 spec 0"),
           (2, "prefetch_mark", "holds 0 pins 0 mark 1 spec 0"),
           (3, "spec_mark", "holds 0 pins 0 mark 0 spec 1")]


@pytest.mark.parametrize("field,tid,text", _FIELDS)
def test_empty_slot_with_any_field_set(k3_shard, field, tid, text):
    """An EMPTY slot with a hold, pin, mark or spec flag: INV-EMPTY, each its own id."""
    cache = open_cache(k3_shard)
    s = empty_slot(cache)
    assert brk(cache, "EMPTY_FIELD", s, field) == (
        3, f"INV-EMPTY: [empty.{tid}] empty slot {s} has {text}")


@pytest.mark.parametrize("field,tid,text", _FIELDS)
def test_inflight_slot_with_any_field_set(k3_shard, field, tid, text):
    """An INFLIGHT slot with a hold, pin, mark or spec flag: INV-INFLIGHT, own id."""
    cache = open_cache(k3_shard)
    s = slot_of(cache, 0)
    assert brk(cache, "INFLIGHT_FIELD", s, field) == (
        4, f"INV-INFLIGHT: [inflight.{tid}] slot {s} in flight has {text}")


def test_inflight_count_differs_from_reads(k3_shard):
    """A read counted with no INFLIGHT slot is INV-INFLIGHT."""
    cache = open_cache(k3_shard)
    assert brk(cache, "READS") == (
        4, "INV-INFLIGHT: [inflight.reads] 0 slots in flight but 1 reads under way")


@pytest.mark.parametrize("variant", [0, 1, 2])
def test_clock_out_of_order(k3_shard, variant):
    """last_use in the future, before insert_tick, or zero: INV-CLOCK."""
    cache = open_cache(k3_shard)
    s = slot_of(cache, 1)
    rc, msg = brk(cache, "CLOCK", s, variant)
    assert rc == 5
    tid = ["future", "insert_after_use", "unstamped"][variant]
    m = re.fullmatch(rf"INV-CLOCK: \[clock\.{tid}\] slot {s} last_use (\d+) "
                     r"insert_tick (\d+) tick (\d+)", msg)
    assert m is not None, msg
    last, ins, tick = map(int, m.groups())
    assert tick == 3  # three demand loads
    assert (last, ins) == [(tick + 1, 2), (2, 3), (0, 0)][variant]


def test_clock_shared_last_use(k3_shard):
    """Two READY slots with one last_use: INV-CLOCK names both."""
    cache = open_cache(k3_shard)
    a, b = slot_of(cache, 0), slot_of(cache, 2)
    rc, msg = brk(cache, "CLOCK_SHARED", a, b)
    assert rc == 5
    assert msg in (f"INV-CLOCK: [clock.shared] slots {a} and {b} share last_use 3",
                   f"INV-CLOCK: [clock.shared] slots {b} and {a} share last_use 3")


@pytest.mark.parametrize("variant", [0, 1, 2, 3, 4])
def test_counters_each_relation(k3_shard, variant):
    """Each of the five counter relations, broken alone, is INV-COUNTERS."""
    cache = open_cache(k3_shard)
    rc, msg = brk(cache, "COUNTERS", -1, variant)
    assert rc == 6
    hits = 1 if variant == 0 else 0
    short = 1 if variant == 1 else 0
    unused = 1 if variant == 2 else 0
    payload = 3 * 1632 + {3: 1, 4: 1000 * 1632}.get(variant, 0)
    tid = ["requests", "failures", "evicted_unused", "payload_whole",
           "payload_loads"][variant]
    assert msg == (f"INV-COUNTERS: [counters.{tid}] requests 3 hits {hits} "
                   f"misses 3 failures 0 "
                   f"short {short} io 0 evictions 0 evicted unused {unused} "
                   f"payload {payload} prefetch 0")


def test_prefetch_accounting(k3_shard):
    """A prefetch load neither used, evicted nor resident is INV-PREFETCH."""
    cache = open_cache(k3_shard)
    assert brk(cache, "PREFETCH") == (
        7, "INV-PREFETCH: [prefetch.loads] first uses 0 + evicted unused 0 + "
           "unused resident 0 "
           "!= prefetch loads 1")


@pytest.mark.parametrize("variant,text", [
    (0, "[policy.evictions] policy saw 0 evictions and 3 requests, the cache "
        "made 1 and 3"),
    (1, "[policy.requests] policy saw 0 evictions and 3 requests, the cache "
        "made 0 and 4")])
def test_policy_counts(k3_shard, variant, text):
    """The policy's event counts must equal the cache's: INV-POLICY."""
    cache = open_cache(k3_shard)
    assert brk(cache, "POLICY_COUNT", -1, variant) == (8, f"INV-POLICY: {text}")


@pytest.mark.parametrize("policy,text", [
    ("hotness", "[hotness.sum] hotness: counts sum to 7 > 3 requests"),
    ("lru", "[plist.none] lru: no state"),
    ("fifo", "[plist.none] fifo: no state"),
    ("lfu", "[lfu.none] lfu: no state"),
    ("arc", "[arc.none] arc: no state"),
    ("s3fifo", "[s3fifo.none] s3fifo: no state")])
def test_policy_own_check(k3_shard, policy, text):
    """A policy whose own check fails is INV-POLICY quoting the policy."""
    cache = open_cache(k3_shard, policy)
    assert brk(cache, "POLICY_STATE") == (8, f"INV-POLICY: {text}")
    cache.check()


_LIST = "INV-POLICY: [order.{}] order list: {} entries (counted {}, last slot {}, " \
        "recorded {}, stops at {}), stamped reads untold: {}"
_ENTRY = "INV-POLICY: [order.{}] order list entry {} (slot 1, state {}, untold {}, " \
         "stamp 2 after {}) is not a stamped read the policy waits for"


@pytest.mark.parametrize("variant,text", [
    (0, _LIST.format("untold", 0, 0, -1, -1, -1, 1)),  # untold, not listed
    (1, _ENTRY.format("state", 0, 2, 0, 0)),  # on the list, already told
    (2, _ENTRY.format("first_untold", 0, 2, 1, 0)),  # untold first: told
    (3, _LIST.format("stop", 1, 1, 1, 1, 8, 1)),  # next entry out of range
    (4, _ENTRY.format("stamp", 1, 1, 0, 2)),  # listed after itself
    (5, _LIST.format("count", 0, 1, -1, -1, -1, 0)),  # count one too many
    (6, _LIST.format("last", 0, 0, -1, 1, -1, 0)),  # last: a slot, list empty
    (7, None)])                               # a demand read: not listed, sound
def test_order_list(k3_shard, variant, text):
    """The order list must hold exactly the untold stamped reads: INV-POLICY."""
    cache = open_cache(k3_shard, "arc")
    rc, msg = brk(cache, "ORDER", slot_of(cache, 1), variant)
    assert (rc, msg if text else None) == ((8, text) if text else (0, None))
    cache.check()


def test_order_list_of_a_policy_told_no_inserts(k3_shard):
    """LRU keeps no order list: a stamped read listed is more than the zero expected."""
    cache = open_cache(k3_shard)
    assert brk(cache, "ORDER", slot_of(cache, 1), 3) == (
        8, _LIST.format("stop", 1, 1, 1, 1, 8, 0))
    assert brk(cache, "ORDER", slot_of(cache, 1), 8)[0] == _lib.lib().XC_E_MISUSE
    assert brk(cache, "ORDER", -1, 0)[0] == _lib.lib().XC_E_MISUSE


def test_policy_state_without_state_is_refused(k3_shard):
    """LFRU keeps no state to break: the hook refuses with MISUSE, writes nothing."""
    cache = open_cache(k3_shard, "lfru")
    rc, msg = brk(cache, "POLICY_STATE")
    assert rc == _lib.lib().XC_E_MISUSE
    assert msg == "test hook: bad corruption 13 (a -1, b -1) for this cache"


def test_queue_deeper_than_its_capacity(k3_shard):
    """More queued than the ring holds: no slot owns those reads (INV-INFLIGHT)."""
    cache = open_cache(k3_shard)
    assert brk(cache, "QUEUE_DEPTH") == (
        4, "INV-INFLIGHT: [ring.queued] 0 slots queued and 0 being read ahead, "
           "the ring has "
           "65 and 0")


@pytest.mark.parametrize("bad_slot,tid", [(-1, "low"), (8, "high")])
def test_queue_entry_naming_no_slot(k3_shard, bad_slot, tid):
    """A queued read naming a slot out of range is INV-QUEUE."""
    cache = open_cache(k3_shard)
    assert brk(cache, "QUEUE_SLOT", slot_of(cache, 2), bad_slot) == (
        9, f"INV-QUEUE: [queue.slot_{tid}] entry 0 names slot {bad_slot}")


def test_queue_entry_for_a_ready_slot(k3_shard):
    """A queued read whose slot is READY is INV-QUEUE naming state and key."""
    cache = open_cache(k3_shard)
    s = slot_of(cache, 2)
    assert brk(cache, "QUEUE_STATE", s, slot_of(cache, 1)) == (
        9, f"INV-QUEUE: [queue.state] entry 0: slot {s} is state 2 key 2, not in "
           "flight for key 2")


def test_queue_same_key_twice(k3_shard):
    """One key queued twice is INV-QUEUE."""
    cache = open_cache(k3_shard)
    s = slot_of(cache, 1)
    assert brk(cache, "QUEUE_TWICE", s, slot_of(cache, 0)) == (
        9, "INV-QUEUE: [queue.twice] key 1 queued twice")


@pytest.mark.parametrize("variant,loads,unknown", [(0, 1, 0), (1, 0, 1)])
def test_spec_and_load_sources(k3_shard, variant, loads, unknown):
    """Speculative loads or load sources that do not add up: INV-SPEC."""
    cache = open_cache(k3_shard)
    rc, msg = brk(cache, "SPEC", -1, variant)
    assert rc == 10
    st = cache.stats()
    pc, dev = int(st["page_cache_loads"]), int(st["device_loads"])
    tid = ["loads", "sources"][variant]
    assert msg == (f"INV-SPEC: [spec.{tid}] spec used 0 + evicted unused 0 + "
                   f"unused resident "
                   f"0 vs loads {loads}; page cache {pc} + device {dev} + unknown "
                   f"{int(st['unknown_loads']) + unknown} vs 3 loads published")


def test_bad_hook_arguments_are_misuse(k3_shard):
    """A slot argument out of range or an unknown corruption writes nothing."""
    cache = open_cache(k3_shard)
    lib = _lib.lib()
    assert brk(cache, "SLOT_STATE", 99) == (
        lib.XC_E_MISUSE, "test hook: bad corruption 1 (a 99, b -1) for this cache")
    assert lib.xc_testhook_break_check(cache._ptr, 999, 0, 0) == lib.XC_E_MISUSE
    assert lib.xc_testhook_break_check(_lib.ffi().NULL, 1, 0, 0) == lib.XC_E_MISUSE
    assert _lib.last_error()[4] == "test hook: NULL cache"
    cache.check()


def test_a_ready_slot_naming_a_read_owner_is_inflight_breakage(k3_shard):
    """A slot that is not in flight yet names a read owner: INV-INFLIGHT."""
    cache = open_cache(k3_shard)
    s = slot_of(cache, 1)
    assert brk(cache, "OWNER_STRAY", s) == (
        4, f"INV-INFLIGHT: [owner.stray] slot {s} not in flight has read owner 1")


def test_an_inflight_slot_owned_by_no_read(k3_shard):
    """A reservation no read owns (a leaked reservation): INV-INFLIGHT."""
    cache = open_cache(k3_shard)
    s = slot_of(cache, 2)
    assert brk(cache, "OWNER_NONE", s) == (
        4, f"INV-INFLIGHT: [owner.none] slot {s} in flight has no read owner (0)")


def test_an_inflight_slot_of_a_stream_that_is_not_open(k3_shard):
    """A stream reservation whose stream is gone is an orphan: INV-INFLIGHT."""
    cache = open_cache(k3_shard)
    s = slot_of(cache, 0)
    assert brk(cache, "OWNER_ORPHAN", s) == (
        4, f"INV-INFLIGHT: [owner.orphan] slot {s} in flight for a stream that "
           "does not own it (orphaned reservation)")
    cache.check()  # restored
