"""Reads held under way in the model: a reservation whose read ends later.

:class:`ReadsUnderWay` is one half of :class:`~oracle.cache.CacheModel` (a
mixin with no state of its own): ``begin_read`` reserves a demand miss and
leaves its slot INFLIGHT, ``in_flight`` says whether a key's read is under
way, and ``end_read`` publishes or fails any read left under way -- a
demand read's, a stream's miss, or a batch read that ``read`` left under
way -- counted in the window it was reserved in (docs/CACHE.md
"reset_stats").
"""

from __future__ import annotations

from xcache.oracle.cache_types import Ref
from xcache.oracle.errors import AllPinned, IOFailure, Misuse, ShortRead

__all__ = ["ReadsUnderWay"]


class ReadsUnderWay:
    """begin_read, in_flight and end_read of the model."""

    def _skip_inflight(self, slot: int) -> None:
        """A batch met a key whose read is under way (a hook: nothing here)."""

    def begin_read(self, layer: int, expert: int) -> None:
        """A demand miss whose read stays under way until :meth:`end_read`.

        ``get`` steps 1 and 4 (validated, victim chosen, counted as a request
        and a miss, evictions as usual); the slot stays INFLIGHT with the
        key: a batch skips it untouched, a stream leaves it for later, and
        a ``get`` or ``hold_layer`` of it must wait for :meth:`end_read` (the
        caller's business: the model is single-threaded).  The key must be
        absent (``Misuse``); no slot is ``AllPinned`` with nothing changed.
        """
        key = self.key_id(layer, expert)
        if key in self._index:
            raise Misuse(f"begin_read: (layer {layer}, expert {expert}) is "
                         "resident or in flight already")
        slot = self._reserve_miss(key)
        if slot is None:
            raise AllPinned(f"no slot for (layer {layer}, expert {expert}): "
                            f"all {self.n_slots} are held, pinned or in flight")
        self._under_way[key] = (slot, "get", self._window)

    def in_flight(self, layer: int, expert: int) -> bool:
        """Whether the key's read is under way (:meth:`begin_read`, or a
        batch read ``read`` left under way)."""
        return self.key_id(layer, expert) in self._under_way

    def end_read(self, layer: int, expert: int, fail: str | None = None
                 ) -> Ref | None:
        """End a read left under way: publish it, or fail it (``fail``).

        A demand read publishes as ``get`` step 6 (touched now, ``freq`` 1,
        held: the returned Ref) or fails as there (raised); a stream's miss
        (:meth:`open_stream`) the same, keeping its stamped tick; a batch read
        publishes as a read-ahead publish (keeping the tick stamped at its
        reservation, ``freq`` 0, its mark) or fails quietly (None).  A read
        reserved before a ``reset_stats`` counts in no window: no bytes, no
        load, no failure and no mark in the new one (docs/CACHE.md
        "reset_stats").
        """
        if fail not in (None, "short", "io"):
            raise ValueError(f"fail must be None, 'short' or 'io', not {fail!r}")
        key = self.key_id(layer, expert)
        if key not in self._under_way:
            raise Misuse(f"end_read: no read of (layer {layer}, expert "
                         f"{expert}) is under way")
        slot, kind, window = self._under_way.pop(key)
        counted = window == self._window
        if counted:
            self.counters["io_bytes"] += self._io_bytes(key)
        if fail is not None:
            saved = dict(self.counters)
            self._fail(slot, fail)
            if not counted:
                self.counters = saved
            if kind in ("get", "stream"):
                cls = ShortRead if fail == "short" else IOFailure
                raise cls(f"load of (layer {layer}, expert {expert}) failed: "
                          f"{fail}", layer, expert)
            return None
        self._publish(slot, 1 if kind in ("get", "stream") else 0)
        if counted:
            self.counters["payload_bytes"] += self.expert_bytes
        if kind in ("get", "stream"):
            return self._hold(slot, layer, expert)
        if counted and kind == "spec":
            self._spec[slot] = True
            self.spec_counters["spec_loads"] += 1
        elif counted:
            self._mark[slot] = True
            self.counters["prefetch_loads"] += 1
        return None

