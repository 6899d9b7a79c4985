"""The oracle's read-ahead queue: ``io_depth`` and ``queue_fallbacks``
(docs/CACHE.md prefetch step 3 and stream step 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from xcache.gate.containers import make_target
from xcache.oracle.reading_cache import ReadingCache


@pytest.fixture(scope="module")
def k3(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The k3-mini target (folder and layout)."""
    return make_target("k3-mini", tmp_path_factory.mktemp("queue-model"))


def _cache(k3: Any, io_depth: int, readers: int = 1) -> ReadingCache:
    """A reading cache of k3-mini with ``readers`` read-ahead threads."""
    return ReadingCache(Path(k3.pristine), k3.layout,
                        k3.quantities["expert_bytes"],
                        {"n_slots": 10, "batch_threads": 1, "io_threads": readers,
                         "io_depth": io_depth, "faults": True})


@pytest.mark.parametrize("depth,fallbacks", [(1, 3), (2, 2), (3, 1), (4, 0), (0, 0)])
def test_behind_a_stalled_reader_the_caller_reads_what_the_queue_cannot_take(
        k3, depth, fallbacks):
    """The one reader held by a stall on the first read: of three more reads
    read ahead, io_depth - 1 are queued and the caller reads the rest
    (io_depth 0: the default 64)."""
    c = _cache(k3, depth)
    c.inject({"op": "inject", "fault": "stall", "nth": 1})
    assert c.prefetch([(0, 1)]) == 1
    c.await_reads(1, 1.0)
    c.prefetch([(0, 2), (0, 3), (0, 4)])
    assert c.values()["queue_fallbacks"] == fallbacks
    c.unstall()
    c.drain()
    assert c.values()["queue_fallbacks"] == fallbacks
    assert c.model.resident() == {(0, 1), (0, 2), (0, 3), (0, 4)}
    c.close()


def test_a_fill_timing_decides_leaves_the_count_out_until_a_reset(k3):
    """Two read-aheads with no drain between on a queue of two: whether the
    second finds the first's reads ended is timing, so the count is left
    out of the values until reset_stats; a drain before it keeps it."""
    c = _cache(k3, 2)
    c.prefetch([(0, 1), (0, 2)])
    assert c.values()["queue_fallbacks"] == 0
    c.drain()
    c.prefetch([(0, 3)])
    assert c.values()["queue_fallbacks"] == 0  # drained: the queue was empty
    c.prefetch([(0, 4), (0, 5)])
    assert "queue_fallbacks" not in c.values()
    c.drain()
    assert "queue_fallbacks" not in c.values()
    c.reset()
    assert c.values()["queue_fallbacks"] == 0
    c.close()


def test_a_stream_offers_each_miss_to_the_queue(k3):
    """A stream with readers over five misses and a queue of two: two are
    queued, the consumer reads three itself (whatever the timing: the
    engine queues them under its lock)."""
    c = _cache(k3, 2, readers=2)
    c.get(0, 9)
    c.stream_begin([(0, 9), (0, 1), (0, 2), (0, 3), (0, 4), (0, 5)], [])
    assert c.values()["queue_fallbacks"] == 3
    c.close()
