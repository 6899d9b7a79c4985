"""Two faults in one header: the documented rule order decides the verdict.

Every fault of :data:`FAULTS` breaks a valid header (:func:`plan.base_plan`)
in one place, as a hand rule does -- a name twice, U+0000 or a bad escape
in a name, bytes that are not UTF-8, an entry that is no object, a dtype
unknown or of another type, a field missing or given twice, nine
dimensions, a shape or offset element of a wrong spelling or malformed,
``data_offsets`` of one or three items, malformed JSON in an ignored field,
``__metadata__`` with a key or value holding U+0000, a value of another
type, a key twice, given twice or no object; and the data checks: a shape
past step 7's limits (zero-element ones included), a bit count of no whole
byte, a wrong size, an empty tensor's range in or out of place.
:func:`pairs` puts every two of them (a fault with itself included) in one
header: the first before the second, the second before the first, both in
one entry, and for a duplicated name the other fault in its first or its
second occurrence; the two entries adjacent, 16 or 17 apart (the
look-ahead of the engine's batched duplicate check, ``dup_check`` in
``engine/csrc/xc_header.c``), far apart, first and last; in the writers'
compact spelling (the C reader's fast path) and in spaced ones (its general
path).  Each case's verdict for each reader comes from docs/DESIGN.md's
order (:func:`plan.want`), never from the readers.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from xcache.gate.reader_diff import generators as gen
from xcache.gate.reader_diff.containers import _BITS
from xcache.gate.reader_diff.doc import Obj, Raw, Spelled
from xcache.gate.reader_diff.plan import (
    SEPS,
    Entry,
    Field,
    Plan,
    Problem,
    at_end,
    at_key,
    at_value,
    base_plan,
    tensor,
)

#: Elements of a shape or of data_offsets that are no unsigned integer below
#: 2^64 but are JSON: ``schema`` at the element, by class.
NOT_UINT: dict[str, tuple[Any, ...]] = {
    "negative": (-1, Raw("-7")),
    "minus-zero": (Raw("-0"),),
    "fraction": (Raw("1.0"), Raw("0.0"), Raw("1.5")),
    "exponent": (Raw("1e2"), Raw("1E0"), Raw("0e0"), Raw("1e+2")),
    "past-64-bits": (Raw(str(2**64)), Raw(str(2**64 + 1)), Raw("1" + "0" * 20)),
    "other-type": ("2", None, True, [1], Obj([])),
}

#: Elements that are no JSON number: (text, the byte the engine points at
#: from the element's first, words of its message).
MALFORMED_NUMBERS: tuple[tuple[str, int, str], ...] = (
    ("012", 0, "leading zero"), ("00", 0, "leading zero"),
    ("-01", 0, "leading zero"), ("1.", 0, "malformed number"),
    ("-", 0, "malformed number"), ("1e", 0, "malformed number"),
    ("+1", 0, "found an unexpected character"),
    (".5", 0, "found an unexpected character"), ("tru", 0, "expected a JSON value"),
)

#: Malformed values of an ignored field: (text, the offending byte from its
#: first, words of the message).
MALFORMED_VALUES: tuple[tuple[str, int, str], ...] = (
    ("[1,]", 3, "expected a JSON value"), ('{"a" 1}', 5, "expected ':'"),
    ("[1 2]", 3, "expected ']'"), ('{"a": 1,}', 8, "expected a string"),
    ('["x\\q"]', 3, "bad escape '\\q'"), ("[[[1,]]]", 5, "expected a JSON value"),
    ("nul", 0, "expected a JSON value"),
)

#: Shapes step 7 refuses: a dimension past 48 bits, a count past 64 bits at
#: some dimension (left to right), or count x bits past 64 bits; the first
#: eight have zero elements.
OVERFLOWS: tuple[list[int], ...] = (
    [0, 2**50], [2**50, 0], [2**48, 0], [2**48 + 1, 0], [2**64 - 1, 0],
    [2**63, 0, 1], [2**40, 2**40, 0], [2**48 - 1, 2**16 + 1, 0],
    [2**48], [3, 2**62], [2**32, 2**31, 4], [2**48 - 1, 2**16],
)
#: Zero-element shapes at the limits that step 7 accepts.
ZERO_FITS: tuple[list[int], ...] = (
    [0, 2**48 - 1], [2**48 - 1, 0], [2**48 - 1, 2**16, 0], [0, 2**40, 2**40],
    [2**32 - 1, 2**32 + 1, 0], [0] * 8,
)

#: The fields of an entry a fault may occupy (a whole entry takes them all).
FIELDS = ("dtype", "shape", "data_offsets", "extra")


@dataclass
class Applied:
    """A fault put in a plan: its problems of steps 4-5 (the data checks are
    judged from the finished plan) and the parts of the plan it occupies."""

    problems: list[Problem]
    slots: frozenset[tuple[str, int]]


Fault = Callable[[random.Random, Plan, Entry, "Entry | None"], Applied]


def _slots(*s: tuple[str, int]) -> frozenset[tuple[str, int]]:
    return frozenset(s)


def _tensors(p: Plan) -> list[Entry]:
    return [e for e in p.tensors() if e.fields is not None]


def conflict(a: frozenset[tuple[str, int]], b: frozenset[tuple[str, int]]) -> bool:
    """Whether two faults cannot both stand: they occupy one part, one writes
    an entry whole where the other occupies a field, or one renames the entry
    whose name the other duplicates (two duplicates of one name may)."""
    for x, y in ((a, b), (b, a)):
        for kind, at in x:
            if (kind, at) in y and kind != "source":
                return True
            if kind == "value" and any(k in FIELDS and t == at for k, t in y):
                return True
            if kind == "source" and ("name", at) in y:
                return True
            if kind == "meta-whole" and any(k == "meta-pair" for k, _ in y):
                return True
    return False


# -- names ---------------------------------------------------------------------

def f_dup(rng: random.Random, p: Plan, e: Entry, src: Entry | None) -> Applied:
    """Entry ``e`` takes the name of an earlier tensor ``src``."""
    assert src is not None and src is not e
    e.name = src.name
    return Applied([Problem("dup", "duplicate", at_key(e), e, "appears twice")],
                   _slots(("name", id(e)), ("source", id(src))))


def f_name_nul(rng: random.Random, p: Plan, e: Entry, _: Entry | None) -> Applied:
    """U+0000 in the name."""
    k = rng.randrange(len(e.name) + 1)
    e.name = e.name[:k] + "\0" + e.name[k:]
    return Applied([Problem("name-nul", "schema", at_key(e), None,
                            "contains U+0000")], _slots(("name", id(e))))


def _bad_name(rng: random.Random, e: Entry, utf8: bool) -> Applied:
    bad = gen._not_utf8(rng) if utf8 else rng.choice(
        (gen._bad_hex, gen._bad_escape, gen._bad_surrogate))(rng)
    good = gen.draw_name(rng, False, prefix=e.name + ".", long=False)
    at = len(good.spelled) - 1 + (bad.at or 0)
    e.name = Spelled(e.name + ".\ufffd", good.spelled[:-1] + bad.spelled + b'"')
    return Applied([Problem(f"name-{bad.label}", bad.kind or "json",
                            at_key(e, plus=at), None, bad.message)],
                   _slots(("name", id(e))))


def f_name_escape(rng: random.Random, p: Plan, e: Entry, _: Entry | None
                  ) -> Applied:
    """A bad escape, hex digit or surrogate in the name (``json`` where it is)."""
    return _bad_name(rng, e, False)


def f_name_utf8(rng: random.Random, p: Plan, e: Entry, _: Entry | None) -> Applied:
    """Bytes in the name that are not UTF-8 (step 4: before any JSON is read)."""
    return _bad_name(rng, e, True)


# -- an entry and its fields -----------------------------------------------------

def f_not_object(rng: random.Random, p: Plan, e: Entry, _: Entry | None) -> Applied:
    """The entry is JSON of another type."""
    e.fields, e.value = None, rng.choice([3, "x", [1, 2], None, False])
    return Applied([Problem("not-object", "schema", at_value(e), e,
                            "expected an object")], _slots(("value", id(e))))


def f_dtype_unknown(rng: random.Random, p: Plan, e: Entry, _: Entry | None
                    ) -> Applied:
    """A dtype no reader knows."""
    f = e.field("dtype")
    f.value = rng.choice(["U9", "f32", "", "F8_E4M3F", "BF 16", "I128"])
    return Applied([Problem("dtype-unknown", "dtype", at_value(e, f), e,
                            "unknown dtype")], _slots(("dtype", id(e))))


def f_dtype_type(rng: random.Random, p: Plan, e: Entry, _: Entry | None) -> Applied:
    """A dtype that is no string."""
    f = e.field("dtype")
    f.value = rng.choice([8, None, [1], Obj([]), True])
    return Applied([Problem("dtype-type", "schema", at_value(e, f), e,
                            "dtype must be a string")], _slots(("dtype", id(e))))


def f_missing(rng: random.Random, p: Plan, e: Entry, _: Entry | None) -> Applied:
    """A field missing: met at the entry's end, reported at its name."""
    name = rng.choice(["dtype", "shape", "data_offsets"])
    assert e.fields is not None
    e.fields.remove(e.field(name))
    # two missing: the message names the first of the three (their order)
    rank = ("dtype", "shape", "data_offsets").index(name)
    return Applied([Problem("missing", "schema", at_end(e), e, f"has no {name}",
                            rank)], _slots((name, id(e))))


def f_twice(rng: random.Random, p: Plan, e: Entry, _: Entry | None) -> Applied:
    """A field given twice: its copy later in the entry, at its key."""
    assert e.fields is not None
    name = rng.choice(["dtype", "shape", "data_offsets"])
    f = e.field(name)
    copy = Field(name, list(f.value) if isinstance(f.value, list) else f.value)
    e.fields.insert(rng.randrange(e.fields.index(f) + 1, len(e.fields) + 1), copy)
    return Applied([Problem("twice", "schema", at_key(e, copy), e,
                            f"field {name} appears twice")], _slots((name, id(e))))


def f_nine(rng: random.Random, p: Plan, e: Entry, _: Entry | None) -> Applied:
    """Nine dimensions: refused at the ninth before it is read (a malformed
    ninth is the oracle's ``json``)."""
    f = e.field("shape")
    ninth = rng.choice([1, 0, Raw("012"), 2**64 - 1, Raw("-1")])
    f.value = [rng.choice([1, 1, 0, 2**48 - 1]) for _ in range(8)] + [ninth]
    got = [Problem("nine", "schema", at_value(e, f, 8), e, "has more than 8 entries")]
    if ninth == Raw("012"):
        got.append(Problem("nine-malformed", "json", at_value(e, f, 8), e, rank=1))
    return Applied(got, _slots(("shape", id(e))))


def f_elem_bad(rng: random.Random, p: Plan, e: Entry, _: Entry | None) -> Applied:
    """A shape or offset element of a wrong spelling or type (an offset also
    2^48 or more)."""
    name = rng.choice(["shape", "data_offsets"])
    f = e.field(name)
    values = list(f.value) or [1]
    m = rng.randrange(len(values))
    classes = sorted(NOT_UINT) + (["past-48-bits"] if name != "shape" else [])
    cls = rng.choice(classes)
    values[m] = (rng.choice([2**48, 2**48 + 1, 2**63, 2**64 - 1])
                 if cls == "past-48-bits" else rng.choice(NOT_UINT[cls]))
    f.value = values
    return Applied([Problem(f"elem-{cls}", "schema", at_value(e, f, m), e)],
                   _slots((name, id(e))))


def f_elem_malformed(rng: random.Random, p: Plan, e: Entry, _: Entry | None
                     ) -> Applied:
    """A shape or offset element that is no JSON number (at its first byte)."""
    name = rng.choice(["shape", "data_offsets"])
    f = e.field(name)
    values = list(f.value) or [1]
    m = rng.randrange(len(values))
    text, plus, words = rng.choice(MALFORMED_NUMBERS)
    values[m] = Raw(text)
    f.value = values
    return Applied([Problem("elem-malformed", "json", at_value(e, f, m, plus), e,
                            words)], _slots((name, id(e))))


def f_offsets_count(rng: random.Random, p: Plan, e: Entry, _: Entry | None
                    ) -> Applied:
    """data_offsets of one item (at the array) or three (at the third)."""
    f = e.field("data_offsets")
    b, end = f.value
    if rng.random() < 0.5:
        f.value = [b]
        got = Problem("offsets-one", "schema", at_value(e, f), e,
                      "exactly two integers")
    else:
        f.value = [b, end, end]
        got = Problem("offsets-three", "schema", at_value(e, f, 2), e,
                      "more than 2 entries")
    return Applied([got], _slots(("data_offsets", id(e))))


def f_extra_malformed(rng: random.Random, p: Plan, e: Entry, _: Entry | None
                      ) -> Applied:
    """An ignored field whose value is malformed JSON."""
    assert e.fields is not None
    text, plus, words = rng.choice(MALFORMED_VALUES)
    f = Field("extra", Raw(text))
    e.fields.insert(rng.randrange(len(e.fields) + 1), f)
    return Applied([Problem("extra-malformed", "json", at_value(e, f, plus=plus),
                            e, words)], _slots(("extra", id(e))))


# -- __metadata__ -------------------------------------------------------------------

def _meta(p: Plan, near: Entry) -> Entry:
    """The plan's ``__metadata__`` (the first), put just before ``near`` if none."""
    for e in p.entries:
        if e.name == "__metadata__":
            return e
    m = Entry("__metadata__", [Field("format", "pt"), Field("k", "v")])
    p.entries.insert(p.index(near), m)
    return m


def _pair(rng: random.Random, p: Plan, near: Entry, f: Field) -> Entry:
    m = _meta(p, near)
    if m.fields is None:
        m.fields, m.value = [], None
    m.fields.insert(rng.randrange(len(m.fields) + 1), f)
    return m


def f_meta_nul(rng: random.Random, p: Plan, e: Entry, _: Entry | None) -> Applied:
    """A __metadata__ key or value holding U+0000 (either reported at the key)."""
    f = Field("m.k", "v")
    m = _pair(rng, p, e, f)
    if rng.random() < 0.5:
        f.name = "m.\0k"
        got = Problem("meta-key-nul", "schema", at_key(m, f), None,
                      "contains U+0000")
    else:
        f.value = "v\0"
        got = Problem("meta-value-nul", "schema", at_key(m, f, order=2), None,
                      "contains U+0000")
    return Applied([got], _slots(("meta-pair", id(f))))


def f_meta_value(rng: random.Random, p: Plan, e: Entry, _: Entry | None) -> Applied:
    """A __metadata__ value that is no string."""
    f = Field("m.t", rng.choice([1, None, ["a"], Obj([]), True]))
    m = _pair(rng, p, e, f)
    return Applied([Problem("meta-value", "schema", at_value(m, f), None,
                            "must be a string")], _slots(("meta-pair", id(f))))


def f_meta_dup(rng: random.Random, p: Plan, e: Entry, _: Entry | None) -> Applied:
    """A __metadata__ key given twice (at the second, after its value)."""
    m = _meta(p, e)
    if not m.fields:
        m.fields, m.value = [Field("format", "pt")], None
    first = rng.choice(m.fields)
    f = Field(first.name, "again")
    m.fields.insert(rng.randrange(m.fields.index(first) + 1, len(m.fields) + 1), f)
    return Applied([Problem("meta-dup", "duplicate", at_key(m, f, order=3), None,
                            "appears twice")], _slots(("meta-pair", id(f))))


def f_meta_twice(rng: random.Random, p: Plan, e: Entry, _: Entry | None) -> Applied:
    """A second __metadata__ member after the first, by ``e`` (null, empty or
    malformed: its name is met first)."""
    m = _meta(p, e)
    value = rng.choice([None, Obj([]), 3, Raw("[1,]")])
    second = Entry("__metadata__", None, value)
    p.entries.insert(max(p.index(e), p.index(m) + 1), second)
    got = [Problem("meta-twice", "duplicate", at_key(second), None,
                   "__metadata__ appears twice")]
    if value == Raw("[1,]"):
        got.append(Problem("meta-twice-malformed", "json",
                           at_value(second, plus=3), None))
    return Applied(got, _slots(("meta-twice", id(second))))


def f_meta_not_object(rng: random.Random, p: Plan, e: Entry, _: Entry | None
                      ) -> Applied:
    """__metadata__ that is no object (nor null)."""
    m = _meta(p, e)
    m.fields, m.value = None, rng.choice([[1], "x", 3, True])
    return Applied([Problem("meta-not-object", "schema", at_value(m), None,
                            "__metadata__ must be an object")],
                   _slots(("meta-whole", 0)))


# -- the data checks (steps 6-9: judged from the finished plan) ---------------

def f_overflow(rng: random.Random, p: Plan, e: Entry, _: Entry | None) -> Applied:
    """A shape past a limit of step 7 (its range kept)."""
    e.field("shape").value = list(rng.choice(OVERFLOWS))
    return Applied([], _slots(("shape", id(e))))


def f_bits(rng: random.Random, p: Plan, e: Entry, _: Entry | None) -> Applied:
    """A bit count of no whole byte (its range kept)."""
    e.field("dtype").value, shape = rng.choice(
        [("F4", [3]), ("F4", [1, 5]), ("F6_E2M3", [1]), ("F6_E3M2", [2, 3]),
         ("F4", [])])
    e.field("shape").value = list(shape)
    return Applied([], _slots(("dtype", id(e)), ("shape", id(e))))


def f_size(rng: random.Random, p: Plan, e: Entry, _: Entry | None) -> Applied:
    """A dtype of another whole-byte width (its range kept: a wrong size)."""
    f = e.field("dtype")
    if not isinstance(f.value, str) or f.value not in _BITS:
        raise ValueError("the dtype is another fault's")
    f.value = rng.choice([d for d in sorted(_BITS)
                          if _BITS[d] >= 8 and _BITS[d] != _BITS[f.value]])
    return Applied([], _slots(("dtype", id(e))))


def _boundaries(p: Plan) -> list[int]:
    """0 and the ends of the ranges the base laid out (the data's own)."""
    ends = {0, len(p.data)}
    for t in _tensors(p):
        fs = [f.value for f in t.fields or [] if f.name == "data_offsets"]
        if fs and isinstance(fs[0], list) and len(fs[0]) == 2 and all(
                type(v) is int and v <= len(p.data) for v in fs[0]):
            ends.add(fs[0][1])
    return sorted(ends)


def f_range(rng: random.Random, p: Plan, e: Entry, _: Entry | None) -> Applied:
    """An empty tensor put before ``e``, its range at a boundary (valid), past
    the end, inverted, or one byte into a tensor."""
    ends = _boundaries(p)
    end = ends[-1]
    at = rng.choice(ends)
    begin, stop = rng.choice([(at, at), (end + 1, end + 1), (end, end - 1),
                              (at + 1, at + 1), (0, end)])
    z = tensor(f"z.{len(p.entries)}", "U8", [0], max(0, begin), max(0, stop))
    p.entries.insert(p.index(e), z)
    return Applied([], _slots())


def f_empty_limit(rng: random.Random, p: Plan, e: Entry, _: Entry | None
                  ) -> Applied:
    """An empty tensor put before ``e``, at a valid boundary, whose zero-element
    shape is past step 7's limits or just within them."""
    at = rng.choice(_boundaries(p))
    shape = list(rng.choice(OVERFLOWS[:8] + ZERO_FITS))
    z = tensor(f"z.{len(p.entries)}", rng.choice(["U8", "F4", "I64"]), shape, at, at)
    p.entries.insert(p.index(e), z)
    return Applied([], _slots())


#: Every fault, by label (``dup`` takes the first occurrence's entry too).
FAULTS: dict[str, Fault] = {
    "dup": f_dup, "name-nul": f_name_nul, "name-escape": f_name_escape,
    "name-utf8": f_name_utf8, "not-object": f_not_object,
    "dtype-unknown": f_dtype_unknown, "dtype-type": f_dtype_type,
    "missing": f_missing, "twice": f_twice, "nine": f_nine,
    "elem-bad": f_elem_bad, "elem-malformed": f_elem_malformed,
    "offsets-count": f_offsets_count, "extra-malformed": f_extra_malformed,
    "meta-nul": f_meta_nul, "meta-value": f_meta_value, "meta-dup": f_meta_dup,
    "meta-twice": f_meta_twice, "meta-not-object": f_meta_not_object,
    "overflow": f_overflow, "bits": f_bits, "size": f_size, "range": f_range,
    "empty-limit": f_empty_limit,
}

#: Faults that need no fields of their entry (they rename it or add one by it).
_NO_FIELDS = {"dup", "name-nul", "name-escape", "name-utf8", "meta-nul",
              "meta-value", "meta-dup", "meta-twice", "meta-not-object", "range",
              "empty-limit"}

#: Where the two faults go: the first's entry before the second's, after it,
#: the same entry; with a duplicated name, the other fault in its first
#: occurrence (``same-entry`` is then its second).
PLACEMENTS = ("first-before", "second-before", "same-entry", "on-source")

#: How far apart the two entries are drawn (16 and 17: the look-ahead of the
#: engine's duplicate check).
SPREADS = ("adjacent", "gap-16", "gap-17", "far", "ends", "late")


def spots(rng: random.Random, n: int, how: str) -> tuple[int, int]:
    """Two tensor positions i < k of ``n``, ``how`` far apart."""
    gap = {"adjacent": 1, "gap-16": 16, "gap-17": 17}.get(how)
    if how == "ends":
        return 0, n - 1
    if how == "late":
        return n - 2, n - 1
    if gap is None or gap >= n:
        i = rng.randrange(n - 1)
        return i, rng.randrange(i + 1, n)
    i = rng.randrange(n - gap)
    return i, i + gap


def case(rng: random.Random, a: str, b: str, placement: str,
         sep: tuple[str, str], spread: str
         ) -> tuple[Plan, list[Problem]] | None:
    """Faults ``a`` and ``b`` in a plan of tensors ``spread`` apart (None if the
    two cannot stand where ``placement`` puts them).  The plan holds a few
    tensors, or just enough for a gap of 16 or 17."""
    if placement == "on-source" and "dup" not in (a, b):
        return None
    gap = {"gap-16": 16, "gap-17": 17}.get(spread)
    n = gap + 1 + rng.randrange(3) if gap else rng.choice([2, 3, 5, 8])
    lead = int("dup" in (a, b))  # a tensor before every spot: a name to copy
    p = base_plan(rng, n + lead, sep)
    ts = _tensors(p)
    i, k = (x + lead for x in spots(rng, n, spread))
    ea, eb = {"first-before": (ts[i], ts[k]), "second-before": (ts[k], ts[i])
              }.get(placement, (ts[k], ts[k]))
    src = None
    if "dup" in (a, b):
        second = ea if a == "dup" else eb
        j = ts.index(second)
        if j == 0:
            return None
        src = ts[rng.randrange(j)]
        if placement == "on-source":  # the other fault in the first occurrence
            ea, eb = (second, src) if a == "dup" else (src, second)
    applied: list[Applied] = []
    for label, e in ((a, ea), (b, eb)):
        if e.fields is None and label not in _NO_FIELDS:
            return None
        try:
            got = FAULTS[label](rng, p, e, src if label == "dup" else None)
        except (StopIteration, ValueError, AssertionError):
            return None  # the first took what this one needs (a field removed)
        if applied and conflict(applied[0].slots, got.slots):
            return None
        applied.append(got)
    return p, [q for ap in applied for q in ap.problems]


def pairs(rng: random.Random) -> Iterator[tuple[str, Plan, list[Problem]]]:
    """Every two faults (a fault with itself too) in one header, in every
    placement that can hold them; the spread, spots and values drawn, the
    spelling taken in turn."""
    count = 0
    for a, b in itertools.combinations_with_replacement(list(FAULTS), 2):
        for placement in PLACEMENTS:
            if placement == "second-before" and a == b:
                continue
            if placement == "on-source" and "dup" not in (a, b):
                continue
            for _ in range(4):  # a few draws until the two can stand there
                spread = rng.choice(SPREADS)
                got = case(rng, a, b, placement, SEPS[count % len(SEPS)], spread)
                if got is not None:
                    count += 1
                    yield f"{a}+{b}-{placement}-{spread}", *got
                    break
