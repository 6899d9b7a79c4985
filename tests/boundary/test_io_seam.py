"""The default I/O vtable and the aligned-read helpers, called as C callers would."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from tests.helpers import INDEX, make_sharded
from xcache import engine
from xcache.engine import _lib


@pytest.fixture()
def data_file(tmp_path: Path) -> Path:
    """A 10,000-byte file whose byte i is i % 251."""
    p = tmp_path / "data.bin"
    p.write_bytes(bytes(i % 251 for i in range(10_000)))
    return p


def _open(path: Path) -> int:
    ffi, lib = _lib.ffi(), _lib.lib()
    io = lib.xc_io_default()
    h = ffi.new("int64_t *")
    assert io.open(io.ctx, str(path).encode(), 0, h) == 0
    return int(h[0])


def test_default_vtable_refuses_bad_offsets_and_handles(data_file):
    """An offset past INT64_MAX is EINVAL; a closed handle is EBADF."""
    ffi, lib = _lib.ffi(), _lib.lib()
    io = lib.xc_io_default()
    h = _open(data_file)
    buf = ffi.new("uint8_t[16]")
    assert io.pread(io.ctx, h, buf, 16, 2**63) == -errno.EINVAL
    assert io.pread_nowait(io.ctx, h, buf, 16, 2**63) == -errno.EINVAL
    assert io.pread(io.ctx, h, buf, 16, 9_990) == 10
    assert bytes(buf[0:10]) == bytes(i % 251 for i in range(9_990, 10_000))
    size = ffi.new("uint64_t *")
    assert io.size(io.ctx, h, size) == 0 and size[0] == 10_000
    assert io.close(io.ctx, h) == 0
    assert io.size(io.ctx, h, size) == -errno.EBADF
    assert io.close(io.ctx, h) == -errno.EBADF


@pytest.mark.parametrize("offset,length,align,span", [
    (100, 10, 4096, 4096), (4090, 10, 4096, 8192), (0, 0, 4096, 0),
    (100, 10, 3, 0), (100, 10, 0, 0), (2**64 - 5, 10, 4096, 0),
])
def test_aligned_span(offset, length, align, span):
    """The widened span: aligned both ends, 0 for a bad alignment or an overflow."""
    assert _lib.lib().xc_io_aligned_span(offset, length, align) == span


def test_aligned_read_contract(data_file):
    """Misuse, empty reads, a failing handle and a short read, each exactly."""
    ffi, lib = _lib.ffi(), _lib.lib()
    io = lib.xc_io_default()
    h = _open(data_file)
    raw = ffi.new("uint8_t[]", 3 * 4096)
    base = int(ffi.cast("uintptr_t", raw))
    buf = raw + (-base % 4096)  # 4096-aligned, 8192 bytes usable
    start = ffi.new("size_t *")
    p = str(data_file).encode()

    def fail(*args) -> engine.EngineError:
        with pytest.raises(engine.EngineError) as ei:
            _lib.check(lib.xc_io_read_aligned(io, *args))
        return ei.value

    e = fail(h, p, buf, 8192, 100, 10, 3, start)
    assert type(e) is engine.MisuseError and e.offset == 100
    assert str(e) == (f"{data_file}: aligned read of 10 bytes at byte 100: bad "
                      "alignment 3 or range overflow")
    e = fail(h, ffi.NULL, buf, 100, 100, 10, 4096, start)
    assert str(e) == ("(file): aligned read needs a 4096-aligned buffer of 4096 "
                      "bytes, got 100 bytes")
    e = fail(h, p, buf + 1, 8000, 100, 10, 4096, start)
    assert type(e) is engine.MisuseError
    assert lib.xc_io_read_aligned(io, h, p, buf, 8192, 4100, 0, 4096, start) == 0
    assert start[0] == 4
    assert lib.xc_io_read_aligned(io, h, p, buf, 8192, 5000, 100, 4096, start) == 0
    assert start[0] == 904
    assert bytes(buf[904:1004]) == bytes(i % 251 for i in range(5000, 5100))
    e = fail(h, p, buf, 8192, 9_950, 100, 4096, start)
    assert type(e) is engine.ShortReadError and e.offset == 10_000
    assert str(e) == (f"{data_file}: short read: 50 of 100 bytes at byte 9950 "
                      "(end of file at byte 10000)")
    assert io.close(io.ctx, h) == 0
    e = fail(h, p, buf, 8192, 0, 10, 4096, start)
    assert type(e) is engine.EngineIOError
    assert str(e) == (f"{data_file}: read of 4096 bytes at byte 0 failed after 0 "
                      "bytes: Bad file descriptor (errno 9)")


def test_open_probed_missing_file_and_no_note(tmp_path):
    """A missing file is NOT_FOUND with or without O_DIRECT; the note may be NULL."""
    ffi, lib = _lib.ffi(), _lib.lib()
    io = lib.xc_io_default()
    h, active = ffi.new("int64_t *"), ffi.new("int *")
    missing = str(tmp_path / "nope").encode()
    for direct in (1, 0):
        rc = lib.xc_io_open_probed(io, missing, direct, h, active, ffi.NULL, 0)
        assert rc == lib.XC_E_NOT_FOUND
        assert _lib.last_error()[4] == f"{tmp_path / 'nope'}: no such file"


def test_container_path_that_cannot_be_examined(tmp_path):
    """A name too long to stat is EngineIOError naming the errno, not NotFound."""
    long = str(tmp_path / ("x" * 300))  # one component past NAME_MAX (255)
    with pytest.raises(engine.EngineIOError) as ei:
        engine.Container(long)
    assert str(ei.value) == f"{long}: stat failed: File name too long (errno 36)"


def test_relative_index_path_opens_from_the_working_folder(tmp_path, monkeypatch):
    """A bare index file name resolves its shards in the current folder."""
    make_sharded(tmp_path)
    monkeypatch.chdir(tmp_path)
    with engine.Container(INDEX) as c:
        assert sorted(c) == ["a", "b", "c"]
        assert [os.path.basename(s) for s in c.shards] == [
            "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]


def test_fault_injector_refuses_unknown_kinds():
    """Arming kind 0 or 14 directly is MisuseError; closing NULL is a no-op."""
    ffi, lib = _lib.ffi(), _lib.lib()
    out = ffi.new("xc_fault **")
    assert lib.xc_fault_open(ffi.NULL, out) == 0
    for kind in (0, 14):
        assert lib.xc_fault_arm(out[0], kind, 1, 0, 0, ffi.NULL) == lib.XC_E_MISUSE
    assert lib.xc_fault_arm(out[0], 1, 0, 0, 0, ffi.NULL) == lib.XC_E_MISUSE
    lib.xc_fault_close(out[0])
    lib.xc_fault_close(ffi.NULL)
