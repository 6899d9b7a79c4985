"""Strict JSON as the official safetensors reader accepts it (docs/DESIGN.md §3).

Python's ``json`` accepts ``NaN``/``Infinity``, lone surrogate escapes and
numbers that overflow a double; serde_json, under the official reader,
refuses them, and refuses nesting past level 127.  :func:`_strict_json`
parses a header or an index that way, keeping every object's pairs in
document order (duplicates are judged by the caller).
"""

from __future__ import annotations

import json
import re

import numpy as np

_U64_MAX = 2**64 - 1


class _JsonError(Exception):
    """Raised inside the JSON hooks: a construct JSON does not allow."""


def _reject_constant(token: str) -> object:
    raise _JsonError(f"{token} is not JSON")


#: a lone surrogate code point (only a ``\\uD8xx``-style escape makes one:
#: text decoded from UTF-8 never holds one)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a code point U+D800..U+DFFF (a lone surrogate)."""
    # one regular-expression scan, not a Python step per character: a
    # DeepSeek-V3-sized header (21,504 tensors) spent 5 s here
    return _SURROGATE.search(text) is not None


def _pairs(pairs: list[tuple[str, object]]) -> dict:
    """Keep every pair: duplicates are judged later, in document order."""
    for key, value in pairs:
        if _has_surrogate(key) or (isinstance(value, str) and _has_surrogate(value)):
            raise _JsonError("lone surrogate escape")
    result: dict = {"\0pairs": pairs}
    return result


_I32_MAX = 2**31 - 1
_NUMBER = re.compile(r"-?([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?")


def _finite_from_parts(sig: int, exp: int) -> bool:
    """Whether ``sig * 10**exp`` stays finite as the official reader computes it.

    Its default float path is not correctly rounded near the top of the range
    (it takes 1.7976931348623158e308 as out of range): a double significand
    times (or divided by) table powers of ten, at most 1e308 at a time.
    """
    f = float(sig)
    while True:
        a = abs(exp)
        if a <= 308 and exp != -(2**31):
            if exp >= 0:
                return f * float(f"1e{a}") != float("inf")
            return True  # a division stays finite
        if f == 0.0:
            return True
        if exp >= 0:
            return False
        f /= 1e308
        exp += 308


def _number_in_range(text: str) -> bool:
    """Whether a JSON number's value is a finite double by that same rule.

    The significand keeps the leading digits that fit 64 bits (later digits
    before the point only raise the exponent, after it they are dropped);
    the exponent saturates at 32 bits; integers that fit 64 bits pass.
    """
    m = _NUMBER.fullmatch(text)
    if m is None:  # json.loads hands over numbers of the JSON grammar only
        raise _JsonError(f"malformed number {text!r}")
    whole, frac, rest = m.group(1), m.group(2) or "", m.group(3) or ""
    is_float = m.group(2) is not None or m.group(3) is not None
    sig = exp = 0
    for i, ch in enumerate(whole):
        if sig * 10 + int(ch) > _U64_MAX:
            is_float = True
            exp += len(whole) - i
            break
        sig = sig * 10 + int(ch)
    else:
        for ch in frac:
            if sig * 10 + int(ch) > _U64_MAX:
                break
            sig = sig * 10 + int(ch)
            exp -= 1
    if rest:
        positive = not rest.startswith("-")
        e = 0
        for ch in rest.lstrip("+-"):
            if e * 10 + int(ch) > _I32_MAX:
                return not (sig != 0 and positive)
            e = e * 10 + int(ch)
        exp = max(-(2**31), min(_I32_MAX, exp + e if positive else exp - e))
    return not is_float or _finite_from_parts(sig, exp)


def _checked_number(text: str) -> object:
    """The value of a JSON number, or ``_JsonError`` when it overflows a double."""
    if len(text) <= 19 and text.isdigit():  # below 10**19: fits 64 bits
        return int(text)  # (the shapes and offsets of a header, at C speed)
    if text == "-0":  # serde_json reads it as the float -0.0, no integer
        return -0.0
    if not _number_in_range(text):
        raise _JsonError(f"number {text} is out of range (a double overflows)")
    return float(text) if any(c in text for c in ".eE") else int(text)


#: The deepest nesting level the official reader accepts: serde_json's
#: recursion limit, 128, refuses the 128th level (the top-level value's
#: bracket is level 1).
MAX_LEVEL = 127


def _escaped(raw: np.ndarray, quotes: np.ndarray) -> np.ndarray:
    """Which of ``quotes`` (positions in ``raw``) an odd run of backslashes precedes.

    The runs are found from the backslashes' positions (consecutive ones
    make a run), so the cost is numpy passes over the bytes, whatever the
    runs' lengths; a Python step per escaped quote cost an 18 MB index
    (DeepSeek-V3's twin: 920,000 escaped quotes) 2 s.
    """
    slashes = np.flatnonzero(raw == ord("\\"))
    if slashes.size == 0:
        return np.zeros(quotes.size, dtype=bool)
    breaks = np.flatnonzero(np.diff(slashes) != 1)
    last = np.append(breaks, slashes.size - 1)  # index in slashes of each run's end
    first = np.insert(breaks + 1, 0, 0)
    ends = slashes[last]
    run = np.searchsorted(ends, quotes - 1)  # the run that may end just before
    found = run < ends.size
    found[found] = ends[run[found]] == quotes[found] - 1
    odd = np.zeros(quotes.size, dtype=bool)
    odd[found] = (last - first + 1)[run[found]] % 2 == 1
    return odd


def _too_deep(text: str) -> int:
    """The character position of the first bracket at a level past MAX_LEVEL, or -1.

    Brackets inside strings do not count (a quote ends a string unless an
    odd run of backslashes precedes it).  Numpy passes over the bytes: a
    header of 21,504 entries costs milliseconds.
    """
    if text.count("[") + text.count("{") <= MAX_LEVEL:
        return -1
    raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    quotes = np.flatnonzero(raw == ord('"'))
    quotes = quotes[~_escaped(raw, quotes)]
    opens = (raw == ord("[")) | (raw == ord("{"))
    closes = (raw == ord("]")) | (raw == ord("}"))
    at = np.flatnonzero(opens | closes)
    outside = np.searchsorted(quotes, at) % 2 == 0  # an even count of quotes before
    at = at[outside]
    level = np.cumsum(np.where(opens[at], 1, -1))
    deep = np.flatnonzero(level > MAX_LEVEL)
    if deep.size == 0:
        return -1
    return len(bytes(raw[:at[deep[0]]]).decode("utf-8"))


def _strict_json(text: str) -> object:
    """Parse strict JSON; objects come back as ``{"\\0pairs": [(k, v), ...]}``.

    Raises ``_JsonError`` with a character position (or -1) on failure: the
    first of a syntax error and a bracket past :data:`MAX_LEVEL`.
    """
    deep = _too_deep(text)
    try:
        doc = json.loads(text, object_pairs_hook=_pairs,
                         parse_constant=_reject_constant,
                         parse_float=_checked_number, parse_int=_checked_number)
    except json.JSONDecodeError as exc:
        if 0 <= deep < exc.pos:
            raise _JsonError(f"nesting deeper than {MAX_LEVEL} levels", deep) from None
        raise _JsonError(exc.msg, exc.pos) from None
    except _JsonError as exc:
        if deep >= 0:
            raise _JsonError(f"nesting deeper than {MAX_LEVEL} levels", deep) from None
        raise exc from None
    except RecursionError:
        if deep >= 0:
            raise _JsonError(f"nesting deeper than {MAX_LEVEL} levels", deep) from None
        raise _JsonError("nesting too deep", -1) from None
    if deep >= 0:
        raise _JsonError(f"nesting deeper than {MAX_LEVEL} levels", deep)
    return doc
