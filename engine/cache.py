"""The expert cache's Python face: held experts as zero-copy numpy views.

All policy lives in the C core (``engine/csrc/xc_cache.c``, semantics in
``docs/CACHE.md``); this module only converts arguments, ties lifetimes
together and turns status codes into exceptions through ``_lib.check``.

Lifetimes: an :class:`ExpertCache` keeps its container alive; an
:class:`Expert` keeps its cache alive.  The numpy views of an expert are
valid until the expert is released -- after that the slot may be reused
for another expert and the views would show its bytes.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from engine import _lib
from engine.container import NUMPY_DTYPES
from engine.errors import EngineError, InvariantError, MisuseError


def _key_arrays(keys: list[tuple[int, int]]) -> tuple[Any, Any]:
    """The layers and the experts of keys as two int32 arrays (never NULL)."""
    new = _lib.ffi().new
    return (new("int32_t[]", [k[0] for k in keys] or [0]),
            new("int32_t[]", [k[1] for k in keys] or [0]))


#: Counters that depend on timing or on the machine, not on the semantics:
#: everything else must match between the synchronous and asynchronous paths.
TIMING_COUNTERS = ("load_ns", "page_cache_loads", "device_loads",
                   "unknown_loads", "page_cache_bytes", "device_bytes",
                   "queue_fallbacks")
_STREAM_END = 1


class _Layout:
    """Where each tensor sits in a payload, and how numpy should see it."""

    __slots__ = ("items",)

    def __init__(self, ptr: Any) -> None:
        ffi, lib = _lib.ffi(), _lib.lib()
        info = ffi.new("xc_slot_tensor *")
        items = []
        for i in range(lib.xc_cache_n_tensors(ptr)):
            _lib.check(lib.xc_cache_tensor(ptr, i, info))
            name = ffi.string(info.name).decode()
            dname = ffi.string(lib.xc_dtype_name(info.dtype)).decode()
            shape = tuple(int(info.shape[d]) for d in range(info.ndim))
            dtype = NUMPY_DTYPES.get(dname)
            if dtype is None:  # numpy lacks it: raw bytes, shape kept if 8-bit
                dtype = np.uint8
                if lib.xc_dtype_bits(info.dtype) != 8:
                    shape = (int(info.nbytes),)
            items.append((name, int(info.offset), int(info.nbytes),
                          np.dtype(dtype), shape))
        self.items = tuple(items)


def _closed(*_args: object) -> Any:
    raise MisuseError("the cache is closed", status=-7, kind="misuse")


class _ClosedLib:
    """Stands in for the C library once a cache is closed: every call is misuse."""

    def __getattr__(self, name: str) -> Any:
        return _closed


_CLOSED_LIB = _ClosedLib()


class Expert:
    """A held reference to one resident expert; release it (or use ``with``)."""

    # _h is the C handle of the hold (xc.h, xc_cache_hold): an int, so the
    # hit path allocates no xc_ref and the views are made only when asked.
    __slots__ = ("_cache", "_h", "key", "_released")

    def __init__(self, cache: ExpertCache, handle: int,
                 key: tuple[int, int]) -> None:
        self._cache = cache
        self._h = handle
        self.key = key
        self._released = False

    @property
    def slot(self) -> int:
        """The slot that holds this expert."""
        return self._h & 0xFFFFFFFF

    @property
    def data(self) -> np.ndarray:
        """The whole payload as a read-only zero-copy uint8 view."""
        self._alive()
        cache = self._cache
        ptr = cache._lib.xc_cache_hold_data(cache._ptr, self._h)
        if ptr == _lib.ffi().NULL:
            _lib.check(cache._lib.XC_E_MISUSE)  # recorded by C with its message
        buf = _lib.ffi().buffer(ptr, cache._expert_bytes)
        a = np.frombuffer(buf, dtype=np.uint8)
        a.flags.writeable = False
        return a

    @property
    def tensors(self) -> dict[str, np.ndarray]:
        """Each tensor as a read-only zero-copy view with its dtype and shape."""
        data = self.data
        return {name: data[off:off + n].view(dtype).reshape(shape)
                for name, off, n, dtype, shape in self._cache._layout.items}

    def release(self) -> None:
        """Give the hold back; a second release is a MisuseError."""
        if self._released:  # C cannot tell our hold from another's
            self._alive()
        cache = self._cache
        rc = cache._unhold(cache._ptr, self._h)
        if rc:
            _lib.check(rc)
        self._released = True

    def _alive(self) -> None:
        if self._released:
            raise MisuseError(f"expert {self.key} was released")

    def __enter__(self) -> Expert:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._released:
            self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return f"<Expert layer={self.key[0]} expert={self.key[1]} {state}>"


class Stream:
    """An open stream: yields held experts, resident ones first, then as reads complete.

    Each yielded :class:`Expert` is the caller's to release.  A failed read
    does not end the stream (docs/CACHE.md stream step 5): the other
    experts are still yielded, and the first failure is raised, with its
    own message, file and byte offset, once they all were; the next call
    then stops.  :meth:`close` (also the context manager's exit, garbage
    collection, and closing the cache) ends the stream early: the holds of
    experts not yet yielded go back, reads it started are finished first.
    """

    __slots__ = ("_cache", "_keys", "_st", "_ref", "_index", "_error",
                 "__weakref__")

    def __init__(self, cache: ExpertCache, keys: Iterable[tuple[int, int]]
                 ) -> None:
        ffi, lib = _lib.ffi(), cache._lib
        self._st: Any = None
        self._cache = cache
        self._keys = list(keys)
        layers, experts = _key_arrays(self._keys)
        out = ffi.new("xc_stream **")
        _lib.check(lib.xc_cache_stream_begin(cache._ptr, layers, experts,
                                             len(self._keys), out))
        self._st = out[0]
        self._ref = ffi.new("xc_ref *")
        self._index = ffi.new("size_t *")
        self._error: EngineError | None = None
        cache._streams.add(self)

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> Expert:
        while True:
            if self._st is None:
                raise StopIteration
            cache = self._cache
            rc = cache._lib.xc_cache_stream_next(self._st, self._ref,
                                                 self._index)
            if rc == _STREAM_END:
                err, self._error = self._error, None
                self.close()
                if err is not None:
                    raise err
                raise StopIteration
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
        st, self._st = self._st, None
        if st is not None:
            self._cache._streams.discard(self)
            self._cache._lib.xc_cache_stream_end(st)

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_st", None) is not None:
            self.close()


class ExpertCache:
    """Slots of experts streamed from a container (see docs/CACHE.md).

    The expert layout is the caller's: ``expert_template`` names a tensor
    from ``{layer}``, ``{expert}`` and ``{tensor}``; ``tensors`` are the
    ``{tensor}`` parts of one expert in slot order; ``layers`` are the MoE
    layer ids (ascending) and ``n_experts`` the experts per layer.  The
    engine knows no model's names; a fixture's spec gives them with
    ``fixtures.preset(name).cache_layout()``.
    """

    def __init__(self, container: Any, *, n_slots: int | None = None,
                 budget_bytes: int | None = None, top_k: int,
                 expert_template: str, tensors: Sequence[str],
                 layers: Sequence[int], n_experts: int, policy: str = "lru",
                 chunk_bytes: int = 0, batch_threads: int = 2,
                 io_threads: int = 0, io_depth: int = 0,
                 split_min_misses: int = 1, lock_memory: bool = False,
                 trace_path: str | os.PathLike[str] | None = None,
                 trace_ring_records: int = 0) -> None:
        ffi, lib = _lib.ffi(), _lib.lib()
        if (n_slots is None) == (budget_bytes is None):
            raise MisuseError("give exactly one of n_slots and budget_bytes")
        self._container = container
        names = [ffi.new("char[]", t.encode()) for t in tensors]
        keep = {
            "policy": ffi.new("char[]", policy.encode()),
            "template": ffi.new("char[]", expert_template.encode()),
            "names": names,
            "tensors": ffi.new("const char *[]", names),
            "layers": ffi.new("int32_t[]", list(layers)),
            "trace": (ffi.new("char[]", os.fsencode(trace_path))
                      if trace_path is not None else ffi.NULL),
        }
        o = ffi.new("xc_cache_opts *")
        o.n_slots = n_slots or 0
        o.budget_bytes = budget_bytes or 0
        o.top_k = top_k
        o.policy = keep["policy"]
        o.expert_template = keep["template"]
        o.tensors = keep["tensors"]
        o.n_tensors = len(names)
        o.layers = keep["layers"]
        o.n_layers = len(layers)
        o.n_experts = n_experts
        o.chunk_bytes = chunk_bytes
        o.batch_threads = batch_threads
        o.io_threads = io_threads
        o.io_depth = io_depth
        o.split_min_misses = split_min_misses
        o.lock_memory = int(lock_memory)
        o.trace_path = keep["trace"]
        o.trace_ring_records = trace_ring_records
        out = ffi.new("xc_cache **")
        handle = getattr(container, "_handle", None)  # MisuseError if closed
        cptr = handle() if handle is not None else container._ptr
        _lib.check(lib.xc_cache_open(cptr, o, out))
        self._ptr = ffi.gc(out[0], lib.xc_cache_close)
        self._layout = _Layout(self._ptr)
        #: whether the slot arena is locked in memory, and why (not) in words
        self.mlock_active: bool = bool(lib.xc_cache_mlock_active(self._ptr))
        self.mlock_note: str = ffi.string(
            lib.xc_cache_mlock_note(self._ptr)).decode("utf-8", "replace")
        self._lib = lib
        # bound once: the hit path is a few hundred ns and lookups show
        self._hold, self._unhold = lib.xc_cache_hold, lib.xc_cache_unhold
        self._expert_bytes = int(lib.xc_cache_expert_bytes(self._ptr))
        self._new = ffi.new
        caches = getattr(container, "_caches", None)
        if caches is not None:  # Container.close refuses while we are open
            caches.add(self)
        #: open streams, ended by close() before the C cache is freed
        self._streams: weakref.WeakSet[Stream] = weakref.WeakSet()

    # -- access ---------------------------------------------------------
    def get(self, layer: int, expert: int) -> Expert:
        """Demand access: a held reference to (layer, expert), loaded if needed."""
        h = self._hold(self._ptr, layer, expert)
        if h < 0:
            _lib.check(h)
        return Expert(self, h, (layer, expert))

    def getmany(self, keys: Iterable[tuple[int, int]]) -> int:
        """Batch prefetch of (layer, expert) keys; returns how many were loaded."""
        keys = list(keys)
        layers, experts = _key_arrays(keys)
        out = _lib.ffi().new("size_t *")
        _lib.check(self._lib.xc_cache_getmany(self._ptr, layers, experts,
                                              len(keys), out))
        return int(out[0])

    def prefetch(self, keys: Iterable[tuple[int, int]], *,
                 speculative: bool = False) -> int:
        """Read-ahead of keys; returns loads published (synchronous) or started."""
        keys = list(keys)
        layers, experts = _key_arrays(keys)
        out = _lib.ffi().new("size_t *")
        _lib.check(self._lib.xc_cache_prefetch(self._ptr, layers, experts,
                                               len(keys), int(speculative),
                                               out))
        return int(out[0])

    def drain(self) -> None:
        """Wait until every read-ahead read queued so far has ended."""
        self._lib.xc_cache_drain(self._ptr)

    def stream(self, keys: Iterable[tuple[int, int]]) -> Stream:
        """Begin a stream of ``keys`` now; iterate it for held experts.

        Validation happens here (MisuseError, nothing changed), and the
        resident keys are counted and held, the missing ones reserved and
        queued (docs/CACHE.md "stream").  See :class:`Stream`.
        """
        return Stream(self, keys)

    def set_step(self, step: int) -> None:
        """Stamp trace records from now on with ``step`` (a token index, say)."""
        self._lib.xc_cache_set_step(self._ptr, step)

    def trace_flush(self) -> None:
        """Write buffered trace records to the trace file now."""
        _lib.check(self._lib.xc_cache_trace_flush(self._ptr))

    def pin(self, layer: int, expert: int) -> None:
        """Protect a resident expert from eviction (nests)."""
        _lib.check(self._lib.xc_cache_pin(self._ptr, layer, expert))

    def unpin(self, layer: int, expert: int) -> None:
        """Undo one pin."""
        _lib.check(self._lib.xc_cache_unpin(self._ptr, layer, expert))

    # -- counters and introspection -------------------------------------
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

    def reset_stats(self) -> None:
        """Start a new counter window (residents and policy state are kept)."""
        self._lib.xc_cache_reset_stats(self._ptr)

    def check(self) -> None:
        """Walk every structure; raise InvariantError naming the first broken INV."""
        n = self._lib.xc_cache_check(self._ptr)
        if n:
            inv = _lib.invariant_names().get(n, f"INV-{n}")
            raise InvariantError(_lib.last_error()[4], inv=inv, number=n)

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

    def contiguous(self, layer: int, expert: int) -> bool:
        """Whether the expert is one contiguous run in its shard."""
        return bool(_lib.check(self._lib.xc_cache_contiguous(self._ptr, layer,
                                                             expert)))

    @property
    def n_slots(self) -> int:
        """Number of slots."""
        return int(self._lib.xc_cache_n_slots(self._ptr))

    @property
    def stride(self) -> int:
        """Bytes per slot."""
        return int(self._lib.xc_cache_stride(self._ptr))

    @property
    def expert_bytes(self) -> int:
        """Payload bytes of one expert."""
        return int(self._lib.xc_cache_expert_bytes(self._ptr))

    # -- lifetime -------------------------------------------------------
    def close(self) -> None:
        """Free the cache now; idempotent.

        Every method called afterwards raises MisuseError ("the cache is
        closed"), and so do ``data``, ``tensors`` and ``release`` of experts
        still held (their holds went with the cache).
        """
        if self._ptr is not None:
            for st in list(self._streams):  # C: streams end before close
                st.close()
            # swap the entry points first: nothing reaches the freed pointer
            self._lib = _CLOSED_LIB
            self._hold = self._unhold = _closed
            _lib.ffi().release(self._ptr)
            self._ptr = None
            caches = getattr(self._container, "_caches", None)
            if caches is not None:
                caches.discard(self)

    def __enter__(self) -> ExpertCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
