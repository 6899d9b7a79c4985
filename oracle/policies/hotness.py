"""Hotness (docs/CACHE.md "Victim choice"): a per-key demand count, halved
for every key each ``period`` demand requests; the coldest candidate goes.

The count table itself is kept by the caller (the cache model and the
simulator count every demand request and halve at each period); ties go to
the candidate used longest ago.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from xcache.oracle.errors import Misuse

NAME = "hotness"
#: Parameters in the C table's order, with their defaults.
PARAMS = {"period": 256}


def validate(params: Mapping[str, int]) -> None:
    """Refuse parameters the engine refuses (``Misuse``)."""
    if params["period"] < 1:
        raise Misuse("policy hotness: period must be at least 1")


def victim(params: Mapping[str, int], cands: np.ndarray, last_use: np.ndarray,
           insert_tick: np.ndarray, freq: np.ndarray, hot: np.ndarray,
           n_evictions: int) -> int:
    """The candidate slot with the smallest (hotness count, ``last_use``)."""
    return int(cands[np.lexsort((last_use[cands], hot[cands]))[0]])
