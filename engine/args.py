"""The argument checks of the Python face: every value handed to C passes one.

A wrong type, an out-of-range integer or a string with an embedded NUL (which
C would silently cut) is a MisuseError -- a ValueError -- whose message starts
with the parameter's name, and whose status is the C core's misuse status.
"""

from __future__ import annotations

import operator
import os
from typing import Any

from xcache.engine._lib import misuse
from xcache.engine.errors import MisuseError

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
