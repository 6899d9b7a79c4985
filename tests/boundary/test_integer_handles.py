"""The integer-handle hit path (xc_cache_hold, unhold, hold_data) keeps get's rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import K3_LAYOUT
from xcache import fixtures
from xcache.engine import Container, ExpertCache, _lib
from xcache.engine.errors import MisuseError


@pytest.fixture()
def cache(tmp_path: Path):
    fixtures.generate("k3-mini", tmp_path / "k3")
    c = ExpertCache(Container(str(tmp_path / "k3")), **K3_LAYOUT, n_slots=8, top_k=4)
    yield c
    c.close()


def test_hold_counts_like_get_and_unhold_gives_back(cache: ExpertCache) -> None:
    """A hold is a get: same counters, same hold, and unhold releases it."""
    lib = _lib.lib()
    h = lib.xc_cache_hold(cache._ptr, 0, 3)
    assert h >= 0
    assert cache.stats()["misses"] == 1
    slot = h & 0xFFFFFFFF
    assert cache.slots()[slot]["key"] == (0, 3)
    assert cache.slots()[slot]["holds"] == 1
    h2 = lib.xc_cache_hold(cache._ptr, 0, 3)
    assert h2 == h and cache.stats()["hits"] == 1
    assert lib.xc_cache_unhold(cache._ptr, h) == 0
    assert lib.xc_cache_unhold(cache._ptr, h2) == 0
    assert cache.slots()[slot]["holds"] == 0
    cache.check()


def test_unhold_refuses_double_release_and_foreign_handles(cache: ExpertCache) -> None:
    """No hold left, a slot out of range, a negative or stale handle: MISUSE."""
    lib = _lib.lib()
    h = lib.xc_cache_hold(cache._ptr, 0, 1)
    assert lib.xc_cache_unhold(cache._ptr, h) == 0
    for bad in (h, -1, 99, h + (1 << 32)):
        assert lib.xc_cache_unhold(cache._ptr, bad) == lib.XC_E_MISUSE
        assert lib.xc_cache_hold_data(cache._ptr, bad) == _lib.ffi().NULL
    cache.check()


def test_stale_generation_is_refused(cache: ExpertCache) -> None:
    """A handle from before the slot was republished releases nothing."""
    lib = _lib.lib()
    old = lib.xc_cache_hold(cache._ptr, 0, 0)
    assert lib.xc_cache_unhold(cache._ptr, old) == 0
    for e in range(1, 24):  # evict (0, 0) and republish its slot
        cache.get(0, e).release()
    new = lib.xc_cache_hold(cache._ptr, 0, 0)
    assert new != old
    assert lib.xc_cache_unhold(cache._ptr, old) == lib.XC_E_MISUSE
    assert lib.xc_cache_unhold(cache._ptr, new) == 0
    cache.check()


def test_hold_errors_are_negative_statuses(cache: ExpertCache) -> None:
    """A bad key is a negative status and changes nothing."""
    lib = _lib.lib()
    assert lib.xc_cache_hold(cache._ptr, 5, 0) == lib.XC_E_MISUSE
    assert lib.xc_cache_hold(cache._ptr, 0, 24) == lib.XC_E_MISUSE
    assert cache.stats()["requests"] == 0
    with pytest.raises(MisuseError):
        cache.get(0, 24)


def test_expert_views_and_release_through_handles(cache: ExpertCache) -> None:
    """Expert.data matches the container bytes; a second release is MISUSE."""
    with Container(cache._container._path) as c:
        want = b"".join(c.read_bytes(
            f"language_model.model.layers.0.block_sparse_moe.experts.7.{t}")
            for t in ("w1.weight_packed", "w1.weight_scale", "w2.weight_packed",
                      "w2.weight_scale", "w3.weight_packed", "w3.weight_scale"))
    x = cache.get(0, 7)
    assert x.data.tobytes() == want
    assert x.slot == cache.slots().index(
        next(s for s in cache.slots() if s["key"] == (0, 7)))
    x.release()
    with pytest.raises(MisuseError):
        x.release()
    with pytest.raises(MisuseError):
        _ = x.data
    cache.check()
