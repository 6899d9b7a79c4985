"""A JSON document written with the byte position of every key and value recorded."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any


class Obj:
    """A JSON object as a list of pairs: duplicate keys survive."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs

    def keys(self) -> list[str]:
        """The keys in document order."""
        return [k for k, _ in self.pairs]

    def get(self, key: str) -> Any:
        """The first value of ``key``."""
        return next(v for k, v in self.pairs if k == key)

    def index(self, key: str) -> int:
        """The position of the first pair named ``key``."""
        return self.keys().index(key)

    def copy(self) -> Obj:
        """A deep copy."""
        return Obj([(k, _copy(v)) for k, v in self.pairs])


def _copy(v: Any) -> Any:
    if isinstance(v, Obj):
        return v.copy()
    if isinstance(v, list):
        return [_copy(x) for x in v]
    return v


@dataclass(frozen=True)
class Raw:
    """JSON text written as it is (a number JSON allows that Python would not write)."""

    text: str


class Spelled(str):
    """A string whose JSON spelling is given byte for byte (escapes, UTF-8, bad bytes).

    It compares and hashes as its decoded value (what a reader that accepts
    it must decode); ``json`` is the text written, quotes included.
    """

    json: bytes

    def __new__(cls, value: str, spelled: bytes) -> Spelled:
        """The string ``value``, written as ``spelled``."""
        s = super().__new__(cls, value)
        s.json = spelled
        return s


Path_ = tuple[int, ...]


@dataclass
class Doc:
    """A rendered header: its bytes and the byte position of every key and value.

    Paths index pairs of objects and elements of arrays from the top:
    ``keys[(i,)]`` is the opening quote of the i-th top-level name,
    ``values[(i, j)]`` the start of the value of its j-th field,
    ``values[(i, j, m)]`` the m-th element of that field's array.
    """

    text: bytes
    keys: dict[Path_, int] = field(default_factory=dict)
    values: dict[Path_, int] = field(default_factory=dict)


_PLAIN = re.compile(r'[ !#-\[\]-~]*')  # printable ASCII but '"' and '\\'


def _scalar(v: Any) -> bytes:
    """The JSON bytes of a key or scalar (a plain ASCII string without json.dumps)."""
    if isinstance(v, Spelled):
        return v.json
    if isinstance(v, Raw):
        return v.text.encode("utf-8")
    if isinstance(v, str) and _PLAIN.fullmatch(v):
        return b'"' + v.encode() + b'"'
    if type(v) is int:
        return str(v).encode()
    return json.dumps(v).encode()


def render(value: Any, sep: tuple[str, str] = (", ", ": "), base: int = 0) -> Doc:
    """Write ``value`` as JSON; positions are ``base`` plus the byte index."""
    out: list[bytes] = []
    doc = Doc(b"")
    keys, values = doc.keys, doc.values
    comma, colon = sep[0].encode(), sep[1].encode()
    size = base

    def walk(v: Any, path: Path_) -> None:
        nonlocal size
        values[path] = size
        if isinstance(v, Obj):
            out.append(b"{")
            size += 1
            for j, (k, x) in enumerate(v.pairs):
                if j:
                    out.append(comma)
                    size += len(comma)
                keys[path + (j,)] = size
                kb = _scalar(k)
                out.append(kb)
                out.append(colon)
                size += len(kb) + len(colon)
                walk(x, path + (j,))
            out.append(b"}")
            size += 1
        elif isinstance(v, list):
            out.append(b"[")
            size += 1
            for m, x in enumerate(v):
                if m:
                    out.append(comma)
                    size += len(comma)
                if isinstance(x, (Obj, list)):
                    walk(x, path + (m,))
                else:  # a scalar element: no call
                    values[path + (m,)] = size
                    xb = _scalar(x)
                    out.append(xb)
                    size += len(xb)
            out.append(b"]")
            size += 1
        else:
            vb = _scalar(v)
            out.append(vb)
            size += len(vb)

    walk(value, ())
    doc.text = b"".join(out)
    return doc
