"""Offline policy simulator over routing traces.

Every access is a demand ``get`` of the cache model (docs/CACHE.md): a hit
touches and bumps ``freq``; a miss takes the lowest EMPTY slot, else the
victim that :func:`oracle.cache.choose_victim` picks (the very function the
cache model uses, so the two cannot drift; ``tests/oracle/test_simulator.py``
also replays traces through :class:`oracle.cache.CacheModel` itself and
compares), publishes with ``freq = 1`` and touches.

``belady`` evicts the candidate whose next use is farthest (never used again
first; ties, i.e. several never used again, go to the lowest slot).

``s3fifo`` and ``arc`` are queue policies (docs/CACHE.md "S3-FIFO", "ARC"):
:mod:`oracle.policies` holds them, the same classes the cache model uses.

Two modes:

- ``plain``: accesses one by one, nothing protected (a get released at once);
- ``step``: the experts of one (token, layer) step are held together until
  the step ends, so no policy, Belady included, may evict an expert of the
  current step to admit another. The capacity must hold the largest step.

Capacity is global (slots shared by every layer) or, with ``per_layer``,
that many slots for each layer separately.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from xcache.oracle.cache import CacheModel, choose_victim, parse_policy
from xcache.oracle.policies import ARC, QUEUE_POLICIES, S3FIFO, make_queue_policy
from xcache.oracle.traces import Trace

__all__ = ["SimResult", "next_use", "simulate", "simulate_with_model", "MODES",
           "S3FIFO", "ARC", "QUEUE_POLICIES"]

MODES = ("plain", "step")
_NEVER = np.iinfo(np.int64).max


@dataclass
class SimResult:
    """Counts of one simulated run.

    ``reloads`` are misses of keys seen before (``misses - compulsory``);
    ``belady_gap`` is ``misses - belady misses`` at the same size and mode,
    when Belady was run alongside (``simulate(..., belady=True)``).
    """

    policy: str
    capacity: int
    mode: str
    per_layer: bool
    requests: int = 0
    hits: int = 0
    misses: int = 0
    compulsory: int = 0
    evictions: int = 0
    belady_gap: int | None = None
    key_misses: np.ndarray = field(default=None, repr=False)

    @property
    def reloads(self) -> int:
        """Misses of keys accessed before."""
        return self.misses - self.compulsory

    @property
    def hit_rate(self) -> float:
        """hits / requests (0 with no requests)."""
        return self.hits / self.requests if self.requests else 0.0

    @property
    def miss_ratio(self) -> float:
        """misses / requests (0 with no requests)."""
        return self.misses / self.requests if self.requests else 0.0


def next_use(keys: np.ndarray) -> np.ndarray:
    """For each position, the position of the next access of its key (or int64 max)."""
    keys = np.asarray(keys)
    order = np.argsort(keys, kind="stable")
    nxt = np.full(len(keys), _NEVER, np.int64)
    same = keys[order[1:]] == keys[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def _run(keys: np.ndarray, starts: np.ndarray, n_keys: int, policy: str,
         capacity: int, step_mode: bool) -> dict:
    """One cache of ``capacity`` slots over ``keys``; returns raw counts."""
    belady = policy == "belady"
    name, params = ("belady", {}) if belady else parse_policy(policy)
    queue = make_queue_policy(name, params, capacity)
    period = params.get("period", 0)
    n = capacity
    slot_key = np.full(n, -1, np.int64)
    last_use = np.full(n, -1, np.int64)
    insert_tick = np.full(n, -1, np.int64)
    freq = np.zeros(n, np.int64)
    protected = np.zeros(n, bool)
    all_slots = np.arange(n)
    key_slot = np.full(n_keys, -1, np.int64)
    hot = np.zeros(n_keys, np.int64)
    key_next = np.full(n_keys, _NEVER, np.int64)
    key_misses = np.zeros(n_keys, np.int64)
    nxt = next_use(keys).tolist() if belady else None
    held: list[int] = []
    tick = filled = evictions = n_evictions = hits = demand = 0
    for i, (k, start) in enumerate(zip(keys.tolist(), starts.tolist(), strict=True)):
        if step_mode and start:
            protected[held] = False
            held.clear()
        if belady:
            key_next[k] = nxt[i]
        s = int(key_slot[k])
        missed = s < 0
        if not missed:
            hits += 1
            freq[s] += 1
            if queue:
                queue.request(k)
                queue.hit(k)
        else:
            if filled < n:
                s = filled
                filled += 1
                if queue:
                    queue.request(k)
            else:
                cands = np.flatnonzero(~protected) if step_mode else all_slots
                if not len(cands):
                    raise ValueError(f"capacity {n} cannot hold one step")
                if belady:
                    s = int(cands[np.argmax(key_next[slot_key[cands]])])
                elif queue:
                    cand_keys = set(slot_key[cands].tolist())
                    queue.want = k  # the victim is chosen for k's miss
                    victim = queue.victim(cand_keys)
                    queue.request(k)
                    queue.evict(victim, cand_keys)
                    queue.want = None
                    s = int(key_slot[victim])
                else:
                    s = choose_victim(name, params, cands, last_use, insert_tick,
                                      freq, hot[slot_key], n_evictions)
                key_slot[slot_key[s]] = -1
                evictions += 1
                n_evictions += 1
            key_misses[k] += 1
            if queue:
                queue.insert(k)
            slot_key[s] = k
            key_slot[k] = s
            freq[s] = 1
        # The request counts (and hotness moves) after the victim is chosen.
        hot[k] += 1
        demand += 1
        if period and demand % period == 0:
            hot >>= 1
        tick += 1
        last_use[s] = tick
        if missed:
            insert_tick[s] = tick
        if step_mode:
            protected[s] = True
            held.append(s)
    requests = len(keys)
    return {"requests": requests, "hits": hits, "misses": requests - hits,
            "compulsory": int(np.count_nonzero(key_misses)), "evictions": evictions,
            "key_misses": key_misses}


def simulate(trace: Trace, policy: str, capacity: int, mode: str = "plain",
             per_layer: bool = False, belady: bool = False) -> SimResult:
    """Replay ``trace`` through one policy (``belady`` or a cache policy spec).

    ``capacity`` is in slots (per layer with ``per_layer``); ``belady=True``
    also runs Belady at the same size and fills ``belady_gap``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    if capacity < 1:
        raise ValueError("capacity must be at least 1 slot")
    keys, starts = trace.keys(), trace.step_starts()
    if mode == "step" and trace.top_k > capacity:
        raise ValueError(f"step mode needs capacity >= top_k = {trace.top_k}")
    result = SimResult(policy, capacity, mode, per_layer,
                       key_misses=np.zeros(trace.n_keys, np.int64))
    if per_layer:
        parts = [trace.layer == layer for layer in np.unique(trace.layer)]
    else:
        parts = [np.ones(len(keys), bool)]
    for mask in parts:
        sub_starts = starts[mask]
        if per_layer:  # within one layer every token is one step
            tok = trace.token[mask]
            sub_starts = np.ones(len(tok), bool)
            sub_starts[1:] = tok[1:] != tok[:-1]
        raw = _run(keys[mask], sub_starts, trace.n_keys, policy, capacity,
                   mode == "step")
        for name in ("requests", "hits", "misses", "compulsory", "evictions"):
            setattr(result, name, getattr(result, name) + raw[name])
        result.key_misses += raw["key_misses"]
    if belady and policy != "belady":
        opt = simulate(trace, "belady", capacity, mode, per_layer)
        result.belady_gap = result.misses - opt.misses
    elif policy == "belady":
        result.belady_gap = 0
    return result


def simulate_with_model(trace: Trace, policy: str, capacity: int,
                        mode: str = "plain") -> SimResult:
    """The same replay, driven through :class:`CacheModel` (slow; cross-checks).

    Plain mode gets and releases each access; step mode holds the step's
    experts until the step ends. Belady is not a cache policy and is refused.
    """
    layers = list(range(trace.n_layers))
    cache = CacheModel(layers, trace.n_experts, 0, expert_bytes=1,
                       n_slots=capacity, policy=policy)
    result = SimResult(policy, capacity, mode, False,
                       key_misses=np.zeros(trace.n_keys, np.int64))
    held = []
    for layer, expert, start in zip(trace.layer.tolist(), trace.expert.tolist(),
                                    trace.step_starts().tolist(), strict=True):
        if start:
            for ref in held:
                cache.release(ref)
            held.clear()
        before = cache.counters["misses"]
        ref = cache.get(layer, expert)
        if cache.counters["misses"] != before:
            result.key_misses[layer * trace.n_experts + expert] += 1
        if mode == "step":
            held.append(ref)
        else:
            cache.release(ref)
    c = cache.counters
    result.requests, result.hits, result.misses = c["requests"], c["hits"], c["misses"]
    result.evictions = c["evictions"]
    result.compulsory = int(np.count_nonzero(result.key_misses))
    return result
