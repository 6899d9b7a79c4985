"""LRU (docs/CACHE.md "Victim choice"): the candidate used longest ago goes."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

NAME = "lru"
#: Parameters in the C table's order, with their defaults (none).
PARAMS: dict[str, int] = {}
#: libCacheSim's name for the same policy: tests/policies and
#: bench/policy_replay.py compare every policy that has one, cell by cell.
LIBCACHESIM = "LRU"


def victim(params: Mapping[str, int], cands: np.ndarray, last_use: np.ndarray,
           insert_tick: np.ndarray, freq: np.ndarray, hot: np.ndarray,
           n_evictions: int) -> int:
    """The candidate slot with the smallest ``last_use`` (ticks are unique)."""
    return int(cands[np.argmin(last_use[cands])])
