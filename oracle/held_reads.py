"""Reads held under way by a stall in the oracle's reading cache, and the
calls made meanwhile (docs/CACHE.md "Threads, fork and lifetimes").

:class:`HeldReads` is the part of :class:`oracle.reading_cache.ReadingCache`
that models a read a ``stall`` fault holds: a get made now whose read is
the one held, the calls made while it is held (modelled as made at its
release, in the order made), the release itself and the bounded waits the
gate's race steps make.  A mixin: every attribute it uses is the reading
cache's own.
"""

from __future__ import annotations

from typing import Any

from xcache.oracle.call_outcomes import (
    AtRelease,
    Ended,
    FileChanged,
    Outcome,
    WaitsForever,
)
from xcache.oracle.errors import IOFailure, NotModelled
from xcache.oracle.layout import expert_pieces
from xcache.oracle.read_path import Key


class HeldReads:
    """A stall's held reads and the calls waiting on them (a mixin of
    :class:`oracle.reading_cache.ReadingCache`)."""

    model: Any
    held: list[Any]
    later: list[Any]

    def start_get(self, layer: int, expert: int) -> Outcome:
        """The get made now: its read is the one under way.

        Under a stall: made while a read is held, it is made at the release
        (:meth:`start_call`; a hit after waiting if its key was the one
        held); a miss whose read meets the stall stays under way (reserved
        and counted now, published at the release).
        """
        key = (layer, expert)
        if self.held:
            waits = self._in_flight(key)
            self.waiting -= not waits  # start_call counts it as waiting
            return self.start_call(self._after_wait, key, waits)
        if self._stall_armed() and self._absent(key):
            try:
                self.model.begin_read(layer, expert)
            except Exception as e:  # noqa: BLE001 - the outcome is handed back
                return Ended(False, e)
            data, failure = self._load(layer, expert, may_stall=True)
            if self._stalled_now:
                pending = AtRelease()
                self.held.append(("get", key, data, failure, pending))
                return pending
            return self._end_get(key, data, failure)
        try:
            return Ended(True, self.get(layer, expert))
        except Exception as e:  # noqa: BLE001 - the outcome is handed back
            return Ended(False, e)

    def _absent(self, key: Key) -> bool:
        try:
            return self.model.slot_of(*key) is None
        except Exception:  # noqa: BLE001 - a bad key: the get says so
            return False

    def _stall_armed(self) -> bool:
        """Whether a modelled stall may still meet a pread."""
        return any(f is not None and f["fault"] == "stall" and
                   (f["persistent"] or f["reads"] < f["nth"])
                   for f in self.faults)

    def _end_get(self, key: Key, data: bytes | None, failure: str | None
                 ) -> Ended:
        """A demand read left under way ends: published (bytes) or failed."""
        try:
            ref = self.model.end_read(*key, fail=_model_failure(failure))
        except Exception as e:  # noqa: BLE001 - the outcome is handed back
            return Ended(False, FileChanged(e) if failure == "changed" and
                         isinstance(e, IOFailure) else e)
        assert data is not None and ref is not None
        self._publish({key: data})
        self.model.release(ref)
        return Ended(True, data)

    def _after_wait(self, key: Key, waited: bool) -> bytes:
        """A get made at the release; a hit after waiting if ``waited``."""
        if waited and self.model.slot_of(*key) is not None:
            self._wait_hits += 1
            if hasattr(self.model, "wait_next"):
                self.model.wait_next = True
        return self.get(*key)

    def start_call(self, fn: Any, *args: Any) -> Outcome:
        """``fn(*args)`` made now, or, while a read is held under way, at
        its release (:meth:`unstall`), in the order made: a scenario makes
        only calls that wait for the read held (docs/SCENARIOS.md)."""
        if self.held:
            pending = AtRelease()
            self.later.append((fn, args, pending))
            self.waiting += 1
            return pending
        try:
            return Ended(True, fn(*args))
        except (NotModelled, AssertionError):
            raise
        except Exception as e:  # noqa: BLE001 - the outcome is handed back
            return Ended(False, e)

    def unstall(self) -> None:
        """End every read held under way, in the order they began, then make
        the calls that waited for them, in the order made."""
        held, self.held = self.held, []
        # the engine's reader ends them after this: queued until a drain
        self.maybe_queued += sum(1 for kind, *_ in held if kind == "batch")
        for kind, key, data, failure, pending in held:
            if data is None and failure is None:  # queued behind: read now
                data, failure = self._load(*key, may_stall=True)
            else:  # the load ends now: its file check is made now
                data, failure = self._recheck(key, data, failure)
            if kind == "get":
                assert pending is not None
                pending.end(self._end_get(key, data, failure).outcome())
                continue
            self.model.end_read(*key, fail=_model_failure(failure))
            if failure is None:
                assert data is not None
                self._publish({key: data})
        later, self.later, self.waiting = self.later, [], 0
        for fn, args, pending in later:
            pending.end(self.start_call(fn, *args).outcome())

    def _recheck(self, key: Key, data: bytes | None, failure: str | None
                 ) -> tuple[bytes | None, str | None]:
        """A held load's end, made again at its release: a read that
        succeeded is refused (``changed``) if, with ``verify``, a shard it
        read from changed while it was held (xc_load.c ``end_load``)."""
        if failure is not None or not self.verify:
            return data, failure
        lay = self.layout
        pieces = expert_pieces(self.reader, lay["expert_template"],
                               lay["tensors"], lay["n_experts"], *key)
        return self._end_load(list(dict.fromkeys(p.shard for p in pieces)),
                              data, None)

    def waiting_get(self, layer: int, expert: int) -> Outcome:
        """A get made now; a hit after waiting when the key is resident."""
        self._not_waiting("a waiting_get", [(layer, expert)])
        was = self.model.slot_of(layer, expert) is not None
        done = self.start_get(layer, expert)
        self._wait_hits += was and done.outcome()[0]
        return done

    def reads_held(self) -> int:
        """Reads a stall holds now in the model (and those queued behind)."""
        return len(self.held)

    def await_waiting(self, count: int, bound_s: float) -> None:
        """Nothing to wait for: the background calls made while a read is
        held are made at its release; there must be ``count`` of them."""
        if self.waiting < count:
            raise WaitsForever(f"await_waiting: {self.waiting} of {count} "
                        "background calls wait for a read under way")

    def await_reads(self, count: int, bound_s: float) -> None:
        """Nothing is under way in the model, but a stall must have met the
        reads the engine's injector would (else the engine's wait is stuck)."""
        f = self.faults[0]
        if f is not None and f["fault"] == "stall" and f.get("fired", 0) < count:
            raise WaitsForever(f"await_read: the injector met {f.get('fired', 0)} "
                        f"of {count} armed preads within {bound_s:g} s")

    def wait_hits(self) -> int | None:
        """The :meth:`waiting_get` calls that found their key resident."""
        return self._wait_hits


def _model_failure(failure: str | None) -> str | None:
    """The oracle model's failure kinds: a changed file is an I/O failure."""
    return None if failure is None else ("short" if failure == "short" else "io")
