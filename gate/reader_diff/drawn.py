"""Header rules built on the generators: names, values, nesting and numbers.

Each breaks (or keeps valid) one valid container in one place with a
drawn part of :mod:`gate.reader_diff.generators`; :data:`DRAWN_RULES` is
drawn beside the hand rules, and :func:`sweep` gives one file per class of
every generator, so that a default run meets each class whatever its draw.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

from xcache.gate.reader_diff import generators as gen
from xcache.gate.reader_diff.containers import Header, base_single
from xcache.gate.reader_diff.doc import Obj, Path_, Raw, Spelled
from xcache.gate.reader_diff.header_rules import (
    Expect,
    _field,
    _meta_index,
    _set_field,
    _tensor_index,
)
from xcache.oracle.bounds import HEADER_MAX_BYTES

#: Tokens whose own value is malformed: wherever one stands the engine's one
#: pass meets it first, and it is a json error (``0x10`` is the value ``0``
#: followed by bytes that are not JSON: a wrong type where one is checked).
MALFORMED = frozenset(t for cls in ("malformed", "malformed-deep", "not-json")
                      for t in gen.TOKENS[cls]) - {"0x10"}


# -- names --

def _named(h: Header, i: int, nm: gen.Name) -> None:
    old, entry = h.top.pairs[i]
    value = nm.value if nm.value is not None else old + ".\ufffd(refused)"
    h.top.pairs[i] = (Spelled(value, nm.spelled), entry)


def _break_entry(rng: random.Random, h: Header, i: int) -> Expect:
    """One more problem in entry ``i``, whose error message quotes its name."""
    choice = rng.randrange(5)
    if choice == 0:
        j = _set_field(h, i, "shape", [1] * 9)
        return Expect("schema", value=(i, j, 8), strict=True,
                      message="has more than 8 entries")
    if choice == 1:
        j = _set_field(h, i, "dtype", "U9")
        return Expect("dtype", value=(i, j), strict=True,
                      message='unknown dtype "U9"')
    if choice == 2:
        j = _set_field(h, i, "dtype", 8)
        return Expect("schema", value=(i, j), strict=True)
    if choice == 3:
        entry = h.top.pairs[i][1]
        entry.pairs.pop(entry.index("data_offsets"))
        return Expect("schema", key=(i,), strict=True, message="has no data_offsets")
    shape = list(h.top.pairs[i][1].get("shape"))
    _set_field(h, i, "shape", shape + [2])
    return Expect(named=True)


def name_case(rng: random.Random, h: Header, bad: bool, long: bool | None = None,
              then_break: bool | None = None, i: int | None = None) -> Expect:
    """Tensor ``i`` (drawn) renamed to a drawn name; a bad one is the error."""
    i = _tensor_index(rng, h) if i is None else i
    nm = gen.draw_name(rng, bad, prefix=h.top.pairs[i][0] + ".", long=long)
    _named(h, i, nm)
    if bad:
        return Expect(nm.kind, key=(i,), plus=nm.at, strict=True,
                      message=nm.message)
    if then_break is None:
        then_break = rng.random() < 0.6
    return _break_entry(rng, h, i) if then_break else Expect()


def r_name(rng: random.Random, h: Header) -> Expect:
    """A tensor named with escapes and UTF-8 of every length, valid or not."""
    return name_case(rng, h, bad=rng.random() < 0.5)


def meta_case(rng: random.Random, h: Header, where: str | None = None) -> Expect:
    """A __metadata__ key or value spelled by the name generator, valid or not."""
    i = _meta_index(h)
    if i is None:
        h.top.pairs.insert(0, ("__metadata__", Obj([])))
        i = 0
    where = where or rng.choice(["key", "value", "ok"])
    key = gen.draw_name(rng, where == "key", prefix="m.")
    value = gen.draw_name(rng, where == "value")
    k = Spelled(key.value if key.value is not None else "m.?", key.spelled)
    v = Spelled(value.value if value.value is not None else "?", value.spelled)
    meta = h.top.pairs[i][1] if isinstance(h.top.pairs[i][1], Obj) else Obj([])
    meta = Obj([p for p in meta.pairs if not p[0].startswith("m.")])
    meta.pairs.insert(0, (k, v))
    h.top.pairs[i] = ("__metadata__", meta)
    if where == "key":
        return Expect(key.kind, key=(i, 0), plus=key.at, strict=True,
                      message=key.message)
    if where == "value":
        return Expect(value.kind, value=(i, 0), plus=value.at, strict=True,
                      message=value.message)
    return Expect()


def r_meta_name(rng: random.Random, h: Header) -> Expect:
    """__metadata__ with a drawn key and value (escapes, UTF-8, bad bytes)."""
    return meta_case(rng, h)


# -- values at every site --

#: Where a drawn value can stand, and the nesting level of a bracket there.
SITES: dict[str, int] = {"top": 1, "entry": 2, "meta": 2, "dtype": 3, "shape": 3,
                         "extra": 3, "meta-value": 3, "shape-elem": 4,
                         "offsets-elem": 4}


def place(rng: random.Random, h: Header, site: str, text: str) -> Path_:
    """Write ``text`` as it is at ``site`` of a drawn tensor; its path."""
    value = Raw(text)
    if site == "top":
        h.top = value
        return ()
    if site in ("meta", "meta-value"):
        i = _meta_index(h)
        if i is None:
            h.top.pairs.insert(0, ("__metadata__", Obj([("a", "b")])))
            i = 0
        if site == "meta":
            h.top.pairs[i] = ("__metadata__", value)
            return (i,)
        h.top.pairs[i] = ("__metadata__", Obj([("k", value)]))
        return (i, 0)
    i = _tensor_index(rng, h)
    if site == "entry":
        h.top.pairs[i] = (h.top.pairs[i][0], value)
        return (i,)
    if site in ("dtype", "shape"):
        return (i, _set_field(h, i, site, value))
    if site == "extra":
        entry = h.top.pairs[i][1]
        j = rng.randrange(len(entry.pairs) + 1)
        entry.pairs.insert(j, ("extra", value))
        return (i, j)
    name = "shape" if site == "shape-elem" else "data_offsets"
    j = _field(h, i, name)
    items = list(h.top.pairs[i][1].pairs[j][1]) or [1]
    m = rng.randrange(len(items))
    items[m] = value
    _set_field(h, i, name, items)
    return (i, j, m)


#: Sites whose value the engine parses by its schema when it opens with
#: this byte (elsewhere a value of another type is probed or skipped whole).
DESCENDS = {"top": "{", "entry": "{", "meta": "{", "shape": "["}


def _type_error_at_value(site: str, token: str) -> bool:
    """Whether ``token`` at ``site`` is a schema or dtype error at the value itself."""
    c = token[0]
    return {"dtype": True, "shape": c != "[", "entry": c != "{",
            "meta": c != "{" and token != "null", "meta-value": c != '"',
            "shape-elem": not token.isdigit(),
            "offsets-elem": not token.isdigit()}.get(site, False)


def value_case(rng: random.Random, h: Header, site: str, token: str) -> Expect:
    """``token`` at ``site``: a malformed one is json wherever it stands."""
    path = place(rng, h, site, token)
    if token in MALFORMED and token[0] != DESCENDS.get(site):
        return Expect("json", strict=True)
    if token in MALFORMED:  # parsed by the site's schema: a problem inside
        return Expect()     # may come first (``{"a": 1,}`` as metadata)
    return Expect(value=path) if _type_error_at_value(site, token) else Expect()


def r_value(rng: random.Random, h: Header) -> Expect:
    """A value of any JSON type, malformed inside (three deep), or not JSON at all,
    where a scalar, an array, an entry or metadata is expected."""
    site = rng.choice(sorted(set(SITES) - {"top"}))
    return value_case(rng, h, site, gen.draw_token(rng))


def depth_case(rng: random.Random, h: Header, site: str, deepest: int) -> Expect:
    """A value at ``site`` nested down to level ``deepest``."""
    levels = deepest - SITES[site] + 1
    inner = rng.choice(["", "1", '"x"', "null"])
    place(rng, h, site, gen.nested(levels, rng, inner))
    if deepest > gen.MAX_LEVEL:
        return Expect("json", strict=True)
    return Expect()


def r_depth(rng: random.Random, h: Header) -> Expect:
    """A value nested to just below or just past the deepest level accepted."""
    site = rng.choice(sorted(SITES))
    return depth_case(rng, h, site, gen.MAX_LEVEL + rng.choice([-1, 0, 0, 1, 1, 2]))


# -- numbers --

def numbers_case(rng: random.Random, h: Header, side: str,
                 widths: list[int] | None = None) -> Expect:
    """An ignored field per significand width, each number ``side`` of the
    largest double; a json error, if any, at the first out of range."""
    i = _tensor_index(rng, h)
    entry = h.top.pairs[i][1]
    texts = {w: gen.number_text(rng, w, side) for w in widths or range(1, 23)}
    for w, text in texts.items():
        entry.pairs.insert(rng.randrange(len(entry.pairs) + 1), (f"n{w}", Raw(text)))
    return Expect(numbers=[((i, entry.index(f"n{w}")), text)
                           for w, text in texts.items()])


def r_numbers(rng: random.Random, h: Header) -> Expect:
    """Numbers of every significand width just below, just above or near the
    largest double (every power of ten from 1e286 up meets one)."""
    return numbers_case(rng, h, rng.choice(["below", "above", "near"]))


# -- what a message says it found --

#: Tokens written where a name is expected, with what the engine must say it found.
NOT_A_NAME = ((b"7", "a number"), (b"-1", "a number"), (b"[", "an array"),
              (b"{", "an object"), (b"null", "an unexpected character"),
              (b"'a'", "an unexpected character"))


def found_case(rng: random.Random, h: Header, k: int | None = None) -> Expect:
    """A tensor's name replaced by a token that is no string."""
    i = _tensor_index(rng, h)
    spelled, what = NOT_A_NAME[rng.randrange(len(NOT_A_NAME)) if k is None else k]
    h.top.pairs[i] = (Spelled(h.top.pairs[i][0] + "?", spelled), h.top.pairs[i][1])
    return Expect("json", key=(i,), strict=True, message=f"found {what}")


def r_found(rng: random.Random, h: Header) -> Expect:
    """A number, an array, an object or a literal where a name is expected."""
    return found_case(rng, h)


# -- integers that wrap --

def wrap_case(rng: random.Random, h: Header) -> Expect:
    """An empty tensor in the writers' exact spelling whose one dimension has 20
    digits or more: 2^64 k (wrapping to 0 in 64 bits, which an empty tensor
    at [0, 0] would make consistent) or 10^20 (wrapping to another size)."""
    h.sep = (",", ":")
    dim = rng.choice([2**64, 2**65, 3 * 2**64, 2**66, 10**20])
    entry = Obj([("dtype", rng.choice(["U8", "F32", "BF16"])),
                 ("shape", [Raw(str(dim))]), ("data_offsets", [0, 0])])
    at = rng.randrange(len(h.top.pairs) + 1)
    h.top.pairs.insert(at, ("wraps", entry))
    return Expect("schema", value=(at, 1, 0), strict=True)


def r_wrap(rng: random.Random, h: Header) -> Expect:
    """A dimension past 64 bits that wraps to a consistent size."""
    return wrap_case(rng, h)


DRAWN_RULES: tuple[tuple[Callable[[random.Random, Header], Expect], int], ...] = (
    (r_name, 6), (r_meta_name, 3), (r_value, 6), (r_depth, 3), (r_numbers, 4),
    (r_found, 2), (r_wrap, 1),
)


# -- one file per class --

Case = tuple[str, Header, Expect]


def sweep(rng: random.Random) -> Iterator[Case]:
    """One file for each class of every generator (names, values, depth, numbers)."""
    def fresh() -> Header:
        return base_single(rng)

    for side in ("below", "near"):  # every width in one file: all in range
        h = fresh()
        yield f"numbers-{side}", h, numbers_case(rng, h, side)
    for w in range(1, 23):  # one file a width: each its only problem
        h = fresh()
        yield f"number-above-{w}", h, numbers_case(rng, h, "above", [w])
    for piece in gen.every_bad_piece(rng):
        h = fresh()
        i = _tensor_index(rng, h)
        nm = gen.draw_name(rng, False, prefix=h.top.pairs[i][0] + ".")
        at = len(nm.spelled) - 1 + (piece.at or 0)
        _named(h, i, gen.Name(nm.spelled[:-1] + piece.spelled + b'"', None,
                              nm.labels, piece.kind, at, piece.message))
        yield (f"name-{piece.label}", h, Expect(piece.kind, key=(i,), plus=at,
                                                strict=True, message=piece.message))
    for width in (1, 2, 3, 4):
        h = fresh()
        for i, (key, _) in enumerate(list(h.top.pairs)):
            if key != "__metadata__":
                pieces = [gen.valid_piece(rng, width) for _ in range(3)]
                _named(h, i, gen.Name(
                    b'"' + key.encode() + b"." + b"".join(p.spelled for p in pieces)
                    + b'"', key + "." + "".join(p.value or "" for p in pieces), ()))
        yield f"names-width-{width}", h, Expect()
    for then in range(4):
        h = fresh()
        yield f"name-long-{then}", h, name_case(rng, h, False, long=True,
                                                then_break=True)
    for where in ("key", "value", "ok"):
        h = fresh()
        yield f"meta-{where}", h, meta_case(rng, h, where)
    for site in sorted(SITES):
        for deepest in (gen.MAX_LEVEL, gen.MAX_LEVEL + 1):
            h = fresh()
            yield f"depth-{site}-{deepest}", h, depth_case(rng, h, site, deepest)
    for token in ("tru", "+1", "@", "NaN", "[[[1,]]]", '{"a" 1}'):
        for site in ("shape-elem", "dtype"):
            h = fresh()
            yield f"value-{site}", h, value_case(rng, h, site, token)
    for n in (HEADER_MAX_BYTES - 1, HEADER_MAX_BYTES, HEADER_MAX_BYTES + 1,
              2**63, 2**64 - 1):  # the length prefix at its bound (step 2)
        h = fresh()
        h.n_is = n
        yield (f"prefix-{n}", h, Expect("header_past_end")
               if n <= HEADER_MAX_BYTES else Expect("header_too_large", at=0))
    for cut in (b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xf4\x8f"):
        h = fresh()
        h.edit = lambda text, cut=cut: text.extend(cut)  # after the closing brace
        yield (f"header-ends-mid-sequence-{cut.hex()}", h,
               Expect("not_utf8", strict=True, oracle=True))
    for _ in range(2):
        h = fresh()
        yield "wraps", h, wrap_case(rng, h)
    for k in range(len(NOT_A_NAME)):
        h = fresh()
        yield f"found-{k}", h, found_case(rng, h, k)
