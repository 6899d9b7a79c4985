"""The allocation seam's counters and countdown, from Python (DESIGN §6).

Every allocation the C engine makes goes through one wrapper
(``engine/csrc/xc_alloc.c``).  :func:`fail_alloc` arms a countdown so that
the nth allocation from now fails (once, or from then on); :func:`stats`
reads the process-wide counters a fault loop compares against a baseline.
"""

from __future__ import annotations

from typing import NamedTuple

from engine import _lib


class AllocStats(NamedTuple):
    """Process-wide allocation counters of the engine."""

    count: int     # allocations attempted since the library was loaded
    live: int      # successful allocations not yet freed
    failures: int  # allocations refused by an armed countdown


def stats() -> AllocStats:
    """A snapshot of the engine's allocation counters."""
    lib = _lib.lib()
    return AllocStats(int(lib.xc_alloc_count()), int(lib.xc_alloc_live()),
                      int(lib.xc_alloc_failures()))


def fail_alloc(n: int, persistent: bool = False) -> None:
    """Make the nth engine allocation from now fail (and all later if persistent)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n}")
    _lib.lib().xc_alloc_fail_at(n, 1 if persistent else 0)


def disarm() -> None:
    """Let every allocation through again."""
    _lib.lib().xc_alloc_fail_at(0, 0)


def live() -> int:
    """Engine allocations not yet freed."""
    return int(_lib.lib().xc_alloc_live())
