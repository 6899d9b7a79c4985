"""The reads one expert load asks of io, and whether a shard reads with O_DIRECT.

docs/CACHE.md "How the bytes are read": a run (a contiguous expert, or one
fused slice of a scattered one) is cut at file offsets that are multiples
of ``chunk_bytes`` (:func:`cut_run`); under O_DIRECT the
run is first widened to ``align`` (4,096) on both ends, each widened piece
may meet end of file once the payload inside it has arrived, and
``io_bytes`` adds every widened length.  :func:`direct_reads` lists those
pieces; :func:`window_ok` judges one of them; :func:`probe_direct` decides,
as the engine does, whether a file reads with O_DIRECT at all (an open that
succeeds proves nothing: one aligned read must work).

Never imports ``engine``.
"""

from __future__ import annotations

import mmap
import os
import stat
from dataclasses import dataclass

from xcache.oracle.bounds import DIRECT_ALIGN

__all__ = ["DIRECT_ALIGN", "Window", "cut_run", "direct_reads", "probe_direct",
           "widen", "window_ok"]


@dataclass(frozen=True)
class Window:
    """One widened piece: ``nbytes`` at ``offset``; whole once ``need_end`` arrived."""

    offset: int
    nbytes: int
    need_end: int


def cut_run(offset: int, nbytes: int, chunk_bytes: int = 0
            ) -> list[tuple[int, int]]:
    """The run ``[offset, offset + nbytes)`` cut at multiples of ``chunk_bytes``.

    Returns the pieces as ``(offset, nbytes)`` in file order; ``chunk_bytes``
    0 leaves the run whole, and an empty run has no piece.
    """
    if chunk_bytes < 0:
        raise ValueError(f"chunk_bytes must be >= 0, got {chunk_bytes}")
    out = []
    at, end = offset, offset + nbytes
    while at < end:
        stop = end
        if chunk_bytes:
            stop = min(stop, at - at % chunk_bytes + chunk_bytes)
        out.append((at, stop - at))
        at = stop
    return out


def widen(offset: int, nbytes: int, align: int = DIRECT_ALIGN) -> tuple[int, int]:
    """The run ``[offset, offset + nbytes)`` widened to ``align``: (lo, hi)."""
    if align <= 0 or align & (align - 1):
        raise ValueError(f"align must be a power of two, got {align}")
    lo = offset - offset % align
    hi = -(-(offset + nbytes) // align) * align
    return lo, hi


def direct_reads(offset: int, nbytes: int, chunk_bytes: int = 0,
                 align: int = DIRECT_ALIGN) -> list[Window]:
    """The widened pieces an O_DIRECT load of the run ``[offset, offset+nbytes)`` asks.

    The widened run is cut at multiples of ``chunk_bytes`` (0: no cut), which
    must then be a multiple of ``align``; each piece is whole once the bytes
    up to ``min(its end, the run's end)`` arrived.
    """
    if chunk_bytes % align:
        raise ValueError(f"chunk_bytes {chunk_bytes} is not a multiple of "
                         f"the O_DIRECT alignment {align}")
    lo, hi = widen(offset, nbytes, align)
    run_end = offset + nbytes
    return [Window(at, n, min(at + n, run_end))
            for at, n in cut_run(lo, hi - lo, chunk_bytes)]


def window_ok(w: Window, got: int) -> bool:
    """Whether a widened piece that got ``got`` bytes before end of file is whole."""
    return w.offset + got >= w.need_end


def probe_direct(path: str, align: int = DIRECT_ALIGN) -> bool:
    """Whether ``path`` reads with O_DIRECT: it opens so and one aligned read works."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | flag)  # never waits
    except OSError:
        return False
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # only regular files are read
        os.close(fd)
        return False
    buf = mmap.mmap(-1, align)  # page-aligned, as O_DIRECT needs
    try:
        os.preadv(fd, [buf], 0)
        return True
    except OSError:
        return False
    finally:
        buf.close()
        os.close(fd)
