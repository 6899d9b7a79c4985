"""The C core's refusals name its bounds: no Python copy of a number or message."""

from __future__ import annotations

import pytest

from tests.helpers import K3_LAYOUT
from xcache import engine
from xcache.faults.loops import alloc_hooks
from xcache.oracle import bounds


def test_table_nomem_with_a_trace_names_the_ring(k3_shard, tmp_path):
    """A refused slot table under a trace: C's message names the default ring too."""
    container = engine.Container(str(k3_shard))
    seen = []
    for n in range(1, 30):
        arm, disarm = alloc_hooks()
        arm(n)
        try:
            engine.ExpertCache(container, **K3_LAYOUT, n_slots=8, top_k=4,
                               batch_threads=1,
                               trace_path=tmp_path / f"t{n}.xctrace").close()
        except engine.OutOfMemoryError as e:
            seen.append(str(e))
        finally:
            disarm()
    ring = bounds.TRACE_RING_DEFAULT * bounds.TRACE_RECORD_BYTES
    assert ring == 98_304
    want = ("cache open: no memory for 8 slots of 12288 bytes and a trace "
            "ring of 4096 records (98304 bytes)")
    assert [m for m in seen if "slots of" in m] == [want] * 10
    container.close()


def test_batch_threads_past_the_bound_is_refused_naming_it(k3_shard):
    """batch_threads 257 is misuse naming 1 to 256, the library's bound."""
    container = engine.Container(str(k3_shard))
    with pytest.raises(engine.MisuseError,
                       match="^batch_threads must be from 1 to 256, got 257$"):
        engine.ExpertCache(container, **K3_LAYOUT, n_slots=8, top_k=4,
                           batch_threads=bounds.MAX_BATCH_THREADS + 1)
    container.close()
