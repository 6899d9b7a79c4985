"""Countdown loops of engine thread-start failures (faults/README.md F28)."""

from __future__ import annotations

import errno
import os

import pytest

from tests.helpers import K3_LAYOUT
from xcache import engine
from xcache.engine import alloc
from xcache.faults.loops import (
    Baseline,
    Run,
    countdown,
    k3_expected,
    n_threads,
    thread_hooks,
)

OOM = (engine.OutOfMemoryError,)
EAGAIN_TEXT = f"{os.strerror(errno.EAGAIN)} (errno {errno.EAGAIN})"


def start_failure(k: int, workers: int, readers: int) -> str:
    """The message of a cache open whose k-th thread start (1-based) failed.

    The batch pool's batch_threads - 1 threads start first, then the
    read-ahead readers; every thread started before the failing one is
    joined.
    """
    if k <= workers:
        pool, i, n = "batch pool", k, workers
    else:
        pool, i, n = "read-ahead", k - workers, readers
    return (f"cache open: cannot start {pool} thread {i} of {n}: {EAGAIN_TEXT}; "
            f"joined the {k - 1} thread(s) already running")


def open_cache(container: engine.Container, batch_threads: int, io_threads: int,
               **kw: object) -> engine.ExpertCache:
    """A k3-mini cache of 8 slots with the given pools."""
    return engine.ExpertCache(container, n_slots=8, top_k=4,
                              batch_threads=batch_threads,
                              io_threads=io_threads,
                              **{**K3_LAYOUT, **kw})


def assert_usable(container: engine.Container) -> None:
    """Another cache, with both pools, opens over the container and loads exactly."""
    with open_cache(container, 2, 1) as cache:
        assert cache.prefetch([(0, 6), (0, 7)]) == 2
        with cache.get(0, 6) as e:
            assert e.data.tobytes() == k3_expected(6)
        cache.getmany([(0, 8), (0, 9)])
        with cache.get(0, 9) as e:
            assert e.data.tobytes() == k3_expected(9)
        cache.check()


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize(("batch_threads", "io_threads"),
                         [(1, 0), (3, 0), (1, 2), (3, 2), (4, 3)])
def test_cache_open_thread_countdown(k3_shard, batch_threads, io_threads,
                                     persistent):
    """Start k failing: OOM naming pool, thread and errno; all joined, nothing left."""
    workers, readers = batch_threads - 1, io_threads
    total = workers + readers
    container = engine.Container(str(k3_shard))
    base = Baseline.now()
    starts = [0]

    def op() -> engine.ExpertCache:
        starts[0] = alloc.thread_stats().count
        return open_cache(container, batch_threads, io_threads)

    def check(run: Run) -> None:
        made = alloc.thread_stats().count - starts[0]
        if run.error is None:
            assert run.fired == 0
            assert made == total
            assert n_threads() == base.threads + total
            with run.result.get(0, 3) as e:
                assert e.data.tobytes() == k3_expected(3)
            run.result.check()
            run.result.close()
        else:
            # the open stops at the start that failed, persistent or not
            assert run.fired == 1
            assert made == run.n
            assert type(run.error) is engine.OutOfMemoryError
            assert run.error.kind == "nomem"
            assert str(run.error) == start_failure(run.n, workers, readers)
            assert run.error.offset is None
            assert (run.error.layer, run.error.expert) == (None, None)
        base.assert_back(f"threads={batch_threads}/{io_threads} N={run.n}")
        assert_usable(container)
        base.assert_back(f"after reuse, N={run.n}")

    arm, disarm = thread_hooks(persistent=persistent)
    runs = countdown(op, arm, disarm, check, 100, allowed=OOM)
    assert len(runs) == total + 1
    assert all(r.error is not None for r in runs[:-1])
    container.close()


def test_thread_start_failure_with_trace(k3_shard, tmp_path):
    """A reader failing to start after the trace opened: old file kept, nothing new."""
    container = engine.Container(str(k3_shard))
    base = Baseline.now()
    trace = tmp_path / "t.xctrace"
    trace.write_bytes(b"an earlier trace")
    arm, disarm = thread_hooks()
    arm(2)  # batch pool thread 1 starts, read-ahead thread 1 does not
    try:
        with pytest.raises(engine.OutOfMemoryError) as info:
            open_cache(container, 2, 2, trace_path=trace)
    finally:
        assert disarm() == 1
    assert str(info.value) == start_failure(2, 1, 2)
    assert trace.read_bytes() == b"an earlier trace"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.xctrace"]
    base.assert_back("trace")
    assert_usable(container)
    container.close()


def test_thread_starts_are_not_allocations(k3_shard):
    """Thread starts move only their own counter, not the allocation count."""
    container = engine.Container(str(k3_shard))
    moved = {}
    for batch_threads, io_threads in ((1, 0), (4, 3)):
        a0, t0 = alloc.stats(), alloc.thread_stats()
        open_cache(container, batch_threads, io_threads).close()
        a1, t1 = alloc.stats(), alloc.thread_stats()
        moved[batch_threads] = (a1.count - a0.count, t1.count - t0.count)
        assert a1.failures == a0.failures and t1.failures == t0.failures
    assert moved[1][1] == 0 and moved[4][1] == 6
    assert moved[1][0] == moved[4][0]
    container.close()


def test_thread_seam_arming(k3_shard):
    """A negative n is refused and n = 0 disarms an armed countdown."""
    with pytest.raises(ValueError, match="n must be >= 0, not -1"):
        alloc.fail_thread_start(-1)
    container = engine.Container(str(k3_shard))
    before = alloc.thread_stats()
    alloc.fail_thread_start(1, persistent=True)
    alloc.fail_thread_start(0)
    open_cache(container, 3, 0).close()
    assert alloc.thread_stats() == (before.count + 2, before.failures)
    container.close()
