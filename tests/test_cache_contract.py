"""Contract details the engine-vs-oracle state machine found broken (docs/CACHE.md).

Each test is the minimal reproduction of one disagreement, kept so that the
fix stays fixed without relying on hypothesis finding it again.
"""

from __future__ import annotations

import pytest

import engine
from engine import MisuseError, NotFoundError
from tests import k3
from tests import stateful_support as sup


@pytest.fixture
def cache(tmp_path):
    c = engine.ExpertCache(k3.open_container(k3.write_k3_mini(tmp_path)),
                           n_slots=5, top_k=4)
    yield c
    c.close()


def test_unpin_of_non_resident_key_is_not_found(cache):
    """unpin of a key that is not READY is NOT_FOUND, not MISUSE."""
    with pytest.raises(NotFoundError):
        cache.unpin(0, 0)
    with cache.get(0, 0):
        with pytest.raises(MisuseError):  # READY without a pin: misuse
            cache.unpin(0, 0)
    cache.check()


def test_second_release_of_an_expert_is_refused_while_another_hold_exists(cache):
    """An Expert's second release is misuse even when its slot has another hold."""
    first, second = cache.get(0, 3), cache.get(0, 3)
    first.release()
    with pytest.raises(MisuseError):
        first.release()
    # the other holder's hold is intact
    assert [s["holds"] for s in cache.slots() if s["key"] == (0, 3)] == [1]
    second.release()
    cache.check()


def test_expert_split_across_shards_is_read_per_tensor():
    """mixtral-mini's experts (1, 1) and (2, 4) straddle a shard boundary and load."""
    p = sup.preset("mixtral-mini")
    c = engine.ExpertCache(sup.open_container(p), n_slots=3, **p.cache_kwargs())
    split = [k for k in p.keys if not c.contiguous(*k)]
    assert split == [(1, 1), (2, 4)]  # found by oracle.safetensors' shard table
    for key in p.keys:
        with c.get(*key) as x:
            assert bytes(x.data) == p.payload[key], p.who(bytes(x.data))
    c.check()
    assert c.stats()["io_bytes"] == 32 * 3072  # per tensor or not, no widening
