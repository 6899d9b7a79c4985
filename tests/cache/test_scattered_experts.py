"""Experts whose tensors straddle shards or scatter load byte-exact.

An expert whose tensors are not one run of bytes in one file (they cross a
shard boundary, or the source stores them apart) is read tensor by tensor,
with no widening, and served in the spec's tensor order.
"""

from __future__ import annotations

import pytest

from tests.helpers import load_preset, open_preset
from xcache import fixtures
from xcache.engine import Container, ExpertCache


def _expected(spec: fixtures.Spec, layer: int, expert: int) -> bytes:
    """The generator's payload for an expert: its tensors in spec order."""
    return b"".join(fixtures.expected_bytes(spec, n)
                    for n in spec.expert_names(layer, expert))


@pytest.mark.parametrize("preset, n_cross", [("mixtral-mini", 2),
                                             ("deepseek-mini", 44)])
def test_every_expert_of_a_multi_shard_preset_loads_exactly(tmp_path, preset,
                                                            n_cross):
    """Each expert, straddling shards or not, is served with its own bytes."""
    spec = fixtures.preset(preset)
    lay = fixtures.generate(preset, tmp_path / preset)
    keys = [(la, e) for la in spec.layers for e in range(spec.n_experts)]
    cross = {k for k in keys if len({r.file for r in lay.expert_runs(*k)}) > 1}
    assert len(cross) == n_cross  # the preset really straddles shards
    with Container(str(lay.dir)) as c, ExpertCache(
            c, n_slots=spec.top_k + 1, top_k=spec.top_k,
            expert_template=spec.expert_template,
            tensors=[t[0] for t in spec.expert_tensors], layers=spec.layers,
            n_experts=spec.n_experts) as cache:
        assert cache.expert_bytes == spec.expert_nbytes
        for k in sorted(cross):
            assert not cache.contiguous(*k)
        for k in keys:
            with cache.get(*k) as ex:
                assert bytes(ex.data) == _expected(spec, *k), k
        assert cache.getmany(keys[:spec.top_k]) == spec.top_k
        for k in keys[:spec.top_k]:
            with cache.get(*k) as ex:
                assert bytes(ex.data) == _expected(spec, *k), k
        s = cache.stats()
        assert (s["misses"], s["hits"], s["load_failures"]) == (
            len(keys), spec.top_k, 0)
        cache.check()


def test_expert_split_across_shards_is_read_per_tensor():
    """mixtral-mini's experts (1, 1) and (2, 4) straddle a shard boundary and load."""
    p = load_preset("mixtral-mini")
    c = ExpertCache(open_preset(p), n_slots=3, **p.cache_kwargs())
    split = [k for k in p.keys if not c.contiguous(*k)]
    assert split == [(1, 1), (2, 4)]  # found by oracle.safetensors' shard table
    for key in p.keys:
        with c.get(*key) as x:
            assert bytes(x.data) == p.payload[key], p.who(bytes(x.data))
    c.check()
    assert c.stats()["io_bytes"] == 32 * 3072  # per tensor or not, no widening
