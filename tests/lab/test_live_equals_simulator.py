"""Live cache vs simulator: an ExpertCache driven with a trace's gets ends with
exactly the counters the C simulator computes for the same policy and slots.

The cache is k3-mini (one layer of 24 experts, one shard); its trace is the
real Mixtral trace's layers 0-2 folded onto those 24 keys (expert
``8 * layer + e``), each (token, layer) step of the original one step here.
"""

from __future__ import annotations

import pytest

from tests import helpers as k3
from tests.helpers import K3_LAYOUT, real_trace
from xcache import engine
from xcache.engine.sim import simulate
from xcache.oracle.traces import Trace

POLICIES = ["lru", "fifo", "lfu", "lfru:sample=3,seed=7", "hotness:period=16",
            "s3fifo", "s3fifo:small=40", "arc"]


@pytest.fixture(scope="module")
def k3_mini(tmp_path_factory):
    """k3-mini, written once for the module."""
    path = k3.write_k3_mini(tmp_path_factory.mktemp("lab"))
    return k3.open_container(path)


def mini_trace(n: int = 1500) -> Trace:
    """The first n accesses of Mixtral layers 0-2 folded onto k3-mini's 24 keys."""
    full = real_trace("mixtral8x7b_humaneval.jsonl")
    m = full.layer < 3
    step = (full.token[m] * 3 + full.layer[m])[:n]
    return Trace(step, step * 0, (full.layer[m] * 8 + full.expert[m])[:n], 1, 24, 2)


def replay_live(container, trace: Trace, policy: str, slots: int, mode: str) -> dict:
    """Drive the live cache: get + release per access, or hold each step."""
    cache = engine.ExpertCache(container, **K3_LAYOUT,
                               n_slots=slots, top_k=2, policy=policy,
                               batch_threads=1)
    held: list = []
    prev = None
    for i, (t, layer, e) in enumerate(zip(trace.token.tolist(), trace.layer.tolist(),
                                          trace.expert.tolist(), strict=True)):
        if (t, layer) != prev:
            for x in held:
                x.release()
            held.clear()
            prev = (t, layer)
        x = cache.get(layer, e)
        if mode == "step":
            held.append(x)
        else:
            x.release()
        if i % 250 == 0:
            cache.check()
    for x in held:
        x.release()
    cache.check()
    s = cache.stats()
    cache.close()
    return s


@pytest.mark.parametrize("mode", ["plain", "step"])
def test_live_counters_equal_the_simulator(k3_mini, mode):
    """For every cache policy and a few sizes, live requests/hits/misses/evictions
    equal the simulator's."""
    trace = mini_trace()
    for policy in POLICIES:
        for slots in (3, 7, 13):
            live = replay_live(k3_mini, trace, policy, slots, mode)
            sim = simulate(trace, policy, slots, mode)
            got = {k: live[k] for k in ("requests", "hits", "misses", "evictions")}
            want = {k: sim[k] for k in ("requests", "hits", "misses", "evictions")}
            assert got == want, (policy, slots)
