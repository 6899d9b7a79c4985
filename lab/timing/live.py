"""The time lab's decode loop on the live cache: what the model is validated against.

:class:`LiveDecoder` makes exactly the calls :mod:`lab.timing.events`
models, on a real :class:`engine.ExpertCache`, with the busy loop of
:func:`lab.timing.calibrate.spin` as the compute of each expert and of
each step's non-expert work:

- ``threads == 0``: ``get`` each expert in order, compute it, hold it;
- read-ahead: ``stream(keys)`` (the cache opened with ``io_threads``,
  ``io_depth`` and ``split_min_misses``), each expert computed as it is
  yielded and held;
- with a lookahead, the speculative reads planned for the next step
  (``spec``: per step, the experts
  :func:`lab.timing.outcomes.replay_outcomes` found to issue) are
  prefetched right after the step's experts are acquired -- a split
  stream's begin, or the plain path's gets, collected first -- and only
  then is the step computed.  A stream that counted nothing at its begin
  is taken for the plain path (its gets come first), unless every key of
  the step was read ahead: then it may be a split stream of keys all in
  flight, and the reads are queued at once (a plain stream's gets of keys
  all ready would be instant, and under LRU the new reservations never
  take a key just read ahead).

Whether a stream split is told by its ``requests`` counter, read through
one C call into a struct kept for the run (:meth:`LiveDecoder._requests`):
``cache.stats()`` builds a dict of every counter, about 8 us a call on the
validation machine, twice a step -- harness time no decode loop spends
and the model does not charge.

A step's experts are released when the next step begins (step mode), so
the cache's counters are those the model took its outcomes from.
:meth:`LiveDecoder.run` runs a range of steps and returns its wall
seconds, so a benchmark can take turns between configurations.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from xcache.lab.predict.predictors import Step
from xcache.lab.timing.calibrate import spin
from xcache.lab.timing.events import Schedule


def open_live_cache(container: Any, schedule: Schedule, slots: int, policy: str,
                    n_layers: int, n_experts: int, top_k: int, template: str,
                    tensors: Sequence[str]) -> Any:
    """An ExpertCache of ``slots`` with the schedule's readers, depth and threshold."""
    from xcache.engine import ExpertCache  # noqa: PLC0415

    return ExpertCache(container, n_slots=slots, policy=policy, top_k=top_k,
                       layers=range(n_layers), n_experts=n_experts,
                       expert_template=template, tensors=tuple(tensors),
                       io_threads=schedule.threads, io_depth=schedule.depth,
                       split_min_misses=schedule.split, batch_threads=1)


class LiveDecoder:
    """One configuration's decode loop over ``steps``, run a range at a time."""

    def __init__(self, cache: Any, steps: Sequence[Step], schedule: Schedule,
                 spec: Sequence[Sequence[int]], expert_s: float,
                 layer_s: float) -> None:
        self.cache, self.steps, self.schedule = cache, steps, schedule
        self.spec, self.expert_s, self.layer_s = spec, expert_s, layer_s
        self.held: list[Any] = []
        self.lookahead = bool(schedule.predictor)
        from xcache.engine import _lib  # noqa: PLC0415

        self._stats_out = _lib.ffi().new("xc_stats *")
        self._stats_fn = _lib.lib().xc_cache_stats
        if self.lookahead and steps and spec[0]:
            cache.prefetch([(steps[0].layer, e) for e in spec[0]], speculative=True)

    def _requests(self) -> int:
        """The cache's ``requests`` counter (as ``stats()`` has it), one C call."""
        self._stats_fn(self.cache._ptr, self._stats_out)
        return int(self._stats_out.requests)

    def _prefetch(self, i: int) -> None:
        """Issue the speculative reads planned for step ``i`` (if any)."""
        if i < len(self.steps) and self.spec[i]:
            layer = self.steps[i].layer
            self.cache.prefetch([(layer, e) for e in self.spec[i]], speculative=True)

    def run(self, start: int, stop: int) -> float:
        """Run steps ``start..stop-1``; wall seconds."""
        cache, sch, ex = self.cache, self.schedule, self.expert_s
        t0 = time.perf_counter()
        for i in range(start, stop):
            st = self.steps[i]
            for x in self.held:
                x.release()
            held: list[Any] = []
            self.held = held
            spin(self.layer_s)
            keys = [(st.layer, e) for e in st.experts]
            if sch.threads == 0:
                for layer, e in keys:
                    held.append(cache.get(layer, e))
                    spin(ex)
                continue
            if not self.lookahead:
                for x in cache.stream(keys):
                    held.append(x)
                    spin(ex)
                continue
            before = self._requests()
            s = cache.stream(keys)
            # a split stream counts its hits and misses at begin; one that
            # counts none is plain -- unless every key was read ahead (all
            # may be in flight), when its gets would be instant anyway
            counted = self._requests() != before
            if not counted and not set(st.experts) <= set(self.spec[i]):
                held.extend(s)
                self._prefetch(i + 1)
                for _ in held:
                    spin(ex)
            else:
                self._prefetch(i + 1)
                for x in s:
                    held.append(x)
                    spin(ex)
        return time.perf_counter() - t0

    def close(self) -> dict[str, Any]:
        """Release the last step, check and close the cache; its counters."""
        for x in self.held:
            x.release()
        self.held = []
        self.cache.drain()
        self.cache.check()
        stats = dict(self.cache.stats())
        self.cache.close()
        return stats
