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

The one reader, :func:`load_document`, reads every JSON or TOML file a
user hands a tool: a regular file whose size is asked before a byte is
read (a sparse terabyte is refused unread), at most its reader's limit,
TOML nested at most :data:`MAX_TOML_NESTING` levels (``xcache.toml_nesting``,
measured before ``tomllib``, which is quadratic in a dotted key's parts),
every field checked by a :class:`Schema` when one is given.

The engine keeps its own checks (``engine/layout.py``): it imports nothing
from the oracle.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from xcache.oracle.regular import TooLargeError, open_regular, read_capped
from xcache.toml_nesting import MAX_NESTING, check_nesting

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
#: The most levels a value of a user's TOML file sits at (dotted keys,
#: tables, arrays and inline tables): ``xcache.toml_nesting``.
MAX_TOML_NESTING = MAX_NESTING

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
    return parse_json(_read(name, max_bytes, "a JSON file"), name)


def _read(name: str, max_bytes: int, what: str) -> bytes:
    """The bytes of regular file ``name``; past ``max_bytes`` a UserFileError."""
    with open_regular(name) as f:
        try:  # its size first: a sparse terabyte is refused unread
            return read_capped(f, name, max_bytes, what)
        except TooLargeError as e:
            raise UserFileError(str(e)) from None


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


# -- schemas: every field of a user's JSON file, checked in one pass --------


def _at(path: str, key: Any) -> str:
    """``path`` one level down: ``steps[3]`` (an index), ``cache.n_slots`` (a key)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


class Schema:
    """What one value of a user's file must be; :meth:`check` refuses any other.

    ``check(value, where, path)`` raises UserFileError "WHERE: PATH:
    expected WORDS, got VALUE" for the first value that does not fit (the
    file's name, the field's path in it).  Subclasses: :class:`Int`,
    :class:`Number`, :class:`Text`, :class:`Flag`, :class:`Items`,
    :class:`Fields`, :class:`Either`, :class:`Anything`.
    """

    words = "a value"

    def ok(self, value: Any) -> bool:
        """Whether ``value`` itself fits (its items are checked by :meth:`check`)."""
        raise NotImplementedError

    def check(self, value: Any, where: str, path: str) -> None:
        """Refuse ``value`` at ``path`` of file ``where`` unless it fits."""
        if not self.ok(value):
            self.refuse(value, where, path)

    def refuse(self, value: Any, where: str, path: str,
               words: str | None = None) -> None:
        """Raise the UserFileError for ``value`` at ``path``."""
        label = f"{where}: {path}" if path else where
        if words is not None:  # the words say what was wrong already
            raise UserFileError(f"{label}: expected {words}")
        raise UserFileError(f"{label}: expected {self.words}, "
                            f"got {_show(value)}")


class Int(Schema):
    """An integer (never a bool, never a float) in ``lo..hi``."""

    def __init__(self, lo: int = 0, hi: int = MAX_INT) -> None:
        self.lo, self.hi = lo, hi
        self.words = _int_words(lo, hi)

    def ok(self, value: Any) -> bool:
        """An int in range."""
        return (isinstance(value, int) and not isinstance(value, bool)
                and self.lo <= value <= self.hi)


class Number(Schema):
    """A finite number (an int or a float, never a bool) in ``lo..hi``."""

    def __init__(self, lo: float = 0.0, hi: float = float(MAX_INT)) -> None:
        self.lo, self.hi = lo, hi
        self.words = f"a finite number in {lo:g}..{hi:g}"

    def ok(self, value: Any) -> bool:
        """A finite int or float in range."""
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value) and self.lo <= value <= self.hi)


class Text(Schema):
    """A string of at most ``max_len`` characters, one of ``choices`` if given."""

    def __init__(self, max_len: int = 1000,
                 choices: tuple[str, ...] | None = None) -> None:
        self.max_len, self.choices = max_len, choices
        self.words = (f"one of {', '.join(map(repr, choices))}" if choices
                      else f"a string of at most {max_len} characters")

    def ok(self, value: Any) -> bool:
        """A short enough string (among the choices)."""
        return (isinstance(value, str) and len(value) <= self.max_len
                and (self.choices is None or value in self.choices))

    def check(self, value: Any, where: str, path: str) -> None:
        """Refuse a string too long by its length, any other misfit by value."""
        if isinstance(value, str) and len(value) > self.max_len:
            self.refuse(value, where, path, f"a string of at most {self.max_len:,} "
                        f"characters, not {len(value):,}")
        super().check(value, where, path)


class Flag(Schema):
    """``true`` or ``false``."""

    words = "true or false"

    def ok(self, value: Any) -> bool:
        """A bool."""
        return isinstance(value, bool)


class Anything(Schema):
    """Any JSON value (its size is bounded by the file's)."""

    words = "any value"

    def ok(self, value: Any) -> bool:
        """Always."""
        return True


class Either(Schema):
    """A value that fits one of ``options`` (each checked whole, in order)."""

    def __init__(self, *options: Schema, words: str = "") -> None:
        self.options = options
        self.words = words or " or ".join(o.words for o in options)

    def ok(self, value: Any) -> bool:
        """Whether one option's own test takes it."""
        return any(o.ok(value) for o in self.options)

    def check(self, value: Any, where: str, path: str) -> None:
        """The first option whose own test takes ``value`` checks it whole."""
        for o in self.options:
            if o.ok(value):
                o.check(value, where, path)
                return
        self.refuse(value, where, path)


class Items(Schema):
    """A JSON list of at most ``max_len`` items, each fitting ``item``."""

    def __init__(self, item: Schema, max_len: int = 10_000,
                 min_len: int = 0) -> None:
        self.item, self.max_len, self.min_len = item, max_len, min_len
        self.words = (f"a list of {min_len}..{max_len} items, each "
                      f"{item.words}")

    def ok(self, value: Any) -> bool:
        """A list of an allowed length."""
        return isinstance(value, list) and (self.min_len <= len(value)
                                            <= self.max_len)

    def check(self, value: Any, where: str, path: str) -> None:
        """The list (one of a wrong length refused by its length), then each item."""
        if isinstance(value, list) and not self.ok(value):
            label = f"{where}: {path}" if path else where
            raise UserFileError(f"{label}: {len(value):,} items; expected "
                                f"{self.min_len:,}..{self.max_len:,}")
        super().check(value, where, path)
        for i, v in enumerate(value):
            self.item.check(v, where, _at(path, i))


class Fields(Schema):
    """A JSON object: its known ``fields``, the ``required`` ones present.

    A key not in ``fields`` is refused, naming the known ones, unless
    ``rest`` gives the schema of any other key's value (then keys are
    strings of at most 200 characters, at most ``max_keys`` of them).
    """

    def __init__(self, fields: Mapping[str, Schema] | None = None,
                 required: tuple[str, ...] = (), rest: Schema | None = None,
                 max_keys: int = 10_000) -> None:
        self.fields, self.required = dict(fields or {}), required
        self.rest, self.max_keys = rest, max_keys
        self.words = "a JSON object"

    def ok(self, value: Any) -> bool:
        """A dict."""
        return isinstance(value, dict)

    def check(self, value: Any, where: str, path: str) -> None:
        """The object, its required fields, then every field's value."""
        super().check(value, where, path)
        label = f"{where}: {path}" if path else where
        if len(value) > self.max_keys:
            raise UserFileError(f"{label}: {len(value):,} fields, past the "
                                f"limit of {self.max_keys:,}")
        for k in self.required:
            if k not in value:
                raise UserFileError(f"{label}: the field {k!r} is missing")
        for k, v in value.items():
            schema = self.fields.get(k, self.rest)
            if schema is None:
                raise UserFileError(
                    f"{label}: unknown field {_show(k)} (known: "
                    f"{', '.join(self.fields)})")
            if k not in self.fields and len(k) > 200:
                raise UserFileError(f"{label}: a field name of {len(k):,} "
                                    "characters, past the limit of 200")
            schema.check(v, where, _at(path, k))


def check_document(doc: Any, schema: Schema, where: str) -> Any:
    """``doc`` if every field fits ``schema``; else UserFileError naming the field."""
    schema.check(doc, where, "")
    return doc


# -- the one reader: every file a user hands a tool ---------------------------


class Input:
    """argparse ``type=`` of an option naming a file (or folder) a tool reads.

    The mark (``xcache_input``) lets the one writer refuse an output at an
    input (``fixtures.ownership.check_outputs``) and the tests find every
    input option; the value is the text as given, or as ``inner`` reads it.
    What the tool reads there goes through :func:`load_document` (or
    ``open_regular`` and a reader with its own limits).
    """

    xcache_input = True

    def __init__(self, inner: Callable[[str], Any] | None = None,
                 kind: str = "file") -> None:
        self.inner, self.kind = inner, kind
        self.__name__ = "path"

    def __call__(self, text: str) -> Any:
        """The path as given (or as ``inner`` reads it); an empty one refused."""
        if not str(text).strip():
            raise argparse.ArgumentTypeError("an empty path")
        return self.inner(text) if self.inner is not None else text


def parse_toml(data: bytes, where: str) -> Any:
    """The TOML document in ``data``; UserFileError naming ``where`` if none.

    Its nesting is measured first (``xcache.toml_nesting``: dotted keys,
    tables, arrays and inline tables at most :data:`MAX_TOML_NESTING` levels):
    ``tomllib`` is quadratic in the parts of a dotted key.
    """
    if sys.version_info >= (3, 11):
        import tomllib  # noqa: PLC0415
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib  # noqa: PLC0415

    try:
        text = data.decode("utf-8")
        check_nesting(text, where)
        return tomllib.loads(text)
    except UnicodeDecodeError as e:
        raise UserFileError(f"{where}: not UTF-8 text ({e.reason} at byte "
                            f"{e.start})") from None
    except RecursionError:
        raise UserFileError(f"{where}: not valid TOML: a value nested too "
                            "deeply") from None
    except tomllib.TOMLDecodeError as e:
        raise UserFileError(f"{where}: not valid TOML: {e}") from None
    except ValueError as e:  # nested past the limit: the line names the file
        raise UserFileError(str(e)) from None


def load_document(path: str | os.PathLike[str], *,
                  max_bytes: int = MAX_JSON_BYTES,
                  schema: Schema | None = None,
                  toml: bool | None = None) -> Any:
    """A user's JSON or TOML file (TOML by its ``.toml`` name, or ``toml``), bounded.

    A regular file (``open_regular``: never a FIFO, a device or a folder)
    of at most ``max_bytes`` (its size asked before a byte is read), JSON
    nested no deeper than the parser manages, TOML no deeper than
    :data:`MAX_TOML_NESTING` levels (measured before ``tomllib`` parses it),
    every field checked by ``schema`` when given: each failure one
    UserFileError (a ValueError) or OSError naming the file.
    """
    name = os.fspath(path)
    if toml is None:
        toml = name.lower().endswith(".toml")
    if not toml:
        doc = load_json(name, max_bytes=max_bytes)
    else:
        doc = parse_toml(_read(name, max_bytes, "a TOML file"), name)
    return doc if schema is None else check_document(doc, schema, name)
