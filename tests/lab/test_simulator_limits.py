"""The simulator's limits: steps larger than the cache, per-layer offsets, parameters.

xc.h promises that in step mode a step needing more slots than the cache
has is XC_E_MISUSE whose offset is the access that found every slot held;
with ``per_layer`` that is still the access's position in the whole trace,
not in its layer's sub-trace.  Every victim path (the LRU/FIFO fast queue,
a policy's ``to_evict``, Belady) must refuse the same way.
"""

from __future__ import annotations

import numpy as np
import pytest

from xcache import engine
from xcache.engine import _lib
from xcache.engine.sim import simulate


def overflow(at: int, key: int, slots: int) -> str:
    """The simulator's sentence for access ``at`` finding every slot held."""
    return (f"sim: access {at} (key {key}): every one of the {slots} slots "
            "holds an expert of the current step; step mode needs slots >= "
            "the largest step")


@pytest.mark.parametrize("policy,fast_path", [
    ("lru", True), ("lru", False), ("lfu", True), ("arc", True),
    ("belady", True),
])
def test_a_step_larger_than_the_cache_is_refused_at_its_access(policy, fast_path):
    """Three distinct keys in one step over 2 slots: MISUSE at access 3, every path."""
    keys = np.array([5, 0, 1, 2, 0])
    starts = np.array([1, 1, 0, 0, 0])  # step 1: key 5; step 2: keys 0 1 2 0
    with pytest.raises(engine.MisuseError) as ei:
        simulate(keys, policy, 2, "step", step_starts=starts, fast_path=fast_path)
    assert str(ei.value) == overflow(3, 2, 2)
    assert ei.value.offset == 3


@pytest.mark.parametrize("policy", ["lru", "belady"])
def test_per_layer_overflow_names_the_position_in_the_whole_trace(policy):
    """Layer 0's third key of one step is access 5 of the trace, not 2 of its layer."""
    # n_experts 3: keys 0-2 are layer 0, 3-5 layer 1; one step of six accesses
    keys = np.array([3, 0, 4, 1, 5, 2])
    starts = np.array([1, 0, 0, 0, 0, 0])
    with pytest.raises(engine.MisuseError) as ei:
        simulate(keys, policy, 2, "step", per_layer=True, n_experts=3,
                 step_starts=starts)
    # layer 1 (keys 3, 4, 5 at accesses 0, 2, 4) is replayed after layer 0
    assert str(ei.value) == overflow(5, 2, 2)
    assert ei.value.offset == 5


def test_per_layer_plain_mode_without_step_flags():
    """per_layer PLAIN with NULL step flags: two independent 1-slot caches."""
    ffi, lib = _lib.ffi(), _lib.lib()
    o = ffi.new("xc_sim_opts *")
    o.n_slots, o.n_keys, o.n_experts = 1, 4, 2
    o.mode, o.per_layer = lib.XC_SIM_PLAIN, 1
    # layer 0 sees 0 0 1 (miss, hit, miss+evict); layer 1 sees 2 2 3 (same)
    keys = ffi.new("uint32_t[]", [0, 2, 0, 2, 1, 3])
    out = ffi.new("xc_sim_result *")
    assert lib.xc_sim_run(o, keys, ffi.NULL, 6, out) == 0
    assert (out.requests, out.hits, out.misses, out.compulsory, out.reloads,
            out.evictions) == (6, 2, 4, 4, 0, 2)


@pytest.mark.parametrize("spec,message", [
    ("lfru:sample=0", "policy lfru: sample must be at least 1"),
    ("lfru:sample=-1", "policy lfru: bad parameter 'sample=-1'; valid "
                       "parameters: sample, seed (as key=unsigned integer)"),
    ("hotness:period=+5", "policy hotness: bad parameter 'period=+5'; valid "
                          "parameters: period (as key=unsigned integer)"),
])
def test_parameter_values_outside_their_range(spec, message):
    """A zero sample and a signed number are MISUSE with the policy's own sentence."""
    with pytest.raises(engine.MisuseError) as ei:
        simulate(np.array([1, 2, 1]), spec, 2)
    assert str(ei.value) == message
