"""The drawn parts of a corruption: names, values and numbers, by class.

- **Names** (:func:`draw_name`): JSON strings spelled byte for byte from
  pieces of every length class -- raw UTF-8 of 1 to 4 bytes, ``\\u``
  escapes of code points of 1, 2 and 3 UTF-8 bytes and surrogate pairs
  (4), the short escapes -- and, for a refused name, one bad piece: a hex
  digit of each class of byte that is none (below ``'0'``, between ``'9'``
  and ``'A'``, between ``'F'`` and ``'a'``, above ``'f'``, non-ASCII), a
  bad escape (printable, control, DEL, non-ASCII), lone and unpaired
  surrogates, and bytes that are not UTF-8 (bad leads, sequences cut
  short, overlong forms, surrogates, above U+10FFFF).  Each bad piece knows
  its kind, the byte the engine must point at and the words its message
  must hold.  Long names pass the 200 bytes a message quotes.
- **Values** (:data:`TOKENS`, :func:`nested`): JSON of every type, values
  nested around the depth limit, and tokens that are not JSON at all.
- **Numbers** (:func:`number_text`): a significand of any width from 1 to
  22 digits (past 64 bits) times the power of ten that puts the value just
  below or just above the largest double, written with the point anywhere.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from decimal import Decimal, getcontext

#: The deepest nesting level the readers accept (serde_json refuses its 128th).
MAX_LEVEL = 127


@dataclass(frozen=True)
class Piece:
    """A part of a JSON string as written, and what a reader makes of it.

    ``value`` is the decoded text (None: the piece is refused), ``kind``
    the error then (``json`` or ``not_utf8``), ``at`` the byte of the piece
    the engine's error points at (``None``: the string's opening quote),
    ``message`` words the engine's message must hold.
    """

    spelled: bytes
    value: str | None
    label: str
    kind: str | None = None
    at: int | None = 0
    message: str | None = None


def _hex(cp: int, rng: random.Random) -> str:
    """``\\uXXXX`` for ``cp``, each hex letter upper or lower case at random."""
    return "\\u" + "".join(c.upper() if rng.random() < 0.5 else c
                           for c in f"{cp:04x}")


#: Code points by the length of their UTF-8 form, the bounds of each class
#: included (no surrogates, no U+0000, no quote or backslash: those are
#: spelled as escapes only).
CODE_POINTS: dict[int, tuple[int, ...]] = {
    1: (0x20, 0x41, 0x7E, 0x7F),
    2: (0x80, 0xE9, 0x3B1, 0x7FF),
    3: (0x800, 0x20AC, 0x4E2D, 0xD7FF, 0xE000, 0xFFFD, 0xFFFF),
    4: (0x10000, 0x1F600, 0x10FFFF, 0xE0001),
}

SHORT_ESCAPES = {'\\"': '"', "\\\\": "\\", "\\/": "/", "\\b": "\b",
                 "\\f": "\f", "\\n": "\n", "\\r": "\r", "\\t": "\t"}


def valid_piece(rng: random.Random, width: int | None = None) -> Piece:
    """A piece that decodes: raw UTF-8 or an escape, of ``width`` UTF-8 bytes."""
    width = width or rng.randrange(1, 5)
    cp = rng.choice(CODE_POINTS[width])
    how = rng.randrange(3)
    if how == 0 or (cp < 0x20):
        return Piece(chr(cp).encode(), chr(cp), f"utf8-{width}")
    if how == 1 and width == 1:
        k = rng.choice(sorted(SHORT_ESCAPES))
        return Piece(k.encode(), SHORT_ESCAPES[k], "escape-short")
    if cp < 0x10000:
        text = _hex(cp, rng)
    else:  # a surrogate pair
        v = cp - 0x10000
        text = _hex(0xD800 + (v >> 10), rng) + _hex(0xDC00 + (v & 0x3FF), rng)
    return Piece(text.encode(), chr(cp), f"escape-{width}")


#: Bytes that are no hex digit, by class: below '0', between '9' and 'A',
#: between 'F' and 'a', above 'f', not ASCII.
NOT_HEX: dict[str, bytes] = {
    "below-0": b" !#$%&()*+,-./", "9-A": b":;<=>?@", "F-a": b"GHZ[]^_`",
    "above-f": b"ghxz{|}~", "non-ascii": "é".encode(),
}


def _bad_hex(rng: random.Random, cls: str | None = None) -> Piece:
    cls = cls or rng.choice(sorted(NOT_HEX))
    k = rng.randrange(4)
    digits = [rng.choice("0123456789abcdefABCDEF") for _ in range(4)]
    if cls == "non-ascii":
        bad = NOT_HEX[cls]
    else:
        bad = bytes([rng.choice(NOT_HEX[cls])])
    spelled = (b"\\u" + "".join(digits[:k]).encode() + bad
               + "".join(digits[k + 1:]).encode())
    if rng.random() < 0.5:  # the low half of a pair
        spelled = _hex(0xD800 + rng.randrange(0x400), rng).encode() + spelled
        k += 6
    return Piece(spelled, None, f"hex-{cls}", "json", 2 + k,
                 "bad hex digit in \\u escape")


#: Bytes after a backslash that make no escape: printable, control, DEL, non-ASCII.
BAD_ESCAPES = (b"x", b"a", b"0", b"U", b"'", b"v", b"\x01", b"\x1f", b"\x7f", b"\t",
               "é".encode())


def _bad_escape(rng: random.Random, c: bytes | None = None) -> Piece:
    c = c or rng.choice(BAD_ESCAPES)
    shown = chr(c[0]) if 0x20 <= c[0] < 0x7F else "?"
    return Piece(b"\\" + c, None, "escape-bad", "json", 0,
                 f"bad escape '\\{shown}'")


def _bad_surrogate(rng: random.Random, how: int | None = None) -> Piece:
    hi = 0xD800 + rng.randrange(0x400)
    lo = 0xDC00 + rng.randrange(0x400)
    how = rng.randrange(4) if how is None else how
    if how == 0:
        return Piece(_hex(lo, rng).encode(), None, "surrogate-low", "json", 0,
                     f"lone low surrogate \\u{lo:04X}")
    if how == 1:  # followed by no escape, or by a short one
        tail = rng.choice([b"a", b"\\n", "é".encode()])
        return Piece(_hex(hi, rng).encode() + tail, None, "surrogate-high",
                     "json", 0, f"lone high surrogate \\u{hi:04X}")
    other = rng.choice([0x41, 0xE9, hi, 0xE000])
    return Piece((_hex(hi, rng) + _hex(other, rng)).encode(), None,
                 "surrogate-unpaired", "json", 0,
                 f"high surrogate \\u{hi:04X} not followed by a low surrogate")


#: Byte sequences that are not UTF-8, by class; the error is at their first byte.
NOT_UTF8: dict[str, tuple[bytes, ...]] = {
    "lead": (b"\x80", b"\xbf", b"\xc0", b"\xc1", b"\xf5", b"\xf8", b"\xff"),
    "cut-2": (b"\xc3a", b"\xdf "),
    "cut-3": (b"\xe2\x82a", b"\xe2a", b"\xef\xbf "),
    "cut-4": (b"\xf0\x9f\x98a", b"\xf0\x9fa", b"\xf4a", b"\xf3\x80\x80 "),
    "overlong": (b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf",
                 b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf"),
    "surrogate": (b"\xed\xa0\x80", b"\xed\xbf\xbf"),
    "above-max": (b"\xf4\x90\x80\x80", b"\xf4\xbf\xbf\xbf"),
    "bad-continuation": (b"\xf0\x9fA\x80", b"\xf0\x9f\x98A", b"\xe2A\xac"),
}


def _not_utf8(rng: random.Random, cls: str | None = None,
              spelled: bytes | None = None) -> Piece:
    cls = cls or rng.choice(sorted(NOT_UTF8))
    return Piece(spelled or rng.choice(NOT_UTF8[cls]), None, f"utf8-bad-{cls}",
                 "not_utf8", 0)


BAD_PIECES = (_bad_hex, _bad_escape, _bad_surrogate, _not_utf8)


def every_bad_piece(rng: random.Random) -> list[Piece]:
    """One bad piece of every class: each non-hex byte class, each bad escape,
    each surrogate error, and every sequence of :data:`NOT_UTF8` (a lead
    byte the check lets through by one value is met only by its own)."""
    return ([_bad_hex(rng, c) for c in sorted(NOT_HEX)]
            + [_bad_escape(rng, c) for c in BAD_ESCAPES]
            + [_bad_surrogate(rng, k) for k in range(3)]
            + [_not_utf8(rng, c, s) for c in sorted(NOT_UTF8)
               for s in NOT_UTF8[c]])


@dataclass(frozen=True)
class Name:
    """A drawn JSON string: as written (quotes included) and what it must give."""

    spelled: bytes
    value: str | None
    labels: tuple[str, ...]
    kind: str | None = None
    at: int = 0            #: byte of ``spelled`` the error points at
    message: str | None = None


def draw_name(rng: random.Random, bad: bool, prefix: str = "",
              long: bool | None = None) -> Name:
    """A name of drawn pieces; with ``bad``, one of them refused.

    ``long`` (drawn when None) pads it past the 200 bytes a message quotes,
    with multi-byte pieces about the cut.
    """
    if long is None:
        long = rng.random() < 0.25
    pieces = [Piece(prefix.encode(), prefix, "prefix")] if prefix else []
    pieces += [valid_piece(rng) for _ in range(rng.randrange(1, 5))]
    if long:
        while sum(len(p.value.encode()) for p in pieces if p.value) < 195:
            pieces.append(valid_piece(rng, rng.choice([1, 1, 2, 3, 4])))
        pieces += [valid_piece(rng, rng.choice([2, 3, 4])) for _ in range(3)]
    broken = None
    if bad:
        broken = rng.randrange(len(pieces) + 1)
        pieces.insert(broken, rng.choice(BAD_PIECES)(rng))
    spelled = b'"' + b"".join(p.spelled for p in pieces) + b'"'
    labels = tuple(p.label for p in pieces)
    if broken is None:
        return Name(spelled, "".join(p.value or "" for p in pieces), labels)
    p = pieces[broken]
    at = 1 + sum(len(q.spelled) for q in pieces[:broken]) + (p.at or 0)
    return Name(spelled, None, labels, p.kind, at, p.message)


def quoted(name: str, precision: int = 200) -> str:
    """How the engine's message quotes ``name``: its first bytes, decoded."""
    return '"' + name.encode("utf-8")[:precision].decode("utf-8", "replace") + '"'


# -- values ---------------------------------------------------------------------

#: Values by class, as written: JSON of every type, nested JSON, JSON that
#: is malformed inside (flat and nested three deep), and tokens that are
#: not JSON at all.
TOKENS: dict[str, tuple[str, ...]] = {
    "scalar": ("7", '"x"', "null", "true", "false", "-0.5", "1e-999"),
    "container": ("[]", "{}", "[1, [2]]", '{"a": [null]}', '[[["x"]]]',
                  '[{"b": {"c": []}}]'),
    "malformed": ("[1,]", '{"a" 1}', "[1 2]", '{"a": }', '{"a": 1,}',
                  '["x\\q"]'),
    "malformed-deep": ("[[[1,]]]", '[[{"a" 1}]]', "[[[tru]]]", '{"a": [[nul]]}',
                       "[[[01]]]", "[[[-]]]", "[[[1.]]]"),
    "not-json": ("tru", "nul", "fals", "+1", ".5", "NaN", "Infinity", "-Infinity",
                 "'x'", "@", "0x10", "01", "1.", "-", "1e", "--1", "\u00e9"),
}


def draw_token(rng: random.Random, classes: tuple[str, ...] | None = None) -> str:
    """A value of a class drawn from ``classes`` (all by default)."""
    cls = rng.choice(classes or tuple(sorted(TOKENS)))
    return rng.choice(TOKENS[cls])


def nested(levels: int, rng: random.Random, inner: str = "") -> str:
    """``levels`` arrays or objects one in another, ``inner`` at the bottom."""
    out = inner
    for _ in range(levels):
        out = ("[" + out + "]") if rng.random() < 0.7 or not out else \
              ('{"k": ' + out + "}")
    return out


# -- numbers --------------------------------------------------------------------

_LARGEST = Decimal(1.7976931348623157e308)  # the largest double, exactly


def number_text(rng: random.Random, width: int, side: str) -> str:
    """A JSON number of ``width`` significant digits just ``below`` or ``above``
    the largest double (``near``: within a factor of ten either side).

    Below and above are within one part in a thousand (or a few units in the
    last digit) of it; the exponent follows from the width, so every width
    meets its own entry of the powers of ten (a 20-digit significand meets
    1e289).  The point goes anywhere in the digits, the exponent is written
    with ``e``/``E``, a sign or leading zeros.
    """
    getcontext().prec = 50
    if side == "near":
        f = Decimal(10) ** Decimal(rng.uniform(-1, 1))
    else:
        rel = Decimal(rng.choice([1, 3, 10, 100, 1000])) / Decimal(10**6)
        f = 1 + rel if side == "above" else 1 - rel
    v = _LARGEST * f
    e = v.adjusted() - (width - 1)
    # below: rounded down, above: up (a width of 1 is 1e308 or 2e308)
    sig = int(v.scaleb(-e).to_integral_value(
        rounding="ROUND_CEILING" if side == "above" else "ROUND_FLOOR"))
    if side != "near" and width >= 3 and rng.random() < 0.3:
        # a few units in the last digit from the largest double's own digits
        top = int(_LARGEST.scaleb(-e))
        sig = top + (rng.randrange(1, 4) if side == "above" else -rng.randrange(0, 3))
    digits = str(sig)
    e += len(digits) - width  # (a carry added a digit)
    cut = rng.randrange(len(digits) + 1)
    mant = digits[:cut] + ("." + digits[cut:] if digits[cut:] else "")
    if mant.startswith("."):
        mant = "0" + mant
    exp = e + (len(digits) - cut)
    sign = "-" if rng.random() < 0.2 else ""
    return (sign + mant + rng.choice(["e", "E", "e+", "E+"])
            + rng.choice(["", "0", "00"]) + str(exp))
