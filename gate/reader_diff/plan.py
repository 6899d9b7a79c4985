"""A header built entry by entry, and each reader's verdict by the documented order.

The combined faults (:mod:`~gate.reader_diff.combined`) and the number edges
(:mod:`~gate.reader_diff.edges`) change a valid header in several places at
once; whichever problem the reader meets first is its verdict.  So that the
construction knows where each problem ends up after the others moved things
(a field removed, an entry inserted), a header is held as a :class:`Plan`:
entries and fields are objects whose place is found by identity once every
change is made.

Each reader's verdict is then computed from docs/DESIGN.md's rules, not
taken from either reader (:func:`want`):

- step 4 (``not_utf8``) before anything, at the first bad byte;
- step 5: the problem the one pass meets first in document order (an
  entry's name before its value, a field's key before its value, a missing
  field at the entry's end); the oracle names the same kind, except that it
  parses the whole JSON first: any malformed JSON in the file is its
  ``json`` (docs/DESIGN.md §5);
- steps 6-9 over the tensors in ``(begin, end)`` order, header order on
  ties: check-major for the engine (the earliest kind any tensor fails, at
  the first tensor failing it), tensor by tensor for the oracle (its first
  tensor failing any check, that check's kind: docs/DESIGN.md §5 "entry by
  entry rather than check-major"); the element count multiplied left to
  right, each dimension at most 2^48 - 1;
- step 10: the data's end against the file's length.

:func:`judge_want` holds both readers to those verdicts: kinds, the
engine's offset (the offending byte, the entry's name for steps 6-9), the
oracle's (data start plus the begin, or the expected begin for
``offsets``), the tensor each names, and, where both accept, the same
tables (:func:`~gate.reader_diff.compare.compare`).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xcache.gate.reader_diff.compare import (
    NAME_COMPARED,
    Verdict,
    compare,
    engine_verdict,
    found_fact,
    named_tensor,
    oracle_verdict,
    quoted,
)
from xcache.gate.reader_diff.containers import _BITS, Header, _data
from xcache.gate.reader_diff.doc import Doc, Obj, Raw

MAX_48 = 2**48 - 1
U64_MAX = 2**64 - 1
#: The separators a plan is written with: the writers' compact form (the C
#: reader's fast path), the common spaced one, and an odd one.
SEPS: tuple[tuple[str, str], ...] = ((",", ":"), (", ", ": "), (" ,\n", " :\t"))


@dataclass(eq=False)
class Field:
    """One field of an entry (or one pair of ``__metadata__``)."""

    name: Any
    value: Any


@dataclass(eq=False)
class Entry:
    """One top-level member: a tensor entry, ``__metadata__``, or a value that is
    no object (``fields`` None, ``value`` written instead)."""

    name: Any
    fields: list[Field] | None
    value: Any = None

    def field(self, name: str) -> Field:
        """The first field called ``name``."""
        assert self.fields is not None
        return next(f for f in self.fields if f.name == name)

    def get(self, name: str) -> Any:
        """The value of the first field called ``name``."""
        return self.field(name).value


def tensor(name: str, dtype: str, shape: list[Any], begin: int, end: int) -> Entry:
    """A tensor entry in the writers' field order."""
    return Entry(name, [Field("dtype", dtype), Field("shape", list(shape)),
                        Field("data_offsets", [begin, end])])


@dataclass
class Plan:
    """A header being built: its entries in document order, the data, the layout."""

    entries: list[Entry]
    data: bytes
    sep: tuple[str, str] = (", ", ": ")
    #: bytes appended to the header text after it is rendered (a raw edit)
    edit: Callable[[bytearray], None] | None = None

    def header(self) -> Header:
        """The :class:`~gate.reader_diff.containers.Header` to write."""
        top = Obj([(e.name, e.value if e.fields is None else
                    Obj([(f.name, f.value) for f in e.fields]))
                   for e in self.entries])
        return Header(top, self.data, self.sep, edit=self.edit)

    def index(self, e: Entry) -> int:
        """Where entry ``e`` stands now."""
        return next(i for i, x in enumerate(self.entries) if x is e)

    def field_index(self, e: Entry, f: Field) -> int:
        """Where field ``f`` of entry ``e`` stands now."""
        assert e.fields is not None
        return next(j for j, x in enumerate(e.fields) if x is f)

    def tensors(self) -> list[Entry]:
        """The tensor entries (not ``__metadata__``), in document order."""
        return [e for e in self.entries if e.name != "__metadata__"]

    def data_end(self) -> int:
        """The end of the data the tensors' ranges tile (the base's)."""
        return len(self.data)


#: Base tensors: every one holds bytes (so a dtype of another width is a
#: wrong size), widths of 4, 6, 8, 16, 32 and 64 bits.
BASE_TENSORS: tuple[tuple[str, list[int]], ...] = (
    ("U8", [3]), ("F32", [2, 2]), ("BF16", [5]), ("I64", [1]), ("F16", [2, 3]),
    ("F4", [2, 3]), ("F6_E2M3", [4]), ("I8", [1, 1, 2]), ("U16", [7]),
    ("BOOL", [2]), ("F8_E4M3", [3, 1]),
)


def base_plan(rng: random.Random, n: int, sep: tuple[str, str] | None = None,
              meta: bool | None = None) -> Plan:
    """``n`` tensors laid out in header order, with ``__metadata__`` or not."""
    entries, off = [], 0
    for k in range(n):
        dtype, shape = BASE_TENSORS[rng.randrange(len(BASE_TENSORS))]
        nb = _count(shape) * _BITS[dtype] // 8
        entries.append(tensor(f"model.layers.{k}.w", dtype, shape, off, off + nb))
        off += nb
    if meta if meta is not None else rng.random() < 0.5:
        entries.insert(rng.randrange(len(entries) + 1), Entry(
            "__metadata__", [Field("format", "pt"), Field("n", str(n))]))
    return Plan(entries, _data(off, n), sep or rng.choice(SEPS))


def _count(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


# -- steps 6-10 -------------------------------------------------------------

@dataclass(frozen=True)
class DataFault:
    """A tensor that fails one of steps 6-9: its kind and what it says."""

    kind: str
    entry: Entry
    begin: int
    expected: int  #: the end of the ranges before it (``offsets``)


def _int(v: Any) -> int:
    """An element's value (one written as text: its digits, whitespace about)."""
    return int(v.text) if isinstance(v, Raw) else v


def _step7(shape: list[int], dtype: str) -> tuple[bool, int]:
    """(fails step 7, its bits) for ``shape`` of ``dtype``."""
    count = 1
    for d in shape:
        if d > MAX_48:
            return True, 0
        count *= d
        if count > U64_MAX:
            return True, 0
    bits = count * _BITS[dtype]
    return bits > U64_MAX, bits


def data_faults(plan: Plan) -> tuple[DataFault | None, DataFault | None, int]:
    """The engine's (check-major) and the oracle's (tensor by tensor) first
    failing tensor of steps 6-9, and the data's end."""
    rows = []
    for i, e in enumerate(plan.tensors()):
        begin, end = (_int(v) for v in e.get("data_offsets"))
        rows.append((begin, end, i, e))
    rows.sort(key=lambda r: r[:3])
    per: list[list[DataFault]] = [[] for _ in rows]  # each tensor's, in step order
    expected = 0
    for k, (begin, end, _, e) in enumerate(rows):
        prior, expected = expected, end
        if end < begin or begin != prior:
            per[k].append(DataFault("offsets", e, begin, prior))
        over, bits = _step7([_int(v) for v in e.get("shape")], e.get("dtype"))
        if over:
            per[k].append(DataFault("overflow", e, begin, prior))
        elif bits % 8:
            per[k].append(DataFault("bits", e, begin, prior))
        elif end - begin != bits // 8:
            per[k].append(DataFault("size", e, begin, prior))
    engine = None
    for kind in ("offsets", "overflow", "bits", "size"):
        engine = next((f for fs in per for f in fs if f.kind == kind), None)
        if engine is not None:
            break
    oracle = next((fs[0] for fs in per if fs), None)
    return engine, oracle, expected


# -- step 4 and 5 problems ---------------------------------------------------

@dataclass
class Problem:
    """A problem of steps 4-5 placed in a plan: what the one pass meets there.

    ``where`` gives, from the finished plan and its Doc, the order in which
    the one pass meets it (a tuple compared as a path: entry, then 0 for its
    name, 1 for a value that is no object, 2 and the field for a field, 3
    for the entry's end) and the engine's offset.  ``json``: it is
    malformed JSON (the oracle's parse meets it first of all).
    """

    label: str
    kind: str
    where: Callable[[Plan, Doc], tuple[tuple[int, ...], int]]
    entry: Entry | None = None   #: the tensor both errors name
    message: str | None = None   #: words the engine's message must hold
    rank: int = 0  #: after another problem met at the same byte

    @property
    def json(self) -> bool:
        """Whether the oracle's parse refuses it first."""
        return self.kind == "json"


def at_key(e: Entry, f: Field | None = None, plus: int = 0, order: int = 0
           ) -> Callable[[Plan, Doc], tuple[tuple[int, ...], int]]:
    """A problem at entry ``e``'s name, or at the key of its field ``f``."""
    def where(p: Plan, d: Doc) -> tuple[tuple[int, ...], int]:
        i = p.index(e)
        if f is None:
            return (i, 0), d.keys[(i,)] + plus
        j = p.field_index(e, f)
        return (i, 2, j, order), d.keys[(i, j)] + plus
    return where


def at_value(e: Entry, f: Field | None = None, m: int | None = None,
             plus: int = 0) -> Callable[[Plan, Doc], tuple[tuple[int, ...], int]]:
    """A problem at entry ``e``'s value, its field ``f``'s or element ``m``'s."""
    def where(p: Plan, d: Doc) -> tuple[tuple[int, ...], int]:
        i = p.index(e)
        if f is None:
            return (i, 1), d.values[(i,)] + plus
        j = p.field_index(e, f)
        if m is None:
            return (i, 2, j, 1), d.values[(i, j)] + plus
        return (i, 2, j, 1, m), d.values[(i, j, m)] + plus
    return where


def at_end(e: Entry) -> Callable[[Plan, Doc], tuple[tuple[int, ...], int]]:
    """A problem met at entry ``e``'s closing brace, reported at its name."""
    def where(p: Plan, d: Doc) -> tuple[tuple[int, ...], int]:
        i = p.index(e)
        return (i, 3), d.keys[(i,)]
    return where


# -- the verdicts --------------------------------------------------------------

@dataclass
class Want:
    """Each reader's verdict by the documented rules (None: accepted)."""

    engine: str | None
    oracle: str | None
    engine_at: int | None = None
    oracle_at: int | None = None
    #: the tensor the engine's message quotes / the oracle's detail names
    engine_name: str | None = None
    oracle_name: str | None = None
    message: str | None = None
    why: str = ""


def want(plan: Plan, doc: Doc, problems: list[Problem], file_bytes: int) -> Want:
    """Both readers' verdicts on ``plan`` as written (``doc``), ``problems`` in it."""
    placed = sorted(((*p.where(plan, doc), p) for p in problems),
                    key=lambda t: (t[0], t[2].rank, t[1]))
    utf8 = [t for t in placed if t[2].kind == "not_utf8"]
    if utf8:
        at = min(t[1] for t in utf8)
        return Want("not_utf8", "not_utf8", at, at, why="step 4 before step 5")
    if placed:
        _, at, first = placed[0]
        name = None if first.entry is None else str(first.entry.name)
        oracle = "json" if any(t[2].json for t in placed) else first.kind
        return Want(first.kind, oracle, at, None, name,
                    name if oracle == first.kind else None, first.message,
                    why=f"first in document order: {first.label}")
    engine, oracle, end = data_faults(plan)
    data_start = 8 + len(doc.text)  # a header written at base 8
    if engine is None:
        if data_start + end != file_bytes:
            at = min(data_start + end, file_bytes)
            return Want("length", "length", at, at, why="step 10")
        return Want(None, None, why="accepted")
    assert oracle is not None
    return Want(engine.kind, oracle.kind, doc.keys[(plan.index(engine.entry),)],
                data_start + (oracle.expected if oracle.kind == "offsets"
                              else oracle.begin),
                str(engine.entry.name), str(oracle.entry.name),
                why=f"steps 6-9: engine {engine.kind} at {engine.entry.name}, "
                    f"oracle {oracle.kind} at {oracle.entry.name}")


def judge_want(engine: Any, path: Path, plan: Plan, problems: list[Problem]
               ) -> tuple[Verdict, str | None]:
    """Write ``plan`` at ``path``, open it with both readers: the oracle's verdict
    and the first way either departs from its documented verdict (None)."""
    doc = plan.header().write(path)
    size = path.stat().st_size
    w = want(plan, doc, problems, size)
    mine, theirs = engine_verdict(engine, path), oracle_verdict(path)
    bad = _departs(mine, theirs, w, path)
    if bad is None and mine.kind == theirs.kind:
        bad = compare(mine, theirs, w.engine_at)
    if bad is None and mine.kind == "json":
        bad = found_fact(mine, doc.text, 8)
    return theirs, None if bad is None else f"{bad} [{w.why}]"


def _departs(mine: Verdict, theirs: Verdict, w: Want, path: Path) -> str | None:
    if (mine.kind, theirs.kind) != (w.engine, w.oracle):
        return (f"engine {mine.kind or 'accepts'} ({mine.message}), oracle "
                f"{theirs.kind or 'accepts'} ({theirs.detail}); the rules say "
                f"engine {w.engine or 'accepts'}, oracle {w.oracle or 'accepts'}")
    if mine.kind is None:
        return None
    if w.engine_at is not None and mine.offset != w.engine_at:
        return (f"{mine.kind} offset: engine {mine.offset}, expected "
                f"{w.engine_at} ({mine.message})")
    if w.oracle_at is not None and theirs.offset != w.oracle_at:
        return (f"{theirs.kind} offset: oracle {theirs.offset}, expected "
                f"{w.oracle_at} ({theirs.detail})")
    if os.path.basename(path) not in mine.message:
        return f"{mine.kind}: the message does not name the file: {mine.message}"
    if (w.engine_name is not None and mine.kind in NAME_COMPARED
            and "\0" not in w.engine_name
            and quoted(w.engine_name) not in mine.message):
        return (f"{mine.kind}: the message does not quote {quoted(w.engine_name)}:"
                f" {mine.message}")
    if w.message is not None and w.message not in mine.message:
        return f"{mine.kind}: the message lacks '{w.message}': {mine.message}"
    if (w.oracle_name is not None and "\0" not in w.oracle_name
            and theirs.kind in NAME_COMPARED | {"schema"}
            and named_tensor(theirs.detail) not in (None, w.oracle_name)):
        return (f"{theirs.kind}: the oracle names {named_tensor(theirs.detail)!r}, "
                f"the rules {w.oracle_name!r} ({theirs.detail})")
    return None
