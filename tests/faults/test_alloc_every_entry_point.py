"""Allocation countdowns over the entry points the older loops skip.

Policies with their own state (hotness, ARC, S3-FIFO), the trace recorder,
read-ahead readers, stream, the simulator, and the fault injector itself:
with the Nth engine allocation failing, each ends in OutOfMemoryError (kind
"nomem") or in the exact result of an undisturbed run, with allocations,
descriptors and threads back to their baseline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tests.helpers import K3_LAYOUT
from xcache import engine
from xcache.engine import _lib, alloc
from xcache.engine.sim import simulate
from xcache.faults.io import Fault, IOFaults
from xcache.faults.loops import Baseline, Run, alloc_hooks, countdown, k3_expected

OOM = (engine.OutOfMemoryError,)


def sweep(op: Callable[[], Any], after: Callable[[Run], None], max_n: int,
          persistent: bool = False) -> list[Run]:
    """Countdown of allocation failures over op; every failure is a clean OOM."""
    base = Baseline.now()

    def check(run: Run) -> None:
        if run.error is not None:
            assert type(run.error) is engine.OutOfMemoryError, run.error
            assert run.error.kind == "nomem"
            assert run.error.status == _lib.lib().XC_E_NOMEM
            assert "memory" in str(run.error)
        after(run)
        assert Baseline.now() == base, f"N={run.n}: {Baseline.now()} vs {base}"

    arm, disarm = alloc_hooks(persistent=persistent)
    runs = countdown(op, arm, disarm, check, max_n, allowed=OOM)
    assert all(r.error is not None for r in runs[:-1])
    assert runs[-1].error is None
    return runs


@pytest.mark.parametrize("policy", ["hotness:period=4", "arc", "s3fifo:small=20",
                                    "lfru:sample=3,seed=7"])
@pytest.mark.parametrize("persistent", [False, True])
def test_cache_open_with_policy_state(k3_shard, policy, persistent):
    """A cache whose policy allocates state opens or fails cleanly at every N."""
    cont = engine.Container(str(k3_shard))

    def op() -> engine.ExpertCache:
        return engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, policy=policy,
                                  batch_threads=1)

    def after(run: Run) -> None:
        if run.error is None:
            with run.result.get(0, 5) as ex:
                assert ex.data.tobytes() == k3_expected(5)
            run.result.check()
            run.result.close()

    runs = sweep(op, after, 200, persistent)
    assert len(runs) >= 9
    cont.close()


def test_cache_open_with_trace_and_readers(k3_shard, tmp_path):
    """Trace buffer, reader threads and ring: each allocation can fail alone."""
    cont = engine.Container(str(k3_shard))
    trace = tmp_path / "t.xctrace"

    def op() -> engine.ExpertCache:
        return engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, io_threads=2,
                                  io_depth=4, batch_threads=2,
                                  trace_path=trace, trace_ring_records=16)

    def after(run: Run) -> None:
        if run.error is None:
            run.result.get(0, 1).release()
            run.result.trace_flush()
            run.result.close()
            # 48-byte header + one 24-byte record (a miss of (0, 1))
            assert trace.stat().st_size == 48 + 24

    runs = sweep(op, after, 200)
    assert len(runs) >= 10
    cont.close()


@pytest.mark.parametrize("io_threads", [0, 2])
def test_stream_begin(k3_shard, io_threads):
    """stream() with allocation N failing yields everything or raises OOM first."""
    cont = engine.Container(str(k3_shard))
    box: dict[str, Any] = {}
    keys = [(0, 0), (0, 3), (0, 7), (0, 9)]

    def op() -> list[tuple[int, int]]:
        got = []
        for ex in box["cache"].stream(keys):
            assert ex.data.tobytes() == k3_expected(ex.key[1])
            got.append(ex.key)
            ex.release()
        return got

    def after(run: Run) -> None:
        cache = box.pop("cache")
        cache.check()
        if run.error is None:
            assert run.result[0] == (0, 0)  # the resident one first
            assert sorted(run.result) == keys
        else:
            assert cache.resident() == {(0, 0)}
        cache.close()

    arm0, disarm0 = alloc_hooks()

    def arm(n: int) -> None:
        cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                                   io_threads=io_threads, split_min_misses=1)
        cache.get(0, 0).release()
        box["cache"] = cache
        arm0(n)

    base = Baseline.now()
    runs = countdown(op, arm, disarm0, lambda r: (after(r), _back(base, r)),
                     50, allowed=OOM)
    assert [type(r.error) for r in runs[:-1]] == [engine.OutOfMemoryError] * (
        len(runs) - 1)
    assert len(runs) == 8  # the stream object and its six per-key arrays
    cont.close()


def _back(base: Baseline, run: Run) -> None:
    assert Baseline.now() == base, f"N={run.n}"


@pytest.mark.parametrize("policy", ["lru", "arc", "s3fifo", "hotness", "belady"])
@pytest.mark.parametrize("per_layer", [False, True])
def test_simulator(policy, per_layer):
    """The simulator with allocation N failing: OOM or the undisturbed counts."""
    rng = np.random.default_rng(5)
    token = np.repeat(np.arange(40), 4)
    layer = np.tile([0, 0, 1, 1], 40)
    expert = rng.integers(0, 6, size=160)
    data = (token, layer, expert, 6)
    want = simulate(data, policy, 3, per_layer=per_layer)
    assert want["requests"] == 160

    def after(run: Run) -> None:
        if run.error is None:
            assert run.result == want

    runs = sweep(lambda: simulate(data, policy, 3, per_layer=per_layer),
                 after, 100)
    assert len(runs) >= 3


def test_fault_injector_allocations(k3_shard):
    """The injector's own allocations (object, filter, handle table) fail cleanly."""
    def op() -> bytes:
        f = IOFaults()
        try:
            f.arm(Fault("delay", nth=1, arg=1, path_filter="k3"))
            with engine.Container(str(k3_shard), io=f) as c:
                name = c.names()[0]
                return c.read_bytes(name)
        finally:
            f.close()

    want = op()
    runs = sweep(op, lambda run: None, 100)
    assert runs[-1].result == want
    assert len(runs) >= 4


def test_alloc_counters_account_for_refusals():
    """A refused allocation counts as a failure, not as live memory."""
    before = alloc.stats()
    alloc.fail_alloc(1)
    with pytest.raises(engine.OutOfMemoryError) as ei:
        simulate(np.array([1, 2, 3]), "lru", 2)
    alloc.disarm()
    after = alloc.stats()
    assert after.failures == before.failures + 1
    assert after.live == before.live
    assert ei.value.kind == "nomem"


def test_sharded_open_through_the_injector(tmp_path):
    """Opening an indexed folder through the injector: OOM or success at every N."""
    from tests.helpers import make_sharded
    folder = tmp_path
    make_sharded(folder)

    def op() -> int:
        f = IOFaults()
        try:
            with engine.Container(str(folder), io=f) as c:
                return len(c)
        finally:
            f.close()

    runs = sweep(op, lambda run: None, 300)
    assert runs[-1].result == 3
