"""LFU (docs/CACHE.md "Victim choice"): fewest demand accesses since publish.

Ties go to the candidate used longest ago.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

NAME = "lfu"
#: Parameters in the C table's order, with their defaults (none).
PARAMS: dict[str, int] = {}
#: libCacheSim's name for the same policy: tests/policies and
#: bench/policy_replay.py compare every policy that has one, cell by cell.
LIBCACHESIM = "LFU"


def victim(params: Mapping[str, int], cands: np.ndarray, last_use: np.ndarray,
           insert_tick: np.ndarray, freq: np.ndarray, hot: np.ndarray,
           n_evictions: int) -> int:
    """The candidate slot with the smallest (``freq``, ``last_use``)."""
    return int(cands[np.lexsort((last_use[cands], freq[cands]))[0]])
