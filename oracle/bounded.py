"""Bounded sizes: every number a user hands the tools is checked before use.

docs/DESIGN.md, "Bounded sizes".  Three pieces, shared by the generator
(``fixtures``), the labs (``lab``) and the oracle's readers:

* :func:`load_json` / :func:`parse_json` read a user's JSON file (a
  ``config.json``, an index, a spec) as a regular file of at most
  :data:`MAX_JSON_BYTES`, nested at most as deep as the interpreter allows,
  and turn every way that can fail into one :class:`UserFileError` naming
  the file: "PATH: not valid JSON: a value nested too deeply".
* :func:`expect_object`, :func:`field_int` and :func:`field_number` read one
  field with its type and range checked, naming the file and the field:
  "PATH: num_attention_heads: expected a positive integer, got 0".
* :func:`int_option` is the argparse ``type=`` of every count, size and
  offset option: a whole number within stated bounds, or argparse's usage
  error naming the option ("argument --slots: 10**20 is past the limit of
  2147483647").  :func:`byte_count` reads a size such as ``512M``.

The engine keeps its own checks (``engine/layout.py``): it imports nothing
from the oracle.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from oracle.regular import open_regular

#: Largest JSON file a tool reads (DeepSeek-V3's index is about 9 MB).
MAX_JSON_BYTES = 256 << 20
#: Largest integer an option or a field takes unless it states its own limit.
MAX_INT = 2**63 - 1
#: The most layers and experts per layer any tool takes (a trace, a config, a
#: selection): every key ``layer * n_experts + expert`` fits 32 bits.  The
#: trace readers' limits (``oracle.traces``) are the same numbers.
MAX_LAYERS = 1 << 12
MAX_EXPERTS = 1 << 19
#: The most cache slots any tool takes: no cache needs more than every key.
MAX_SLOTS = MAX_LAYERS * MAX_EXPERTS
#: The largest tensor dimension a config may name.
MAX_DIM = 2**31 - 1

_MISSING: Any = object()


class UserFileError(ValueError):
    """A user's file is not what it must be; ``str()`` names the file and field."""


def _show(value: Any) -> str:
    """A value as the message quotes it (short, and never a huge repr)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int) and abs(value) >= 10**30:
        k = value.bit_length() - 1
        return f"{'-' if value < 0 else ''}2**{k}" if abs(value) == 1 << k else \
            f"an integer of {len(str(abs(value)))} digits"
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'list'}"
    if value is None:
        return "null"
    s = repr(value)
    return s if len(s) <= 40 else s[:37] + "..."


def parse_json(data: bytes | str, where: str) -> Any:
    """The JSON document in ``data``; UserFileError naming ``where`` if none."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as e:
        raise UserFileError(f"{where}: not UTF-8 text ({e.reason} at byte "
                            f"{e.start})") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise UserFileError(f"{where}: not valid JSON: a value nested too "
                            "deeply") from None
    except ValueError as e:
        raise UserFileError(f"{where}: not valid JSON: {e}") from None


def load_json(path: str | os.PathLike[str], *,
              max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The JSON document in regular file ``path``, of at most ``max_bytes``.

    Raises UserFileError naming the file (too large, not UTF-8, not JSON,
    nested too deeply) and the OSError of opening it (NotRegularFileError
    for a FIFO, a folder or a device).
    """
    name = os.fspath(path)
    with open_regular(name) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UserFileError(f"{name}: larger than the limit of {max_bytes:,} "
                            "bytes for a JSON file")
    return parse_json(data, name)


def expect_object(doc: Any, where: str, what: str = "") -> dict[str, Any]:
    """``doc`` if it is a JSON object, else UserFileError ("WHERE: WHAT: ...")."""
    if isinstance(doc, dict):
        return doc
    label = f"{where}: {what}" if what else where
    raise UserFileError(f"{label}: expected a JSON object, got {_show(doc)}")


def _int_words(lo: int, hi: int) -> str:
    if hi >= MAX_INT:
        return {1: "a positive integer", 0: "a non-negative integer"}.get(
            lo, f"an integer of at least {lo}")
    return f"an integer in {lo}..{hi}"


def field_int(doc: Mapping[str, Any], key: str, where: str, *, lo: int = 0,
              hi: int = MAX_INT, default: Any = _MISSING,
              none_is_absent: bool = True) -> Any:
    """``doc[key]`` as an integer in ``lo..hi``; UserFileError naming file and field.

    An absent key (or ``null`` with ``none_is_absent``) gives ``default``, or
    is an error when there is none.  A bool, a float (even 8.0), a string
    or an integer out of range is refused.
    """
    v = doc.get(key, _MISSING)
    if v is None and none_is_absent:
        v = _MISSING
    if v is _MISSING:
        if default is not _MISSING:
            return default
        raise UserFileError(f"{where}: {key}: missing (expected "
                            f"{_int_words(lo, hi)})")
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise UserFileError(f"{where}: {key}: expected {_int_words(lo, hi)}, "
                            f"got {_show(v)}")
    return v


def field_number(doc: Mapping[str, Any], key: str, where: str, *,
                 lo: float = 0.0, hi: float = float(MAX_INT),
                 default: Any = _MISSING) -> Any:
    """``doc[key]`` as a finite number in ``lo..hi`` (an int or a float)."""
    v = doc.get(key, _MISSING)
    if v is None or v is _MISSING:
        if default is not _MISSING:
            return default
        raise UserFileError(f"{where}: {key}: missing (expected a number)")
    if (not isinstance(v, (int, float)) or isinstance(v, bool)
            or not math.isfinite(v) or not lo <= v <= hi):
        raise UserFileError(f"{where}: {key}: expected a finite number in "
                            f"{lo:g}..{hi:g}, got {_show(v)}")
    return v


def int_option(lo: int = 0, hi: int = MAX_INT) -> Callable[[str], int]:
    """argparse ``type=``: a whole number in ``lo..hi``, else a usage error.

    argparse prefixes the option ("argument --slots: ..."), so the one line
    it prints names the option and the value.
    """
    def parse(text: str) -> int:
        try:
            n = int(text.strip().replace("_", ""), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number") from None
        if n < lo:
            raise argparse.ArgumentTypeError(f"{_show(n)} is below {lo}")
        if n > hi:
            raise argparse.ArgumentTypeError(
                f"{_show(n)} is past the limit of {hi}")
        return n

    parse.__name__ = "int"
    return parse


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def byte_count(text: str) -> int:
    """A size such as ``4096``, ``512M`` or ``8G`` (powers of 1024) in bytes."""
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1:] if t[-1:] in _UNITS else ""
    try:
        n = float(t[:len(t) - len(unit)])
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size (bytes, or a number with K, M, G or T)"
        ) from None
    if not math.isfinite(n) or n < 1 or n * _UNITS[unit] > MAX_INT:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size in "
                                         f"1..{MAX_INT} bytes")
    return int(n * _UNITS[unit])
