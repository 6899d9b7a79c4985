"""Exceptions of the engine: one class per family of C status codes."""

from __future__ import annotations

import operator
import os
from typing import Any


class EngineError(Exception):
    """Base of every engine error; ``status`` is the C code, ``kind`` its name."""

    def __init__(self, message: str, *, status: int = 0, kind: str = "",
                 offset: int = -1, layer: int = -1, expert: int = -1) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.offset = None if offset < 0 else offset
        self.layer = None if layer < 0 else layer
        self.expert = None if expert < 0 else expert


class OutOfMemoryError(EngineError, MemoryError):
    """An engine allocation failed; the operation changed nothing."""


class EngineIOError(EngineError, OSError):
    """The operating system reported an error while reading."""


class ShortReadError(EngineIOError):
    """Fewer bytes than asked arrived: the file ended early."""


class FileChangedError(EngineIOError):
    """A file changed identity or size while the container was open."""


class FormatError(EngineError, ValueError):
    """A container failed validation; ``kind`` names the check, ``offset`` the byte."""


class LayoutError(EngineError, ValueError):
    """No expert layout for a container, or a bad one; the message says what and where.

    Raised by ``engine.layout`` (explicit layout files, fixture specs,
    detection) with ``kind`` "layout"; ``layer`` and ``expert`` are set
    when one expert is concerned.
    """

    def __init__(self, message: str, *, layer: int = -1,
                 expert: int = -1) -> None:
        super().__init__(message, kind="layout", layer=layer, expert=expert)


class NotFoundError(EngineError, LookupError):
    """No such tensor, shard or key."""


class AllPinnedError(EngineError):
    """Every slot is held, pinned or in flight; nothing changed."""


class MisuseError(EngineError, ValueError):
    """A bad argument or a call out of order; the message names the parameter."""


def misuse(message: str) -> MisuseError:
    """A MisuseError with the C misuse status, as the C side would record it."""
    from xcache.engine import _lib  # noqa: PLC0415 - _lib imports this module

    return MisuseError(message, status=int(_lib.lib().XC_E_MISUSE), kind="misuse")


class BudgetError(MisuseError):
    """The cache budget is too small; the message says what would work."""


#: The class of each family, by the name the C side gives its status
#: (``xc_status_name``); every ``XC_E_FORMAT_*`` status is a FormatError.
_BY_KIND: dict[str, type[EngineError]] = {
    "nomem": OutOfMemoryError,
    "io": EngineIOError,
    "short_read": ShortReadError,
    "changed": FileChangedError,
    "not_found": NotFoundError,
    "all_pinned": AllPinnedError,
    "misuse": MisuseError,
    "budget": BudgetError,
}


def _format_statuses() -> frozenset[int]:
    """Every ``XC_E_FORMAT_*`` status of the loaded engine."""
    from xcache.engine import _lib  # noqa: PLC0415 - _lib imports this module

    lib = _lib.lib()
    return frozenset(int(getattr(lib, n)) for n in dir(lib)
                     if n.startswith("XC_E_FORMAT_"))


def from_status(status: int, kind: str, message: str, *, offset: int = -1,
                layer: int = -1, expert: int = -1) -> EngineError:
    """Build the exception for a negative C status code named ``kind``."""
    cls = _BY_KIND.get(kind)
    if cls is None:
        cls = FormatError if status in _format_statuses() else EngineError
    return cls(message, status=status, kind=kind, offset=offset, layer=layer,
               expert=expert)


class InvariantError(EngineError, AssertionError):
    """``check()`` found a broken invariant; ``inv`` is its ``INV-*`` id."""

    def __init__(self, message: str, *, inv: str, number: int) -> None:
        super().__init__(message, status=number, kind=inv)
        self.inv = inv
        self.number = number


# -- argument checks of the Python face --------------------------------------
# Every value handed to C passes through one of these first, so that a wrong
# type, an out-of-range integer or a string with an embedded NUL (which C
# would silently cut) is a MisuseError -- a ValueError -- whose message starts
# with the parameter's name.

INT32 = (-(2**31), 2**31 - 1)
INT = INT32
U64 = (0, 2**64 - 1)


def check_int(name: str, value: Any, lo: int, hi: int) -> int:
    """``value`` as an int in [lo, hi], else MisuseError naming ``name``."""
    try:
        v = operator.index(value)
    except TypeError:
        raise misuse(f"{name} must be an integer, got "
                     f"{type(value).__name__} {value!r}") from None
    if not lo <= v <= hi:
        raise misuse(f"{name} must be from {lo} to {hi}, got {v}")
    return v


def check_flag(name: str, value: Any) -> bool:
    """``value`` as a bool (a bool, or an integer 0 or 1), else MisuseError."""
    if isinstance(value, bool):
        return value
    return bool(check_int(name, value, 0, 1))


def check_text(name: str, value: Any) -> bytes:
    """``value`` (a str) UTF-8 encoded for C, refusing an embedded NUL."""
    if not isinstance(value, str):
        raise misuse(f"{name} must be a str, got {type(value).__name__} "
                     f"{value!r}")
    if "\0" in value:
        raise misuse(f"{name}: embedded null character in {value!r}")
    return value.encode()


def check_path(name: str, value: Any) -> bytes:
    """A path (str, bytes or os.PathLike) encoded for C, refusing an embedded NUL."""
    try:
        raw = os.fsencode(value)
    except TypeError:
        raise misuse(f"{name} must be a path (str, bytes or os.PathLike), "
                     f"got {type(value).__name__} {value!r}") from None
    if b"\0" in raw:
        raise misuse(f"{name}: embedded null byte in {os.fsdecode(raw)!r}")
    return raw


def check_key(layer: Any, expert: Any, where: str = "") -> tuple[int, int]:
    """A (layer, expert) pair of int32s, else MisuseError naming which one."""
    return (check_int(f"{where}layer", layer, *INT32),
            check_int(f"{where}expert", expert, *INT32))


def check_keys(name: str, value: Any) -> list[tuple[int, int]]:
    """An iterable of (layer, expert) pairs as a list of int32 pairs."""
    try:
        items = list(value)
    except TypeError:
        raise misuse(f"{name} must be an iterable of (layer, expert) pairs, "
                     f"got {type(value).__name__} {value!r}") from None
    out = []
    for i, k in enumerate(items):
        try:
            layer, expert = k
        except (TypeError, ValueError):
            raise misuse(f"{name}[{i}] must be a (layer, expert) pair, got "
                         f"{k!r}") from None
        out.append(check_key(layer, expert, f"{name}[{i}]: "))
    return out


def conversion_error(exc: BaseException, checks: list[tuple[str, Any, int, int]]
            ) -> MisuseError:
    """The MisuseError for a cffi conversion failure of one of ``checks``."""
    for name, value, lo, hi in checks:
        try:
            check_int(name, value, lo, hi)
        except MisuseError as e:
            return e
    return misuse(str(exc))
