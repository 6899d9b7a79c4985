"""A bounded, thread-safe map of verdicts kept by content, least recently used out.

The oracle's reader judges the same header bytes and the same index text
many times in one run of the gate (every scenario opens a fresh copy of
its container, and a twin of DeepSeek-V3 has an 18 MB index and 62
shards).  A verdict depends only on the bytes judged (and the path that
names them), so a success is kept under those bytes and handed out again;
a refusal is never kept (it is judged again, and names its own path).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


class Kept:
    """At most ``entries`` values, of total ``weight`` at most ``max_weight``."""

    def __init__(self, entries: int, max_weight: int = 1 << 62) -> None:
        assert entries >= 1 and max_weight >= 0
        self._entries, self._max_weight = entries, max_weight
        self._map: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()  # a timed-out scenario's thread may still read

    def get(self, key: Hashable) -> Any:
        """The value kept under ``key`` (now the most recent), or None."""
        with self._lock:
            got = self._map.get(key)
            if got is None:
                return None
            self._map.move_to_end(key)
            return got[0]

    def put(self, key: Hashable, value: Any, weight: int = 0) -> None:
        """Keep ``value`` under ``key``, dropping the least recent past the bounds.

        ``value`` must not be None; one heavier than the bound is not kept.
        """
        assert value is not None and weight >= 0
        if weight > self._max_weight:
            return
        with self._lock:
            old = self._map.pop(key, None)
            if old is not None:
                self._weight -= old[1]
            while self._map and (len(self._map) >= self._entries
                                 or self._weight + weight > self._max_weight):
                self._weight -= self._map.popitem(last=False)[1][1]
            self._map[key] = (value, weight)
            self._weight += weight

    def clear(self) -> None:
        """Forget every value."""
        with self._lock:
            self._map.clear()
            self._weight = 0

    def __len__(self) -> int:
        return len(self._map)
