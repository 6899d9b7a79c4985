"""oracle/bounds.py holds the C core's bounds: equal to engine/csrc/xc.h's #defines."""

from __future__ import annotations

import re
from pathlib import Path

from xcache.engine import _lib
from xcache.oracle import bounds

XC_H = Path(__file__).resolve().parents[2] / "engine" / "csrc" / "xc.h"
_DEFINE = re.compile(r"^#define\s+(XC_\w+)\s+(\d+)(?:ull|u)?\s*$", re.M)


def _header_bounds() -> dict[str, int]:
    """Every ``#define XC_NAME <integer>`` of xc.h named in the bounds module."""
    found = {m[1]: int(m[2]) for m in _DEFINE.finditer(XC_H.read_text())}
    return {k: v for k, v in found.items() if k in bounds.BOUNDS}


def test_every_bound_is_the_headers_number():
    """Each bound of oracle/bounds.py is the integer xc.h defines under its name."""
    assert _header_bounds() == bounds.BOUNDS


def test_each_module_constant_is_listed_under_its_xc_name():
    """Every upper-case constant of the module is in BOUNDS as ``XC_`` + its name."""
    names = {n for n in vars(bounds) if n.isupper() and n != "BOUNDS"}
    assert {f"XC_{n}" for n in names} == set(bounds.BOUNDS)
    assert {f"XC_{n}": getattr(bounds, n) for n in names} == bounds.BOUNDS


def test_the_pinned_numbers():
    """The numbers as docs/CACHE.md states them (a change is deliberate)."""
    assert bounds.BOUNDS == {
        "XC_DIRECT_ALIGN": 4096, "XC_MAX_DIMS": 8,
        "XC_HEADER_MAX_BYTES": 100_000_000, "XC_MAX_BATCH_THREADS": 256,
        "XC_MAX_IO_THREADS": 64, "XC_IO_DEPTH_DEFAULT": 64,
        "XC_TRACE_RING_DEFAULT": 4096, "XC_TRACE_RECORD_BYTES": 24,
        "XC_MAX_KEYS": 2_147_483_647, "XC_IO_MAX_RETRIES": 1000}


def test_the_library_exports_the_same_numbers():
    """The built engine's cdef constants (lib.XC_...) equal the bounds module."""
    lib = _lib.lib()
    assert {k: int(getattr(lib, k)) for k in bounds.BOUNDS} == bounds.BOUNDS
