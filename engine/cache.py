"""The expert cache's Python face: held experts as zero-copy numpy views.

All policy lives in the C core (``engine/csrc/xc_cache.c``, semantics in
``docs/CACHE.md``); this module only converts arguments, ties lifetimes
together and turns status codes into exceptions through ``_lib.check``.

Lifetimes: an :class:`ExpertCache` keeps its container alive; an
:class:`Expert` keeps its cache alive; a numpy view keeps the slot arena it
points into alive, even past ``close()`` and the cache's collection (the
arena is reference-counted in C, ``xc_cache_arena``).  A view also keeps
its hold: an Expert or LayerHold dropped without ``release()`` gives its
hold back once it and every view of it are garbage (``engine.hold``).  A
view shows its expert's bytes until the expert is released -- after an
explicit ``release()`` the slot may be reused for another expert, which
``XCACHE_CHECK_VIEWS=1`` turns into a MisuseError at the release.

Threads: ``close()`` waits for the calls in progress in other threads
(every C call is counted in ``_busy``, a list appended to and popped
from, which the GIL makes atomic), then refuses new ones.  A
:class:`Stream` serialises its own calls with a lock.  After ``fork()`` a
cache the parent opened refuses every call in the child and its
``close()`` does nothing.  docs/CACHE.md "Threads, fork and lifetimes".

Holds owned before they exist: Ctrl-C (or any exception a signal handler
raises) must never orphan a hold, and must never wait for one.  CPython
runs a handler only where its eval loop checks (a call's return, a
function's entry, a backward jump), so a hold C returned as a value would
be lost at the very return.  Instead the owner comes first: every cell C
writes a hold into -- an ``xc_ref`` (get, a stream's next), a handle array
(hold_layer), a stream pointer (stream) -- is made before the call and
armed with ``ffi.gc(cell, self._lose)``, a finalizer with no Python code
that appends the cell to ``_lost`` when its owner is gone; the next call
on the cache (``_sweep``, counted busy, so close() waits for it) gives
back what each lost cell still holds.  C marks every give-back in the cell
itself (``xc_cache_release`` spends the ref, ``xc_cache_unhold_many`` sets
the handles to -1; a stream's cell is cleared in the ``finally`` of the C
call, with no call between), so an interrupted release or sweep leaves a
cell that says the truth.  Signals are never masked: the C calls that
wait stay interruptible at their return.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import weakref
from array import array
from collections.abc import Iterable
from typing import Any

import numpy as np

from xcache.engine import _lib
from xcache.engine import args as _args
from xcache.engine import errors as _err
from xcache.engine._lib import misuse
from xcache.engine.cache_options import open_cache
from xcache.engine.container import Container
from xcache.engine.errors import InvariantError
from xcache.engine.hold import (
    Expert,
    HoldViews,
    LayerHold,
    SlotLayout,
    hold_layer,
    pinned_bytes,
)
from xcache.engine.layout import UNSET, resolve
from xcache.engine.stream import Stream
from xcache.engine.stream import key_arrays as _key_arrays
from xcache.engine.weightless import explained

__all__ = ["TIMING_COUNTERS", "Expert", "ExpertCache", "LayerHold", "Stream"]


#: Counters that depend on timing or on the machine, not on the semantics:
#: everything else must match between the synchronous and asynchronous paths.
TIMING_COUNTERS = ("load_ns", "page_cache_loads", "device_loads",
                   "unknown_loads", "page_cache_bytes", "device_bytes",
                   "queue_fallbacks")


def _closed(*_args: object) -> Any:
    raise misuse("the cache is closed")


class _ClosedLib:
    """Stands in for the C library once a cache is closed: every call is misuse."""

    def __init__(self, fail: Any = _closed) -> None:
        self._fail = fail

    def __getattr__(self, name: str) -> Any:
        return self._fail


_CLOSED_LIB = _ClosedLib()


def _gated(fn: Any) -> Any:
    """Counts a method of ExpertCache as a call in progress (close waits for it)."""
    @functools.wraps(fn)
    def call(self: ExpertCache, *args: Any, **kwargs: Any) -> Any:
        busy = self._busy
        try:  # appended inside: a signal after the append still pops it
            busy.append(None)
            if self._lost:
                self._sweep()
            return fn(self, *args, **kwargs)
        finally:
            busy.pop()
    return call


#: every open cache of this process, for the fork handler
_OPEN: weakref.WeakSet[ExpertCache] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a child after fork(): every cache of the parent refuses all calls."""
    for cache in list(_OPEN):
        cache._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class ExpertCache:
    """Slots of experts streamed from a container (see docs/CACHE.md).

    The expert layout is given either as five keywords or as ``layout``.
    The keywords: ``expert_template`` names a tensor from ``{layer}``,
    ``{expert}`` and ``{tensor}`` (without ``{expert}``, the tensors are
    fused: expert e is slice e of each, docs/LAYOUT.md); ``tensors`` are
    the ``{tensor}`` parts of one expert in slot order; ``layers`` are the
    MoE layer ids (ascending), ``n_experts`` the experts per layer and
    ``top_k`` the experts per token.  ``layout`` is an
    :class:`engine.layout.Layout`, a mapping of those five keys, or a path
    to a TOML layout file; giving it together with any of the five is a
    MisuseError.  The engine knows no model's names: :meth:`open` finds the
    layout of a container (docs/LAYOUT.md).
    """

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, layout: Any = None,
             **cache_options: Any) -> ExpertCache:
        """Open the container at ``path`` and a cache on it, in one call.

        The layout is ``engine.layout.resolve(path, layout)`` (an explicit
        layout, else ``xcache-layout.toml``, the fixture spec, detection).
        ``direct``, ``verify`` and ``io`` go to :class:`engine.Container`,
        every other option to the cache.  The cache owns the container:
        :meth:`close` closes both.  A checkpoint's folder without its weights
        (index and config, shards missing, Git-LFS pointers or header-only)
        raises the reader's error led by what to do: make a twin with
        ``xcache-fixtures from-header`` (``engine.weightless``).
        """
        copts = {k: cache_options.pop(k) for k in ("direct", "verify", "io")
                 if k in cache_options}
        try:
            cont = Container(path, **copts)
        except _err.EngineError as e:
            # a checkpoint without its weights: say so and what to do
            made = explained(e, path)
            if made is e:
                raise
            raise made from None
        try:
            lay = resolve(path, layout, container=cont)
            cache = cls(cont, layout=lay, **cache_options)
        except BaseException:
            cont.close()
            raise
        cache._owns_container = True
        return cache

    def __init__(self, container: Any, *, layout: Any = None,
                 n_slots: int | None = None,
                 budget_bytes: int | None = None, top_k: Any = UNSET,
                 expert_template: Any = UNSET, tensors: Any = UNSET,
                 layers: Any = UNSET, n_experts: Any = UNSET,
                 policy: str = "lru",
                 chunk_bytes: int = 0, batch_threads: int = 2,
                 io_threads: int = 0, io_depth: int = 0,
                 split_min_misses: int = 1, lock_memory: bool = False,
                 trace_path: str | os.PathLike[str] | None = None,
                 trace_ring_records: int = 0) -> None:
        ffi, lib = _lib.ffi(), _lib.lib()
        self._ptr: Any = None
        self._busy: list[None] = []
        #: what owners that are gone left to give back (the module
        #: docstring, "Holds owned before they exist"); _lose appends to it
        #: and is the C-only finalizer of every armed cell
        self._lost: list[Any] = []
        self._lose = self._lost.append
        self._sweeping = threading.RLock()
        self._owns_container = False
        #: the C cache, and the layout facts it was opened with (read by
        #: the properties below; the C cache keeps its own copy)
        self._ptr, self._shape = open_cache(
            container, layout=layout, n_slots=n_slots, budget_bytes=budget_bytes,
            top_k=top_k, expert_template=expert_template, tensors=tensors,
            layers=layers, n_experts=n_experts, policy=policy,
            chunk_bytes=chunk_bytes, batch_threads=batch_threads,
            io_threads=io_threads, io_depth=io_depth,
            split_min_misses=split_min_misses, lock_memory=lock_memory,
            trace_path=trace_path, trace_ring_records=trace_ring_records)
        self._container = container
        #: the C library for internal calls that must still work while
        #: closing (ending streams); _lib is swapped to refuse once closed
        self._clib = lib
        # The arena as one read-only numpy array whose base chain holds a
        # reference to the C arena: every view is a slice of it, so no view
        # can outlive the memory it shows.
        arena = lib.xc_cache_arena(self._ptr)
        base = lib.xc_arena_data(arena)
        keeper = ffi.gc(ffi.cast("uint8_t *", base),
                        lambda _p, a=arena, rel=lib.xc_arena_release: rel(a))
        self._arena = np.frombuffer(
            ffi.buffer(keeper, int(lib.xc_arena_bytes(arena))), np.uint8)
        self._arena.flags.writeable = False
        self._layout = SlotLayout(self._ptr)
        #: whether the slot arena is locked in memory, and why (not) in words
        self.mlock_active: bool = bool(lib.xc_cache_mlock_active(self._ptr))
        self.mlock_note: str = ffi.string(
            lib.xc_cache_mlock_note(self._ptr)).decode("utf-8", "replace")
        self._lib = lib
        # bound once: the hit path is a few hundred ns and lookups show
        self._hold, self._unhold = lib.xc_cache_get, lib.xc_cache_release
        self._expert_bytes = int(lib.xc_cache_expert_bytes(self._ptr))
        #: views by payload offset and spare C arrays of hold_layer
        self._hold_views = HoldViews(lib, self._ptr, self._arena, self._layout,
                                     int(lib.xc_cache_n_slots(self._ptr)),
                                     self._busy, self._lose)
        self._pid = os.getpid()
        self._fork_note: str | None = None
        caches = getattr(container, "_caches", None)
        if caches is not None:  # Container.close refuses while we are open
            caches.add(self)
        #: open streams, ended by close() before the C cache is freed
        self._streams: weakref.WeakSet[Stream] = weakref.WeakSet()
        _OPEN.add(self)

    def _view(self, h: int, owner: object,
              seen: list[Any] | None = None) -> np.ndarray:
        """The payload of held handle ``h``, a read-only view that keeps ``owner``.

        The view's base chain holds ``owner`` (the Expert) and the arena, so
        a hold is never given back by garbage collection while a view of it
        (or a slice of one) is alive; ``seen`` gets a weak reference that
        lives as long as the view does (``engine.hold.pinned_bytes``).
        """
        busy = self._busy
        try:
            busy.append(None)
            ptr = self._lib.xc_cache_hold_data(self._ptr, h)
            if ptr == _lib.ffi().NULL:
                _lib.check(self._lib.XC_E_MISUSE)  # recorded by C
        finally:
            busy.pop()
        return pinned_bytes(ptr, self._expert_bytes, owner, self._arena, seen)

    def _new_ref(self) -> Any:
        """A new empty ``xc_ref``, armed: dropped, it goes to ``_lost``."""
        ffi = _lib.ffi()
        return ffi.gc(ffi.new("xc_ref *"), self._lose)

    def _sweep(self) -> None:
        """Give back what owners that are gone left in ``_lost``.

        Called inside a counted call (``_busy``): close() waits for it.
        Each entry says itself whether C still holds it (a ref's data, a
        handle array's first handle, a stream cell's pointer), and C clears
        that as it gives it back, so an entry interrupted half way is
        finished by the next sweep; it leaves the list only then.
        """
        lib = self._lib
        if lib is not self._clib:  # closed, or a fork child: C is not ours
            return
        ffi, ptr, lost = _lib.ffi(), self._ptr, self._lost
        ref_t, handles_t = ffi.typeof("xc_ref *"), ffi.typeof("int64_t[]")
        with self._sweeping:  # one sweeper: C spends a cell after unlocking
            while lost:
                cell = lost[0]
                kind = ffi.typeof(cell)
                if kind is ref_t:
                    if cell.data:
                        lib.xc_cache_release(ptr, cell)  # spends it
                elif kind is handles_t:
                    if cell[0] != -1:
                        lib.xc_cache_unhold_many(ptr, cell, len(cell))
                elif cell[0] != ffi.NULL:  # a stream nobody ended
                    try:
                        lib.xc_cache_stream_end(cell[0])
                    finally:
                        cell[0] = ffi.NULL
                if lost and lost[0] is cell:
                    del lost[0]

    def _end_lost_streams(self) -> None:
        """At close: end the streams in ``_lost`` (the holds go with the cache)."""
        ffi, lost = _lib.ffi(), self._lost
        stream_t = ffi.typeof("xc_stream **")
        with self._sweeping:
            while lost:
                cell = lost[0]
                if ffi.typeof(cell) is stream_t and cell[0] != ffi.NULL:
                    try:
                        self._clib.xc_cache_stream_end(cell[0])
                    finally:
                        cell[0] = ffi.NULL
                if lost and lost[0] is cell:
                    del lost[0]

    # -- access ---------------------------------------------------------
    def get(self, layer: int, expert: int) -> Expert:
        """Demand access: a held reference to (layer, expert), loaded if needed."""
        # the owner first: C fills an armed ref (see "Holds owned before
        # they exist" in the module docstring)
        ref = self._new_ref()
        busy = self._busy
        try:
            busy.append(None)
            if self._lost:
                self._sweep()
            rc = self._hold(self._ptr, layer, expert, ref)
        except (OverflowError, TypeError) as e:  # cffi refused an argument
            raise _args.conversion_error(e, [("layer", layer, *_args.INT32),
                                             ("expert", expert, *_args.INT32)]
                                         ) from None
        finally:
            busy.pop()
        if rc:  # nothing written to ref: no need for the lost list
            _lib.ffi().gc(ref, None)
            _lib.check(rc)
        return Expert(self, ref, (layer, expert))

    #: ``with cache.hold_layer(layer, experts) as views:`` -- one layer's
    #: experts held in one C call; see :func:`engine.hold.hold_layer`
    hold_layer = hold_layer

    @_gated
    def getmany(self, keys: Iterable[tuple[int, int]]) -> int:
        """Batch prefetch of (layer, expert) keys; returns how many were loaded."""
        ffi, layers = _lib.ffi(), None
        # The usual batch, a list of (layer, expert) tuples, skips the
        # per-key checks (Python time paid once per batch of loads):
        # array("i") takes exactly what check_int does (an index in int32;
        # int is 32 bits on every platform the engine builds for) and
        # anything it refuses takes check_keys, which names what and where.
        if type(keys) is list and keys and {*map(type, keys)} == {tuple}:
            try:
                ls, es = zip(*keys, strict=True)
                layers = ffi.from_buffer("int32_t[]", array("i", ls + es))
            except (TypeError, ValueError, OverflowError):
                layers = None
            else:
                experts = layers + len(ls)
        if layers is None:
            keys = _args.check_keys("keys", keys)
            layers, experts = _key_arrays(keys)
        out = ffi.new("size_t *")
        _lib.check(self._lib.xc_cache_getmany(self._ptr, layers, experts,
                                              len(keys), out))
        return int(out[0])

    @_gated
    def prefetch(self, keys: Iterable[tuple[int, int]], *,
                 speculative: bool = False) -> int:
        """Read-ahead of keys; returns loads published (synchronous) or started."""
        keys = _args.check_keys("keys", keys)
        spec = _args.check_flag("speculative", speculative)
        layers, experts = _key_arrays(keys)
        out = _lib.ffi().new("size_t *")
        _lib.check(self._lib.xc_cache_prefetch(self._ptr, layers, experts,
                                               len(keys), int(spec), out))
        return int(out[0])

    @_gated
    def drain(self) -> None:
        """Wait until every read-ahead read queued so far has ended."""
        self._lib.xc_cache_drain(self._ptr)

    @_gated
    def stream(self, keys: Iterable[tuple[int, int]]) -> Stream:
        """Begin a stream of ``keys`` now; iterate it for held experts.

        Validation happens here (MisuseError, nothing changed), and the
        resident keys are counted and held, the missing ones reserved and
        queued (docs/CACHE.md "stream").  See :class:`Stream`.
        """
        return Stream(self, keys)

    @_gated
    def set_step(self, step: int) -> None:
        """Stamp trace records from now on with ``step`` (a token index, say)."""
        self._lib.xc_cache_set_step(self._ptr,
                                    _args.check_int("step", step, *_args.U64))

    @_gated
    def trace_flush(self) -> None:
        """Write buffered trace records to the trace file now."""
        _lib.check(self._lib.xc_cache_trace_flush(self._ptr))

    @_gated
    def pin(self, layer: int, expert: int) -> None:
        """Protect a resident expert from eviction (nests)."""
        layer, expert = _args.check_key(layer, expert)
        _lib.check(self._lib.xc_cache_pin(self._ptr, layer, expert))

    @_gated
    def unpin(self, layer: int, expert: int) -> None:
        """Undo one pin."""
        layer, expert = _args.check_key(layer, expert)
        _lib.check(self._lib.xc_cache_unpin(self._ptr, layer, expert))

    # -- counters and introspection -------------------------------------
    @_gated
    def stats(self) -> dict[str, float]:
        """This window's counters plus the derived adjusted hits and rates."""
        s = _lib.ffi().new("xc_stats *")
        self._lib.xc_cache_stats(self._ptr, s)
        d: dict[str, float] = {k: int(getattr(s, k))
                                   for k in _lib.stats_fields()}
        d["spec_adjusted_hits"] = d["hits"] - d["spec_used"]
        req = d["requests"]
        d["adjusted_hits_aggregate"] = max(d["hits"] - d["prefetch_loads"], 0)
        d["adjusted_hits_exact"] = d["hits"] - d["prefetch_first_uses"]
        for name in ("hit_rate", "adjusted_hit_rate_aggregate",
                     "adjusted_hit_rate_exact"):
            num = d["hits" if name == "hit_rate" else
                    name.replace("_rate", "s")]
            d[name] = num / req if req else 0.0
        return d

    @_gated
    def reset_stats(self) -> None:
        """Start a new counter window (residents and policy state are kept)."""
        self._lib.xc_cache_reset_stats(self._ptr)

    @_gated
    def check(self) -> None:
        """Walk every structure; raise InvariantError naming the first broken INV."""
        n = self._lib.xc_cache_check(self._ptr)
        if n:
            inv = _lib.invariant_names().get(n, f"INV-{n}")
            raise InvariantError(_lib.last_error()[4], inv=inv, number=n)

    @_gated
    def slots(self) -> list[dict[str, Any]]:
        """A snapshot of every slot: state, key, holds, pins, unused mark."""
        ffi = _lib.ffi()
        st, la, ex = ffi.new("int *"), ffi.new("int32_t *"), ffi.new("int32_t *")
        ho, pi, mk = ffi.new("uint32_t *"), ffi.new("uint32_t *"), ffi.new("int *")
        out = []
        for i in range(self.n_slots):
            _lib.check(self._lib.xc_cache_slot(self._ptr, i, st, la, ex, ho, pi,
                                               mk))
            key = None if st[0] == 0 else (int(la[0]), int(ex[0]))
            out.append({"state": _lib.slot_state_names()[st[0]], "key": key,
                        "holds": int(ho[0]), "pins": int(pi[0]),
                        "unused_mark": bool(mk[0])})
        return out

    def resident(self) -> set[tuple[int, int]]:
        """The keys of READY slots."""
        return {s["key"] for s in self.slots() if s["state"] == "ready"}

    @_gated
    def contiguous(self, layer: int, expert: int) -> bool:
        """Whether the expert is one contiguous run in its shard."""
        layer, expert = _args.check_key(layer, expert)
        return bool(_lib.check(self._lib.xc_cache_contiguous(self._ptr, layer,
                                                             expert)))

    @property
    @_gated
    def n_slots(self) -> int:
        """Number of slots."""
        return int(self._lib.xc_cache_n_slots(self._ptr))

    @property
    @_gated
    def stride(self) -> int:
        """Bytes per slot."""
        return int(self._lib.xc_cache_stride(self._ptr))

    @property
    @_gated
    def expert_bytes(self) -> int:
        """Payload bytes of one expert."""
        return int(self._lib.xc_cache_expert_bytes(self._ptr))

    @property
    def layers(self) -> tuple[int, ...]:
        """The MoE layer ids the cache serves, ascending."""
        return self._shape[0]

    @property
    def n_experts(self) -> int:
        """Experts per MoE layer."""
        return self._shape[1]

    @property
    def top_k(self) -> int:
        """Experts routed per token (the budget's floor is ``top_k + 1`` slots)."""
        return self._shape[2]

    @property
    def policy(self) -> str:
        """The policy spec the cache was opened with (``"lru"``, ``"arc"``, ...)."""
        return self._shape[3]

    def __repr__(self) -> str:
        layers, n_experts, top_k, policy = getattr(
            self, "_shape", ((), 0, 0, "?"))
        if not layers:
            span = "no layers"
        elif len(layers) == 1:
            span = f"layer {layers[0]}"
        elif layers[-1] - layers[0] == len(layers) - 1:
            span = f"layers {layers[0]}-{layers[-1]}"
        else:
            span = f"{len(layers)} layers from {layers[0]} to {layers[-1]}"
        if getattr(self, "_ptr", None) is None or self._lib is _CLOSED_LIB:
            state = "closed"
        else:
            state = (f"{self.n_slots} slots of {self.stride:,} bytes, "
                     f"{len(self.resident()):,} resident")
        return (f"<ExpertCache {policy!r} {span} x {n_experts} experts, "
                f"top-{top_k}; {state}>")

    # -- lifetime -------------------------------------------------------
    def close(self) -> None:
        """Free the cache now; idempotent; safe while other threads use it.

        New calls are refused at once; calls already in progress in other
        threads (a ``get`` waiting for its read, a stream's ``next``) are
        waited for, then open streams are ended and the C cache is freed.
        Every method called afterwards raises MisuseError ("the cache is
        closed"), and so do ``data``, ``tensors`` and ``release`` of experts
        still held (their holds went with the cache).  Views taken before
        stay readable (the arena lives as long as they do).  In a child
        process after ``fork()`` it does nothing.
        """
        if self._ptr is None:
            return
        # swap the entry points first: no new call reaches the C cache
        self._lib = _CLOSED_LIB
        self._hold = self._unhold = _closed
        self._hold_views.refuse(_closed)
        if self._fork_note is None:
            while self._busy:  # calls in progress in other threads
                time.sleep(0.0005)
            for st in list(self._streams):  # C: streams end before close
                with st._lock:
                    st._end(self._clib)
            self._end_lost_streams()
            ptr, self._ptr = self._ptr, None
            _lib.ffi().release(ptr)
        else:
            self._ptr = None
        self._arena = None  # the views that remain keep the C arena alive
        _OPEN.discard(self)
        caches = getattr(self._container, "_caches", None)
        if caches is not None:
            caches.discard(self)
        if self._owns_container and self._fork_note is None:
            self._container.close()  # opened by ExpertCache.open for us

    def _forked(self) -> None:
        """In a child after fork(): refuse every call, free nothing, join nothing."""
        if self._ptr is None:
            return
        note = (f"the cache was opened by process {self._pid}; this is a "
                f"child process ({os.getpid()}) made by fork(), where the "
                f"cache's threads do not exist: open a new cache here")

        def refuse(*_args: object) -> Any:
            raise misuse(note)

        self._fork_note = note
        self._lib = _ClosedLib(refuse)
        self._hold = self._unhold = refuse
        self._hold_views.refuse(refuse)
        _lib.ffi().gc(self._ptr, None)  # never xc_cache_close in the child
        self._busy = []  # the parent's threads are not here to pop
        self._hold_views.busy = self._busy
        for st in list(self._streams):  # never end them here: no readers
            st._cell = None
            st._lock = threading.Lock()
        self._sweeping = threading.RLock()  # a parent's thread may have had it
        caches = getattr(self._container, "_caches", None)
        if caches is not None:
            caches.discard(self)

    def __enter__(self) -> ExpertCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
