"""The C trace simulator: exact agreement with libcachesim (LRU, FIFO, Belady)
on the shared traces, and with the numpy oracle simulator on every policy,
both modes, global and per-layer capacity, including tie-breaks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import REAL, lcs_misses, real_trace, synthetic
from xcache import engine
from xcache.engine.sim import simulate
from xcache.oracle.sim import simulate as oracle_simulate
from xcache.oracle.traces import Trace

#: Every policy, with non-default parameters where they exist.
POLICIES = ["lru", "fifo", "lfu", "lfru", "lfru:sample=2,seed=5", "hotness",
            "hotness:period=3", "s3fifo", "s3fifo:small=50", "arc", "belady"]
COUNTS = ("requests", "hits", "misses", "compulsory", "reloads", "evictions")


def same(c: dict, o) -> bool:
    """C result dict and oracle SimResult agree on every count."""
    return all(c[k] == getattr(o, k) for k in COUNTS)


@pytest.mark.parametrize("name", sorted(REAL))
def test_libcachesim_agrees_on_real_traces(name):
    """Plain mode: LRU, FIFO and Belady misses equal libcachesim's and the goldens."""
    trace = real_trace(name)
    keys = trace.keys().tolist()
    for capacity, golden in REAL[name].items():
        for policy in ("lru", "fifo", "belady"):
            ours = simulate(trace, policy, capacity, "plain")["misses"]
            assert ours == lcs_misses(keys, policy, capacity), (policy, capacity)
            if policy in golden:
                assert ours == golden[policy]


@pytest.mark.parametrize("name", sorted(REAL))
def test_oracle_agrees_on_real_traces(name):
    """Every policy, both modes, global and per-layer: C counts equal the oracle's
    (on the first 8,000 accesses, to keep the pure-Python oracle quick)."""
    full, n = real_trace(name), 8000
    trace = Trace(full.token[:n], full.layer[:n], full.expert[:n], full.n_layers,
                  full.n_experts, full.top_k)
    for policy in POLICIES:
        for mode in ("plain", "step"):
            for capacity, per_layer in ((64, False), (200, False), (10, True)):
                c = simulate(trace, policy, capacity, mode, per_layer)
                o = oracle_simulate(trace, policy, capacity, mode, per_layer)
                assert same(c, o), (policy, mode, capacity, per_layer)


# Golden values from this simulator, equal to the oracle's in the same run
# (step mode, global capacity): the policy table for the two shared traces.
GOLDEN_STEP = {
    "olmoe_299.jsonl": {244: {"lru": 17184, "fifo": 19266, "lfu": 22231,
                              "lfru": 18310, "hotness": 17255, "s3fifo": 17912,
                              "arc": 17302, "belady": 9422}},
}


def test_golden_step_mode_olmoe():
    """Step-mode misses on olmoe at 244 slots are the recorded ones."""
    trace = real_trace("olmoe_299.jsonl")
    for policy, misses in GOLDEN_STEP["olmoe_299.jsonl"][244].items():
        assert simulate(trace, policy, 244, "step")["misses"] == misses, policy


@st.composite
def traces(draw) -> Trace:
    """Small routing traces: 1-3 layers, 2-6 experts, steps of 1..k distinct experts."""
    n_layers = draw(st.integers(1, 3))
    n_experts = draw(st.integers(2, 6))
    k = draw(st.integers(1, min(3, n_experts)))
    n_tokens = draw(st.integers(1, 25))
    steps = []
    for t in range(n_tokens):
        for layer in range(n_layers):
            if draw(st.booleans()) or layer == 0:
                experts = draw(st.lists(st.integers(0, n_experts - 1), min_size=1,
                                        max_size=k, unique=True))
                steps.append((t, layer, experts))
    return Trace.from_steps(steps, n_layers, n_experts)


@settings(max_examples=150)
@given(trace=traces(), capacity=st.integers(1, 10),
       mode=st.sampled_from(["plain", "step"]), per_layer=st.booleans())
def test_oracle_agrees_on_generated_traces(trace, capacity, mode, per_layer):
    """On generated traces every policy's C counts equal the oracle's exactly."""
    if mode == "step":
        capacity = max(capacity, trace.top_k)
    for policy in POLICIES:
        c = simulate(trace, policy, capacity, mode, per_layer)
        o = oracle_simulate(trace, policy, capacity, mode, per_layer)
        assert same(c, o), policy


@settings(max_examples=60)
@given(trace=traces(), capacity=st.integers(1, 8),
       mode=st.sampled_from(["plain", "step"]))
def test_fast_path_equals_to_evict(trace, capacity, mode):
    """LRU and FIFO replayed on their declared queue give what to_evict gives."""
    if mode == "step":
        capacity = max(capacity, trace.top_k)
    for policy in ("lru", "fifo"):
        a = simulate(trace, policy, capacity, mode)
        b = simulate(trace, policy, capacity, mode, fast_path=False)
        assert a == b


def test_belady_by_hand_and_step_protection():
    """Belady: the oracle's hand-computed runs (a b c a b; [0] [1 2] [0] [2] [1])."""
    one = Trace.from_steps([(t, 0, s) for t, s in enumerate([[0], [1], [2], [0], [1]])],
                           1, 8)
    r = simulate(one, "belady", 2, "plain")
    assert (r["misses"], r["hits"], r["compulsory"], r["reloads"],
            r["evictions"]) == (4, 1, 3, 1, 2)
    steps = Trace.from_steps([(t, 0, s) for t, s in
                              enumerate([[0], [1, 2], [0], [2], [1]])], 1, 8)
    assert simulate(steps, "belady", 2, "plain")["misses"] == 4
    assert simulate(steps, "belady", 2, "step")["misses"] == 5


def test_misuse():
    """A step larger than the cache, a bad policy and a bad key are MisuseError."""
    trace = synthetic()
    with pytest.raises(engine.MisuseError, match="largest step"):
        simulate(trace, "lru", 1, "step")
    with pytest.raises(engine.MisuseError, match="unknown policy"):
        simulate(trace, "nope", 4)
    with pytest.raises(engine.MisuseError, match="bad parameter"):
        simulate(trace, "s3fifo:big=3", 4)
    with pytest.raises(engine.MisuseError, match="n_slots"):
        simulate(trace, "lru", 0)
    r = simulate(np.array([3, 1, 3, 2, 1]), "lru", 2, "plain")
    assert (r["misses"], r["compulsory"], r["reloads"]) == (4, 3, 1)


def test_per_layer_is_the_sum_of_layers():
    """Per-layer capacity: the sum of single-layer runs, for a queue policy too."""
    trace = synthetic(seed=3)
    for policy in ("lru", "arc", "s3fifo"):
        total = 0
        for layer in range(4):
            m = trace.layer == layer
            sub = Trace(trace.token[m], trace.layer[m], trace.expert[m], 4, 8, 2)
            total += simulate(sub, policy, 3, "step")["misses"]
        assert simulate(trace, policy, 3, "step", per_layer=True)["misses"] == total
