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


class NotFoundError(EngineError, LookupError):
    """No such tensor, shard or key."""


class AllPinnedError(EngineError):
    """Every slot is held, pinned or in flight; nothing changed."""


class MisuseError(EngineError, ValueError):
    """A bad argument or a call out of order."""


class BudgetError(MisuseError):
    """The cache budget is too small; the message says what would work."""


_BY_STATUS: dict[int, type[EngineError]] = {
    -1: OutOfMemoryError,
    -2: EngineIOError,
    -3: ShortReadError,
    -4: FileChangedError,
    -5: NotFoundError,
    -6: AllPinnedError,
    -7: MisuseError,
    -8: BudgetError,
}


def from_status(status: int, kind: str, message: str, *, offset: int = -1,
                layer: int = -1, expert: int = -1) -> EngineError:
    """Build the exception for a negative C status code."""
    if -199 <= status <= -100:
        cls: type[EngineError] = FormatError
    else:
        cls = _BY_STATUS.get(status, EngineError)
    return cls(message, status=status, kind=kind, offset=offset, layer=layer,
               expert=expert)


class InvariantError(EngineError, AssertionError):
    """``check()`` found a broken invariant; ``inv`` is its ``INV-*`` id."""

    def __init__(self, message: str, *, inv: str, number: int) -> None:
        super().__init__(message, status=number, kind=inv)
        self.inv = inv
        self.number = number
