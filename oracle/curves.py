"""Exact miss-ratio curves, the reference: LRU's and Belady's misses at every size.

The engine computes them in C (``engine/csrc/xc_curve.c``, ``engine.sim.curve``);
this is the plain model the tests hold it to.  Both policies are stack
algorithms (Mattson et al., 1970): a priority list, the same at every cache
size, decides each eviction, so the cache of ``c`` slots always holds the
top ``c`` keys of one stack.  Here the stack is a numpy array updated by the
definition, one access at a time: the accessed key goes on top, and each
cache of fewer slots than the key's depth evicts its least-priority key,
which is the key carried down past that depth (the prefix records of
"evictability" below).  No tree, no skipping: ``O(n W)`` numpy work.

Priorities, as ``oracle.sim`` and ``engine.sim.simulate`` define the policies:

- ``lru``: the least recently used key goes first;
- ``belady``: the key of the farthest next use goes first (never used again:
  farthest of all); in ``step`` mode a key of the current step is never
  evicted, which is one more priority (above all others) at every size.

A size below the largest step's distinct keys is refused in ``step`` mode
(the simulator raises for it): its entry is -1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xcache.oracle.sim import next_use

__all__ = ["POLICIES", "curve", "largest_step", "stack_distances", "trace_curve"]

POLICIES = ("lru", "belady")
_NEVER = np.iinfo(np.int64).max
_HELD = np.iinfo(np.int64).min


def largest_step(keys: np.ndarray, starts: np.ndarray) -> int:
    """The most distinct keys of one step (a step begins where ``starts`` is set)."""
    most, step = 0, set()
    for i, (k, s) in enumerate(zip(keys.tolist(), starts.tolist(), strict=True)):
        if s or i == 0:
            step = set()
        step.add(k)
        most = max(most, len(step))
    return most


def stack_distances(keys: np.ndarray, starts: np.ndarray, policy: str,
                    step: bool) -> np.ndarray:
    """Each access's stack distance: the least size where it hits (0: first use)."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, not {policy!r}")
    keys = np.asarray(keys, np.int64)
    nxt = next_use(keys)
    n_keys = int(keys.max()) + 1 if len(keys) else 1
    # evictability: the larger, the sooner evicted
    ev = np.zeros(n_keys, np.int64)
    step_of = np.full(n_keys, -1, np.int64)
    stack = np.zeros(0, np.int64)
    dist = np.zeros(len(keys), np.int64)
    sid = -1
    for i, x in enumerate(keys.tolist()):
        if step and (i == 0 or starts[i]):
            sid += 1
        found = np.flatnonzero(stack == x)
        d = int(found[0]) if len(found) else len(stack)
        dist[i] = d + 1 if len(found) else 0
        if d == len(stack):
            stack = np.append(stack, x)
        if d > 0:
            above = stack[:d]
            e = ev[above].copy()
            if step:  # a key the step holds is never evicted
                e[step_of[above] == sid] = _HELD
            top = np.maximum.accumulate(e)
            rec = np.flatnonzero(np.r_[True, e[1:] > top[:-1]])  # strict: ties stay
            moved = stack[rec].copy()
            stack[rec[1:]] = moved[:-1]
            stack[d] = moved[-1]
            stack[0] = x
        step_of[x] = sid
        ev[x] = -i if policy == "lru" else nxt[i]
    return dist


def curve(keys: Any, starts: Any, policy: str, mode: str = "plain",
          layer_of: Any = None) -> np.ndarray:
    """Misses at every size 1..W (W: the most distinct keys of one cache), int64.

    ``starts`` flags each step's first access; ``layer_of`` (one id per
    access, optional) gives each layer its own cache of the same size, as
    ``per_layer`` does: the accesses of a layer replayed in order, with
    their own step flags.  Entries for sizes ``mode`` refuses are -1.
    """
    if mode not in ("plain", "step"):
        raise ValueError(f"mode must be plain or step, not {mode!r}")
    keys = np.asarray(keys, np.int64)
    starts = np.asarray(starts).astype(bool)
    groups = ([np.ones(len(keys), bool)] if layer_of is None else
              [np.asarray(layer_of) == g for g in np.unique(layer_of)])
    parts = []
    for mask in groups:
        sub, st = keys[mask], starts[mask]
        parts.append((stack_distances(sub, st, policy, mode == "step"),
                      len(np.unique(sub)), largest_step(sub, st)))
    w = max((p[1] for p in parts), default=0)
    sizes = np.arange(1, w + 1)
    misses = np.zeros(w, np.int64)
    for dist, _, _ in parts:  # first accesses, and those of distance > c
        hits = np.sort(dist[dist > 0])
        misses += len(dist) - np.searchsorted(hits, sizes, side="right")
    if mode == "step":
        misses[:max((p[2] for p in parts), default=1) - 1] = -1
    return misses


def trace_curve(trace: Any, policy: str, mode: str = "plain",
                per_layer: bool = False) -> np.ndarray:
    """:func:`curve` of an ``oracle.traces.Trace`` (keys and steps from the trace)."""
    return curve(trace.keys(), trace.step_starts(), policy, mode,
                 trace.layer if per_layer else None)
