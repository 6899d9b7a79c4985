"""What the project's two backends share: failure kinds and the C core's bounds.

:func:`kind_of` names a failure of either backend in the words of
``faults.kinds``; the oracle's own failures that the cache model has no
class for are :class:`OracleOnly`.  The constants are the C core's
(``xc_io.c``, the read-ahead queue) that both backends' behaviour follows;
:func:`holding` is the view of holds both report.
"""

from __future__ import annotations

from typing import Any


class OracleOnly(Exception):
    """A failure the oracle backend models that its cache model has no class for."""

    kind = ""


def kind_of(exc: BaseException) -> str:
    """The failure kind of either backend's exception (faults.kinds)."""
    if isinstance(exc, OracleOnly):
        return exc.kind
    from xcache.faults.kinds import kind_of as faults_kind_of  # noqa: PLC0415

    kind = faults_kind_of(exc)
    if kind.startswith("other:"):
        raise exc
    return kind


#: The fault kinds an ``inject`` step may arm (faults/io.py).
FAULT_KINDS = ("eof", "eio", "eintr", "partial", "delay", "stall")

#: Consecutive interrupted preads after which the C read loop gives up
#: (``XC_IO_MAX_RETRIES`` of xc_io.c): the last one is an I/O error.
IO_MAX_RETRIES = 1000


#: The read-ahead queue's depth (``io_depth``, docs/CACHE.md "prefetch"; the
#: gate never sets it): reads queued or under way at most.  Every one of
#: them holds an INFLIGHT slot of its own and the read being queued holds
#: one more, so with at most this many slots the queue is never full and
#: ``queue_fallbacks`` stays 0, whatever the timing -- the oracle's value.
IO_DEPTH = 64


def holding(slots: list[tuple[Any, int]]) -> list[list[int]]:
    """Sorted ``[layer, expert, holds]`` of the slots with holds, from (key, holds)."""
    return sorted([[*key, holds] for key, holds in slots if holds])
