"""Countdown loops of I/O faults under the C read loop (faults/README.md F1-F9)."""

from __future__ import annotations

import pytest

from xcache import engine
from xcache.faults.io import Fault, IOFaults
from xcache.faults.loops import (
    K3Harness,
    Run,
    countdown,
    io_hooks,
    k3_expected,
    primed_baseline,
)

#: (kind, persistent) -> what a read that meets it becomes ("short", "io" or
#: None: the read loop absorbs it and the load succeeds).
OUTCOME = {
    ("eof", False): "short", ("eof", True): "short",
    ("eio", False): "io", ("eio", True): "io",
    ("eintr", False): None, ("eintr", True): "io",
    ("partial", False): None, ("partial", True): None,
}
CASES = sorted(OUTCOME)
ERROR = {"short": engine.ShortReadError, "io": engine.EngineIOError}
BATCH = [(0, 5), (0, 6), (0, 0), (0, 7), (0, 8), (0, 6)]  # a resident, a repeat


def _failures(kind: str, persistent: bool, n: int, loads: list) -> dict:
    """Which keys a serial batch fails when the nth read meets the fault."""
    outcome = OUTCOME[(kind, persistent)]
    if outcome is None or n > len(loads):
        return {}
    hit = loads[n - 1:] if persistent else [loads[n - 1]]
    return dict.fromkeys(hit, outcome)


@pytest.mark.parametrize("kind,persistent", CASES)
def test_get_countdown(k3_shard, kind, persistent):
    """get(0, 5) with read N faulted: success, or the documented error, no publish."""
    with IOFaults() as faults:
        base = primed_baseline(faults, k3_shard)
        h = K3Harness(k3_shard, faults)
        io_arm, io_disarm = io_hooks(faults, kind, persistent=persistent, arg=100)

        def arm(n: int) -> None:
            h.open()
            io_arm(n)

        def check(run: Run) -> None:
            fails = _failures(kind, persistent, run.n, [(0, 5)])
            if fails:
                assert type(run.error) is ERROR[fails[(0, 5)]]
                e = run.error
                assert (e.layer, e.expert) == (0, 5)
                assert "layer 0 expert 5" in str(e) and str(k3_shard) in str(e)
                try:
                    h.model.get(0, 5, fail=fails[(0, 5)])
                except OSError:
                    pass
            else:
                assert run.error is None, run.error
                assert run.result.data.tobytes() == k3_expected(5)
                run.result.release()
                h.model.release(h.model.get(0, 5))
            h.assert_sound(fails)
            h.close()
            assert faults.open_handles == 0
            base.assert_back(f"{kind} persistent={persistent} N={run.n}")

        runs = countdown(lambda: h.cache.get(0, 5), arm, io_disarm, check, 40,
                         allowed=(engine.EngineIOError,))
        assert len(runs) == 2


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("kind,persistent", CASES)
def test_getmany_countdown(k3_shard, kind, persistent, threads):
    """getmany with read N faulted publishes exactly the keys whose reads succeeded."""
    with IOFaults() as faults:
        base = primed_baseline(faults, k3_shard)
        h = K3Harness(k3_shard, faults, batch_threads=threads)
        io_arm, io_disarm = io_hooks(faults, kind, persistent=persistent, arg=100)
        loads = [(0, 5), (0, 6), (0, 7), (0, 8)]

        def arm(n: int) -> None:
            h.open()
            assert h.to_load(BATCH) == loads
            io_arm(n)

        def check(run: Run) -> None:
            assert run.error is None, run.error
            fails = _failures(kind, persistent, run.n, loads)
            if threads > 1 and fails:
                # Which read is the nth is up to the scheduler; how many
                # keys fail is not.  Take the failed set from the outcome.
                lost = [k for k in loads if k not in h.cache.resident()]
                assert len(lost) == len(fails)
                fails = dict.fromkeys(lost, next(iter(fails.values())))
            assert run.result == h.model.getmany(BATCH, failures=fails)
            assert run.result == len(loads) - len(fails)
            h.assert_sound(fails)
            h.close()
            assert faults.open_handles == 0
            base.assert_back(f"{kind} persistent={persistent} N={run.n}")

        runs = countdown(lambda: h.cache.getmany(BATCH), arm, io_disarm, check,
                         80, allowed=())
        assert len(runs) == len(loads) + 1


@pytest.mark.parametrize("kind,persistent", CASES)
def test_reset_stats_then_getmany_countdown(k3_shard, kind, persistent):
    """reset_stats meets no read; the getmany after it counts only its own window."""
    with IOFaults() as faults:
        base = primed_baseline(faults, k3_shard)
        h = K3Harness(k3_shard, faults)
        io_arm, io_disarm = io_hooks(faults, kind, persistent=persistent, arg=100)
        keys = [(0, 9), (0, 10)]

        def arm(n: int) -> None:
            h.open()
            io_arm(n)

        def op() -> int:
            h.cache.reset_stats()
            assert faults.reads == 0
            return h.cache.getmany(keys)

        def check(run: Run) -> None:
            fails = _failures(kind, persistent, run.n, keys)
            h.model.reset_stats()
            assert run.result == h.model.getmany(keys, failures=fails)
            h.assert_sound(fails)
            h.close()
            base.assert_back(f"{kind} persistent={persistent} N={run.n}")

        assert len(countdown(op, arm, io_disarm, check, 40)) == 3


@pytest.mark.parametrize("kind,persistent", CASES)
def test_container_open_countdown(k3_shard, kind, persistent):
    """Opening k3-mini with read N faulted: the container, or the error, no fd left."""
    with IOFaults() as faults:
        base = primed_baseline(faults, k3_shard)
        io_arm, io_disarm = io_hooks(faults, kind, persistent=persistent, arg=100)
        outcome = OUTCOME[(kind, persistent)]

        def check(run: Run) -> None:
            if outcome is not None and run.fired:
                assert type(run.error) is ERROR[outcome]
                assert str(k3_shard) in str(run.error)
            else:
                assert run.error is None, run.error
                assert len(run.result) == 144
                assert run.result.read_bytes(run.result.names()[0]) == \
                    k3_expected(0)[:512]
                run.result.close()
            assert faults.open_handles == 0
            base.assert_back(f"{kind} persistent={persistent} N={run.n}")

        runs = countdown(lambda: engine.Container(str(k3_shard), io=faults),
                         io_arm, io_disarm, check, 400,
                         allowed=(engine.EngineIOError,))
        assert runs[-1].error is None


def test_container_takes_the_raw_io_pointer_and_keeps_its_owner(k3_shard):
    """Container(io=faults.io) reads through it; IOFaults.close refuses while in use."""
    faults = IOFaults()
    c = engine.Container(str(k3_shard), io=faults.io)
    assert faults.open_handles == 1
    with pytest.raises(engine.MisuseError, match="1 open handle"):
        faults.close()
    faults.arm(Fault("eio", nth=1))
    with pytest.raises(engine.EngineIOError):
        c.read_bytes(c.names()[0])
    c.close()
    assert faults.open_handles == 0
    faults.close()


def test_container_keeps_the_injector_alive(k3_shard):
    """The container holds a reference to the IOFaults it was given."""
    faults = IOFaults()
    c = engine.Container(str(k3_shard), io=faults)
    assert c._io_owner is faults
    assert c.read_bytes(c.names()[0]) == k3_expected(0)[:512]
    c.close()
    faults.close()


def test_alloc_stats_and_fail_alloc():
    """engine.alloc arms the countdown and counts the refusal."""
    from xcache.engine import alloc

    before = alloc.stats()
    alloc.fail_alloc(1)
    with pytest.raises(engine.OutOfMemoryError):
        engine.Container("/nonexistent-but-allocates-first.safetensors")
    alloc.disarm()
    after = alloc.stats()
    assert after.failures == before.failures + 1
    assert after.live == before.live
    with pytest.raises(ValueError):
        alloc.fail_alloc(-1)
