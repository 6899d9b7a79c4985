"""Contract details the engine-vs-oracle state machine found broken (docs/CACHE.md).

Each test is the minimal reproduction of one disagreement, kept so that the
fix stays fixed without relying on hypothesis finding it again.
"""

from __future__ import annotations

import pytest

import engine
from engine import MisuseError, NotFoundError
from tests import k3


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
