"""The allocation and thread-start seams, from Python (DESIGN §6).

Every allocation the C engine makes goes through one wrapper
(``engine/csrc/xc_alloc.c``).  :func:`fail_alloc` arms a countdown so that
the nth allocation from now fails (once, or from then on); :func:`stats`
reads the process-wide counters a fault loop compares against a baseline.
Every thread the engine starts goes through a second wrapper in the same
file with its own countdown: :func:`fail_thread_start` and
:func:`thread_stats`.

These are test seams: they exist in the instrumented build only (DESIGN
"Two builds"); with the release build loaded every function here raises
:class:`~xcache.engine._lib.SeamsError` saying how to load the other.
"""

from __future__ import annotations

from typing import NamedTuple

from xcache.engine import _lib


class AllocStats(NamedTuple):
    """Process-wide allocation counters of the engine."""

    count: int     # allocations attempted since the library was loaded
    live: int      # successful allocations not yet freed
    failures: int  # allocations refused by an armed countdown


def stats() -> AllocStats:
    """A snapshot of the engine's allocation counters."""
    lib = _lib.seams_lib("the allocation counters")
    return AllocStats(int(lib.xc_alloc_count()), int(lib.xc_alloc_live()),
                      int(lib.xc_alloc_failures()))


def fail_alloc(n: int, persistent: bool = False) -> None:
    """Make the nth engine allocation from now fail (and all later if persistent)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    _lib.seams_lib("the allocation countdown").xc_alloc_fail_at(
        n, 1 if persistent else 0)


def disarm() -> None:
    """Let every allocation through again."""
    _lib.seams_lib("the allocation countdown").xc_alloc_fail_at(0, 0)


def live() -> int:
    """Engine allocations not yet freed."""
    return int(_lib.seams_lib("the allocation counters").xc_alloc_live())


# -- the thread-start seam ------------------------------------------------
# Thread starts have a countdown of their own (xc_thread_fail_at in xc_test.h;
# why it is separate is said at the top of engine/csrc/xc_alloc.c).


class ThreadStats(NamedTuple):
    """Process-wide thread-start counters of the engine."""

    count: int     # thread starts attempted since the library was loaded
    failures: int  # starts refused by an armed countdown


def thread_stats() -> ThreadStats:
    """A snapshot of the engine's thread-start counters."""
    lib = _lib.seams_lib("the thread-start counters")
    return ThreadStats(int(lib.xc_thread_count()), int(lib.xc_thread_failures()))


def fail_thread_start(n: int, persistent: bool = False) -> None:
    """Fail the nth thread start from now (EAGAIN); all later ones too if persistent."""
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    _lib.seams_lib("the thread-start countdown").xc_thread_fail_at(
        n, 1 if persistent else 0)


def disarm_thread_start() -> None:
    """Let every thread start through again."""
    _lib.seams_lib("the thread-start countdown").xc_thread_fail_at(0, 0)
