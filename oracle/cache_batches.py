"""The model's calls that take many keys: getmany, prefetch, streams, hold_layer.

:class:`BatchOps` is one half of :class:`~oracle.cache.CacheModel` (a mixin
with no state of its own): the batch prefetch and read-ahead
(``getmany``, ``prefetch``), a stream begun without readers and run to its
end (``open_stream``, ``stream``), and a layer held in one call, all or
none (``hold_layer``), each per docs/CACHE.md.  They work through the
model's slot primitives (victim choice, reservation, publish, holds) and
leave a read under way to :mod:`oracle.cache_under_way`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from xcache.oracle.cache_types import READY, UNDER_WAY, Ref, StreamOpen
from xcache.oracle.errors import AllPinned, IOFailure, Misuse, ShortRead

__all__ = ["BatchOps"]


class BatchOps:
    """getmany, prefetch, open_stream, stream and hold_layer of the model."""

    def getmany(self, keys: Iterable[tuple[int, int]],
                failures: Mapping[tuple[int, int], str] | None = None,
                speculative: bool = False,
                read: Callable[[tuple[int, int]], str | None] | None = None,
                stamped: bool = False) -> int:
        """Batch prefetch: reserve serially, read, publish in reservation order.

        Every key resident at the call is protected before the first
        reservation, so no miss of the batch evicts a resident it names.
        ``failures`` maps keys to "short" or "io" to fail their reads; or
        ``read`` is called once for each key reserved, in reservation order
        after every reservation, and returns its read's failure (None, "short"
        or "io"), or :data:`UNDER_WAY` to leave the read under way (stamped
        now, published by :meth:`end_read`, not counted in the return). A key
        already under way is skipped untouched. Returns
        how many were published; fails only with ``Misuse`` (nothing changed).
        ``speculative`` counts the loads as speculative (see :meth:`prefetch`).
        ``stamped`` makes it a read-ahead's (``io_threads > 0``): every
        reservation is stamped in reservation order, so a queue policy is
        told its inserts in that order, behind a read left under way
        (docs/CACHE.md "Stamp order").
        """
        keys = list(keys)
        failures = dict(failures or {})
        ids = [self.key_id(layer, expert) for layer, expert in keys]  # validate all
        if any(v not in ("short", "io") for v in failures.values()):
            raise ValueError("failure kinds are 'short' or 'io'")
        seen: set[int] = set()
        reserved: list[tuple[int, int]] = []  # (slot, key id)
        for key in ids:  # (1) every key resident at the call is protected
            slot = self._index.get(key)
            if slot is not None and self._state[slot] == READY:
                self._batch_protected.add(slot)
        for key in ids:  # (1) reserve
            if key in seen:
                continue
            seen.add(key)
            slot = self._index.get(key)
            if slot is not None:
                if self._state[slot] == READY:
                    self._batch_protected.add(slot)
                    self._touch(slot)
                else:
                    self._skip_inflight(slot)
                continue
            slot = self._victim()
            if slot is None:
                continue
            self._evict_into(slot, key)
            reserved.append((slot, key))
        if speculative:
            self.spec_counters["spec_issued"] += len(reserved)
        published = 0
        for slot, key in reserved:  # (2) read, (3) publish in order
            if stamped:
                self._stamp(slot)
            kind = (failures.get(self.key_of(key)) if read is None
                    else read(self.key_of(key)))
            if kind == UNDER_WAY:  # held under way: stamped now, ends later
                if not stamped:
                    self._touch(slot)
                self._under_way[key] = (slot, "spec" if speculative
                                        else "prefetch", self._window)
                continue
            if kind not in (None, "short", "io"):
                raise ValueError("failure kinds are 'short' or 'io'")
            self.counters["io_bytes"] += self._io_bytes(key)
            if kind is not None:
                self._fail(slot, kind)
                continue
            self._publish(slot, 0)
            if speculative:
                self._spec[slot] = True
                self.spec_counters["spec_loads"] += 1
            else:
                self._mark[slot] = True
                self.counters["prefetch_loads"] += 1
            self.counters["payload_bytes"] += self.expert_bytes
            published += 1
        self._batch_protected.clear()
        return published

    def prefetch(self, keys: Iterable[tuple[int, int]], speculative: bool = False,
                 failures: Mapping[tuple[int, int], str] | None = None) -> int:
        """Read-ahead with its synchronous meaning: ``getmany`` exactly.

        Speculative loads carry the speculative mark instead of the
        unused-prefetch mark and move ``spec_*`` instead of ``prefetch_loads``.
        """
        return self.getmany(keys, failures, speculative=speculative)

    def open_stream(self, keys: Iterable[tuple[int, int]],
                    split_min_misses: int = 1) -> StreamOpen | None:
        """A stream's begin with no readers (docs/CACHE.md "stream" steps 1-3).

        A key named twice is ``Misuse``; with fewer than ``split_min_misses``
        keys not READY the stream is plain: None, nothing changed (the
        caller makes each key's ``get``).  Else, in the order given: a hit
        now (held); a key whose read is under way is left out (the caller
        gets it once that read ended, step 4), nothing counted; a miss
        reserved and stamped now and left under way for the consumer
        (:meth:`end_read` reads and publishes it, held); a key that finds
        no slot is kept for a ``get`` at the end.
        """
        keys = list(keys)
        ids = [self.key_id(layer, expert) for layer, expert in keys]
        if len(set(ids)) != len(ids):
            raise Misuse("stream: a key is named twice")
        if sum(k not in self._index or self._state[self._index[k]] != READY
               for k in ids) < max(1, split_min_misses):
            return None
        opened = StreamOpen([], [], [])
        for (layer, expert), key in zip(keys, ids, strict=True):
            if key in self._index:
                if self._state[self._index[key]] == READY:
                    opened.hits.append(self.get(layer, expert))
                continue
            slot = self._reserve_miss(key)
            if slot is None:
                opened.no_slot.append((layer, expert))
                continue
            self._stamp(slot)  # the stamp its publish keeps
            self._under_way[key] = (slot, "stream", self._window)
            opened.misses.append((layer, expert))
        return opened

    def stream(self, keys: Iterable[tuple[int, int]],
               split_min_misses: int = 1,
               no_slot: list[tuple[int, int]] | None = None) -> list[Ref]:
        """A stream without readers, run to its end: its held refs in yield order.

        :meth:`open_stream`, then the consumer's reads in the order given
        (so every *insert* follows every reservation, in stamp order: the
        order the engine tells its policy, whatever order its reads end
        in), then the keys that found no slot as gets -- made here by a
        consumer that holds every expert to the end; given ``no_slot``, a
        list, they are put there instead, for a consumer that gives each
        expert back before it asks for the next to get them last.
        """
        keys = list(keys)
        opened = self.open_stream(keys, split_min_misses)
        if opened is None:
            return [self.get(*k) for k in keys]
        refs = list(opened.hits)
        for layer, expert in opened.misses:
            ref = self.end_read(layer, expert)
            assert ref is not None
            refs.append(ref)
        if no_slot is not None:
            no_slot.extend(opened.no_slot)
            return refs
        return refs + [self.get(*k) for k in opened.no_slot]

    def stream_unread(self, layer: int, expert: int) -> bool:
        """Whether the key is a stream's miss that nobody has read yet."""
        got = self._under_way.get(self.key_id(layer, expert))
        return got is not None and got[1] == "stream"

    def hold_layer(self, keys: Iterable[tuple[int, int]],
                   read: Callable[[tuple[int, int]], str | None] | None = None
                   ) -> list[Ref]:
        """docs/CACHE.md "hold_layer": the keys held in one call, all or none.

        Validation as the engine's (``Misuse``, nothing changed: a bad key,
        a key twice, more keys than slots).  Counted in the order given as a
        stream with ``split_min_misses`` 1 (hits now, misses reserved and
        stamped now); a key that finds no slot ends the counting (it and
        the keys after it are not counted).  The reserved misses are read
        in the order given (``read`` gives each one's failure: None,
        "short" or "io") and published as stream misses.  A failed read or
        a key without a slot gives back every hold the call took and raises
        the first failed read (``ShortRead`` / ``IOFailure``), else
        ``AllPinned``; the counters, clock and loaded experts stay as the
        gets that ran left them.  Returns the refs in the order given.
        """
        keys = list(keys)
        ids = [self.key_id(layer, expert) for layer, expert in keys]
        if len(set(ids)) != len(ids):
            raise Misuse("hold_layer: a key is named twice")
        if len(ids) > self.n_slots:
            raise Misuse(f"hold_layer: {len(ids)} experts cannot be held at "
                         f"once in {self.n_slots} slots")
        held: dict[tuple[int, int], Ref] = {}
        reads: list[tuple[int, int, int]] = []
        stopped: tuple[int, int] | None = None
        for (layer, expert), key in zip(keys, ids, strict=True):
            if key in self._index:  # READY: nothing is in flight here
                held[(layer, expert)] = self.get(layer, expert)
                continue
            slot = self._reserve_miss(key)
            if slot is None:
                stopped = (layer, expert)
                break
            self._stamp(slot)  # the stamp its publish keeps
            reads.append((slot, layer, expert))
        failed: tuple[int, int, str] | None = None
        for slot, layer, expert in reads:
            kind = read((layer, expert)) if read is not None else None
            if kind not in (None, "short", "io"):
                raise ValueError("failure kinds are 'short' or 'io'")
            self.counters["io_bytes"] += self._io_bytes(self._key[slot])
            if kind is not None:
                self._fail(slot, kind)
                failed = failed or (layer, expert, kind)
                continue
            self._publish(slot, 1)
            self.counters["payload_bytes"] += self.expert_bytes
            held[(layer, expert)] = self._hold(slot, layer, expert)
        if failed is None and stopped is None:
            return [held[k] for k in keys]
        for ref in held.values():
            self.release(ref)
        if failed is not None:
            layer, expert, kind = failed
            cls = ShortRead if kind == "short" else IOFailure
            raise cls(f"hold_layer: load of (layer {layer}, expert {expert}) "
                      f"failed: {kind}", layer, expert)
        assert stopped is not None
        raise AllPinned(f"hold_layer: layer {stopped[0]} expert {stopped[1]}: "
                        f"all {self.n_slots} slots are held, pinned or in "
                        "flight")
