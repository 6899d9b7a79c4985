"""A JSON document written with the byte position of every key and value recorded."""

from __future__ import annotations

import json
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


def render(value: Any, sep: tuple[str, str] = (", ", ": "), base: int = 0) -> Doc:
    """Write ``value`` as JSON; positions are ``base`` plus the byte index."""
    out: list[bytes] = []
    doc = Doc(b"")
    size = [0]

    def put(s: str) -> None:
        b = s.encode("utf-8")
        out.append(b)
        size[0] += len(b)

    def walk(v: Any, path: Path_) -> None:
        doc.values[path] = base + size[0]
        if isinstance(v, Obj):
            put("{")
            for j, (k, x) in enumerate(v.pairs):
                if j:
                    put(sep[0])
                doc.keys[path + (j,)] = base + size[0]
                put(json.dumps(k))
                put(sep[1])
                walk(x, path + (j,))
            put("}")
        elif isinstance(v, list):
            put("[")
            for m, x in enumerate(v):
                if m:
                    put(sep[0])
                walk(x, path + (m,))
            put("]")
        elif isinstance(v, Raw):
            put(v.text)
        else:
            put(json.dumps(v))

    walk(value, ())
    doc.text = b"".join(out)
    return doc

