"""Loads the compiled engine and turns C status codes into exceptions.

Every C call made by the Python face goes through :func:`check`, so there is
one place where a negative status becomes an exception carrying the thread's
error record.  ``XC_ENGINE_LIB`` (or :func:`use`) points the package at
another build of the same sources -- the sanitizer build in CI, or the build
``replay.py`` makes of a candidate engine tree.
"""

from __future__ import annotations

import importlib.util
import os
from types import ModuleType
from typing import Any

from engine import errors

ENV_LIB = "XC_ENGINE_LIB"

_module: ModuleType | None = None


def use(path: str | os.PathLike[str]) -> ModuleType:
    """Load the engine extension at ``path`` and make it the one in use."""
    global _module
    spec = importlib.util.spec_from_file_location("engine._xc", os.fspath(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the engine extension at {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _module = mod
    return mod


def module() -> ModuleType:
    """Return the loaded extension module, loading it on first use."""
    global _module
    if _module is None:
        override = os.environ.get(ENV_LIB)
        if override:
            return use(override)
        from engine import _xc  # type: ignore[attr-defined]

        _module = _xc
    return _module


def ffi() -> Any:
    """The cffi FFI object of the loaded engine."""
    return module().ffi


def lib() -> Any:
    """The cffi lib object of the loaded engine."""
    return module().lib


def last_error() -> tuple[int, int, int, int, str]:
    """This thread's last C error record: (code, offset, layer, expert, msg)."""
    f, lb = ffi(), lib()
    e = lb.xc_last_error()
    msg = f.string(e.message).decode("utf-8", "replace")
    return int(e.code), int(e.offset), int(e.layer), int(e.expert), msg


def check(rc: int) -> int:
    """Return ``rc`` if it is not negative, else raise the mapped exception."""
    if rc >= 0:
        return rc
    code, offset, layer, expert, msg = last_error()
    if code != rc:  # the C side failed without recording why: a bug there
        msg = f"{msg} (status {rc} without matching error record {code})"
    kind = lib().xc_status_name(rc)
    raise errors.from_status(rc, ffi().string(kind).decode(), msg,
                             offset=offset, layer=layer, expert=expert)
