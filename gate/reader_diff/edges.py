"""Dimensions and offsets at every limit, and integers spelled every way JSON allows.

:func:`number_edges` writes one file per edge, each in the writers' compact
spelling (the C reader's fast path) and a spaced one (its general path):

- every value of :data:`LIMITS` (0, 1, 2^32 - 1 and 2^32, 2^48 - 1, 2^48,
  2^48 + 1, 2^50, 2^53 and 2^53 + 1, 2^63 - 1, 2^63, 2^64 - 1, 2^64,
  2^64 + 1, 10^20) as a dimension of an empty tensor beside a zero (``[0, v]``,
  ``[v, 0]``, ``[v, v, 0]``, ``[0, v, v]``, ``[v, 2^16, 0]``) -- a byte size
  of 0 that step 7 must still refuse past 48 bits, or past 64 bits
  multiplied left to right -- and as a data offset (``[v, v]``, ``[0, v]``,
  ``[v, 0]``);
- every spelling of :data:`SPELLINGS` in place of a shape and of an offset
  element: a leading zero, a sign, ``-0``, an exponent, a fraction, no digit
  after the point, whitespace around;
- shapes of 0, 1, 7, 8 and 9 dimensions, the ninth plain or malformed, and a
  bad element before the ninth.

:func:`range_orders` writes every header order of a few ranges (a gap, an
overlap, ties, inverted ones ending on another's begin): step 6 judges them
in ``(begin, end)`` order, so each set's verdict, and the tensor it names,
is the same in every order -- the C reader's scan for a header already in
order (``sort_shard``) must not take a disorder for order.

Each file's verdict for each reader comes from the JSON grammar, the limits
of docs/DESIGN.md §3 and its order (:func:`element_problems`,
:func:`plan.want`).
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterator
from typing import Any

from xcache.gate.reader_diff.doc import Doc, Raw
from xcache.gate.reader_diff.plan import (
    MAX_48,
    U64_MAX,
    Entry,
    Plan,
    Problem,
    base_plan,
    tensor,
)

#: Numbers at the limits a dimension or an offset meets.
LIMITS: tuple[int, ...] = (
    0, 1, 2**32 - 1, 2**32, 2**48 - 1, 2**48, 2**48 + 1, 2**50, 2**53,
    2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**64 + 1, 10**20,
)

#: Zero-element shapes around a value ``v`` (step 7 multiplies left to right).
DIM_FORMS: tuple[str, ...] = ("0,v", "v,0", "v,v,0", "0,v,v", "v,65536,0")

#: Ranges of an empty tensor around an offset ``v``.
OFFSET_FORMS: tuple[str, ...] = ("v,v", "0,v", "v,0")

#: Spellings of an element where an unsigned integer is wanted: ``%`` is
#: the element's own value (it stays valid), the rest are refused.
SPELLINGS: tuple[str, ...] = (
    "0%", "00", "012", "-0", "-1", "+1", "-01", "1e2", "1E0", "0e0", "1e+2",
    "1.0", "0.0", "1.5", "2.5e1", "1.", ".5", "-", "1e", "--1", " % ", "\t%\n",
    "%.0", "%e0",
)

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_UINT = re.compile(r"0|[1-9]\d*")


def classify(value: Any, field: str) -> tuple[str | None, int, str]:
    """(kind, the byte the engine points at from the element's start, words of
    its message) for one element of ``field``; kind None when it is an
    unsigned integer within the field's limit (2^48 - 1 for an offset, 2^64 - 1
    for a dimension: step 7 judges a dimension's 48 bits)."""
    limit = MAX_48 if field == "data_offsets" else U64_MAX
    lead = 0
    if isinstance(value, Raw):
        text = value.text
        lead = len(text) - len(text.lstrip(" \t\n\r"))
        tok = text.strip(" \t\n\r")
        if not _NUMBER.fullmatch(tok):
            return "json", lead, ""
        if not _UINT.fullmatch(tok):
            return "schema", lead, "must be a non-negative integer"
        value = int(tok)
    if type(value) is not int:
        return "schema", lead, ""
    if value < 0:
        return "schema", lead, "must be a non-negative integer"
    if value > limit:
        return "schema", lead, "exceeds the limit"
    return None, lead, ""


def element_problems(e: Entry) -> list[Problem]:
    """The problems of entry ``e``'s shape and data_offsets, element by element,
    as the one pass meets them: a bad element at itself, one element past the
    limit of 8 (2) at it before it is read, too few offsets at the array's end."""
    out: list[Problem] = []
    assert e.fields is not None
    for f in e.fields:
        if f.name not in ("shape", "data_offsets") or not isinstance(f.value, list):
            continue
        most = 8 if f.name == "shape" else 2
        for m, v in enumerate(f.value):
            if m == most:
                out.append(Problem(f"{f.name}-count", "schema",
                                   _elem(e, f, m, 0), e, "more than"))
            kind, plus, words = classify(v, f.name)
            if kind is not None and (m < most or kind == "json"):
                out.append(Problem(f"{f.name}[{m}]", kind, _elem(e, f, m, plus),
                                   e, words or None, rank=1 if m >= most else 0))
        if f.name == "data_offsets" and len(f.value) < 2:
            out.append(Problem("offsets-few", "schema", _end(e, f), e,
                               "exactly two integers"))
    return out


def _elem(e: Entry, f: Any, m: int, plus: int) -> Any:
    def where(p: Plan, d: Doc) -> tuple[tuple[int, ...], int]:
        i, j = p.index(e), p.field_index(e, f)
        return (i, 2, j, 1, m), d.values[(i, j, m)] + plus
    return where


def _end(e: Entry, f: Any) -> Any:
    """Too few offsets: met at the array's end, reported at its start."""
    def where(p: Plan, d: Doc) -> tuple[tuple[int, ...], int]:
        i, j = p.index(e), p.field_index(e, f)
        return (i, 2, j, 1, 99), d.values[(i, j)]
    return where


def _form(form: str, v: Any) -> list[Any]:
    return [v if x == "v" else int(x) for x in form.split(",")]


def _put(rng: random.Random, p: Plan, z: Entry) -> Entry:
    """``z`` among the plan's tensors at a drawn place."""
    p.entries.insert(rng.randrange(len(p.entries) + 1), z)
    return z


def _at_boundary(rng: random.Random, p: Plan) -> int:
    return rng.choice([0, len(p.data)])


#: Ranges about a data buffer of 9 bytes: three that tile it, a gap, an
#: overlap, empty ones tied with a tile's begin, and inverted ones that end
#: on a tile's begin (so that, in header order, each may look sorted beside
#: the tile after it while the ranges are not).
RANGES: tuple[tuple[int, int], ...] = (
    (3, 6), (6, 9), (4, 7), (2, 5), (3, 3), (9, 9), (9, 0), (9, 3), (7, 6),
)


def range_orders() -> Iterator[tuple[str, Plan, list[Problem]]]:
    """Every header order of (0, 3) and two ranges of :data:`RANGES`: step 6
    runs in (begin, end) order whatever the header's, so its first failing
    range (and the tensor named) is the same in every order."""
    data = bytes(range(9))
    for a, b in itertools.combinations(RANGES, 2):
        for order in itertools.permutations([(0, 3), a, b]):
            entries = [tensor(f"r{k}.{x}-{y}", "U8", [max(0, y - x)], x, y)
                       for k, (x, y) in enumerate(order)]
            label = "ranges-" + "_".join(f"{x}-{y}" for x, y in order)
            yield label, Plan(entries, data, (",", ":")), []


def number_edges(rng: random.Random) -> Iterator[tuple[str, Plan, list[Problem]]]:
    """One file per limit and form, per spelling and site, per dimension count;
    each in the compact and in a spaced spelling."""
    for sep in ((",", ":"), (", ", ": ")):
        tag = "compact" if sep == (",", ":") else "spaced"
        for v in LIMITS:
            for form in DIM_FORMS:
                p = base_plan(rng, 3, sep, meta=False)
                at = _at_boundary(rng, p)
                z = _put(rng, p, tensor("z", rng.choice(["U8", "F4", "I64"]),
                                        _form(form, v), at, at))
                yield f"dim-{form}-{v}-{tag}", p, element_problems(z)
            for form in OFFSET_FORMS:
                p = base_plan(rng, 3, sep, meta=False)
                z = _put(rng, p, tensor("z", "U8", [0], *_form(form, v)))
                yield f"offsets-{form}-{v}-{tag}", p, element_problems(z)
        for spelling in SPELLINGS:
            for site in ("shape", "data_offsets"):
                p = base_plan(rng, 3, sep, meta=False)
                t = rng.choice(p.tensors())
                f = t.field(site)
                m = rng.randrange(len(f.value))
                f.value = list(f.value)
                f.value[m] = Raw(spelling.replace("%", str(f.value[m])))
                yield f"spelling-{site}-{spelling!r}-{tag}", p, element_problems(t)
        for dims in (0, 1, 7, 8, 9):
            for last in ([0], [1], [Raw("012")], [2**64], [Raw("-0")]):
                if dims == 0 and last != [0]:
                    continue
                shape: list[Any] = [1] * max(0, dims - 1) + (last if dims else [])
                p = base_plan(rng, 3, sep, meta=False)
                z = _put(rng, p, tensor("z", rng.choice(["U8", "F4"]), shape,
                                        len(p.data), len(p.data)))
                yield f"dims-{dims}-{last[0]}-{tag}", p, element_problems(z)
        for bad_at in (0, 7):  # a bad element before the ninth
            shape = [1] * 9
            shape[bad_at] = Raw("-1")
            p = base_plan(rng, 3, sep, meta=False)
            z = _put(rng, p, tensor("z", "U8", shape, 0, 0))
            yield f"dims-9-bad-{bad_at}-{tag}", p, element_problems(z)
        for few in ([], [0]):
            p = base_plan(rng, 3, sep, meta=False)
            z = _put(rng, p, tensor("z", "U8", [0], 0, 0))
            z.field("data_offsets").value = list(few)
            yield f"offsets-{len(few)}-items-{tag}", p, element_problems(z)


__all__ = ["DIM_FORMS", "LIMITS", "OFFSET_FORMS", "SPELLINGS", "classify",
           "element_problems", "number_edges"]
