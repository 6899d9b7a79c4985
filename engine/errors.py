"""Exceptions of the engine: one class per family of C status codes."""

from __future__ import annotations


class EngineError(Exception):
    """Base of every engine error; ``status`` is the C code, ``kind`` its name."""

    def __init__(self, message: str, *, status: int = 0, kind: str = "",
                 offset: int = -1, layer: int = -1, expert: int = -1) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.offset = None if offset < 0 else offset
        self.layer = None if layer < 0 else layer
        self.expert = None if expert < 0 else expert


class OutOfMemoryError(EngineError, MemoryError):
    """An engine allocation failed; the operation changed nothing."""


class EngineIOError(EngineError, OSError):
    """The operating system reported an error while reading."""


class ShortReadError(EngineIOError):
    """Fewer bytes than asked arrived: the file ended early."""


class FileChangedError(EngineIOError):
    """A file changed identity or size while the container was open."""


class FormatError(EngineError, ValueError):
    """A container failed validation; ``kind`` names the check, ``offset`` the byte."""


class LayoutError(EngineError, ValueError):
    """No expert layout for a container, or a bad one; the message says what and where.

    Raised by ``engine.layout`` (explicit layout files, fixture specs,
    detection) with ``kind`` "layout"; ``layer`` and ``expert`` are set
    when one expert is concerned.
    """

    def __init__(self, message: str, *, layer: int = -1,
                 expert: int = -1) -> None:
        super().__init__(message, kind="layout", layer=layer, expert=expert)


class NotFoundError(EngineError, LookupError):
    """No such tensor, shard or key."""


class AllPinnedError(EngineError):
    """Every slot is held, pinned or in flight; nothing changed."""


class MisuseError(EngineError, ValueError):
    """A bad argument or a call out of order; the message names the parameter."""


class BudgetError(MisuseError):
    """The cache budget is too small; the message says what would work."""


#: The class of each family, by the name the C side gives its status
#: (``xc_status_name``); every ``XC_E_FORMAT_*`` status is a FormatError
#: (``engine._lib.from_status`` turns a status into its exception).
BY_KIND: dict[str, type[EngineError]] = {
    "nomem": OutOfMemoryError,
    "io": EngineIOError,
    "short_read": ShortReadError,
    "changed": FileChangedError,
    "not_found": NotFoundError,
    "all_pinned": AllPinnedError,
    "misuse": MisuseError,
    "budget": BudgetError,
}




class InvariantError(EngineError, AssertionError):
    """``check()`` found a broken invariant; ``inv`` is its ``INV-*`` id."""

    def __init__(self, message: str, *, inv: str, number: int) -> None:
        super().__init__(message, status=number, kind=inv)
        self.inv = inv
        self.number = number
