"""What a routing trace says about caching: reuse distances, overlap, curves.

Every function takes a :class:`oracle.traces.Trace`. Distances count tokens
(the dense token ordinals of the trace), not accesses. ``reload_counts`` and
``miss_ratio_curve`` replay the trace through the oracle's simulator.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xcache.oracle.sim import simulate
from xcache.oracle.traces import Trace

__all__ = [
    "reuse_distances", "reuse_histogram", "median_reuse_distance",
    "adjacent_overlap", "reload_counts", "miss_ratio_curve",
]


def reuse_distances(trace: Trace) -> np.ndarray:
    """For every access of a key seen before: tokens since its previous access."""
    keys = trace.keys()
    order = np.argsort(keys, kind="stable")
    k, t = keys[order], trace.token[order]
    same = k[1:] == k[:-1]
    return (t[1:] - t[:-1])[same]


def reuse_histogram(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Distinct reuse distances (ascending) and how often each occurs."""
    return np.unique(reuse_distances(trace), return_counts=True)


def median_reuse_distance(trace: Trace) -> float:
    """The median reuse distance in tokens (nan if no key is reused)."""
    d = reuse_distances(trace)
    return float(np.median(d)) if len(d) else float("nan")


def adjacent_overlap(trace: Trace) -> float:
    """Mean fraction of a layer's experts at token t also used at t-1.

    Taken over every (t, layer) step whose layer also has a step at token
    t-1 of the same sequence; nan if there is none.
    """
    sets: dict[tuple[int, int], set[int]] = {}
    seq_of: dict[int, int] = {}
    for s, t, layer, e in zip(trace.sequence.tolist(), trace.token.tolist(),
                              trace.layer.tolist(), trace.expert.tolist(), strict=True):
        sets.setdefault((t, layer), set()).add(e)
        seq_of[t] = s
    fractions = [len(now & sets[(t - 1, layer)]) / len(now)
                 for (t, layer), now in sets.items()
                 if (t - 1, layer) in sets and seq_of[t - 1] == seq_of[t]]
    return float(np.mean(fractions)) if fractions else float("nan")


def reload_counts(trace: Trace, policy: str, capacity: int,
                  mode: str = "step") -> np.ndarray:
    """Per key, how often a simulation reloads it (misses after its first)."""
    misses = simulate(trace, policy, capacity, mode=mode).key_misses
    return np.maximum(misses - 1, 0)


def miss_ratio_curve(trace: Trace, policies: Sequence[str], sizes: Sequence[int],
                     mode: str = "step", per_layer: bool = False
                     ) -> dict[str, np.ndarray]:
    """Miss ratio of each policy (``belady`` allowed) at each cache size."""
    return {p: np.array([simulate(trace, p, n, mode=mode, per_layer=per_layer
                                  ).miss_ratio for n in sizes])
            for p in policies}
