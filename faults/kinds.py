"""One vocabulary of failure kinds for the engine and the oracle.

Every comparison between the two -- replay scenarios, the state machine, the
fault loops -- asks "which kind of failure was this?" of an exception from
either side.  The kinds are the engine's status names (``xc_status_name``):
``short_read``, ``io``, ``changed``, ``nomem``, ``not_found``, ``all_pinned``,
``misuse``, ``budget``, and for a container that failed validation the
format check's own name (``offsets``, ``duplicate``, ...).
"""

from __future__ import annotations

from xcache.engine import errors as eerr
from xcache.oracle import errors as oerr

#: Engine exception classes and oracle exception classes by kind, most
#: derived first (the first isinstance match wins).
_CLASSES: tuple[tuple[type[BaseException], str], ...] = (
    (eerr.FileChangedError, "changed"),
    (eerr.ShortReadError, "short_read"), (oerr.ShortRead, "short_read"),
    (eerr.EngineIOError, "io"), (oerr.IOFailure, "io"),
    (eerr.OutOfMemoryError, "nomem"),
    (eerr.BudgetError, "budget"), (oerr.Budget, "budget"),
    (eerr.MisuseError, "misuse"), (oerr.Misuse, "misuse"),
    (eerr.NotFoundError, "not_found"), (oerr.NotFound, "not_found"),
    (eerr.AllPinnedError, "all_pinned"), (oerr.AllPinned, "all_pinned"),
)


def kind_of(exc: BaseException) -> str:
    """The failure kind of an engine or oracle exception.

    Format errors give the name of the check that failed; an exception of
    neither family gives ``other:<class name>`` so that a comparison fails
    loudly instead of matching by accident.
    """
    if isinstance(exc, (eerr.FormatError, oerr.OracleFormatError)):
        return str(exc.kind)
    for cls, kind in _CLASSES:
        if isinstance(exc, cls):
            return kind
    return f"other:{type(exc).__name__}"


def model_failure(exc: BaseException) -> str:
    """The oracle model's injected-failure kind ("short" or "io") for a failed load."""
    return "short" if kind_of(exc) == "short_read" else "io"
