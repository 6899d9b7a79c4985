"""The oracle's streams, in the engine's order of yields and reads.

:class:`ModelStream` is what :meth:`oracle.reading_cache.ReadingCache.stream_open`
returns (docs/CACHE.md "stream" and "Claiming"); it works through the
:class:`StreamHost` it was opened on.  Never imports ``engine`` or ``gate``.
"""

from __future__ import annotations

from typing import Any, Protocol

from xcache.oracle.cache import Misuse
from xcache.oracle.errors import NotModelled

#: A key: (layer id, expert).
Key = tuple[int, int]


class StreamHost(Protocol):
    """What a stream needs of the reading cache it was opened on."""

    model: Any
    payload: dict[Key, bytes]
    streams: list[ModelStream]
    claims: bool

    def _in_flight(self, key: Key) -> bool: ...
    def _unread(self, key: Key) -> bool: ...
    def _read_unread(self, key: Key) -> tuple[Any, bytes]: ...
    def _not_waiting(self, what: str, keys: list[Key]) -> None: ...
    def stream_begin(self, keys: list[Key],
                     no_slot: list[Key] | None = None) -> Any: ...
    def stream_get(self, key: Key) -> tuple[Any, bytes]: ...


class ModelStream:
    """The oracle's stream: the model's held refs, yielded in the engine's order.

    The engine yields the experts resident at open first, then the reads
    that ended (a ``get`` claimed them), then it reads the others itself in
    the order given; this stream yields in that same order.  A key whose
    read was under way at open -- held by a stall, or another stream's miss
    nobody has read -- is *foreign*: nothing is counted for it at open, and
    it is yielded as a ``get`` (a hit counted then) once that read has
    ended (another stream's miss this stream reads for it, as the engine
    claims it) -- before the stream's own reads still to make, else after
    them (the engine waits for it there).  A stream of resident experts only
    is *plain* (docs/CACHE.md stream step 2): it changes nothing at open and
    makes each key's ``get`` when asked for it.

    With no read-ahead threads (the backend ``claims``) the model opens the
    stream and leaves its misses under way (:meth:`CacheModel.open_stream`):
    each is read when the stream gets to it or when a ``get``, a
    ``hold_layer`` or another stream claims it, so the policy hears of
    every call made in between in the engine's order.  With readers the
    model runs the stream whole at its open.
    """

    def __init__(self, backend: StreamHost, keys: list[Key]) -> None:
        self.backend = backend
        model = backend.model
        self.foreign = [k for k in keys if backend._in_flight(k)
                        or backend._unread(k)]
        self.hits = [k for k in keys if k not in self.foreign and
                     model.slot_of(*k) is not None]
        self.misses = [k for k in keys if k not in self.hits
                       and k not in self.foreign]
        self.ended: list[Key] = []
        #: with claims: the misses nobody has read yet, and the keys that
        #: found no slot (gets at the end)
        self.unread_keys: list[Key] = []
        self.no_slot: list[Key] = []
        self.deferred = backend.claims
        #: a plain stream's keys not yet asked for (None: not plain)
        self.plain: list[Key] | None = None
        self.error: BaseException | None = None
        self.refs: dict[Key, Any] = {}
        if self.deferred:
            opened = model.open_stream(keys)
            if opened is None:
                self.plain = list(keys)
            else:
                self.refs = {(r.layer, r.expert): r for r in opened.hits}
                self.unread_keys = list(opened.misses)
                self.no_slot = list(opened.no_slot)
                # hit or miss as the model decided them, in the order given:
                # a key resident at the call may be an earlier miss's victim
                self.hits = list(self.refs)
                self.misses = [*opened.misses, *opened.no_slot]
        elif self.misses or self.foreign:
            before = model.counters["hits"]
            # the keys that found no slot are got last, as the consumer
            # asks for them, each earlier expert given back by then
            refs = backend.stream_begin(keys, self.no_slot)
            self.refs = {(r.layer, r.expert): r for r in refs}
            # the model's stream yields its hits first (counted as hits at
            # the open), then its misses: an earlier miss's victim is a miss
            n_hits = model.counters["hits"] - before
            self.hits = [(r.layer, r.expert) for r in refs[:n_hits]]
            self.misses = [k for k in keys if k not in self.hits
                           and k not in self.foreign]
        else:  # validated as the model's stream validates; nothing counted
            ids = [model.key_id(*k) for k in keys]
            if len(set(ids)) != len(ids):
                raise Misuse("stream: a key is named twice")
            self.plain = list(keys)
        backend.streams.append(self)

    def unread(self, key: Key) -> bool:
        """Whether ``key`` is a miss of this stream that nobody has read yet."""
        if self.deferred:
            return key in self.unread_keys
        return key in self.misses and key not in self.ended and key in self.refs

    def read_for(self, key: Key) -> bool:
        """Read an unread miss of this stream now (a claim or the stream's own
        turn): its ref joins the completions; a failed read is the stream's
        error.  Whether it published."""
        self.unread_keys.remove(key)
        try:
            ref, _ = self.backend._read_unread(key)
        except (NotModelled, AssertionError):
            raise
        except Exception as e:  # noqa: BLE001 - raised at the stream's end
            self.error = self.error or e
            return False
        self.refs[key] = ref
        self.ended.append(key)
        return True

    def claimed(self, key: Key) -> None:
        """A get of ``key`` read it for the stream (if it was a miss not yet read)."""
        if not self.deferred and key in self.misses and key not in self.ended:
            self.ended.append(key)

    def order(self) -> list[Key]:
        """The keys not yet yielded, in the order they will be (with readers)."""
        rest = [k for k in self.misses if k not in self.ended]
        return [k for k in self.hits + self.ended + rest if k in self.refs]

    def _end(self) -> None:
        """The stream is done: off the open list; its first failure raised."""
        if self in self.backend.streams:
            self.backend.streams.remove(self)
        err, self.error = self.error, None
        if err is not None:
            raise err

    def _get(self, key: Key) -> tuple[Key, bytes] | None:
        """A ``get`` of ``key`` for the stream (held and released); a failed
        one is kept for the end."""
        try:
            ref, data = self.backend.stream_get(key)
        except (NotModelled, AssertionError):
            raise
        except Exception as e:  # noqa: BLE001 - the stream goes on
            self.error = self.error or e
            return None
        self.backend.model.release(ref)
        return key, data

    def _first_get(self, keys: list[Key]) -> tuple[Key, bytes] | None:
        """``get`` the keys in turn (taken off ``keys``) until one is served."""
        while keys:
            got = self._get(keys.pop(0))
            if got is not None:
                return got
        return None

    def _next_plain(self) -> tuple[Key, bytes] | None:
        """A plain stream's next ``get`` (a failed one is raised at the end)."""
        assert self.plain is not None
        got = self._first_get(self.plain)
        if got is None:
            self._end()
        return got

    def _next_foreign(self, ended_only: bool) -> tuple[Key, bytes] | None:
        """The first foreign key whose read has ended, as a ``get`` (held and
        released); with ``ended_only`` False one still under way is refused.
        Another stream's miss nobody has read is read for it first."""
        for key in list(self.foreign):
            for other in list(self.backend.streams):
                if other is not self and other.deferred and other.unread(key):
                    other.read_for(key)
            if self.backend._in_flight(key):
                if ended_only:
                    continue
                self.backend._not_waiting("a stream's next", [key])
            self.foreign.remove(key)
            got = self._get(key)
            if got is not None:
                return got
        return None

    def _yield(self, key: Key) -> tuple[Key, bytes]:
        self.backend.model.release(self.refs.pop(key))
        return key, self.backend.payload[key]

    def _next_deferred(self) -> tuple[Key, bytes] | None:
        """docs/CACHE.md stream step 4 with the consumer's own reads."""
        while True:
            for queue in (self.hits, self.ended):
                while queue:
                    key = queue.pop(0)
                    if key in self.refs:
                        return self._yield(key)
            if self.foreign:
                got = self._next_foreign(ended_only=True)
                if got is not None:
                    return got
            if self.unread_keys:
                self.read_for(self.unread_keys[0])
                continue
            if self.foreign:
                got = self._next_foreign(ended_only=False)
                if got is not None:
                    return got
                continue
            got = self._first_get(self.no_slot)
            if got is None:
                self._end()
            return got

    def next(self) -> tuple[Key, bytes] | None:
        """Yield (and release) the next expert: its key and bytes, or None."""
        if self.plain is not None:
            return self._next_plain()
        if self.deferred:
            return self._next_deferred()
        order = self.order()
        rest = [k for k in self.misses if k not in self.ended]
        if self.foreign and (not order or order[0] in rest):
            # after the hits and the completions: a foreign key whose read
            # ended, else the stream's own reads, else wait for it
            got = self._next_foreign(ended_only=bool(order))
            if got is not None:
                return got
        if not order:
            got = self._first_get(self.no_slot)
            if got is not None:
                return got
            self._end()  # a foreign get that failed is raised here
            return None
        return self._yield(order[0])

    def rest(self) -> list[tuple[Key, bytes | BaseException]]:
        """Every expert the stream has not yielded, each released; then its
        first failure (the engine's ``(-1, -1)`` entry)."""
        out: list[tuple[Key, bytes | BaseException]] = []
        try:
            while (got := self.next()) is not None:
                out.append(got)
        except (NotModelled, AssertionError):
            raise
        except Exception as e:  # noqa: BLE001 - a plain stream's failed get
            out.append(((-1, -1), e))
        return out
