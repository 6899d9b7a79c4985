"""Every C status becomes the exception of its family, found by the name C
gives it (``xc_status_name``), never by a retyped number."""

from __future__ import annotations

from xcache.engine import _lib, errors


def _statuses() -> dict[str, int]:
    """Every XC_E_* constant of the loaded engine."""
    lib = _lib.lib()
    return {n: int(getattr(lib, n)) for n in dir(lib) if n.startswith("XC_E_")}


def test_each_status_maps_to_its_family():
    """nomem, io, short_read, changed, not_found, all_pinned, misuse, budget, format."""
    lib, ffi = _lib.lib(), _lib.ffi()
    want = {"XC_E_NOMEM": errors.OutOfMemoryError, "XC_E_IO": errors.EngineIOError,
            "XC_E_SHORT_READ": errors.ShortReadError,
            "XC_E_CHANGED": errors.FileChangedError,
            "XC_E_NOT_FOUND": errors.NotFoundError,
            "XC_E_ALL_PINNED": errors.AllPinnedError,
            "XC_E_MISUSE": errors.MisuseError, "XC_E_BUDGET": errors.BudgetError}
    seen = set()
    for name, status in _statuses().items():
        kind = ffi.string(lib.xc_status_name(status)).decode()
        exc = _lib.from_status(status, kind, "m")
        cls = errors.FormatError if name.startswith("XC_E_FORMAT_") else want[name]
        assert type(exc) is cls, (name, kind)
        assert (exc.status, exc.kind) == (status, kind)
        seen.add(name)
    assert set(want) <= seen


def test_an_unknown_status_is_the_base_error():
    """A status the engine does not define is a plain EngineError, kept as given."""
    exc = _lib.from_status(-999, "mystery", "m")
    assert type(exc) is errors.EngineError
    assert (exc.status, exc.kind) == (-999, "mystery")


def test_python_side_misuse_carries_the_c_status():
    """A MisuseError raised by the Python face has the C misuse status."""
    exc = _lib.misuse("n_slots must be an integer")
    assert (exc.status, exc.kind) == (_lib.lib().XC_E_MISUSE, "misuse")
