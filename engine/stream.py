"""A layer stream of an expert cache: held experts, resident ones first,
then as their reads complete (docs/CACHE.md "stream")."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from xcache.engine import _lib
from xcache.engine import args as _args
from xcache.engine.errors import EngineError
from xcache.engine.hold import CacheCore, Expert

#: xc_cache_stream_next's "every key was yielded" (xc.h XC_STREAM_END)
STREAM_END = 1


def key_arrays(keys: list[tuple[int, int]]) -> tuple[Any, Any]:
    """The layers and the experts of keys as two int32 arrays (never NULL)."""
    new = _lib.ffi().new
    return (new("int32_t[]", [k[0] for k in keys] or [0]),
            new("int32_t[]", [k[1] for k in keys] or [0]))



class Stream:
    """An open stream: yields held experts, resident ones first, then as reads complete.

    Each yielded :class:`Expert` is the caller's to release.  A failed read
    does not end the stream (docs/CACHE.md stream step 5): the other
    experts are still yielded, and the first failure is raised, with its
    own message, file and byte offset, once they all were; the next call
    then stops.  :meth:`close` (also the context manager's exit, garbage
    collection, and closing the cache) ends the stream early: the holds of
    experts not yet yielded go back, reads it started are finished first.
    One stream may be used from several threads: its calls take turns (a
    lock), and a ``close()`` from another thread waits for a ``next()`` in
    progress.
    """

    __slots__ = ("_cache", "_keys", "_st", "_ref", "_index", "_error",
                 "_lock", "__weakref__")

    def __init__(self, cache: CacheCore, keys: Iterable[tuple[int, int]]
                 ) -> None:
        ffi = _lib.ffi()
        self._st: Any = None
        self._lock = threading.Lock()
        self._cache = cache
        self._keys = _args.check_keys("keys", keys)
        layers, experts = key_arrays(self._keys)
        out = ffi.new("xc_stream **")
        _lib.check(cache._lib.xc_cache_stream_begin(
            cache._ptr, layers, experts, len(self._keys), out))
        self._st = out[0]
        self._ref = ffi.new("xc_ref *")
        self._index = ffi.new("size_t *")
        self._error: EngineError | None = None
        cache._streams.add(self)

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> Expert:
        cache = self._cache
        busy = cache._busy
        busy.append(None)
        try:
            with self._lock:
                ex = self._next_locked()
        finally:
            busy.pop()
        if ex is None:
            raise StopIteration
        return ex

    def _next_locked(self) -> Expert | None:
        while True:
            if self._st is None:
                return None
            cache = self._cache
            rc = cache._lib.xc_cache_stream_next(self._st, self._ref,
                                                 self._index)
            if rc == STREAM_END:
                err, self._error = self._error, None
                self._end_locked()
                if err is not None:
                    raise err
                return None
            if rc:
                try:
                    _lib.check(rc)
                except EngineError as e:  # the stream goes on; raised last
                    if self._error is None:
                        self._error = e
                    continue
            ref = self._ref
            h = (ref.generation & 0x7FFFFFFF) << 32 | ref.slot
            return Expert(cache, h, self._keys[self._index[0]])

    def close(self) -> None:
        """End the stream: give back the holds of experts not yet yielded."""
        if self._st is None:
            return
        with self._lock:
            self._end_locked()

    def _end_locked(self) -> None:
        st, self._st = self._st, None
        if st is not None:
            self._cache._streams.discard(self)
            self._cache._clib.xc_cache_stream_end(st)

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_st", None) is not None:
            self.close()
