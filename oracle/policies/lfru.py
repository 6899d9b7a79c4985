"""LFRU (docs/CACHE.md "Victim choice"): LFU over a seeded sample of candidates.

Eviction number ``e`` considers ``sample`` positions of the ascending
candidate list, drawn with splitmix64 from ``seed`` (all of them when
``sample`` covers the list); among those the fewest demand accesses since
publish goes, ties to the candidate used longest ago.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from xcache.oracle.errors import Misuse

NAME = "lfru"
#: Parameters in the C table's order, with their defaults.
PARAMS = {"sample": 4, "seed": 0}

_MASK64 = (1 << 64) - 1


def validate(params: Mapping[str, int]) -> None:
    """Refuse parameters the engine refuses (``Misuse``)."""
    if params["sample"] < 1:
        raise Misuse("policy lfru: sample must be at least 1")


def splitmix64(x: int) -> int:
    """The standard splitmix64 finaliser of ``x + golden gamma``, mod 2**64."""
    z = (x + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def lfru_sample(seed: int, n_evictions: int, sample: int, m: int) -> list[int]:
    """Positions into the ascending candidate list that LFRU considers.

    All of ``0 .. m-1`` when ``sample >= m``; else ``h(seed, e*s + i) % m`` for
    ``i = 0 .. s-1`` (repeats allowed), ``h(seed, x) = splitmix64((seed << 32) ^ x)``.
    """
    if sample >= m:
        return list(range(m))
    base = (seed << 32) & _MASK64
    return [splitmix64(base ^ ((n_evictions * sample + i) & _MASK64)) % m
            for i in range(sample)]


def victim(params: Mapping[str, int], cands: np.ndarray, last_use: np.ndarray,
           insert_tick: np.ndarray, freq: np.ndarray, hot: np.ndarray,
           n_evictions: int) -> int:
    """LFU's choice among the sampled candidates."""
    cands = cands[lfru_sample(params["seed"], n_evictions, params["sample"],
                              len(cands))]
    return int(cands[np.lexsort((last_use[cands], freq[cands]))[0]])
