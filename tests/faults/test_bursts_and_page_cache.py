"""The injector's bursts and page-cache faults, and the oracle's model of them."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from tests.helpers import K3_LAYOUT, expert_bytes, read_through
from xcache.engine import _lib
from xcache.faults.io import Fault, IOFaults
from xcache.oracle.read_path import ReadPath

DATA = bytes(i % 251 for i in range(65536))


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    """A 64 KiB file of known bytes."""
    p = tmp_path / "data.bin"
    p.write_bytes(DATA)
    return p


def _nowait(faults: IOFaults, path: Path, length: int, offset: int = 0
            ) -> tuple[int, bytes]:
    """One pread_nowait call through the injector: (return value, bytes copied)."""
    ffi = _lib.ffi()
    io = faults.io
    h = ffi.new("int64_t *")
    assert io.open(io.ctx, str(path).encode(), 0, h) == 0
    try:
        buf = ffi.new("unsigned char[]", length)
        n = io.pread_nowait(io.ctx, h[0], buf, length, offset)
        return n, bytes(ffi.buffer(buf, max(n, 0)))
    finally:
        io.close(io.ctx, h[0])


def _armed(*faults: dict) -> list[dict | None]:
    """The oracle's two modelled injectors with ``faults`` armed, counting from now."""
    return [None if f is None else {"nth": 1, "persistent": False, "arg": 0,
                                    "progress": 0, "reads": 0, "fired": 0, **f}
            for f in (*faults, None, None)][:2]


def _model(path: Path, *faults: dict) -> ReadPath:
    """The oracle's read path over ``path``'s folder, ``faults`` armed."""
    rp = ReadPath()
    rp._open_reads(path.parent, {})
    rp.faults = _armed(*faults)
    return rp


# -- bursts: interrupts in a row, then progress ---------------------------------

def test_bursts_of_600_between_progress_never_exhaust_the_retry_budget(data_file):
    """10 bursts of 600 EINTRs (6,000 in all) between reads of 100 bytes: success."""
    with IOFaults() as f:
        f.arm(Fault("eintr_burst", persistent=True, arg=600, progress=100))
        rc, got = read_through(f, str(data_file), 1000, 3)
        assert (rc, got) == (0, DATA[3:1003])
        assert (f.reads, f.fired) == (6010, 6010)


def test_999_eagain_in_a_row_then_progress_succeeds(data_file):
    """A transient burst of 999 EAGAINs is retried; the 1,000th call reads all."""
    with IOFaults() as f:
        f.arm(Fault("eagain_burst", arg=999))
        rc, got = read_through(f, str(data_file), 4096)
        assert (rc, got) == (0, DATA[:4096])
        assert (f.reads, f.fired) == (1000, 1000)


def test_1000_interrupts_in_a_row_fail_the_read(data_file):
    """A burst of 1,000 is an I/O error naming the errno, after 1,000 calls."""
    for kind, code in (("eintr_burst", errno.EINTR), ("eagain_burst", errno.EAGAIN)):
        with IOFaults() as f:
            f.arm(Fault(kind, arg=1000, progress=100))
            rc, _ = read_through(f, str(data_file), 4096)
            assert rc == _lib.lib().XC_E_IO
            assert f"(errno {code})" in _lib.last_error()[4]
            assert (f.reads, f.fired) == (1000, 1000)


def test_eagain_is_retried_as_eintr_is(data_file):
    """One EAGAIN at the first pread costs one retry and no error."""
    with IOFaults() as f:
        f.arm(Fault("eagain", nth=1))
        rc, got = read_through(f, str(data_file), 4096)
        assert (rc, got, f.reads, f.fired) == (0, DATA[:4096], 2, 1)


def test_bad_burst_and_page_cache_armings_are_misuse(data_file):
    """A burst without a length, progress without a burst, a placed burst: misuse."""
    from xcache.engine.errors import MisuseError

    with IOFaults() as f:
        with pytest.raises(MisuseError, match="a burst needs its length"):
            f.arm(Fault("eintr_burst"))
        with pytest.raises(MisuseError, match="none is armed"):
            f.arm(Fault("eintr", progress=5))
        with pytest.raises(MisuseError, match="cannot be placed"):
            f.arm(Fault("eagain_burst", arg=3, at=10))
        with pytest.raises(MisuseError, match="cannot be placed"):
            f.arm(Fault("nowait_eio", at=10))


# -- page-cache copies (pread_nowait) -------------------------------------------

def test_unarmed_injector_cannot_tell_what_is_cached(data_file):
    """With no page-cache fault armed, pread_nowait answers EOPNOTSUPP."""
    with IOFaults() as f:
        assert _nowait(f, data_file, 100) == (-errno.EOPNOTSUPP, b"")
        with IOFaults(f) as outer:  # forwarded to the inner injector
            f.arm(Fault("nowait_eagain"))
            assert _nowait(outer, data_file, 100)[0] == -errno.EAGAIN
            outer.close()


def test_each_page_cache_kind_and_the_whole_copies_around_it(data_file):
    """The nth copy meets the kind; the others copy whole, short only at real EOF."""
    cases = {"nowait_partial": (100, DATA[8:108]), "nowait_eof": (0, b""),
             "nowait_eagain": (-errno.EAGAIN, b""),
             "nowait_eio": (-errno.EIO, b"")}
    for kind, met in cases.items():
        with IOFaults() as f:
            f.arm(Fault(kind, nth=2, arg=100))
            assert _nowait(f, data_file, 500, 8) == (500, DATA[8:508])
            assert _nowait(f, data_file, 500, 8) == met
            assert _nowait(f, data_file, 500, 65526) == (10, DATA[65526:])
            assert _nowait(f, data_file, 500, 65536) == (0, b"")
            assert (f.reads, f.fired) == (4, 1)


def test_page_cache_faults_count_no_pread_and_preads_no_copy(data_file):
    """A nowait kind counts no pread; a whole copy is no pread of the inner one."""
    with IOFaults() as f:
        f.arm(Fault("nowait_eio", persistent=True))
        assert read_through(f, str(data_file), 4096) == (0, DATA[:4096])
        assert (f.reads, f.fired) == (0, 0)
        with IOFaults() as inner, IOFaults(inner) as outer:
            outer.arm(Fault("nowait_partial", nth=5))
            inner.arm(Fault("eio", persistent=True))
            assert _nowait(outer, data_file, 64) == (64, DATA[:64])  # not preaded
            assert (inner.reads, outer.reads) == (0, 1)
            outer.close()


def test_the_loader_rereads_a_partly_cached_piece_whole(k3_shard):
    """A copy of 100 of 1,632 bytes: the expert is read again whole, a device load."""
    from xcache import engine

    with IOFaults() as f:
        c = engine.Container(str(k3_shard), io=f)
        cache = engine.ExpertCache(c, **K3_LAYOUT, n_slots=8, top_k=4)
        f.arm(Fault("nowait_partial", nth=1, arg=100))
        for e in (5, 6, 7):
            with cache.get(0, e) as ex:
                assert ex.data.tobytes() == expert_bytes(k3_shard, e)
        f.arm(Fault("nowait_eio", nth=1))
        with cache.get(0, 8) as ex:
            assert ex.data.tobytes() == expert_bytes(k3_shard, 8)
        s = cache.stats()
        assert (s["device_loads"], s["page_cache_loads"], s["unknown_loads"],
                s["io_bytes"], s["load_failures"]) == (1, 2, 1, 4 * 1632, 0)
        assert (f.reads, f.fired) == (1, 1)
        cache.close()
        c.close()


# -- the oracle's model ------------------------------------------------------------

def test_model_of_a_burst_read(k3_shard):
    """The oracle's read loop meets the same 6,010 calls and the 1,000-in-a-row edge."""
    s, data = str(k3_shard), k3_shard.read_bytes()
    rp = _model(k3_shard, {"fault": "eintr_burst", "persistent": True,
                           "arg": 600, "progress": 100})
    fd = rp.fds[s][0]
    assert rp._read_full(fd, 3, 1000, s) == (data[3:1003], None)
    assert rp.faults[0]["reads"] == 6010
    rp.faults = _armed({"fault": "eagain_burst", "arg": 999})
    assert rp._read_full(fd, 0, 4096, s) == (data[:4096], None)
    assert rp.faults[0]["reads"] == 1000
    rp.faults = _armed({"fault": "eagain_burst", "arg": 1000})
    assert rp._read_full(fd, 0, 4096, s) == (None, "io")
    assert rp.faults[0]["reads"] == 1000
    rp._close_reads()


def test_model_of_the_page_cache_copy(k3_shard):
    """The oracle's pread_nowait: the nth copy meets the kind, the rest are whole."""
    s = str(k3_shard)
    assert k3_shard.stat().st_size == 59776
    rp = _model(k3_shard)
    assert rp._nowait(500, s, 8) == "unsupported"
    rp.faults = _armed({"fault": "nowait_partial", "nth": 2,
                                  "arg": 100})
    assert [rp._nowait(500, s, at) for at in (8, 8, 8, 59766, 59776)] == \
        [500, 100, 500, 10, 0]
    rp.faults = _armed({"fault": "nowait_eagain",
                                  "persistent": True})
    assert [rp._nowait(500, s, 0) for _ in range(2)] == ["eagain", "eagain"]
    rp.faults = _armed({"fault": "eio"}, {"fault": "nowait_eof"})
    assert (rp._nowait(500, s, 0), rp._nowait(500, s, 0)) == (0, 500)
    assert (rp.faults[0]["reads"], rp.faults[1]["reads"]) == (0, 2)
    rp._close_reads()
