"""Exceptions of the oracle, one class per engine error family.

The names mirror ``engine.errors`` by family, not by import: the oracle never
imports the engine, so a test compares the two by family (an ``AllPinned``
from the oracle must meet an ``AllPinnedError`` from the engine).
"""

from __future__ import annotations


class OracleError(Exception):
    """Base of every error the oracle raises."""


class OracleFormatError(OracleError, ValueError):
    """A container failed validation: ``kind`` names the check, ``offset`` the byte.

    ``kind`` is one of :data:`FORMAT_KINDS`; ``offset`` is the absolute byte
    position in ``path`` where the check failed (``None`` for index checks that
    concern no single byte); ``path`` is the file (or folder) concerned.
    """

    def __init__(self, kind: str, offset: int | None, path: str,
                 detail: str = "") -> None:
        assert kind in FORMAT_KINDS, kind
        where = "" if offset is None else f" at byte {offset}"
        super().__init__(f"{path}: {kind}{where}" + (f": {detail}" if detail else ""))
        self.kind = kind
        self.offset = offset
        self.path = path
        self.detail = detail


#: Every ``OracleFormatError.kind``, in the order the checks run (DESIGN §3).
FORMAT_KINDS = (
    "too_short", "header_too_large", "header_past_end", "not_utf8", "json",
    "schema", "dtype", "duplicate", "offsets", "overflow", "bits", "size",
    "length", "index",
)


class NotFound(OracleError, LookupError):
    """No such tensor, or the key is not resident (``pin``)."""


class AllPinned(OracleError):
    """Every slot is protected or in flight; nothing changed."""


class Misuse(OracleError, ValueError):
    """A bad argument or a call out of order; nothing changed."""


class Budget(Misuse):
    """The cache budget holds fewer than ``top_k + 1`` slots."""


class IOFailure(OracleError, OSError):
    """A load failed with an I/O error; ``layer`` and ``expert`` name the key."""

    def __init__(self, message: str, layer: int, expert: int) -> None:
        super().__init__(message)
        self.layer = layer
        self.expert = expert


class ShortRead(IOFailure):
    """A load ended early: fewer bytes arrived than were asked."""


class NotModelled(Exception):
    """A call whose outcome the engine's contract leaves open: the model does not guess.

    Not an engine error family: the caller (the gate) cannot judge such a
    step and says so instead of comparing anything.
    """
