"""A plain-Python model of the expert cache, exactly per docs/CACHE.md.

It answers "what must the engine report now" for any single-threaded
sequence of calls: which slot a key lands in, which victim goes, every
counter. Reads are instantaneous and succeed unless a test injects a failure
(``fail=`` on :meth:`CacheModel.get`, ``failures=`` on
:meth:`CacheModel.getmany`), so failure accounting can be compared too.

One slot's life: EMPTY -> INFLIGHT (reserved, with its key) -> READY (whole
payload) -> victim (INFLIGHT again for the new key), or back to EMPTY when a
read fails. A slot is *protected* when ``holds + pins > 0`` (and, inside one
``getmany``, when it holds a resident key named by the batch); protected and
INFLIGHT slots are never victims.

The victim rule (:func:`choose_victim`, and the queue policies of
:mod:`oracle.policies`) is shared with ``oracle.sim``, so the simulator and
the model cannot drift apart.

This module holds the model's state, its slot primitives and the one-key
calls (get, release, pin, the counters, ``check``); the calls that take
many keys are in :mod:`oracle.cache_batches`, the reads held under way in
:mod:`oracle.cache_under_way`, and the states, counter names and
references they share in :mod:`oracle.cache_types`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from xcache.oracle.cache_batches import BatchOps
from xcache.oracle.cache_types import (
    COUNTERS,
    EMPTY,
    INFLIGHT,
    READY,
    SPEC_COUNTERS,
    Ref,
    SlotView,
    stride_bytes,
)
from xcache.oracle.cache_under_way import ReadsUnderWay
from xcache.oracle.errors import (
    AllPinned,
    Budget,
    IOFailure,
    Misuse,
    NotFound,
    NotModelled,
    ShortRead,
)
from xcache.oracle.policies import (
    POLICIES,
    choose_victim,
    make_queue_policy,
    parse_policy,
)
from xcache.oracle.policies.lfru import lfru_sample, splitmix64

__all__ = [
    "POLICIES", "splitmix64", "lfru_sample", "parse_policy", "choose_victim",
    "CacheModel",
]

class CacheModel(BatchOps, ReadsUnderWay):
    """The cache of docs/CACHE.md, single-threaded, reads injected or instant.

    Give the budget as ``n_slots`` or ``budget_bytes`` (exactly one); fewer
    than ``top_k + 1`` slots is ``Budget``. ``io_bytes_per_load`` is what one
    load asks of io (default ``expert_bytes``: no widening, no chunks), or a
    function of the ``(layer, expert)`` loaded when that differs per expert
    (O_DIRECT widens each expert's own run to 4,096 on both ends).
    """

    _next_cache_id = 1

    def __init__(self, layers: Sequence[int], n_experts: int, top_k: int, *,
                 expert_bytes: int, n_slots: int | None = None,
                 budget_bytes: int | None = None, policy: str = "lru",
                 io_bytes_per_load: int | Callable[[tuple[int, int]], int]
                 | None = None) -> None:
        if list(layers) != sorted(set(layers)) or not layers or n_experts < 1:
            raise Misuse("layers must be ascending and distinct; n_experts >= 1")
        self.layers = list(layers)
        self.n_experts = n_experts
        self.top_k = top_k
        self.expert_bytes = expert_bytes
        self.stride = stride_bytes(expert_bytes)
        self.io_bytes_per_load = (expert_bytes if io_bytes_per_load is None
                                  else io_bytes_per_load)
        if (n_slots is None) == (budget_bytes is None):
            raise Misuse("give exactly one of n_slots and budget_bytes")
        if n_slots is None:
            n_slots = budget_bytes // self.stride
        if n_slots < top_k + 1:
            raise Budget(f"the cache needs {top_k + 1} slots (top_k + 1) but the "
                         f"budget holds {n_slots}; the smallest budget_bytes that "
                         f"works is {(top_k + 1) * self.stride}")
        self.n_slots = n_slots
        self.policy, self.params = parse_policy(policy)
        self.queue = make_queue_policy(self.policy, self.params, n_slots)
        self._layer_pos = {layer: i for i, layer in enumerate(self.layers)}
        self.cache_id = CacheModel._next_cache_id
        CacheModel._next_cache_id += 1
        n = n_slots
        self._state = [EMPTY] * n
        self._key: list[int | None] = [None] * n
        self._holds = [0] * n
        self._pins = [0] * n
        self._mark = [False] * n
        self._spec = [False] * n
        self._last_use = [-1] * n
        self._insert_tick = [-1] * n
        self._freq = [0] * n
        self._generation = [0] * n  # publishes of each slot (xc_ref.generation)
        self._index: dict[int, int] = {}  # key id -> slot, for non-EMPTY slots
        self._batch_protected: set[int] = set()
        self._refs: dict[int, Ref] = {}
        self._next_ref = 1
        self.tick = 0
        self.hot: dict[int, int] = {}  # hotness count per key id
        self.demand_total = 0  # demand requests since open (hotness period)
        self.n_policy_evictions = 0  # READY victims since open (LFRU's e)
        self.counters = dict.fromkeys(COUNTERS, 0)
        #: evictions of the windows before this one: a model with none yet
        #: has made no choice of a victim
        self._evictions_before = 0
        self._carried = 0
        self.spec_counters = dict.fromkeys(SPEC_COUNTERS, 0)
        #: reads held under way (:meth:`begin_read`): key id -> (slot, kind,
        #: the counter window it was reserved in)
        self._under_way: dict[int, tuple[int, str, int]] = {}
        self._window = 0
        #: docs/CACHE.md "Stamp order", for the queue policies: the stamped
        #: reservations (stream misses, hold_layer's) whose insert the policy
        #: has not been told, in stamp order -- INFLIGHT, or READY and untold
        self._oq: list[int] = []
        #: the untold READY slots, each with the demand hits it had meanwhile
        #: (told after its insert)
        self._untold: dict[int, int] = {}

    # -- keys -------------------------------------------------------------
    def key_id(self, layer: int, expert: int) -> int:
        """The key id ``layer_pos * n_experts + expert``; ``Misuse`` if invalid."""
        if (type(layer) is not int or type(expert) is not int
                or layer not in self._layer_pos or not 0 <= expert < self.n_experts):
            raise Misuse(f"invalid key (layer {layer!r}, expert {expert!r})")
        return self._layer_pos[layer] * self.n_experts + expert

    def key_of(self, key_id: int) -> tuple[int, int]:
        """The (layer, expert) of a key id."""
        return self.layers[key_id // self.n_experts], key_id % self.n_experts

    # -- internals --------------------------------------------------------
    def _touch(self, slot: int) -> None:
        self.tick += 1
        self._last_use[slot] = self.tick

    def _stamp(self, slot: int) -> None:
        """Stamp a fresh reservation's publish tick; a queue policy lists it."""
        self._touch(slot)
        if self.queue is not None:
            self._oq.append(slot)

    def _tell(self, slot: int) -> None:
        """Tell the policy an untold slot's insert, then the hits it had meanwhile."""
        assert self.queue is not None and self._state[slot] == READY
        key = self._key[slot]
        self.queue.insert(key)
        for _ in range(self._untold.pop(slot)):
            self.queue.hit(key)

    def _tell_ready(self) -> None:
        """Tell the untold inserts at the front of the order, up to a read under way."""
        while self._oq and self._state[self._oq[0]] == READY:
            self._tell(self._oq.pop(0))

    def _tell_all(self) -> None:
        """Tell every untold insert in stamp order, leaving the reads under way."""
        for slot in [s for s in self._oq if self._state[s] == READY]:
            self._oq.remove(slot)
            self._tell(slot)

    def _protected(self, slot: int) -> bool:
        return (self._holds[slot] + self._pins[slot] > 0
                or slot in self._batch_protected)

    def _candidates(self) -> list[int]:
        """The READY, unprotected slots whose insert was told, ascending."""
        return [s for s in range(self.n_slots)
                if self._state[s] == READY and not self._protected(s)
                and s not in self._untold]

    def _victim(self) -> int | None:
        """Victim choice steps 1-3: lowest EMPTY, else the policy; None if none."""
        for slot in range(self.n_slots):
            if self._state[slot] == EMPTY:
                return slot
        cands = self._candidates()
        if not cands:
            if not any(not self._protected(s) for s in self._untold):
                return None
            # only untold slots are left: tell them all first (stamp order)
            self._tell_all()
            return self._victim()
        if self.queue is not None:
            return self._index[self.queue.victim({self._key[s] for s in cands})]
        hot = [self.hot.get(k, 0) if k is not None else 0 for k in self._key]
        return choose_victim(self.policy, self.params, np.array(cands),
                             np.array(self._last_use), np.array(self._insert_tick),
                             np.array(self._freq), np.array(hot),
                             self.n_policy_evictions)

    def _want(self, key: int | None) -> None:
        """Tell a queue policy the key whose demand miss the next victim serves."""
        if self.queue is not None:
            self.queue.want = key

    def _evict_into(self, slot: int, key: int) -> None:
        """Make ``slot`` INFLIGHT for ``key``, evicting a READY occupant."""
        assert self._state[slot] != INFLIGHT and not self._protected(slot)
        if self._state[slot] == READY:
            self.counters["evictions"] += 1
            self.n_policy_evictions += 1
            if self._mark[slot]:
                self.counters["prefetch_evicted_unused"] += 1
            if self._spec[slot]:
                self.spec_counters["spec_evicted_unused"] += 1
            del self._index[self._key[slot]]
            if self.queue is not None:
                self.queue.evict(self._key[slot],
                                 {self._key[s] for s in self._candidates()})
        self._state[slot], self._key[slot] = INFLIGHT, key
        self._mark[slot] = self._spec[slot] = False
        self._last_use[slot] = self._insert_tick[slot] = -1
        self._freq[slot] = 0
        self._index[key] = slot

    def _io_bytes(self, key: int) -> int:
        """What one load of key id ``key`` asks of io."""
        per_load = self.io_bytes_per_load
        return per_load(self.key_of(key)) if callable(per_load) else per_load

    def _count_demand(self, key: int) -> None:
        if self.queue is not None:
            self.queue.request(key)
        self.counters["requests"] += 1
        self.hot[key] = self.hot.get(key, 0) + 1
        self.demand_total += 1
        period = self.params.get("period")  # hotness only
        if period and self.demand_total % period == 0:
            self.hot = {k: c >> 1 for k, c in self.hot.items()}

    def _fail(self, slot: int, kind: str) -> None:
        key = self._key[slot]
        del self._index[key]
        self._state[slot], self._key[slot] = EMPTY, None
        self._last_use[slot] = -1
        self.counters["load_failures"] += 1
        self.counters["short_reads" if kind == "short" else "io_errors"] += 1
        if slot in self._oq:  # off the order: later inserts may be told now
            self._oq.remove(slot)
            self._tell_ready()

    def _publish(self, slot: int, freq: int) -> None:
        """READY with ``freq``; touch unless a tick was stamped; *insert* event.

        A stamped slot's insert (:meth:`_stamp`) is told once every
        reservation stamped before it has ended; until then it is untold.
        """
        self._state[slot] = READY
        self._freq[slot] = freq
        self._generation[slot] += 1
        if self._last_use[slot] < 0:
            self._touch(slot)
        self._insert_tick[slot] = self._last_use[slot]
        if self.queue is None:
            return
        if slot in self._oq:
            self._untold[slot] = 0
            self._tell_ready()
        else:
            self.queue.insert(self._key[slot])

    def _hold(self, slot: int, layer: int, expert: int) -> Ref:
        self._holds[slot] += 1
        ref = Ref(self._next_ref, layer, expert, slot, self.cache_id,
                  self._generation[slot])
        self._next_ref += 1
        self._refs[ref.id] = ref
        return ref

    # -- operations -------------------------------------------------------
    def get(self, layer: int, expert: int, fail: str | None = None) -> Ref:
        """Demand access: a held reference to the key's resident bytes.

        ``fail`` ("short" or "io") makes this call's read fail, if it reads.
        Raises ``Misuse`` or ``AllPinned`` with nothing changed, or
        ``ShortRead`` / ``IOFailure`` after the failure has been counted.
        """
        if fail not in (None, "short", "io"):
            raise ValueError(f"fail must be None, 'short' or 'io', not {fail!r}")
        key = self.key_id(layer, expert)  # (1) validate
        slot = self._index.get(key)  # (2) look up
        if slot is not None:
            # (3) INFLIGHT is met only under begin_read, whose caller must
            # end it first (the engine's get waits for it)
            assert self._state[slot] == READY
            self._count_demand(key)
            self.counters["hits"] += 1
            if self._mark[slot]:
                self._mark[slot] = False
                self.counters["prefetch_first_uses"] += 1
            if self._spec[slot]:
                self._spec[slot] = False
                self.spec_counters["spec_used"] += 1
            self._freq[slot] += 1
            self._touch(slot)
            if slot in self._untold:
                self._untold[slot] += 1  # told after its insert
            elif self.queue is not None:
                self.queue.hit(key)
            return self._hold(slot, layer, expert)
        slot = self._reserve_miss(key)  # (4) miss: choose a victim
        if slot is None:
            raise AllPinned(f"no slot for (layer {layer}, expert {expert}): all "
                            f"{self.n_slots} are held, pinned or in flight")
        self.counters["io_bytes"] += self._io_bytes(key)  # (5) read
        if fail is not None:
            self._fail(slot, fail)
            cls = ShortRead if fail == "short" else IOFailure
            raise cls(f"load of (layer {layer}, expert {expert}) failed: {fail}",
                      layer, expert)
        self._publish(slot, 1)  # (6) publish
        self.counters["payload_bytes"] += self.expert_bytes
        return self._hold(slot, layer, expert)

    def _reserve_miss(self, key: int) -> int | None:
        """A demand miss of ``key``: choose a victim and reserve it (counted
        as a demand and a miss), or None, changing nothing, when no slot is free."""
        self._want(key)
        slot = self._victim()
        if slot is not None:
            self._count_demand(key)
            self.counters["misses"] += 1
            self._evict_into(slot, key)
        self._want(None)
        return slot

    def holds_ref(self, ref: Any) -> bool:
        """Whether ``ref`` is a reference of this cache still held (a
        :meth:`release` of it would succeed)."""
        return (isinstance(ref, Ref) and ref.cache_id == self.cache_id
                and ref.id in self._refs)

    def release(self, ref: Ref) -> None:
        """Drop one hold; releasing twice or another cache's ref is ``Misuse``."""
        if not isinstance(ref, Ref) or ref.cache_id != self.cache_id:
            raise Misuse("release of a reference of another cache")
        if self._refs.pop(ref.id, None) is None:
            raise Misuse(f"reference {ref.id} released twice")
        self._holds[ref.slot] -= 1

    def release_copy(self, ref: Ref) -> None:
        """Give back a copy of ``ref`` made before ``ref`` itself was released.

        The C struct face (docs/CACHE.md, "References and their copies"):
        the released struct is spent, its copy is not, and the copy is
        refused only as the slot allows -- ``Misuse`` once the slot was
        republished since the hold (its generation moved) or when the slot
        has no hold left.  A copy given back while another hold of the same
        publish is held would take that hold, whose holder the contract
        does not name: the model refuses to guess
        (:class:`~oracle.errors.NotModelled`), and so does a copy of a
        reference still held (give that back with :meth:`release`).
        """
        if not isinstance(ref, Ref) or ref.cache_id != self.cache_id:
            raise Misuse("release of a reference of another cache")
        if ref.id in self._refs:
            raise NotModelled(f"reference {ref.id} is still held: its copy is "
                             "the reference itself (release it)")
        if self._generation[ref.slot] != ref.generation:
            raise Misuse(f"a copy of reference {ref.id}: slot {ref.slot} was "
                         "republished since")
        if self._holds[ref.slot] == 0:
            raise Misuse(f"a copy of reference {ref.id}: slot {ref.slot} has "
                         "no hold left")
        raise NotModelled(f"a copy of reference {ref.id} given back while "
                         f"slot {ref.slot} holds another reference of the "
                         "same publish: whose hold it takes is not modelled")

    def pin(self, layer: int, expert: int) -> None:
        """Pin a READY key (nests); ``NotFound`` if it is not READY."""
        slot = self._index.get(self.key_id(layer, expert))
        if slot is None or self._state[slot] != READY:
            raise NotFound(f"(layer {layer}, expert {expert}) is not resident")
        self._pins[slot] += 1

    def unpin(self, layer: int, expert: int) -> None:
        """Undo one pin: ``NotFound`` if not READY, ``Misuse`` if not pinned."""
        slot = self._index.get(self.key_id(layer, expert))
        if slot is None or self._state[slot] != READY:
            raise NotFound(f"(layer {layer}, expert {expert}) is not resident")
        if self._pins[slot] == 0:
            raise Misuse(f"(layer {layer}, expert {expert}) is not pinned")
        self._pins[slot] -= 1

    def reset_stats(self, keep_marks: bool = False) -> None:
        """Start a new window: zero the counters, clear the unused-prefetch
        marks (``keep_marks``: keep them, for a cache whose first uses
        outlive a window: gate/outside/designs.py ``first_uses``)."""
        self._evictions_before += self.counters["evictions"]
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.spec_counters = dict.fromkeys(SPEC_COUNTERS, 0)
        #: unused prefetch marks carried into this window (their first uses
        #: count here, their loads did not)
        self._carried = sum(self._mark) if keep_marks else 0
        if not keep_marks:
            self._mark = [False] * self.n_slots
        self._spec = [False] * self.n_slots
        self._window += 1  # a read under way now counts in no window
    # -- observation ------------------------------------------------------
    def evictions_ever(self) -> int:
        """Evictions since the model was made, every window: 0 while no
        state yet rests on which key a policy chose to evict."""
        return self._evictions_before + self.counters["evictions"]

    def refused_get(self, layer: int, expert: int) -> None:
        """A get answered with a failure without a read (a design whose
        failed read stays to be reported to the next get): a request and a
        miss, nothing else."""
        key = self.key_id(layer, expert)
        self._count_demand(key)
        self.counters["misses"] += 1

    def stats(self) -> dict[str, float]:
        """The counters plus every derived value (rates are 0 with no requests)."""
        c = dict(self.counters)
        c.update(self.spec_counters)
        c["spec_unused_resident"] = sum(
            1 for s in range(self.n_slots) if self._state[s] == READY and self._spec[s])
        req = c["requests"]
        c["prefetch_unused_resident"] = sum(
            1 for s in range(self.n_slots) if self._state[s] == READY and self._mark[s])
        c["adjusted_hits_aggregate"] = max(c["hits"] - c["prefetch_loads"], 0)
        c["adjusted_hits_exact"] = c["hits"] - c["prefetch_first_uses"]
        rates = {"hit_rate": "hits",
                 "adjusted_hit_rate_aggregate": "adjusted_hits_aggregate",
                 "adjusted_hit_rate_exact": "adjusted_hits_exact"}
        for name, count in rates.items():
            c[name] = c[count] / req if req else 0.0
        return c

    def resident(self) -> set[tuple[int, int]]:
        """The keys of the READY slots."""
        return {self.key_of(k) for k, s in self._index.items()
                if self._state[s] == READY}

    def slots(self) -> list[SlotView]:
        """A snapshot of every slot, in slot order."""
        return [SlotView(self._state[s],
                         None if self._key[s] is None else self.key_of(self._key[s]),
                         self._holds[s], self._pins[s], self._mark[s],
                         self._last_use[s], self._insert_tick[s], self._freq[s])
                for s in range(self.n_slots)]

    def slot_of(self, layer: int, expert: int) -> int | None:
        """The slot holding a key (any non-EMPTY state), or None."""
        return self._index.get(self.key_id(layer, expert))

    def _order_broken(self) -> bool:
        """Whether the stamp order is not what docs/CACHE.md keeps: each entry
        INFLIGHT or READY and untold, every untold slot on it, stamps rising."""
        if not set(self._untold) <= set(self._oq):
            return True
        stamps = []
        for s in self._oq:
            ready = self._state[s] == READY
            if self._state[s] == EMPTY or ready != (s in self._untold):
                return True
            stamps.append(self._insert_tick[s] if s in self._untold
                          else self._last_use[s])
        return stamps != sorted(set(stamps))

    def check(self) -> str | None:
        """The first broken invariant of the model itself, or None."""
        live = [0] * self.n_slots
        for ref in self._refs.values():
            live[ref.slot] += 1
        if any(self._key[s] is not None and self._index.get(self._key[s]) != s
               for s in range(self.n_slots)) or len(self._index) != sum(
                   k is not None for k in self._key):
            return "INV-INDEX"
        for s in range(self.n_slots):
            if self._state[s] != READY and (self._holds[s] or self._pins[s]
                                            or self._mark[s]):
                return "INV-NOT-READY-CLEAN"
            if (self._state[s] == EMPTY) != (self._key[s] is None):
                return "INV-EMPTY-KEY"
            if self._holds[s] != live[s]:
                return "INV-HOLDS"
        uses = [self._last_use[s] for s in range(self.n_slots)
                if self._state[s] == READY]
        if len(set(uses)) != len(uses) or any(u > self.tick or u < 1 for u in uses):
            return "INV-CLOCK"
        if self._order_broken():
            return "INV-ORDER"
        c = self.counters
        if (c["hits"] + c["misses"] != c["requests"]
                or c["prefetch_first_uses"] > c["prefetch_loads"] + self._carried
                or c["short_reads"] + c["io_errors"] != c["load_failures"]):
            return "INV-COUNTERS"
        return None
