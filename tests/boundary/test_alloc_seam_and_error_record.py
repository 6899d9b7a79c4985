"""The allocation seam, the error record and the default I/O read loop."""

from __future__ import annotations

import os

import pytest

from xcache.engine import _lib, errors


def _read_full(path: str, length: int, offset: int) -> tuple[int, bytes, int]:
    """Read through the default vtable's full-read loop; return (rc, bytes, got)."""
    ffi, lib = _lib.ffi(), _lib.lib()
    io = lib.xc_io_default()
    handle = ffi.new("int64_t *")
    assert io.open(io.ctx, path.encode(), 0, handle) == 0
    try:
        buf = ffi.new("unsigned char[]", max(length, 1))
        got = ffi.new("size_t *")
        rc = lib.xc_io_read_full(io, handle[0], path.encode(), buf, length,
                                 offset, got)
        return rc, bytes(ffi.buffer(buf, got[0])), int(got[0])
    finally:
        io.close(io.ctx, handle[0])


def test_dtype_table_matches_the_format():
    """Every dtype of the format has its header spelling and bit size."""
    lib, ffi = _lib.lib(), _lib.ffi()
    expected = {
        "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
        "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16,
        "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64,
        "F64": 64, "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    }
    got = {ffi.string(lib.xc_dtype_name(i)).decode(): lib.xc_dtype_bits(i)
           for i in range(lib.XC_DT_COUNT)}
    assert got == expected
    assert lib.xc_dtype_name(lib.XC_DT_COUNT) == ffi.NULL
    assert lib.xc_dtype_bits(-1) == 0


def test_read_full_reads_the_exact_range(tmp_path):
    """A whole range comes back byte for byte."""
    p = tmp_path / "f.bin"
    data = bytes(range(256)) * 40
    p.write_bytes(data)
    rc, got, n = _read_full(str(p), 1000, 777)
    assert (rc, n) == (0, 1000)
    assert got == data[777:1777]


def test_read_full_reports_a_short_read_with_position(tmp_path):
    """A range past the end is a short read naming the file and where it ended."""
    p = tmp_path / "short.bin"
    p.write_bytes(b"x" * 100)
    rc, got, n = _read_full(str(p), 50, 80)
    assert rc == _lib.lib().XC_E_SHORT_READ
    assert n == 20 and got == b"x" * 20
    code, offset, _, _, msg = _lib.last_error()
    assert code == rc and offset == 100
    assert str(p) in msg and "20 of 50 bytes" in msg


def test_check_maps_status_to_exception_family(tmp_path):
    """check() raises the family class with the C record's message and offset."""
    empty = tmp_path / "empty"  # a regular file: the vtable refuses /dev/null
    empty.touch()
    with pytest.raises(errors.ShortReadError) as ei:
        rc, _, _ = _read_full(str(empty), 8, 0)
        _lib.check(rc)
    assert ei.value.kind == "short_read" and ei.value.offset == 0
    lib = _lib.lib()
    offsets = _lib.from_status(lib.XC_E_FORMAT_OFFSETS, "offsets", "m", offset=9)
    assert type(offsets) is errors.FormatError
    assert (offsets.kind, offsets.offset, str(offsets)) == ("offsets", 9, "m")
    budget = _lib.from_status(lib.XC_E_BUDGET, "budget", "m")
    assert type(budget) is errors.BudgetError and isinstance(budget, errors.MisuseError)


def test_the_engine_in_use_is_the_one_asked_for():
    """XC_ENGINE_LIB (sanitizer, coverage builds) really replaces the package build."""
    asked = os.environ.get(_lib.ENV_LIB)
    loaded = os.path.realpath(_lib.module().__file__)
    if asked:
        assert loaded == os.path.realpath(asked)
    else:
        assert os.path.dirname(loaded) == os.path.dirname(
            os.path.realpath(_lib.__file__))
