"""Holds dropped by garbage collection are given back, but never while a view of
them is alive; a view used after its hold was released is refused or caught."""

from __future__ import annotations

import gc

import pytest

import xcache.engine.hold as hold_mod
from tests.helpers import K3_LAYOUT, expert_bytes
from xcache import engine
from xcache.engine import MisuseError

N_SLOTS = 8


@pytest.fixture
def cache(k3_shard):
    """A k3-mini cache of 8 slots, top-k 4, closed after the test."""
    c = engine.ExpertCache(engine.Container(str(k3_shard)), **K3_LAYOUT,
                           n_slots=N_SLOTS, top_k=4)
    yield c
    c.close()


def holds(c) -> int:
    """Holds over every slot."""
    return sum(s["holds"] for s in c.slots())


def test_dropped_experts_give_their_holds_back(cache, k3_shard):
    """n_slots + 1 experts dropped unreleased: then get still works, no hold is left."""
    for e in range(N_SLOTS + 1):
        cache.get(0, e)  # dropped at once, never released
    gc.collect()
    assert holds(cache) == 0
    x = cache.get(0, 9)
    assert x.data.tobytes() == expert_bytes(k3_shard, 9)
    x.release()
    cache.check()


def test_dropped_layer_holds_give_their_holds_back(cache):
    """n_slots + 1 layer holds dropped unreleased: every hold given back."""
    for e in range(N_SLOTS + 1):
        h = cache.hold_layer(0, [e, (e + 1) % 10])
        h.views[0]["w1.weight_packed"]  # a view made, then dropped with the hold
        del h
    gc.collect()
    assert holds(cache) == 0
    with cache.hold_layer(0, [1, 2, 3, 4]):
        assert holds(cache) == 4
    cache.check()


def test_a_view_kept_alive_keeps_its_hold(cache, k3_shard):
    """An expert dropped with a view (a slice of one) alive stays held, bytes intact."""
    tail = cache.get(0, 3).data[100:]
    whole = cache.hold_layer(0, [5]).views[0]["w2.weight_packed"]
    gc.collect()
    assert holds(cache) == 2
    for e in range(10):  # churn every free slot: the held ones are not reused
        if e not in (3, 5):
            cache.get(0, e).release()
    assert tail.tobytes() == expert_bytes(k3_shard, 3)[100:]
    assert not tail.flags.writeable and not whole.flags.writeable
    del tail
    gc.collect()
    assert holds(cache) == 1
    del whole
    gc.collect()
    assert holds(cache) == 0
    cache.check()


def test_released_views_refuse_to_be_read(cache):
    """After release the hold's mappings and the expert's data raise MisuseError."""
    h = cache.hold_layer(0, [1])
    views = h.views
    h.release()
    with pytest.raises(MisuseError, match="the hold of these views was released"):
        views[0]["w1.weight_packed"]
    x = cache.get(0, 2)
    x.release()
    with pytest.raises(MisuseError, match=r"expert \(0, 2\) was released"):
        _ = x.data


def test_a_dropped_hold_after_close_is_quiet(k3_shard, capsys):
    """A hold dropped after its cache closed frees nothing twice and prints nothing."""
    c = engine.ExpertCache(engine.Container(str(k3_shard)), **K3_LAYOUT,
                           n_slots=N_SLOTS, top_k=4)
    x, h = c.get(0, 1), c.hold_layer(0, [2])
    view = x.data
    c.close()
    assert view.tobytes() == expert_bytes(k3_shard, 1)
    del x, h, view
    gc.collect()
    assert capsys.readouterr() == ("", "")


def test_check_views_catches_a_view_outliving_its_release(cache, monkeypatch,
                                                          k3_shard):
    """XCACHE_CHECK_VIEWS: release() refuses while a view lives and keeps the hold."""
    monkeypatch.setattr(hold_mod, "CHECK_VIEWS", True)
    x = cache.get(0, 4)
    w = x.tensors["w3.weight_packed"]
    with pytest.raises(MisuseError, match=r"expert \(0, 4\): release\(\) while 1 "
                                          r"view\(s\) of it are alive"):
        x.release()
    assert holds(cache) == 1
    del w
    x.release()
    h = cache.hold_layer(0, [6, 7])
    kept = h.views[1]["w1.weight_scale"]
    h.views[0]["w1.weight_packed"]  # read and dropped: not counted
    with pytest.raises(MisuseError, match=r"layer 0 experts \[6, 7\]: release"):
        h.release()
    assert holds(cache) == 2
    del kept
    with h:
        pass
    assert holds(cache) == 0 and h.released
    cache.check()
