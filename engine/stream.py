"""A layer stream of an expert cache: held experts, resident ones first,
then as their reads complete (docs/CACHE.md "stream")."""

from __future__ import annotations

import signal
import threading
import time
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


#: how long after a finalizer caught a Ctrl-C it is delivered again
INTERRUPT_AGAIN_S = 0.005


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
    progress.  Interrupted (Ctrl-C, an exception from a signal handler), a
    ``next()`` loses no hold: the expert C yielded is in an armed ref made
    before the call, given back when dropped (engine.cache, "Holds owned
    before they exist"), and the stream itself is in an armed cell made
    before ``xc_cache_stream_begin``.
    """

    __slots__ = ("_cache", "_keys", "_cell", "_index", "_error",
                 "_lock", "__weakref__")

    def __init__(self, cache: CacheCore, keys: Iterable[tuple[int, int]]
                 ) -> None:
        ffi = _lib.ffi()
        self._cell: Any = None
        self._lock = threading.Lock()
        self._cache = cache
        self._keys = _args.check_keys("keys", keys)
        layers, experts = key_arrays(self._keys)
        self._index = ffi.new("size_t *")
        self._error: EngineError | None = None
        # the owner first: the cell C writes the stream into is armed (lost
        # when dropped, ended by the cache) and ours before the call
        self._cell = ffi.gc(ffi.new("xc_stream **"), cache._lose)
        cache._streams.add(self)
        _lib.check(cache._lib.xc_cache_stream_begin(
            cache._ptr, layers, experts, len(self._keys), self._cell))

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> Expert:
        cache = self._cache
        busy = cache._busy
        try:  # appended inside: a signal after the append still pops it
            busy.append(None)
            if cache._lost:
                cache._sweep()
            with self._lock:
                ex = self._next_locked()
        finally:
            busy.pop()
        if ex is None:
            raise StopIteration
        return ex

    def _next_locked(self) -> Expert | None:
        while True:
            if self._cell is None:
                return None
            cache = self._cache
            ref = cache._new_ref()  # the owner first: C fills an armed ref
            rc = cache._lib.xc_cache_stream_next(self._cell[0], ref,
                                                 self._index)
            if rc:  # nothing written to ref: no need for the lost list
                _lib.ffi().gc(ref, None)
            if rc == STREAM_END:
                err, self._error = self._error, None
                self._end(cache._lib)
                if err is not None:
                    raise err
                return None
            if rc:
                try:
                    _lib.check(rc)
                except EngineError as e:  # the stream goes on; raised last
                    if self._error is None:
                        # kept without its traceback: that holds this frame,
                        # whose ``ref`` becomes the next yielded expert's, and
                        # ``self``: a cycle only the cyclic collector would
                        # break, the hold kept until it runs
                        self._error = e.with_traceback(None)
                    continue
            return Expert(cache, ref, self._keys[self._index[0]])

    def close(self) -> None:
        """End the stream: give back the holds of experts not yet yielded."""
        if self._cell is None:
            return
        cache = self._cache
        busy = cache._busy
        try:  # counted: the cache's close() waits for it
            busy.append(None)
            with self._lock:
                self._end(cache._lib)
        finally:
            busy.pop()

    def _end(self, lib: Any) -> None:
        """End the C stream through ``lib`` (the lock held, or closing).

        Not when ``lib`` is no longer the cache's C library (closed: the
        cache's close() ends it; a fork child: never).  The cell says
        whether C has a stream in it; it is cleared in the same step as the
        C call, as Python sees it.
        """
        cell = self._cell
        if cell is None or lib is not self._cache._clib:
            return
        null = _lib.ffi().NULL  # no call between the C call and the clear
        if cell[0] != null:
            try:
                lib.xc_cache_stream_end(cell[0])
            finally:
                cell[0] = null
        self._cell = None
        self._cache._streams.discard(self)

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # promptly; if this is interrupted, the armed cell still reaches
        # the cache's lost list and the next call ends the stream
        if getattr(self, "_cell", None) is not None:
            try:
                self.close()
            except KeyboardInterrupt:
                # a Ctrl-C handled here would be printed and dropped (what a
                # finalizer raises goes nowhere): it is delivered again
                _interrupt_again()


def _interrupt_again() -> None:
    """Deliver a Ctrl-C again to the main thread a moment from now, once the
    finalizer that caught it has returned.

    Re-arming it at once would run its handler inside the finalizer again
    (the interpreter checks for signals at the next call there)."""
    def later() -> None:
        time.sleep(INTERRUPT_AGAIN_S)
        # a real SIGINT to the main thread, as the first was: it wakes a
        # blocking call there, and goes through whatever handler is set
        signal.pthread_kill(main, signal.SIGINT)
    main = threading.main_thread().ident
    assert main is not None
    threading.Thread(target=later, name="xcache-interrupt-again",
                     daemon=True).start()
