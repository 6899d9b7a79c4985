"""The reader differential: seeded corruptions of headers and indexes, engine vs oracle.

Each replay writes a few hundred small containers, each one valid container
broken in one place by a rule drawn from a seed, and opens every one with
the engine's C reader (``engine.Container``) and the oracle's reader
(``oracle.safetensors``).  The two must give the same verdict, field by
field:

- accept or refuse, and when both accept the same tensor table (name,
  dtype, shape, shard, offset, size) and metadata;
- the same error kind (:data:`KIND_DIFFERENCES` lists the pairs the two
  readers may legitimately name, each with its rule);
- the byte offset of the error record by the engine's convention
  (docs/DESIGN.md §3's table): the corruption knows what it broke and
  where, because the header is written here with every key's and value's
  byte position recorded (:class:`Doc`); the oracle's own offset where
  both readers follow one rule;
- the message names the file the oracle names, the tensor the oracle names
  (as ``"name"``), and every number of the oracle's detail (the sizes,
  ends and counts of a ``size``, ``length`` or ``offsets`` error).

The rules (:data:`HEADER_RULES`, :data:`INDEX_RULES`) cover every check of
§3 -- the length prefix and the file's extent, UTF-8, JSON syntax and
numbers, the entry schema field by field, dtypes, duplicates, ``__metadata__``,
the data offsets, overflow, bits, size, the buffer's length -- and the
index's promises (unknown and missing entries, a wrong shard, a missing
shard, ``total_size``, the ``weight_map`` schema), plus random byte edits
of the header text whose verdict and kind must agree.  A parser or error
path bug that changes any verdict or any field of an error fails the
gate's ``reader-diff`` checks, with the first disagreement named.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Corruptions a default replay draws, and their seed (pinned: the same
#: files every run; ``run_checks`` takes others for a longer search).
DEFAULT_CASES = 280
DEFAULT_SEED = 26

#: (engine kind, oracle kind) pairs both readers may name for one file.
KIND_DIFFERENCES: dict[tuple[str, str], str] = {
    ("offsets", "size"): "check-major (engine) vs tensor by tensor (oracle): "
    "a moved end is an overlap for the engine, a wrong size for the oracle",
    ("dtype", "json"): "one JSON pass (engine) vs parse first (oracle)",
    ("schema", "json"): "one JSON pass (engine) vs parse first (oracle)",
    ("duplicate", "json"): "one JSON pass (engine) vs parse first (oracle)",
    ("index", "json"): "one JSON pass (engine) vs parse first (oracle)",
}

INDEX_NAME = "model.safetensors.index.json"
#: Bits of every dtype of docs/DESIGN.md §3 (as the oracle's DTYPE_BITS).
_BITS = {"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "BOOL": 8, "U8": 8, "I8": 8,
         "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8,
         "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
         "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64,
         "C64": 64}


# -- a JSON document written with every position recorded ---------------------

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


# -- the valid containers the rules break ---------------------------------------

def _entries(specs: list[tuple[str, str, list[int]]], start: int = 0
             ) -> tuple[list[tuple[str, Any]], int]:
    pairs, off = [], start
    for name, dtype, shape in specs:
        n = 1
        for s in shape:
            n *= s
        nb = n * _BITS[dtype] // 8
        pairs.append((name, Obj([("dtype", dtype), ("shape", list(shape)),
                                 ("data_offsets", [off, off + nb])])))
        off += nb
    return pairs, off


def _data(n: int, salt: int) -> bytes:
    return bytes((i * 7 + salt) % 251 for i in range(n))


#: The single-file containers: (tensors, with metadata).  Every dtype width
#: (4, 6, 8, 16, 32, 64 bits), a scalar, an empty tensor, ties in offsets.
SINGLE: tuple[list[tuple[str, str, list[int]]], ...] = (
    [("a.w", "F32", [2, 3]), ("b.w", "BF16", [4]), ("c.w", "I8", [5]),
     ("d", "F4", [2, 2])],
    [("layers.0.x", "F16", [3, 2]), ("layers.0.y", "U8", []),
     ("layers.0.z", "I64", [2]), ("e", "F32", [0, 3]),
     ("layers.1.q", "F6_E2M3", [4]), ("layers.1.r", "BOOL", [7]),
     ("layers.1.s", "F8_E4M3", [1, 1, 3])],
    # every dtype once, in the table's order: a wrong width anywhere is a
    # wrong size (the 4- and 6-bit ones with element counts that end on a
    # byte)
    [(f"t.{d.lower()}", d, {4: [2, 3], 6: [2, 2]}.get(_BITS[d], [3]))
     for d in _BITS],
)


@dataclass
class Header:
    """One file to write: its header value, the data, and how to lay it out."""

    top: Any
    data: bytes
    sep: tuple[str, str] = (", ", ": ")
    n_delta: int = 0          #: added to the true header length in the prefix
    tail: bytes = b""         #: appended after the data
    cut: int = 0              #: bytes cut from the end of the file
    edit: Callable[[bytearray], None] | None = None  #: on the header bytes

    def write(self, path: Path) -> Doc:
        """Write the file; the Doc's positions are absolute offsets in it."""
        doc = render(self.top, self.sep, base=8)
        text = bytearray(doc.text)
        if self.edit is not None:
            self.edit(text)
        raw = struct.pack("<Q", max(0, len(text) + self.n_delta)) + bytes(text)
        raw += self.data + self.tail
        if self.cut:
            raw = raw[:max(0, len(raw) - self.cut)]
        path.write_bytes(raw)
        doc.text = bytes(text)
        return doc


def base_single(rng: random.Random) -> Header:
    """One of the valid single files, with or without ``__metadata__``."""
    k = rng.randrange(len(SINGLE))
    pairs, n = _entries(SINGLE[k])
    if rng.random() < 0.7:
        pairs.insert(rng.randrange(len(pairs) + 1),
                     ("__metadata__", Obj([("format", "pt"), ("k", str(k))])))
    sep = rng.choice([(", ", ": "), (",", ":"), (" ,\n", " :\t")])
    return Header(Obj(pairs), _data(n, k), sep)


# -- what the engine must report ----------------------------------------------

@dataclass
class Expect:
    """Where the engine's error record must point, by the corruption's construction.

    ``key``/``value``: a path of the Doc (the opening quote of a name, the
    start of a value); ``at``: an absolute offset; ``named``: the opening
    quote of the entry the oracle's error names; ``oracle``: the oracle's
    own offset (both follow one rule).  ``kind`` is the check the
    corruption breaks, when the construction fixes it (else the oracle
    decides, and any offset rule still applies to the kind it names).
    """

    kind: str | None = None
    key: Path_ | None = None
    value: Path_ | None = None
    at: int | None = None
    named: bool = False
    oracle: bool = False
    number: bool = False  #: a json error, if any, is at ``value``

    def offset(self, doc: Doc, oracle_name: str | None, top: Any) -> int | None:
        """The offset the engine must report (None: not fixed by this rule)."""
        if self.key is not None:
            return doc.keys[self.key]
        if self.value is not None:
            return doc.values[self.value]
        if self.at is not None:
            return self.at
        if self.named and oracle_name is not None and isinstance(top, Obj):
            if oracle_name in top.keys():
                return doc.keys[(top.index(oracle_name),)]
        return None


Rule = Callable[[random.Random, Header], Expect]


def _tensor_index(rng: random.Random, h: Header) -> int:
    names = [i for i, k in enumerate(h.top.keys()) if k != "__metadata__"]
    return rng.choice(names)


def _field(h: Header, i: int, name: str) -> int:
    return h.top.pairs[i][1].index(name)


def _set_field(h: Header, i: int, name: str, value: Any) -> int:
    entry = h.top.pairs[i][1]
    j = entry.index(name)
    entry.pairs[j] = (name, value)
    return j


def _meta_index(h: Header) -> int | None:
    keys = h.top.keys()
    return keys.index("__metadata__") if "__metadata__" in keys else None


def r_dtype_not_string(rng: random.Random, h: Header) -> Expect:
    """A dtype that is a number, an array, null, an object or a boolean."""
    i = _tensor_index(rng, h)
    j = _set_field(h, i, "dtype", rng.choice([8, [1], None, Obj([]), True]))
    return Expect("schema", value=(i, j))


def r_dtype_unknown(rng: random.Random, h: Header) -> Expect:
    """A dtype name no reader knows (a near miss of a real one)."""
    i = _tensor_index(rng, h)
    j = _set_field(h, i, "dtype", rng.choice(["U9", "f32", "F32 ", "", "BF",
                                              "F8_E4M3F", "I128"]))
    return Expect("dtype", value=(i, j))


def r_dtype_other(rng: random.Random, h: Header) -> Expect:
    """Another known dtype: a size or bits error, or accepted when it fits."""
    i = _tensor_index(rng, h)
    _set_field(h, i, "dtype", rng.choice(sorted(_BITS)))
    return Expect(named=True)


def r_shape_bad(rng: random.Random, h: Header) -> Expect:
    """A shape that is not an array, or holds a negative, a float or a string."""
    i = _tensor_index(rng, h)
    j = _field(h, i, "shape")
    shape = list(h.top.pairs[i][1].pairs[j][1])
    choice = rng.randrange(4)
    if choice == 0 or not shape:
        _set_field(h, i, "shape", rng.choice([4, "4", None, Obj([])]))
        return Expect("schema", value=(i, j))
    m = rng.randrange(len(shape))
    # the last two pass 19 digits: past the writers' fast path, past u64
    shape[m] = [-1, Raw("2.0"), "2", None, Raw("1e2"), Raw("18446744073709551616"),
                Raw("100000000000000000000003")][rng.randrange(7)]
    _set_field(h, i, "shape", shape)
    return Expect("schema", value=(i, j, m))


def r_shape_nine(rng: random.Random, h: Header) -> Expect:
    """A shape of nine dimensions (at most eight)."""
    i = _tensor_index(rng, h)
    j = _set_field(h, i, "shape", [1] * 9)
    return Expect("schema", value=(i, j, 8))


def r_shape_dim(rng: random.Random, h: Header) -> Expect:
    """One dimension plus or minus one, a dimension added or dropped."""
    i = _tensor_index(rng, h)
    shape = list(h.top.get(h.top.keys()[i]).get("shape"))
    op = rng.randrange(4)
    if op == 0 and shape:
        m = rng.randrange(len(shape))
        shape[m] = max(0, shape[m] + rng.choice([-1, 1]))
    elif op == 1:
        shape.insert(rng.randrange(len(shape) + 1), rng.choice([1, 2, 3]))
    elif op == 2 and shape:
        shape.pop(rng.randrange(len(shape)))
    else:
        shape = shape + [0]
    _set_field(h, i, "shape", shape)
    return Expect(named=True)


def r_long_integer(rng: random.Random, h: Header) -> Expect:
    """A dimension or offset past 19 digits in the writers' exact spelling.

    Compact separators put the entry on the reader's fast path, which reads
    at most 19 digits; 2^64 + k would wrap to k in 64 bits.
    """
    h.sep = (",", ":")
    i = _tensor_index(rng, h)
    name = rng.choice(["shape", "data_offsets"])
    j = _field(h, i, name)
    values = list(h.top.pairs[i][1].pairs[j][1]) or [1]
    m = rng.randrange(len(values))
    values[m] = Raw(rng.choice([str(2**64 + rng.randrange(2**16)),
                                "1" + "0" * rng.randrange(20, 25)]))
    _set_field(h, i, name, values)
    return Expect("schema", value=(i, j, m))


def r_overflow(rng: random.Random, h: Header) -> Expect:
    """Dimensions of 48 bits or more, or whose product passes 64 bits."""
    i = _tensor_index(rng, h)
    _set_field(h, i, "shape", rng.choice([[2**48], [2**40, 2**40],
                                          [2**32, 2**31, 4], [3, 2**62],
                                          [2**48 - 1, 2**20]]))
    return Expect(named=True)


def r_offsets_bad(rng: random.Random, h: Header) -> Expect:
    """data_offsets of one or three items, a negative, a string, 2**48."""
    i = _tensor_index(rng, h)
    j = _field(h, i, "data_offsets")
    do = list(h.top.pairs[i][1].pairs[j][1])
    choice = rng.randrange(5)
    if choice == 0:
        _set_field(h, i, "data_offsets", do[:1])
        return Expect("schema", value=(i, j))
    if choice == 1:
        _set_field(h, i, "data_offsets", do + [do[1]])
        return Expect("schema", value=(i, j, 2))
    m = rng.randrange(2)
    do[m] = [-1, "0", 2**48, Raw("0.0"), Raw("10000000000000000000"),
             Raw("18446744073709551616")][rng.randrange(6)]
    _set_field(h, i, "data_offsets", do)
    return Expect("schema", value=(i, j, m))


def r_offsets_move(rng: random.Random, h: Header) -> Expect:
    """A begin or an end moved by a few bytes, or two ranges swapped."""
    i = _tensor_index(rng, h)
    do = list(h.top.get(h.top.keys()[i]).get("data_offsets"))
    if rng.random() < 0.2:
        k = _tensor_index(rng, h)
        other = h.top.get(h.top.keys()[k]).get("data_offsets")
        _set_field(h, k, "data_offsets", do)
        do = list(other)
    else:
        m = rng.randrange(2)
        do[m] = max(0, do[m] + rng.choice([-2, -1, 1, 2]))
    _set_field(h, i, "data_offsets", do)
    return Expect(named=True)


def r_field_missing(rng: random.Random, h: Header) -> Expect:
    """An entry without its dtype, shape or data_offsets."""
    i = _tensor_index(rng, h)
    entry = h.top.pairs[i][1]
    entry.pairs.pop(rng.randrange(3))
    return Expect("schema", key=(i,))


def r_field_twice(rng: random.Random, h: Header) -> Expect:
    """A field given twice in one entry."""
    i = _tensor_index(rng, h)
    entry = h.top.pairs[i][1]
    j = rng.randrange(3)
    at = rng.randrange(j + 1, len(entry.pairs) + 1)
    entry.pairs.insert(at, entry.pairs[j])
    return Expect("schema", key=(i, at))


def r_field_extra(rng: random.Random, h: Header) -> Expect:
    """An unknown field (ignored) of any JSON type."""
    i = _tensor_index(rng, h)
    entry = h.top.pairs[i][1]
    entry.pairs.insert(rng.randrange(len(entry.pairs) + 1),
                       (rng.choice(["extra", "dtype2", "Shape"]),
                        rng.choice([1, "x", [1, [2]], Obj([("a", None)]), -0.5,
                                    Raw("1e-999"), True])))
    return Expect()


def r_entry_not_object(rng: random.Random, h: Header) -> Expect:
    """An entry that is not an object."""
    i = _tensor_index(rng, h)
    name = h.top.pairs[i][0]
    h.top.pairs[i] = (name, rng.choice([3, "x", [1, 2], None, False]))
    return Expect("schema", value=(i,))


def r_duplicate(rng: random.Random, h: Header) -> Expect:
    """A later entry renamed to an earlier one's name."""
    keys = h.top.keys()
    i = rng.randrange(len(keys) - 1)
    k = rng.randrange(i + 1, len(keys))
    h.top.pairs[k] = (keys[i], h.top.pairs[k][1])
    return Expect("duplicate", key=(k,))


def r_name_nul(rng: random.Random, h: Header) -> Expect:
    """A tensor name holding U+0000."""
    i = _tensor_index(rng, h)
    name = h.top.pairs[i][0]
    at = rng.randrange(len(name) + 1)
    h.top.pairs[i] = (name[:at] + "\0" + name[at:], h.top.pairs[i][1])
    return Expect("schema", key=(i,))


def r_meta_bad(rng: random.Random, h: Header) -> Expect:
    """__metadata__ that is not an object of strings, or has a key twice."""
    i = _meta_index(h)
    if i is None:
        h.top.pairs.insert(0, ("__metadata__", Obj([("a", "b")])))
        i = 0
    meta = h.top.pairs[i][1]
    choice = rng.randrange(4)
    if choice == 0:
        h.top.pairs[i] = ("__metadata__", rng.choice([[1], "x", 3, True]))
        return Expect("schema", value=(i,))
    if choice == 1:
        j = rng.randrange(len(meta.pairs))
        meta.pairs[j] = (meta.pairs[j][0], rng.choice([1, None, ["a"], Obj([])]))
        return Expect("schema", value=(i, j))
    if choice == 2:
        j = rng.randrange(len(meta.pairs))
        meta.pairs.append(meta.pairs[j])
        return Expect("duplicate", key=(i, len(meta.pairs) - 1))
    h.top.pairs.append(("__metadata__", rng.choice([None, Obj([])])))
    return Expect("duplicate", key=(len(h.top.pairs) - 1,))


def r_meta_ok(rng: random.Random, h: Header) -> Expect:
    """__metadata__ null, empty, or with escaped and non-ASCII strings."""
    i = _meta_index(h)
    value = rng.choice([None, Obj([]), Obj([("é", "\u00e9\\\"\n"), ("z", "")])])
    if i is None:
        h.top.pairs.append(("__metadata__", value))
    else:
        h.top.pairs[i] = ("__metadata__", value)
    return Expect()


def r_top_not_object(rng: random.Random, h: Header) -> Expect:
    """A header that is JSON but not an object."""
    h.top = rng.choice([[1, 2], "x", 3, None, []])
    return Expect("schema", at=8)


def r_number_range(rng: random.Random, h: Header) -> Expect:
    """An ignored field with a number that overflows a double (or does not)."""
    i = _tensor_index(rng, h)
    entry = h.top.pairs[i][1]
    if rng.random() < 0.5:
        text = rng.choice(["1e999", "-1e999", "1" * 400, "1.7976931348623158e308",
                           "1.7976931348623157e308", "0e99999", "1e-999",
                           "-0.0e5", "1E+2", "2.5e-3", "1" * 25 + ".5e280",
                           "0." + "0" * 30 + "1e330", "1e-2147483649",
                           "1e2147483648", "0e2147483648"])
    else:  # at the top of the range: a power of ten 10^a from 1e286 on
        # times a significand of the digits that put the product within a
        # factor of ten of the largest double, on either side of it
        a = rng.randrange(286, 310)
        n_digits = max(1, min(20, 309 - a + rng.randrange(-1, 2)))
        digits = str(rng.randrange(10 ** (n_digits - 1), 10 ** n_digits))
        cut = rng.randrange(len(digits) + 1)
        sig = digits[:cut] + ("." + digits[cut:] if digits[cut:] else "")
        exp = a + (len(digits) - cut)  # the written exponent
        text = (sig if not sig.startswith(".") else "0" + sig) + f"e{exp}"
    j = rng.randrange(len(entry.pairs) + 1)
    entry.pairs.insert(j, ("n", Raw(text)))
    # the oracle decides whether it overflows; the engine must point at it
    return Expect(value=(i, j), number=True)


def r_prefix(rng: random.Random, h: Header) -> Expect:
    """The length prefix off by a few bytes, or far past the file, or too large."""
    choice = rng.randrange(4)
    if choice == 0:
        h.n_delta = rng.choice([-3, -1, 1, 2])
        return Expect(oracle=True)
    if choice == 1:
        h.n_delta = 10_000 + rng.randrange(1000)
        return Expect("header_past_end")
    if choice == 2:
        h.n_delta = 100_000_001
        return Expect("header_too_large", at=0)
    h.cut = 10**9  # the whole file: the 8 bytes of N are not there
    h.tail = b""
    return Expect("too_short", at=0)


def r_length(rng: random.Random, h: Header) -> Expect:
    """Trailing bytes after the data, or the data cut short."""
    if rng.random() < 0.5:
        h.tail = b"\0" * rng.randrange(1, 9)
    else:
        h.cut = rng.randrange(1, 4)
    return Expect(oracle=True)


def r_not_utf8(rng: random.Random, h: Header) -> Expect:
    """A byte that is not UTF-8 inside a name or a string value."""
    bad = rng.choice([b"\xff", b"\xc0", b"\xed\xa0\x80", b"\xe0\x80"])

    def edit(text: bytearray) -> None:
        quotes = [m.start() for m in re.finditer(rb'"', bytes(text))]
        at = rng.choice(quotes[::2]) + 1
        text[at:at] = bad
    h.edit = edit
    return Expect("not_utf8", oracle=True)


def r_text_edit(rng: random.Random, h: Header) -> Expect:
    """A random byte of the header deleted, inserted, replaced or a span doubled."""
    op = rng.randrange(4)
    pick = rng.choice(list(b'{}[],:"\\ 0129-.eE+atn\t\x01'))

    def edit(text: bytearray) -> None:
        at = rng.randrange(len(text))
        if op == 0:
            del text[at]
        elif op == 1:
            text[at:at] = bytes([pick])
        elif op == 2:
            text[at] = pick
        else:
            n = rng.randrange(1, 12)
            text[at:at] = text[at:at + n]
    h.edit = edit
    return Expect(oracle=True)


#: The header rules, each with its weight in the draw.
HEADER_RULES: tuple[tuple[Rule, int], ...] = (
    (r_dtype_not_string, 2), (r_dtype_unknown, 2), (r_dtype_other, 3),
    (r_shape_bad, 3), (r_shape_nine, 1), (r_shape_dim, 4), (r_overflow, 2),
    (r_long_integer, 2),
    (r_offsets_bad, 3), (r_offsets_move, 5), (r_field_missing, 2),
    (r_field_twice, 2), (r_field_extra, 2), (r_entry_not_object, 2),
    (r_duplicate, 2), (r_name_nul, 1), (r_meta_bad, 4), (r_meta_ok, 1),
    (r_top_not_object, 1), (r_number_range, 4), (r_prefix, 3), (r_length, 2),
    (r_not_utf8, 2), (r_text_edit, 10),
)


# -- verdicts -----------------------------------------------------------------

@dataclass
class Verdict:
    """One reader's verdict: accepted (``kind`` None) with a table, or an error."""

    kind: str | None = None
    offset: int | None = None
    message: str = ""
    path: str = ""
    detail: str = ""
    table: list[tuple[Any, ...]] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    key: tuple[int | None, int | None] = (None, None)  #: layer, expert


def engine_verdict(engine: Any, path: Path) -> Verdict:
    """The C reader's verdict on ``path``."""
    try:
        with engine.Container(str(path)) as c:
            names = [os.path.basename(s) for s in c.shards]
            rows = sorted((t.name, t.dtype, tuple(t.shape), names[t.shard],
                           t.offset, t.nbytes) for t in c.tensors())
            return Verdict(table=rows, metadata=dict(c.metadata))
    except engine.EngineError as e:
        return Verdict(e.kind, e.offset, str(e),
                       key=(getattr(e, "layer", None), getattr(e, "expert", None)))


def oracle_verdict(path: Path) -> Verdict:
    """The oracle reader's verdict on ``path``."""
    from oracle.safetensors import OracleFormatError, open_container  # noqa: PLC0415

    try:
        c = open_container(path)
    except OracleFormatError as e:
        return Verdict(e.kind, e.offset, str(e), e.path, e.detail)
    rows = sorted((t.name, t.dtype, tuple(t.shape), os.path.basename(t.shard),
                   t.offset, t.nbytes) for t in c.tensors())
    return Verdict(table=rows, metadata=dict(c.metadata))


_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")
_INT = re.compile(r"(?<![\w.])\d+(?![\w.])")


def named_tensor(detail: str) -> str | None:
    """The tensor an oracle error's detail names first (``'name'``), if any."""
    m = _QUOTED.search(detail)
    if m is None:
        return None
    try:
        import ast  # noqa: PLC0415

        return str(ast.literal_eval("'" + m.group(1) + "'"))
    except (ValueError, SyntaxError):
        return None


#: Kinds whose message must name (as ``"name"``) the tensor the oracle's names.
NAME_COMPARED = frozenset({"dtype", "duplicate", "offsets", "overflow", "bits",
                           "size"})

#: Oracle kinds whose detail's integers the engine's message must all hold
#: (sizes, bits, ends: the same facts in other words).
NUMBERS_COMPARED = frozenset({"size", "bits", "length", "offsets",
                              "header_past_end", "index"})


def compare(mine: Verdict, theirs: Verdict, expected_offset: int | None
            ) -> str | None:
    """The first field on which the two verdicts differ, or None."""
    if (mine.kind is None) != (theirs.kind is None):
        return (f"engine {'accepts' if mine.kind is None else 'refuses'} "
                f"({mine.kind}: {mine.message}), oracle "
                f"{'accepts' if theirs.kind is None else 'refuses'} "
                f"({theirs.kind}: {theirs.message})")
    if mine.kind is None:
        if mine.table != theirs.table:
            diff = [r for r in mine.table if r not in theirs.table][:1]
            return f"tensor tables differ: engine has {diff or mine.table[:1]}"
        if mine.metadata != theirs.metadata:
            return f"metadata: engine {mine.metadata}, oracle {theirs.metadata}"
        return None
    if mine.kind != theirs.kind:
        if (mine.kind, theirs.kind) in KIND_DIFFERENCES:
            return None
        return f"kind: engine {mine.kind} ({mine.message}), oracle {theirs.kind}"
    if mine.key != (None, None):  # a format error concerns no key
        return (f"{mine.kind}: the error names layer {mine.key[0]} expert "
                f"{mine.key[1]} ({mine.message})")
    if expected_offset is not None and mine.offset != expected_offset:
        return (f"{mine.kind} offset: engine {mine.offset}, expected "
                f"{expected_offset} ({mine.message})")
    if theirs.path and os.path.basename(theirs.path) not in mine.message:
        return (f"{mine.kind}: the message does not name the file "
                f"{os.path.basename(theirs.path)}: {mine.message}")
    name = named_tensor(theirs.detail)
    if (name is not None and name != "__metadata__" and mine.kind in NAME_COMPARED
            and json.dumps(name) not in mine.message):
        return (f"{mine.kind}: the message does not name {json.dumps(name)}: "
                f"{mine.message}")
    if theirs.kind in NUMBERS_COMPARED:
        have = set(_INT.findall(mine.message))
        detail = theirs.detail.removeprefix("8 + N = ")
        if theirs.kind == "offsets":  # the range; "after E" is the oracle's own
            detail = detail.split(" after ")[0]
        missing = [n for n in _INT.findall(detail) if n not in have]
        if missing:
            return (f"{mine.kind}: the message lacks {', '.join(missing)} of "
                    f"the oracle's '{theirs.detail}': {mine.message}")
    return None


# -- the run ------------------------------------------------------------------

@dataclass
class Outcome:
    """What one class of corruptions gave: how many, and the first disagreement."""

    name: str
    cases: int = 0
    refused: int = 0
    failures: list[str] = field(default_factory=list)


def _draw(rng: random.Random, rules: tuple[tuple[Rule, int], ...]) -> Rule:
    total = sum(w for _, w in rules)
    x = rng.randrange(total)
    for r, w in rules:
        x -= w
        if x < 0:
            return r
    raise AssertionError("unreachable")


_NUMBER_BYTES = frozenset(b"-+.eE0123456789")


def _number_start(raw: bytes, engine_at: int, oracle_at: int) -> int:
    """The offset a JSON syntax error must have: the oracle's, or a number's start.

    The engine reports a malformed number (``01``, ``1.``, ``-``) at its
    first byte; Python's parser stops inside or just after it.  So the
    engine's offset is right when it is at most the oracle's and only
    number bytes lie between the two.
    """
    if engine_at <= oracle_at and all(b in _NUMBER_BYTES
                                      for b in raw[engine_at:oracle_at]):
        if engine_at == oracle_at or raw[engine_at - 1] not in _NUMBER_BYTES:
            return engine_at
    return oracle_at


#: Kinds whose offset both readers compute by one rule.
SAME_OFFSET = frozenset({"not_utf8", "length", "header_too_large"})


def header_cases(engine: Any, folder: Path, n: int, seed: int) -> Outcome:
    """``n`` single-file corruptions drawn from ``seed``; their disagreements."""
    out = Outcome("headers")
    rng = random.Random(f"reader-diff headers {seed}")
    for i in range(n):
        h = base_single(rng)
        rule = _draw(rng, HEADER_RULES)
        expect = rule(rng, h)
        path = folder / f"h{i:04d}-{rule.__name__[2:]}.safetensors"
        doc = h.write(path)
        size = path.stat().st_size
        mine, theirs = engine_verdict(engine, path), oracle_verdict(path)
        out.cases += 1
        out.refused += theirs.kind is not None
        want = None
        if mine.kind == theirs.kind and mine.kind is not None:
            if expect.kind is not None and expect.kind != theirs.kind:
                out.failures.append(f"{path.name}: the rule breaks "
                                    f"{expect.kind}, the oracle says "
                                    f"{theirs.kind} ({theirs.message})")
                continue
            if theirs.kind in ("too_short", "header_past_end"):
                want = size
            elif theirs.kind in SAME_OFFSET:
                want = theirs.offset
            elif theirs.kind == "json" and expect.number:
                want = expect.offset(doc, None, h.top)
            elif theirs.kind == "json" and expect.kind is None:
                # where the oracle's parser stopped, when it says (a number
                # out of range is found after parsing: no position)
                want = theirs.offset if theirs.offset != 8 else None
                if want is not None and mine.offset is not None:
                    want = _number_start(path.read_bytes(), mine.offset, want)
            elif not expect.oracle:
                want = expect.offset(doc, named_tensor(theirs.detail), h.top)
        bad = compare(mine, theirs, want)
        if bad is not None:
            out.failures.append(f"{path.name}: {bad}")
        path.unlink()
    return out


# -- sharded containers and their index -----------------------------------------

SHARDED: tuple[list[tuple[str, str, list[int]]], ...] = (
    [("model.layers.0.mlp.w1", "BF16", [4, 2]), ("model.layers.0.mlp.w2", "F32", [3])],
    [("model.layers.1.mlp.w1", "BF16", [4, 2]), ("model.layers.1.mlp.w2", "F32", [3]),
     ("model.norm", "F16", [2])],
    [("lm_head", "I8", [6])],
)


@dataclass
class Sharded:
    """A sharded container being broken: shards by name and the index document."""

    shards: dict[str, Header]
    index: Obj
    sep: tuple[str, str] = (",\n  ", ": ")

    def wmap(self) -> Obj:
        """The weight_map object."""
        return self.index.get("weight_map")

    def write(self, folder: Path) -> Doc:
        """Write shards and index; the Doc's positions are offsets in the index."""
        folder.mkdir()
        for name, h in self.shards.items():
            h.write(folder / name)
        doc = render(self.index, self.sep)
        if self.index.pairs:  # (an empty index: the folder has none)
            (folder / INDEX_NAME).write_bytes(doc.text)
        return doc


def base_sharded(rng: random.Random) -> Sharded:
    """Two or three shards, every tensor mapped, total_size given or not."""
    k = rng.choice([2, 3])
    shards, wm, total = {}, [], 0
    for s in range(k):
        name = f"model-{s + 1:05d}-of-{k:05d}.safetensors"
        pairs, n = _entries(SHARDED[s])
        shards[name] = Header(Obj(pairs), _data(n, s))
        wm += [(t, name) for t, _, _ in SHARDED[s]]
        total += n
    rng.shuffle(wm)
    meta: list[tuple[str, Any]] = [("format", "pt")]
    if rng.random() < 0.8:
        meta.insert(rng.randrange(2), ("total_size", total))
    top = [("metadata", Obj(meta)), ("weight_map", Obj(wm))]
    if rng.random() < 0.3:
        top.reverse()
    return Sharded(shards, Obj(top))


IndexRule = Callable[[random.Random, Sharded], Path_ | None]


def _wm_path(s: Sharded, j: int, key: bool = True) -> Path_:
    return (s.index.index("weight_map"), j)


def x_stray(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """weight_map names a tensor no shard holds (at a real shard)."""
    wm = s.wmap()
    j = rng.randrange(len(wm.pairs) + 1)
    wm.pairs.insert(j, ("model.layers.9.stray", rng.choice(list(s.shards))))
    return "key", _wm_path(s, j)


def x_missing(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """A shard's tensor is not in weight_map (the error names it in its shard)."""
    wm = s.wmap()
    wm.pairs.pop(rng.randrange(len(wm.pairs)))
    return "tensor", None


def x_wrong_shard(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """A tensor mapped to another shard that exists."""
    wm = s.wmap()
    j = rng.randrange(len(wm.pairs))
    name, shard = wm.pairs[j]
    other = rng.choice([x for x in s.shards if x != shard])
    wm.pairs[j] = (name, other)
    return "tensor", None


def x_no_shard(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """A tensor mapped to a shard file that does not exist."""
    wm = s.wmap()
    j = rng.randrange(len(wm.pairs))
    wm.pairs[j] = (wm.pairs[j][0], rng.choice(["model-9.safetensors", "x",
                                               "a" * 300]))
    return "key", _wm_path(s, j)


def x_total(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """metadata.total_size off by some bytes."""
    meta = s.index.get("metadata")
    if "total_size" not in meta.keys():
        meta.pairs.append(("total_size", 0))
    j = meta.index("total_size")
    meta.pairs[j] = ("total_size", max(0, meta.pairs[j][1] + rng.choice(
        [-7, -1, 1, 2, 10**6])))
    return "value", (s.index.index("metadata"), j)


def x_schema(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """The index's schema broken: weight_map or metadata of the wrong type."""
    choice = rng.randrange(5)
    wi = s.index.index("weight_map")
    if choice == 0:
        s.index.pairs[wi] = ("weight_map", rng.choice([[1], "x", None, 3]))
        return "value", (wi,)
    if choice == 1:
        wm = s.wmap()
        j = rng.randrange(len(wm.pairs))
        wm.pairs[j] = (wm.pairs[j][0], rng.choice([1, None, ["a"]]))
        return "value", (wi, j)
    if choice == 2:
        wm = s.wmap()
        j = rng.randrange(len(wm.pairs))
        wm.pairs.append(wm.pairs[j])
        return "key", (wi, len(wm.pairs) - 1)
    mi = s.index.index("metadata")
    if choice == 3:
        s.index.pairs[mi] = ("metadata", rng.choice([[1], "x", 3]))
        return "value", (mi,)
    meta = s.index.get("metadata")
    meta.pairs.append(("total_size", rng.choice([-1, "9", 1.5, None])))
    if meta.keys().count("total_size") > 1:
        return "oracle", None
    return "value", (mi, len(meta.pairs) - 1)


def x_ok(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """Accepted: entries reordered, metadata null, or with unknown nested fields."""
    s.wmap().pairs.reverse()
    choice = rng.randrange(3)
    if choice == 0:
        s.index.pairs[s.index.index("metadata")] = ("metadata", None)
    elif choice == 1:
        meta = s.index.get("metadata")
        meta.pairs.insert(rng.randrange(len(meta.pairs) + 1), (
            "extra", rng.choice([Obj([("a", [1, Obj([("b", None)])])]),
                                 [[[]]], "x", -1.5, Raw("1e-999")])))
    else:
        s.index.pairs.insert(rng.randrange(3), ("note", Obj([("k", [True])])))
    return "ok", None


def x_no_index(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """No index, and 2 to 12 .safetensors files: which container is meant?"""
    first = next(iter(s.shards.values()))
    s.index = Obj([])
    s.shards = {f"part-{i}.safetensors": first for i in range(rng.randrange(2, 13))}
    return "none", None


def x_shard_broken(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """One shard broken by a header rule: the shard's error, not the index's."""
    name = rng.choice(sorted(s.shards))
    h = s.shards[name]
    rule = _draw(rng, ((r_offsets_move, 1), (r_shape_dim, 1), (r_length, 1),
                       (r_dtype_unknown, 1)))
    rule(rng, h)
    return "shard", None


INDEX_RULES: tuple[tuple[Callable[..., tuple[str, Path_ | None]], int], ...] = (
    (x_stray, 2), (x_missing, 2), (x_wrong_shard, 2), (x_no_shard, 2),
    (x_total, 2), (x_schema, 3), (x_ok, 2), (x_shard_broken, 2),
    (x_no_index, 1),
)


def index_cases(engine: Any, folder: Path, n: int, seed: int) -> Outcome:
    """``n`` sharded containers with a broken index (or shard); disagreements."""
    out = Outcome("indexes")
    rng = random.Random(f"reader-diff indexes {seed}")
    for i in range(n):
        s = base_sharded(rng)
        rule = _draw(rng, INDEX_RULES)
        where, path = rule(rng, s)
        d = folder / f"x{i:04d}-{rule.__name__[2:]}"
        doc = s.write(d)
        mine, theirs = engine_verdict(engine, d), oracle_verdict(d)
        out.cases += 1
        out.refused += theirs.kind is not None
        want = None
        if mine.kind == "index" == theirs.kind and path is not None:
            want = doc.keys[path] if where == "key" else doc.values[path]
        bad = compare(mine, theirs, want)
        if bad is None and mine.kind == "index" == theirs.kind:
            bad = _index_names(mine, theirs, s)
        if bad is not None:
            out.failures.append(f"{d.name}: {bad}")
        shutil.rmtree(d)
    return out


def _index_names(mine: Verdict, theirs: Verdict, s: Sharded) -> str | None:
    """A container name the oracle's index error quotes and the engine's lacks."""
    for q in _QUOTED.finditer(theirs.detail):
        name = q.group(1)
        if name in ("None",) or len(name) > 200:
            continue
        if name in s.shards or name in [k for k, _ in s.wmap().pairs] or \
                any(name == t for h in s.shards.values() for t in h.top.keys()):
            if name not in mine.message:
                return (f"index: the message does not name {json.dumps(name)} "
                        f"of the oracle's '{theirs.detail}': {mine.message}")
    return None


def run_checks(engine: Any, work: Path, report: Any, n: int = DEFAULT_CASES,
               seed: int = DEFAULT_SEED) -> list[str]:
    """Run the reader differential; one check line a class in ``report``."""
    shm = Path("/dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="xc-reader-diff-",
                                   dir=shm if shm.is_dir() else work))
    try:
        outs = [header_cases(engine, folder, n * 3 // 4, seed),
                index_cases(engine, folder, n - n * 3 // 4, seed)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    names = []
    for o in outs:
        name = f"reader-diff-{o.name}"
        names.append(name)
        detail = (f"{o.cases} corruptions (seed {seed}), {o.refused} refused"
                  if not o.failures else
                  f"{len(o.failures)} of {o.cases} differ; first: {o.failures[0]}")
        report.add(name, "engine", name, not o.failures, detail, 0,
                   len(o.failures))
    return names
