"""Lifetimes: a container outlives its caches, and a closed cache refuses every call.

Closing a container that a cache still uses is refused (nothing is freed);
after ``close()`` every method of a cache, and every expert it handed out,
raises MisuseError instead of touching freed memory (docs/CACHE.md).
"""

from __future__ import annotations

import pytest

from tests.helpers import K3_LAYOUT, expert_bytes, open_container
from xcache import engine


def test_container_close_is_refused_while_a_cache_is_open(k3_shard):
    """Container.close() with an open cache raises MisuseError and frees nothing."""
    cont = engine.Container(str(k3_shard))
    c = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4)
    with pytest.raises(engine.MisuseError, match="1 cache"):
        cont.close()
    with c.get(0, 3) as x:  # the container is still there
        assert bytes(x.data) == expert_bytes(k3_shard, 3)
    c.close()
    cont.close()
    cont.close()  # idempotent
    with pytest.raises(engine.MisuseError, match="closed"):
        engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4)


def test_every_method_of_a_closed_cache_is_misuse(k3_shard):
    """After close(), methods and held experts raise MisuseError, never crash."""
    c = engine.ExpertCache(open_container(k3_shard), **K3_LAYOUT, n_slots=8, top_k=4)
    x = c.get(0, 3)
    c.close()
    c.close()  # idempotent
    calls = [lambda: c.get(0, 1), lambda: c.getmany([(0, 1)]),
             lambda: c.prefetch([(0, 1)]), c.drain,
             lambda: c.set_step(1),
             c.trace_flush, lambda: c.pin(0, 3), lambda: c.unpin(0, 3),
             c.stats, c.reset_stats, c.check, c.slots, c.resident,
             lambda: c.contiguous(0, 1), lambda: c.n_slots,
             lambda: c.stride, lambda: c.expert_bytes,
             lambda: x.data, lambda: x.tensors, x.release]
    for call in calls:
        with pytest.raises(engine.MisuseError, match="the cache is closed"):
            call()
