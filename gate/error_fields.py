"""The structured fields of a failed call, as both backends can state them.

A check compares more of an error than its kind: :func:`project` gives,
for an exception of either backend, ``[kind, layer, expert, offset]`` in
the form both can state, so a derived check (the programs) holds the
engine's error record to the oracle's field by field:

- ``layer`` and ``expert`` of an I/O failure of a load (``io``,
  ``short_read``, ``changed``): the key whose read failed, which the
  oracle's ``IOFailure`` carries too;
- ``offset`` of every error that concerns no byte of a file (everything
  but the I/O and format kinds): none, as the oracle says by having none
  (docs/DESIGN.md §4: -1 in the C record, ``None`` in Python).

The rest (the file offset of an I/O failure, the key of a misuse) the
oracle does not model; it is left out on both sides.
"""

from __future__ import annotations

from typing import Any

#: Kinds whose error names the key of the load that failed.
KEYED = frozenset({"io", "short_read", "changed"})
#: Kinds whose error may carry a byte offset: the I/O ones and every format
#: check (their offsets are the reader differential's business).
BYTE_KINDS = KEYED | frozenset({
    "too_short", "header_too_large", "header_past_end", "not_utf8", "json",
    "schema", "dtype", "duplicate", "offsets", "overflow", "bits", "size",
    "length", "index", "layout"})


def project(exc: BaseException, kind: str | None) -> list[Any]:
    """``[kind, layer, expert, offset]`` of ``exc`` as the other backend states it."""
    layer = expert = offset = None
    if kind in KEYED:
        layer, expert = getattr(exc, "layer", None), getattr(exc, "expert", None)
    if kind not in BYTE_KINDS:
        offset = getattr(exc, "offset", None)
    return [kind, layer, expert, offset]
