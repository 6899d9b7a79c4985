"""The policy simulator: hand-computed Belady runs, agreement with the cache
model it shares its victim rule with, and exact agreement with libcachesim."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import REAL, lcs_misses, real_trace, synthetic
from xcache.oracle.sim import next_use, simulate, simulate_with_model
from xcache.oracle.traces import Trace

POLICIES = ["lru", "fifo", "lfu", "lfru", "lfru:sample=3,seed=7", "hotness",
            "hotness:period=16"]
_NEVER = np.iinfo(np.int64).max


def one_layer(*steps: list[int]) -> Trace:
    """A one-layer trace: step t (token t) needs the experts listed."""
    return Trace.from_steps([(t, 0, s) for t, s in enumerate(steps)], 1, 8)


def test_next_use():
    """next_use gives the position of each key's next access, or int64 max."""
    got = next_use(np.array([5, 6, 5, 5, 7])).tolist()
    assert got == [2, _NEVER, 3, _NEVER, _NEVER]


def test_belady_plain_by_hand():
    """Belady, 2 slots, a b c a b: c evicts b (next 4 > 3), b evicts a (never; s0)."""
    r = simulate(one_layer([0], [1], [2], [0], [1]), "belady", 2)
    assert (r.misses, r.hits, r.compulsory, r.reloads, r.evictions) == (4, 1, 3, 1, 2)
    assert simulate(one_layer([0], [1], [2], [0], [1]), "lru", 2).misses == 5


def test_step_mode_protects_the_current_step():
    """Steps [0] [1 2] [0] [2] [1], 2 slots: plain Belady evicts 1 for 2 (4 misses);
    step mode must keep 1 and evict 0 instead (5 misses)."""
    trace = one_layer([0], [1, 2], [0], [2], [1])
    assert simulate(trace, "belady", 2, "plain").misses == 4
    assert simulate(trace, "belady", 2, "step").misses == 5
    with pytest.raises(ValueError, match="top_k"):
        simulate(trace, "lru", 1, "step")


@pytest.mark.parametrize("mode", ["plain", "step"])
def test_simulator_agrees_with_the_cache_model(mode):
    """Every policy replays a synthetic trace to the same counts as CacheModel."""
    trace = synthetic()
    for policy in POLICIES:
        for capacity in (3, 5, 12):
            a = simulate(trace, policy, capacity, mode)
            b = simulate_with_model(trace, policy, capacity, mode)
            assert (a.requests, a.hits, a.misses, a.evictions, a.compulsory) == (
                b.requests, b.hits, b.misses, b.evictions, b.compulsory), (
                    policy, capacity)
            assert np.array_equal(a.key_misses, b.key_misses)


@pytest.mark.parametrize("name", ["mixtral8x7b_humaneval.jsonl", "olmoe_299.jsonl"])
def test_simulator_agrees_with_the_model_on_real_prefixes(name):
    """On the first 3,000 accesses of each real trace, sim and model agree (step)."""
    full = real_trace(name)
    n = 3000
    trace = Trace(full.token[:n], full.layer[:n], full.expert[:n], full.n_layers,
                  full.n_experts, full.top_k)
    for policy in POLICIES:
        for capacity in (16, 96):
            a, b = (simulate(trace, policy, capacity, "step"),
                    simulate_with_model(trace, policy, capacity, "step"))
            assert (a.misses, a.evictions) == (b.misses, b.evictions), (
                policy, capacity)


def test_belady_bounds_every_policy_and_gap():
    """Belady never misses more than any policy; belady_gap is the difference."""
    trace = synthetic(seed=2)
    for mode in ("plain", "step"):
        for capacity in (4, 8, 16):
            opt = simulate(trace, "belady", capacity, mode).misses
            for policy in POLICIES:
                r = simulate(trace, policy, capacity, mode, belady=True)
                assert r.belady_gap == r.misses - opt >= 0


def test_per_layer_capacity():
    """Per-layer runs are independent caches: the sum of single-layer runs."""
    trace = synthetic(seed=3)
    r = simulate(trace, "lru", 3, per_layer=True)
    total = 0
    for layer in range(4):
        m = trace.layer == layer
        sub = Trace(trace.token[m], trace.layer[m], trace.expert[m], 4, 8, 2)
        total += simulate(sub, "lru", 3).misses
    assert r.misses == total
    full = simulate(trace, "lru", 8, per_layer=True)  # a whole layer fits
    assert full.misses == full.compulsory and full.reloads == 0


def test_libcachesim_agrees_on_a_synthetic_trace():
    """LRU, FIFO and Belady miss counts equal libcachesim's exactly (plain mode)."""
    trace = synthetic(seed=4, n_tokens=300)
    keys = trace.keys().tolist()
    for policy in ("lru", "fifo", "belady"):
        for capacity in (1, 3, 7, 16, 31):
            assert simulate(trace, policy, capacity).misses == lcs_misses(
                keys, policy, capacity), (policy, capacity)


@pytest.mark.parametrize("name", sorted(REAL))
def test_libcachesim_agrees_on_real_traces(name):
    """On both shared traces LRU, FIFO and Belady misses equal libcachesim's."""
    trace = real_trace(name)
    keys = trace.keys().tolist()
    for capacity, golden in REAL[name].items():
        for policy in ("lru", "fifo", "belady"):
            ours = simulate(trace, policy, capacity).misses
            assert ours == lcs_misses(keys, policy, capacity), (policy, capacity)
            if policy in golden:
                assert ours == golden[policy]
