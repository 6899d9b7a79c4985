"""The hotness halving's work is bounded: amortised O(log n) per request.

A halving maps every bucket's count v to v >> 1 and melds the buckets that
meet (engine/csrc/xc_order_heaps.c): the smaller bucket's keys
are relabelled and two heaps' right spines walked, never the bigger
bucket's keys.  The test hook ``xc_testhook_halving_work`` reads the
work done so far (halvings, keys relabelled, heap nodes walked by melds);
the sequences here have the shape that made a list merge walk a whole
bucket -- a big bucket 0 of fresh prefetched keys, newer than the keys that
fall into it from bucket 1 -- and the counts are exact.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from xcache import engine, fixtures
from xcache.engine import _lib

LAYERS, EXPERTS = 2, 256
N_KEYS = LAYERS * EXPERTS


@pytest.fixture(scope="module")
def wide_shard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2 x 256 container of one 64-byte tensor per expert."""
    folder = tmp_path_factory.mktemp("wide")
    spec = {
        "name": "halving-wide", "seed": 18, "layers": list(range(LAYERS)),
        "experts": EXPERTS, "top_k": 8,
        "expert_template": "model.layers.{layer}.mlp.experts.{expert}.{tensor}",
        "expert_tensors": [{"name": "w.weight", "dtype": "U8", "shape": [1, 64]}],
        "layout": "contiguous", "shards": 1, "index": True,
        "spec_in_header": False,
    }
    fixtures.generate(spec, folder)
    return next(folder.glob("*.safetensors"))


def open_cache(shard: Path, slots: int, policy: str) -> engine.ExpertCache:
    """A cache over the wide container with the given policy."""
    return engine.ExpertCache(
        engine.Container(str(shard)),
        expert_template="model.layers.{layer}.mlp.experts.{expert}.{tensor}",
        tensors=["w.weight"], layers=list(range(LAYERS)), n_experts=EXPERTS,
        n_slots=slots, top_k=8, policy=policy)


def work(cache: engine.ExpertCache) -> tuple[int, int, int]:
    """(halvings, keys relabelled, heap nodes walked) from the test hook."""
    lib, ffi = _lib.lib(), _lib.ffi()
    out = ffi.new("uint64_t[3]")
    assert lib.xc_testhook_halving_work(cache._ptr, out) == 0
    return int(out[0]), int(out[1]), int(out[2])


def key(k: int) -> tuple[int, int]:
    """(layer, expert) of key k."""
    return divmod(k, EXPERTS)


def adversary(cache: engine.ExpertCache, rounds: int) -> int:
    """Run the adversarial sequence; returns the demand requests made.

    Each round prefetches 24 keys never requested (count 0, the newest
    ticks: a big bucket 0), then requests 3 warm keys once each, keys that
    were requested three times some rounds before and whose counts now
    halve down through bucket 1 into bucket 0 behind the prefetched keys.
    """
    requests = 0
    cold = list(range(64, N_KEYS))
    for r in range(rounds):
        batch = [key(cold[(24 * r + i) % len(cold)]) for i in range(24)]
        cache.getmany(batch)
        for i in range(3):
            w = key((3 * r + i) % 64)
            for _ in range(3 if r % 4 == 0 else 1):
                cache.get(*w).release()
                requests += 1
    return requests


def test_halvings_under_the_list_merge_adversary_cost_log_n_per_request(wide_shard):
    """Exact work of 200 adversarial rounds, and within log2(n) + 2 per request."""
    cache = open_cache(wide_shard, 300, "hotness:period=2")
    requests = adversary(cache, 200)
    cache.check()
    halvings, relabels, steps = work(cache)
    assert requests == 900
    assert halvings == 450
    assert (relabels, steps) == (350, 1909)
    assert relabels + steps <= requests * (math.log2(N_KEYS) + 2)


def test_a_halving_every_third_request_stays_within_the_bound(wide_shard):
    """period=3: the same adversary; the work stays O(log n) per request."""
    cache = open_cache(wide_shard, 300, "hotness:period=3")
    requests = adversary(cache, 120)
    cache.check()
    halvings, relabels, steps = work(cache)
    assert (requests, halvings) == (540, 180)
    assert (relabels, steps) == (270, 967)
    assert relabels + steps <= requests * (math.log2(N_KEYS) + 2)


def test_the_halving_hook_refuses_another_policy(wide_shard):
    """The hook names the cache's policy when it is not hotness."""
    cache = open_cache(wide_shard, 16, "lfu")
    lib, ffi = _lib.lib(), _lib.ffi()
    out = ffi.new("uint64_t[3]")
    assert lib.xc_testhook_halving_work(cache._ptr, out) == lib.XC_E_MISUSE
    assert _lib.last_error()[4] == "test hook: the cache's policy is lfu, not hotness"
    assert lib.xc_testhook_halving_work(ffi.NULL, out) == lib.XC_E_MISUSE
    assert _lib.last_error()[4] == "test hook: NULL cache or output"
