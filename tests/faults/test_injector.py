"""The C fault injector under the default read loop."""

from __future__ import annotations

import pytest

from tests.helpers import K3_LAYOUT, read_through
from xcache.engine import _lib
from xcache.faults.io import Fault, IOFaults


@pytest.fixture
def data_file(tmp_path):
    """A 64 KiB file of known bytes."""
    p = tmp_path / "data.bin"
    p.write_bytes(bytes(i % 251 for i in range(65536)))
    return p


def test_partial_reads_are_completed_by_the_loop(data_file):
    """Every pread returning only 100 bytes still yields the whole range."""
    with IOFaults() as f:
        f.arm(Fault("partial", nth=1, persistent=True, arg=100))
        rc, got = read_through(f, str(data_file), 1000, 5)
        assert rc == 0 and got == data_file.read_bytes()[5:1005]
        assert f.fired == 10 and f.reads == 10


def test_transient_eintr_is_retried(data_file):
    """One EINTR costs one retry and no error."""
    with IOFaults() as f:
        f.arm(Fault("eintr", nth=1))
        rc, got = read_through(f, str(data_file), 4096)
        assert rc == 0 and got == data_file.read_bytes()[:4096]
        assert (f.fired, f.reads) == (1, 2)


def test_persistent_eintr_storm_is_reported_not_spun_on(data_file):
    """An endless EINTR storm ends in an I/O error naming the file."""
    with IOFaults() as f:
        f.arm(Fault("eintr", nth=1, persistent=True))
        rc, _ = read_through(f, str(data_file), 4096)
        assert rc == _lib.lib().XC_E_IO
        assert str(data_file) in _lib.last_error()[4]
        assert f.fired == 1000


def test_eof_is_a_short_read_with_position(data_file):
    """A pread that finds the file ended reports where the bytes stopped."""
    with IOFaults() as f:
        f.arm(Fault("eof", nth=1))
        rc, got = read_through(f, str(data_file), 1000, 24)
        assert rc == _lib.lib().XC_E_SHORT_READ and got == b""
        code, offset, *_ = _lib.last_error()
        assert (code, offset) == (rc, 24)
        assert "0 of 1000 bytes" in _lib.last_error()[4]


def test_eio_on_the_nth_read_only(data_file):
    """The 3rd matching read fails with EIO; the 2nd and 4th do not."""
    with IOFaults() as f:
        f.arm(Fault("eio", nth=3))
        results = [read_through(f, str(data_file), 10, 10 * i)[0] for i in range(4)]
        assert results == [0, 0, _lib.lib().XC_E_IO, 0]
        assert "Input/output error" in _lib.last_error()[4]


def test_path_filter_spares_other_files(tmp_path, data_file):
    """A fault filtered to one file never touches another."""
    other = tmp_path / "other.bin"
    other.write_bytes(b"z" * 100)
    with IOFaults() as f:
        f.arm(Fault("eio", nth=1, persistent=True, path_filter="data.bin"))
        assert read_through(f, str(other), 100) == (0, b"z" * 100)
        assert read_through(f, str(data_file), 100)[0] == _lib.lib().XC_E_IO
        assert f.reads == 1 and f.open_handles == 0


def test_bad_arming_is_misuse():
    """Unknown kinds, a zero countdown and negative arguments are refused."""
    from xcache.engine import errors

    with IOFaults() as f:
        with pytest.raises(ValueError, match="unknown fault kind"):
            f.arm(Fault("explode"))
        with pytest.raises(errors.MisuseError, match="start at 1"):
            f.arm(Fault("eio", nth=0))
        with pytest.raises(errors.MisuseError, match="negative"):
            f.arm(Fault("partial", arg=-1))


def test_partial_larger_than_the_read_changes_nothing(data_file):
    """A partial-read limit above the request lets the whole read through at once."""
    with IOFaults() as f:
        f.arm(Fault("partial", nth=1, persistent=True, arg=1 << 20))
        rc, got = read_through(f, str(data_file), 4096, 100)
        assert rc == 0 and got == data_file.read_bytes()[100:4196]
        assert (f.fired, f.reads) == (1, 1)


def test_a_delayed_read_keeps_its_slot_in_flight_until_it_lands(k3_shard):
    """A demand get of a key whose read-ahead is delayed waits for it and hits."""
    from tests.helpers import expert_bytes
    from xcache import engine

    shard = k3_shard
    with IOFaults() as f:
        c = engine.Container(str(shard), io=f)
        cache = engine.ExpertCache(c, **K3_LAYOUT, n_slots=8, top_k=4, io_threads=1)
        f.arm(Fault("delay", nth=1, arg=50_000))  # 50 ms on the reader
        assert cache.prefetch([(0, 7)]) == 1  # queued, not yet read
        with cache.get(0, 7) as ex:  # waits for that read, then a hit
            assert ex.data.tobytes() == expert_bytes(shard, 7)
        s = cache.stats()
        assert (f.fired, s["requests"], s["hits"], s["misses"],
                s["prefetch_loads"], s["prefetch_first_uses"]) == (1, 1, 1, 0, 1, 1)
        cache.check()
        cache.close()
        c.close()


def _read_on_thread(faults: IOFaults, path: str, length: int) -> tuple:
    """Start a read of ``length`` bytes on a thread; (thread, its result list)."""
    import threading  # noqa: PLC0415

    out: list = []
    t = threading.Thread(target=lambda: out.append(read_through(faults, path, length)),
                         daemon=True)
    t.start()
    return t, out


def test_a_stalled_read_waits_for_its_release(data_file):
    """A stalled pread is reported, reads nothing until released, then reads whole."""
    with IOFaults() as f:
        f.arm(Fault("stall", nth=1))
        t, out = _read_on_thread(f, str(data_file), 4096)
        assert f.await_stalled(1, 30.0)
        assert (f.stalled, f.fired, out) == (1, 1, [])
        t.join(0.05)
        assert t.is_alive()  # still held: no bound has passed
        f.release()
        t.join(30.0)
        assert out == [(0, data_file.read_bytes()[:4096])]
        assert (f.stalled, f.stall_timeouts) == (0, 0)
        # transient: the next read is not stalled
        assert read_through(f, str(data_file), 10) == (0, data_file.read_bytes()[:10])


def test_a_stall_nobody_releases_ends_at_its_bound(data_file):
    """A stall bounded at 1 ms ends by itself (a timeout); the read succeeds."""
    with IOFaults() as f:
        f.arm(Fault("stall", nth=1, arg=1000))
        assert read_through(f, str(data_file), 100) == (0, data_file.read_bytes()[:100])
        assert (f.fired, f.stalled, f.stall_timeouts) == (1, 0, 1)


def test_disarm_lets_a_stalled_read_go(data_file):
    """Disarming an injector releases the read stalled in it."""
    with IOFaults() as f:
        f.arm(Fault("stall", nth=1))
        t, out = _read_on_thread(f, str(data_file), 64)
        assert f.await_stalled(1, 30.0)
        f.disarm()
        t.join(30.0)
        assert out == [(0, data_file.read_bytes()[:64])]
        assert (f.stalled, f.stall_timeouts) == (0, 0)


def test_await_stalled_says_when_none_is_stalled(data_file):
    """await_stalled returns False after its timeout when no read stalls."""
    with IOFaults() as f:
        f.arm(Fault("stall", nth=2))
        assert read_through(f, str(data_file), 10)[0] == 0  # the 1st: not stalled
        assert f.await_stalled(1, 0.0) is False
        assert f.stalled == 0


def test_a_stall_without_a_bound_is_refused():
    """Arming a stall with no bound (arg 0) in C is misuse: a stall always ends."""
    with IOFaults() as f:
        lib = _lib.lib()
        assert lib.xc_fault_arm(f._ptr, lib.XC_FAULT_STALL, 1, 0, 0,
                                _lib.ffi().NULL) == lib.XC_E_MISUSE
        assert "bound" in _lib.last_error()[4]


def test_a_placed_fault_meets_only_the_reads_over_its_byte(data_file):
    """Placed at byte 5000: reads of [0, 4096) and [8192, 12288) pass
    uncounted; the read of [4096, 8192) is the first that counts, and fails."""
    with IOFaults() as f:
        f.arm(Fault("eio", nth=1, at=5000))
        rcs = [read_through(f, str(data_file), 4096, at)[0] for at in (0, 8192, 4096)]
        assert rcs == [0, 0, _lib.lib().XC_E_IO]
        assert (f.reads, f.fired) == (1, 1)


def test_a_placed_partial_returns_the_bytes_before_its_byte(data_file):
    """A placed partial cuts the read that covers its byte just before it
    (reads=2: the cut pread, then the loop's pread from the byte, which
    starts there and does not count); the loop completes the range."""
    with IOFaults() as f:
        f.arm(Fault("partial", nth=1, persistent=True, at=3000))
        rc, got = read_through(f, str(data_file), 4096, 1000)
        assert rc == 0 and got == data_file.read_bytes()[1000:5096]
        assert (f.reads, f.fired) == (1, 1)


def test_a_placed_fault_follows_its_path_filter(data_file, tmp_path):
    """Placed at a byte of one file: the same range of another file passes."""
    other = tmp_path / "other.bin"
    other.write_bytes(data_file.read_bytes())
    with IOFaults() as f:
        f.arm(Fault("eof", nth=1, persistent=True, path_filter="data.bin",
                    at=10))
        assert read_through(f, str(other), 100)[0] == 0
        assert read_through(f, str(data_file), 100)[0] == \
            _lib.lib().XC_E_SHORT_READ


def test_placing_nothing_armed_is_misuse():
    """xc_fault_place without an armed fault is XC_E_MISUSE."""
    with IOFaults() as f:
        assert _lib.lib().xc_fault_place(f._ptr, 10) == _lib.lib().XC_E_MISUSE
