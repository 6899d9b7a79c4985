"""Page-cache helpers for benchmarks and tests: make the next reads hit the device."""

from __future__ import annotations

import os
from typing import Any


def _paths(target: Any) -> list[str]:
    shards = getattr(target, "shards", None)
    if shards is not None:
        return [os.fspath(p) for p in shards]
    return [os.fspath(target)]


def drop_page_cache(target: Any) -> int:
    """Ask the kernel to drop cached pages of a file or a container's shards.

    Uses ``posix_fadvise(POSIX_FADV_DONTNEED)`` on each file (clean pages
    only; it needs no privileges).  Returns how many files were advised.
    Pages mapped or locked by another process may stay cached.
    """
    n = 0
    for path in _paths(target):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            n += 1
        finally:
            os.close(fd)
    return n
