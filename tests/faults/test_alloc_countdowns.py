"""Countdown loops of engine allocation failures (faults/README.md F10-F14)."""

from __future__ import annotations

import pytest

from tests.helpers import K3_LAYOUT
from xcache import engine
from xcache.faults.loops import (
    Baseline,
    K3Harness,
    Run,
    alloc_hooks,
    countdown,
    k3_expected,
)

OOM = (engine.OutOfMemoryError,)


def _check_oom(run: Run) -> None:
    """A run that met the fault ends in OutOfMemoryError or in success."""
    if run.error is not None:
        assert run.fired >= 1
        assert type(run.error) is engine.OutOfMemoryError
        assert run.error.kind == "nomem"


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("which", ["k3", "mixtral_dir"])
def test_container_open_countdown(k3_shard, mixtral_dir, which, persistent):
    """Opening a container with allocation N failing: it opens, or OOM, nothing left."""
    path = k3_shard if which == "k3" else mixtral_dir
    n_tensors = {"k3": 144, "mixtral_dir": 111}[which]
    base = Baseline.now()

    def check(run: Run) -> None:
        _check_oom(run)
        if run.error is None:
            assert len(run.result) == n_tensors
            run.result.close()
        base.assert_back(f"{which} persistent={persistent} N={run.n}")

    arm, disarm = alloc_hooks(persistent=persistent)
    runs = countdown(lambda: engine.Container(str(path)), arm, disarm, check,
                     2000, allowed=OOM)
    assert len(runs) > 5
    assert all(r.error is not None for r in runs[:-1])
    print(f"{which}: {len(runs) - 1} allocations")


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("threads", [1, 3])
def test_cache_open_countdown(k3_shard, threads, persistent):
    """Opening a cache with allocation N failing: it opens, or OOM, no thread left."""
    container = engine.Container(str(k3_shard))
    base = Baseline.now()

    def op() -> engine.ExpertCache:
        return engine.ExpertCache(container, **K3_LAYOUT, n_slots=8, top_k=4,
                                  batch_threads=threads)

    def check(run: Run) -> None:
        _check_oom(run)
        if run.error is None:
            with run.result.get(0, 3) as e:
                assert e.data.tobytes() == k3_expected(3)
            run.result.check()
            run.result.close()
        base.assert_back(f"threads={threads} persistent={persistent} N={run.n}")

    arm, disarm = alloc_hooks(persistent=persistent)
    runs = countdown(op, arm, disarm, check, 500, allowed=OOM)
    assert len(runs) >= 8
    assert all(r.error is not None for r in runs[:-1])
    print(f"cache open threads={threads}: {len(runs) - 1} allocations")
    container.close()


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("op_name", ["get", "getmany", "reset_stats"])
def test_cache_ops_countdown(k3_shard, op_name, threads, persistent):
    """get, getmany and reset_stats with allocation N failing: OOM changes nothing."""
    base = Baseline.now()
    h = K3Harness(k3_shard, batch_threads=threads)
    batch = [(0, 4), (0, 0), (0, 5), (0, 4)]
    alloc_arm, alloc_disarm = alloc_hooks(persistent=persistent)

    def arm(n: int) -> None:
        h.open()
        alloc_arm(n)

    def op() -> object:
        if op_name == "get":
            return h.cache.get(0, 4)
        if op_name == "reset_stats":
            h.cache.reset_stats()
        return h.cache.getmany(batch)

    def check(run: Run) -> None:
        _check_oom(run)
        if run.error is None:
            if op_name == "get":
                assert run.result.data.tobytes() == k3_expected(4)
                run.result.release()
                h.model.release(h.model.get(0, 4))
            else:
                if op_name == "reset_stats":
                    h.model.reset_stats()
                assert run.result == h.model.getmany(batch) == 2
        elif op_name == "reset_stats":
            h.model.reset_stats()  # it ran; only the getmany after it failed
        h.assert_sound()
        h.close()
        base.assert_back(f"{op_name} threads={threads} N={run.n}")

    runs = countdown(op, arm, alloc_disarm, check, 50, allowed=OOM)
    # get allocates nothing; getmany allocates its three key arrays.
    assert len(runs) == (1 if op_name == "get" else 4)


def test_cache_open_nomem_message_after_cleanup(k3_shard):
    """Regression: the slot-table NOMEM message was read from the freed cache."""
    container = engine.Container(str(k3_shard))
    base = Baseline.now()
    seen = []
    for n in range(1, 30):
        arm, disarm = alloc_hooks()
        arm(n)
        try:
            engine.ExpertCache(container, **K3_LAYOUT, n_slots=8, top_k=4,
                               batch_threads=1).close()
        except engine.OutOfMemoryError as e:
            seen.append(str(e))
        finally:
            disarm()
        base.assert_back(f"N={n}")
    slot_msgs = [m for m in seen if "slots of" in m]
    # ten tables are allocated together (the arena's record and its bytes,
    # slots, candidates, index, scratch, seen, workers, readers, read-ahead
    # queue): each refusal of one of them gives this message
    assert slot_msgs == ["cache open: no memory for 8 slots of 12288 bytes"] * 10
    container.close()
