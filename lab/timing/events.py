"""The discrete-event model of streaming decode: one consumer, N readers, one disk.

Time runs on two clocks that never pass each other at a hand-over: the
consumer's (``now``: compute, cache calls, waits) and the I/O system's
(:class:`IO`, advanced lazily to wherever the consumer looks).  Reads are
served by processor sharing: every read in flight on a tier progresses at
``1 / tau(q, size)`` of its whole per second, ``q`` being the reads then
in flight on that tier (:class:`lab.timing.model.Tier`), so a second
reader helps exactly as much as the tier's queue-depth curve says.  Which
tier serves a read is fixed by its ordinal: the ``j``-th read goes to the
page cache when ``floor((j + 1) p) > floor(j p)`` for the page-cache
share ``p`` -- an exact share, no randomness.  A read the consumer makes
itself progresses ``own_read_factor`` times slower than a reader's (the
synchronous path's measured cost over the readers').

The consumer replays the engine's decode loop (the same calls the live
driver :mod:`lab.timing.live` makes), step by step -- a step is one
token's layer:

1. ``layer_s`` of non-expert work (attention, the router);
2. the step's experts, by the schedule:

   - ``threads == 0`` (synchronous): ``get`` each expert in order -- a
     miss is read by the consumer itself -- and compute it;
   - ``threads >= 1`` (read-ahead): ``stream(keys)`` (``stream_s`` of the
     consumer's time, and ``stream_key_s`` more per expert it hands
     over than a ``get``'s ``access_s``).  Fewer than
     ``split`` keys not ready (absent, or read but still in flight): the
     plain path, a ``get`` of each in order.  Otherwise the split path:
     each miss goes to the readers' queue while fewer than ``depth``
     reads are queued or under way, else it is kept for the consumer;
     the hits are computed first, then the other experts in the order
     their reads end (the consumer reading a kept miss itself when
     nothing has ended), exactly as docs/CACHE.md "stream" says;

3. with a lookahead predictor, right after the step's experts are
   acquired (the split path's begin; the plain path's gets), the
   speculative reads planned for the next step are queued (the consumer
   reads one itself when the queue is full), and only then is the step
   computed -- so the reads overlap this step's compute and the next
   step's non-expert work.

Every read the consumer queues that wakes an idle reader costs it
``queue_s`` (one queued with every reader busy ``reserve_s``), every
``prefetch`` call ``prefetch_s``, and each time it
blocks on a reader's read it runs again ``wake_s`` after that read ended (a
read it makes itself needs no wake-up).  While it is blocked, the reads
progress by the tiers' ``waiting`` curves (the consumer's core is theirs);
otherwise by the main curves, measured with the consumer computing.
And the consumer's compute is slowed by the reads it overlaps: while a
reader's read of a tier with ``compute_factor`` ``f`` is in flight, a
second of compute takes ``f`` seconds of the consumer's clock (the largest
factor of the tiers then read; the stretch is counted in ``compute`` and
also alone as ``contention``).  With every factor 1 compute is free to
overlap, as before.

Which accesses hit, and which speculative reads are issued, come from
:mod:`lab.timing.outcomes` (the live cache, synchronously); the model adds
only time.  A hit on an expert whose read is still in flight waits for it.

Accounting, per step and in all: ``compute`` (expert, non-expert and
cache-call seconds), ``wait`` (the consumer idle on a read: exposed I/O;
``compute + wait`` is the wall time), ``hidden`` (seconds at which some
read was in flight while the consumer computed: I/O hidden under compute)
and ``wasted`` (the service seconds of speculative reads never used).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from xcache.lab.predict.predictors import Step
from xcache.lab.timing.model import Machine
from xcache.lab.timing.outcomes import Outcomes


@dataclass(frozen=True)
class Schedule:
    """How the decode loop reads: readers, queue depth, split threshold, lookahead."""

    threads: int = 0
    depth: int = 64
    split: int = 1
    predictor: str = ""
    budget: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.threads <= 64:
            raise ValueError(f"threads {self.threads}: outside 0..64")
        if self.depth < 1:
            raise ValueError(f"depth {self.depth}: at least 1")
        if self.split < 1:
            raise ValueError(f"split {self.split}: at least 1")
        if self.predictor and self.threads == 0:
            raise ValueError(f"lookahead {self.predictor}: needs read-ahead "
                             "threads (with none a speculative read is synchronous)")

    @property
    def name(self) -> str:
        """A short label: ``sync``, ``ra2 T=1``, ``ra2 T=1 +oracle``."""
        if self.threads == 0:
            return "sync"
        text = f"ra{self.threads} T={self.split}"
        if self.depth != 64:
            text += f" D={self.depth}"
        if self.predictor:
            text += f" +{self.predictor}"
        return text


class Read:
    """One read of one expert: its tier, what is left of it, when it ended."""

    __slots__ = ("key", "tier", "size", "left", "start", "done", "spec",
                 "used", "service", "by_consumer", "slow")

    def __init__(self, key: tuple[int, int], tier: str, size: int,
                 spec: bool, by_consumer: bool) -> None:
        self.key, self.tier, self.size = key, tier, size
        self.left, self.start = 1.0, math.nan
        self.done: float | None = None
        self.spec, self.used, self.by_consumer = spec, False, by_consumer
        self.service = 0.0
        self.slow = 1.0  # the tier's own_read_factor for a consumer's read


class IO:
    """The readers, their queue and the tiers, on their own clock."""

    def __init__(self, machine: Machine, threads: int, depth: int) -> None:
        self.m, self.threads, self.depth = machine, threads, depth
        self.now = 0.0
        self.queue: deque[Read] = deque()
        self.running: list[Read] = []
        self.pool_busy = 0
        self.inflight = {"device": 0, "page_cache": 0}
        self.ordinal = 0
        self.busy: list[list[float]] = []  # [start, end] with >= 1 read running
        self.reads: list[Read] = []
        self.max_qd = {"device": 0, "page_cache": 0}
        # tau by tier and depth: every read is one expert, so a table does
        deep = threads + 2 * depth + 2
        self.taus = {t: [0.0] + [machine.tier(t).tau(q, machine.expert_bytes)
                                 for q in range(1, deep + 1)]
                     for t in ("device", "page_cache")}
        self.taus_waiting = {
            t: [0.0] + [machine.tier(t).while_waiting().tau(q, machine.expert_bytes)
                        for q in range(1, deep + 1)]
            for t in ("device", "page_cache")}
        #: whether some tier slows the consumer's compute it overlaps
        self.slowing = any(machine.tier(t).compute_factor != 1.0
                           for t in ("device", "page_cache"))
        #: until when the consumer is blocked on a reader's read (the
        #: tiers' ``waiting`` curves apply before it)
        self.idle_until = -math.inf

    # -- reads -------------------------------------------------------
    def _tier(self) -> str:
        p, j = self.m.page_cache_share, self.ordinal
        self.ordinal += 1
        return ("page_cache" if math.floor((j + 1) * p) > math.floor(j * p)
                else "device")

    def outstanding(self) -> int:
        """Reads queued or under way on the readers."""
        return len(self.queue) + self.pool_busy

    def _run(self, r: Read) -> None:
        if not self.running:
            self.busy.append([self.now, math.inf])
        r.start = self.now
        self.running.append(r)
        self.inflight[r.tier] += 1
        self.max_qd[r.tier] = max(self.max_qd[r.tier], self.inflight[r.tier])

    def submit(self, at: float, key: tuple[int, int], spec: bool) -> Read:
        """Queue a read on the readers at consumer time ``at``."""
        self.advance(at)
        r = Read(key, self._tier(), self.m.expert_bytes, spec, False)
        self.reads.append(r)
        self.queue.append(r)
        self._start()
        return r

    def read_here(self, at: float, key: tuple[int, int], spec: bool) -> Read:
        """A read the consumer does itself, starting at ``at``."""
        self.advance(at)
        r = Read(key, self._tier(), self.m.expert_bytes, spec, True)
        r.slow = self.m.tier(r.tier).own_read_factor
        self.reads.append(r)
        self._run(r)
        return r

    def _start(self) -> None:
        while self.queue and self.pool_busy < self.threads:
            self.pool_busy += 1
            self._run(self.queue.popleft())

    # -- time --------------------------------------------------------
    def _tau(self, r: Read) -> float:
        q = self.inflight[r.tier]
        waiting = self.now < self.idle_until
        tab = (self.taus_waiting if waiting else self.taus)[r.tier]
        if q < len(tab):
            return tab[q] * r.slow
        tier = self.m.tier(r.tier)
        return (tier.while_waiting() if waiting else tier).tau(q, r.size) * r.slow

    def _step(self, limit: float) -> bool:
        """Advance to the next completion or to ``limit``; True if a read ended."""
        if not self.running:
            self.now = max(self.now, limit)
            return False
        if self.now < self.idle_until:  # the curve changes there
            limit = min(limit, self.idle_until)
        taus = [self._tau(r) for r in self.running]
        dts = [r.left * t for r, t in zip(self.running, taus, strict=True)]
        i = min(range(len(dts)), key=dts.__getitem__)
        dt = dts[i]
        if self.now + dt > limit:
            el = limit - self.now
            for r, t in zip(self.running, taus, strict=True):
                r.left -= el / t
                r.service += el
            self.now = limit
            return False
        for r, t in zip(self.running, taus, strict=True):
            r.left -= dt / t
            r.service += dt
        self.now += dt
        r = self.running.pop(i)
        r.left, r.done = 0.0, self.now
        self.inflight[r.tier] -= 1
        if not r.by_consumer:
            self.pool_busy -= 1
        if not self.running:
            self.busy[-1][1] = self.now
        self._start()
        return True

    def compute_factor(self) -> float:
        """The factor compute takes now: the largest of the tiers readers read."""
        f = 1.0
        for r in self.running:
            if not r.by_consumer:
                f = max(f, self.m.tier(r.tier).compute_factor)
        return f

    def stretch(self, at: float, seconds: float) -> float:
        """Consumer-clock seconds ``seconds`` of compute from ``at`` take.

        Runs the I/O system along: while reads of a tier with a
        ``compute_factor`` ``f`` run, compute progresses at ``1 / f``.
        """
        self.advance(at)
        t, left = at, seconds
        while left > 0:
            if not self.running:  # nothing starts until the consumer acts
                return t + left - at
            f = self.compute_factor()
            end = t + left * f
            self._step(end)
            if self.now >= end:
                return end - at
            left -= (self.now - t) / f
            t = self.now
        return t - at

    def advance(self, t: float) -> None:
        """Run the I/O system up to time ``t``."""
        while self.now < t:
            self._step(t)

    def wait(self, r: Read) -> float:
        """Run until ``r`` has ended; its end time."""
        while r.done is None:
            self._step(math.inf)
        return r.done

    def first_of(self, reads: Sequence[Read]) -> Read:
        """Run until one of ``reads`` has ended; the earliest ended."""
        while True:
            done = [r for r in reads if r.done is not None]
            if done:
                return min(done, key=lambda r: r.done)  # type: ignore[arg-type, return-value]
            self._step(math.inf)

    def blocked(self, at: float, reads: Sequence[Read], wake_s: float) -> Read:
        """The consumer blocks at ``at`` until the first of ``reads`` ends, then wakes.

        Up to ``at`` the consumer was busy; from then until ``wake_s`` after
        the read ended it is blocked, and the tiers' ``waiting`` curves apply.
        """
        self.advance(at)
        self.idle_until = math.inf
        r = self.first_of(reads)
        self.idle_until = r.done + wake_s  # type: ignore[operator]
        return r


class Consumer:
    """The decode loop's thread: its clock and where its time went."""

    def __init__(self, machine: Machine, io: IO, n_layers: int) -> None:
        self.m, self.io, self.now = machine, io, 0.0
        self.compute_s = [0.0] * n_layers
        self.wait_s = [0.0] * n_layers
        self.spans: list[tuple[float, float, int]] = []  # compute spans
        self.layer = 0
        self.last: dict[tuple[int, int], Read] = {}
        self.contention_s = 0.0

    def work(self, seconds: float) -> None:
        """Compute for ``seconds`` (longer while reads that slow it run)."""
        if seconds > 0:
            if self.io.slowing:
                wall = self.io.stretch(self.now, seconds)
                self.contention_s += wall - seconds
                seconds = wall
            spans = self.spans
            if spans and spans[-1][1] == self.now and spans[-1][2] == self.layer:
                spans[-1] = (spans[-1][0], self.now + seconds, self.layer)
            else:
                spans.append((self.now, self.now + seconds, self.layer))
            self.compute_s[self.layer] += seconds
            self.now += seconds

    def until(self, t: float) -> None:
        """Wait (idle) until ``t``."""
        if t > self.now:
            self.wait_s[self.layer] += t - self.now
            self.now = t

    def ready(self, key: tuple[int, int]) -> bool:
        """Whether ``key``'s last read has ended by now."""
        r = self.last.get(key)
        if r is None or r.done is not None and r.done <= self.now:
            return True
        self.io.advance(self.now)
        return r.done is not None and r.done <= self.now

    def hit(self, key: tuple[int, int]) -> None:
        """A demand hit: wait for the key's read if still in flight, then take it."""
        r = self.last.get(key)
        if r is not None:
            if r.done is None or r.done > self.now:
                wake = self.m.compute.wake_s
                self.until(self.io.blocked(self.now, [r], wake).done + wake)  # type: ignore[operator]
            if r.spec:
                r.used = True
        self.work(self.m.compute.access_s)

    def read_here(self, key: tuple[int, int], spec: bool = False) -> Read:
        """Read ``key`` in this thread (a miss of ``get``, a kept miss); wait for it."""
        r = self.io.read_here(self.now, key, spec)
        self.last[key] = r
        self.until(self.io.wait(r))
        return r

    def submit(self, key: tuple[int, int], spec: bool) -> Read:
        """Queue a read of ``key`` on the readers (``queue_s`` if it wakes one).

        With every reader busy it costs ``reserve_s`` instead.
        """
        self.io.advance(self.now)
        if self.io.pool_busy < self.io.threads:
            self.work(self.m.compute.queue_s)
        else:
            self.work(self.m.compute.reserve_s)
        r = self.io.submit(self.now, key, spec)
        self.last[key] = r
        return r

    def prefetch(self, layer: int, experts: Sequence[int]) -> None:
        """Queue speculative reads of ``experts`` (read here when the queue is full)."""
        if experts:
            self.work(self.m.compute.prefetch_s)
        for e in experts:
            key = (layer, e)
            self.work(self.m.compute.access_s)
            self.io.advance(self.now)
            if self.io.threads and self.io.outstanding() < self.io.depth:
                self.submit(key, True)
            else:
                self.read_here(key, True)


def run_schedule(steps: Sequence[Step], outcomes: Outcomes, schedule: Schedule,
                 machine: Machine, n_layers: int, n_tokens: int | None = None,
                 ) -> dict[str, Any]:
    """Replay ``steps`` through the decode loop under ``schedule``; time and breakdown.

    Returns ``s_per_token``, ``compute_s``, ``wait_s``, ``hidden_s``,
    ``wasted_s``, ``contention_s`` (compute's stretch by overlapped reads,
    part of ``compute_s``) (each per token), ``per_layer`` (the same four per layer,
    per token), ``reads``, ``spec_reads``, ``spec_unused``, ``io_s`` (the
    service seconds of every read, per token) and ``max_qd`` per tier.
    """
    io = IO(machine, schedule.threads, schedule.depth)
    c = Consumer(machine, io, n_layers)
    comp = machine.compute
    lookahead = bool(schedule.predictor)
    if lookahead and steps:
        c.prefetch(steps[0].layer, outcomes.spec[0])
    for i, st in enumerate(steps):
        c.layer = st.layer
        c.work(comp.layer_s)
        keys = [(st.layer, e) for e in st.experts]
        missed = outcomes.missed[i]
        nxt = outcomes.spec[i + 1] if lookahead and i + 1 < len(steps) else ()
        nlayer = steps[i + 1].layer if i + 1 < len(steps) else 0
        if schedule.threads == 0:  # synchronous: get, compute, in order
            for key, miss in zip(keys, missed, strict=True):
                if miss:
                    c.read_here(key)
                    c.work(comp.access_s)
                else:
                    c.hit(key)
                c.work(comp.expert_s)
            continue
        c.work(comp.stream_s)
        not_ready = sum(1 for key, miss in zip(keys, missed, strict=True)
                        if miss or not c.ready(key))
        if not_ready < schedule.split:  # the plain path: gets in order
            for key, miss in zip(keys, missed, strict=True):
                if miss:
                    c.read_here(key)
                    c.work(comp.access_s)
                else:
                    c.hit(key)
                c.work(comp.stream_key_s)
                if not lookahead:
                    c.work(comp.expert_s)
            if lookahead:
                c.prefetch(nlayer, nxt)
                for _ in keys:
                    c.work(comp.expert_s)
            continue
        # the split path: hits now, misses queued or kept, in the order given
        hits, later, kept = [], [], []
        io.advance(c.now)
        for key, miss in zip(keys, missed, strict=True):
            if miss:
                if io.outstanding() < io.depth:
                    later.append(c.submit(key, False))
                else:
                    kept.append(key)
            elif c.ready(key):
                hits.append(key)
            else:
                later.append(c.last[key])  # in flight at begin
        if lookahead:
            c.prefetch(nlayer, nxt)
        for key in hits:
            c.hit(key)
            c.work(comp.stream_key_s + comp.expert_s)
        while later or kept:
            io.advance(c.now)
            done = [r for r in later if r.done is not None and r.done <= c.now]
            if done:
                r = min(done, key=lambda x: x.done)  # type: ignore[arg-type, return-value]
            elif kept:
                key = kept.pop(0)
                c.read_here(key)
                c.work(comp.access_s + comp.stream_key_s + comp.expert_s)
                continue
            else:
                r = io.blocked(c.now, later, comp.wake_s)
                c.until(r.done + comp.wake_s)  # type: ignore[operator]
            later.remove(r)
            if r.spec:
                r.used = True
            c.work(comp.access_s + comp.stream_key_s + comp.expert_s)
    io.advance(c.now)
    return _account(c, io, n_layers, n_tokens or _tokens(steps))


def _tokens(steps: Sequence[Step]) -> int:
    return max(1, len({st.token for st in steps}))


def _account(c: Consumer, io: IO, n_layers: int, n_tokens: int) -> dict[str, Any]:
    """The totals and per-layer breakdown of one replay, per token."""
    hidden = [0.0] * n_layers
    busy = io.busy
    j = 0
    for a, b, layer in c.spans:  # both lists are in time order
        while j < len(busy) and busy[j][1] <= a:
            j += 1
        k = j
        while k < len(busy) and busy[k][0] < b:
            hidden[layer] += max(0.0, min(b, busy[k][1]) - max(a, busy[k][0]))
            k += 1
    wasted = [0.0] * n_layers
    spec = unused = 0
    for r in io.reads:
        if r.spec:
            spec += 1
            if not r.used:
                unused += 1
                wasted[r.key[0]] += r.service
    per = 1.0 / n_tokens
    per_layer = [{"layer": L, "compute_s": c.compute_s[L] * per,
                  "wait_s": c.wait_s[L] * per, "hidden_s": hidden[L] * per,
                  "wasted_s": wasted[L] * per} for L in range(n_layers)]
    total = c.now * per
    return {"s_per_token": total,
            "compute_s": sum(c.compute_s) * per, "wait_s": sum(c.wait_s) * per,
            "hidden_s": sum(hidden) * per, "wasted_s": sum(wasted) * per,
            "contention_s": c.contention_s * per,
            "io_s": sum(r.service for r in io.reads) * per,
            "reads": len(io.reads), "spec_reads": spec, "spec_unused": unused,
            "max_qd": dict(io.max_qd), "per_layer": per_layer}
