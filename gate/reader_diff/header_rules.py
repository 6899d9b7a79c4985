"""The corruptions of a single file's header, and where the engine must point."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xcache.gate.reader_diff.containers import _BITS, Header
from xcache.gate.reader_diff.doc import Doc, Obj, Path_, Raw


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
    plus: int = 0         #: added to the ``key``/``value`` position
    #: words the engine's message must hold (a fact of the construction)
    message: str | None = None
    #: the engine must name ``kind`` itself (no kind difference allowed: the
    #: corruption is the file's only problem, so one pass meets it first)
    strict: bool = False
    #: numbers written, by path: a json error is at the first one the
    #: official rule finds out of range
    numbers: list[tuple[Path_, str]] = field(default_factory=list)

    def offset(self, doc: Doc, oracle_name: str | None, top: Any) -> int | None:
        """The offset the engine must report (None: not fixed by this rule)."""
        if self.numbers:
            from xcache.oracle.safetensors import _number_in_range  # noqa: PLC0415

            bad = [doc.values[p] for p, text in self.numbers
                   if not _number_in_range(text)]
            return min(bad) if bad else None
        if self.key is not None:
            return doc.keys[self.key] + self.plus
        if self.value is not None:
            return doc.values[self.value] + self.plus
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
    at most 19 digits; 2^64 + k would wrap to k in 64 bits, and 20 digits
    that fit 64 bits are read by the general path only.
    """
    h.sep = (",", ":")
    i = _tensor_index(rng, h)
    name = rng.choice(["shape", "data_offsets"])
    j = _field(h, i, name)
    values = list(h.top.pairs[i][1].pairs[j][1]) or [1]
    m = rng.randrange(len(values))
    if rng.random() < 0.4:  # 20 digits, in 64 bits: past the fast path only
        values[m] = Raw(rng.choice([str(2**64 - 1 - rng.randrange(2**16)),
                                    str(10**19 + rng.randrange(10**6))]))
        _set_field(h, i, name, values)
        # a dimension past 48 bits is an overflow, an offset a schema error
        return (Expect(named=True) if name == "shape"
                else Expect("schema", value=(i, j, m)))
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



def _draw(rng: random.Random, rules: tuple[tuple[Rule, int], ...]) -> Rule:
    total = sum(w for _, w in rules)
    x = rng.randrange(total)
    for r, w in rules:
        x -= w
        if x < 0:
            return r
    raise AssertionError("unreachable")

