"""Held references of an expert cache: one expert (:class:`Expert`) or one
layer's experts at once (:class:`LayerHold`), and their numpy views.

A slot's payload layout is fixed per container (:class:`SlotLayout`); a
hold costs two C calls (``xc_cache_hold_layer``, ``xc_cache_unhold_many``)
and its views are made when first read (:class:`HeldTensors`).

Holds given back: every view is a numpy array whose base chain holds the
hold itself (an :class:`Expert`, or a LayerHold's :class:`_Grip`) through
a cffi buffer (:func:`pinned_bytes`), so a hold dropped without
``release()`` is given back once it and every view of it (slices
included) are garbage -- never while a view could still show the slot.
What C fills (an ``xc_ref``, an array of handles) is armed before the C
call with a C-only finalizer that puts it on the cache's lost list, and
the next call on the cache gives it back (``engine.cache``, "Holds owned
before they exist"): no Python code runs between a hold taken in C and its
owner, nor between a dropped owner and the list.  No reference cycle
runs through a hold.  After an explicit ``release()`` the slot may be
reused: the hold's mappings refuse to be read (MisuseError), and with
``XCACHE_CHECK_VIEWS=1`` in the environment ``release()`` itself refuses
while an array of the hold is still alive.  Semantics in docs/CACHE.md
"hold_layer" and "Holds"; lifetimes in the ``engine.cache`` docstring.
"""

from __future__ import annotations

import operator
import os
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

import numpy as np

from xcache.engine import _lib
from xcache.engine import args as _args
from xcache.engine._lib import misuse
from xcache.engine.container import NUMPY_DTYPES


class CacheCore(Protocol):
    """What a held reference or a stream uses of the cache that made it.

    ``engine.cache.ExpertCache`` is the one class that has these; naming
    them here keeps the cache above its holds and streams (it imports them,
    they never import it).
    """

    _ptr: Any  # the C cache
    _lib: Any  # the loaded library, refusing every call once closed
    _clib: Any  # the loaded library, always
    _busy: list[None]  # one entry per C call in progress
    _layout: Any  # the payload layout (PayloadLayout)
    _hold_views: Any  # the cache's HoldViews
    _streams: Any  # the live streams (a WeakSet)
    _unhold: Any  # xc_cache_release, or a refusal once closed
    _lost: list[Any]  # what dropped owners left to give back
    _lose: Any  # _lost.append: the C-only finalizer of what C fills

    def _sweep(self) -> None: ...

    def _new_ref(self) -> Any: ...

    def _view(self, h: int, owner: object,
              seen: list[Any] | None = None) -> np.ndarray: ...


#: Whether ``release()`` refuses while a view of the hold is alive (a
#: debugging aid: it costs a weak reference per view and a look at each).
CHECK_VIEWS = os.environ.get("XCACHE_CHECK_VIEWS", "") not in ("", "0")


def _pin(ptr: Any, n_bytes: int, owner: object, arena: Any,
         ) -> tuple[memoryview, weakref.ref]:
    """``n_bytes`` at C pointer ``ptr`` as a read-only buffer that keeps ``owner``.

    The buffer is a cffi buffer over a pointer whose (empty) destructor
    holds ``owner`` and ``arena`` (the numpy arena, which keeps the C
    arena); every numpy array made on it, and every slice or view of one,
    refers to that buffer, so they keep both alive.  The weak reference is
    to the pointer: it dies with the last of them.
    """
    ffi = _lib.ffi()
    keeper = ffi.gc(ffi.cast("uint8_t *", ptr),
                    lambda _p, _o=owner, _a=arena: None)
    return (memoryview(ffi.buffer(keeper, n_bytes)).toreadonly(),
            weakref.ref(keeper))


def pinned_bytes(ptr: Any, n_bytes: int, owner: object, arena: Any,
                 seen: list[weakref.ref] | None = None) -> np.ndarray:
    """``n_bytes`` at ``ptr``, a read-only uint8 array that keeps ``owner`` alive.

    With ``seen``, a weak reference that lives as long as the array or any
    view of it is appended there.
    """
    buf, ref = _pin(ptr, n_bytes, owner, arena)
    if seen is not None:
        seen.append(ref)
    return np.frombuffer(buf, np.uint8)


def _alive(seen: list[weakref.ref] | None) -> int:
    """How many of the weakly referenced view bases are still alive."""
    return sum(1 for ref in seen or () if ref() is not None)


def _views_alive_error(what: str, n: int) -> Exception:
    return misuse(f"{what}: release() while {n} view(s) of it are alive; the "
                  "slot would then show another expert's bytes under them "
                  "(drop or copy them first; XCACHE_CHECK_VIEWS is set)")


class SlotLayout:
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



class Expert:
    """A held reference to one resident expert; release it (or use ``with``)."""

    # _ref is the hold itself: an xc_ref that xc_cache_get (or a stream's
    # next) filled before this object was made, and that xc_cache_release
    # spends (its data becomes NULL) -- C writes both, so ``_ref.data``
    # says whether the hold is taken whatever Python was interrupted
    # where.  _ref is armed (engine.cache "Holds owned before they exist"):
    # dropped while filled, it goes to its cache's lost list and the next
    # call on the cache gives it back -- no Python finalizer, so no signal
    # can land between a dropped Expert and its give-back.  _live is set
    # while held and claims a release: deleting an unset slot fails
    # atomically, so of two racing releases exactly one calls C.  Each
    # view's base chain holds the Expert, so _ref is dropped only once no
    # view of it is alive.  _seen: weak references to the views' bases,
    # kept only with CHECK_VIEWS.
    __slots__ = ("_cache", "_ref", "key", "_live", "_seen")

    def __init__(self, cache: CacheCore, ref: Any,
                 key: tuple[int, int]) -> None:
        self._cache = cache
        self._ref = ref
        self.key = key
        self._live = True

    @property
    def _released(self) -> bool:
        return not hasattr(self, "_live")

    @property
    def _h(self) -> int:
        """The integer handle of the hold (xc.h: generation << 32 | slot)."""
        ref = self._ref
        return (ref.generation & 0x7FFFFFFF) << 32 | ref.slot

    @property
    def slot(self) -> int:
        """The slot that holds this expert."""
        return int(self._ref.slot)

    @property
    def data(self) -> np.ndarray:
        """The whole payload as a read-only zero-copy uint8 view (it keeps the hold)."""
        self._alive()
        seen = None
        if CHECK_VIEWS:
            if not hasattr(self, "_seen"):
                self._seen = []
            seen = self._seen
        return self._cache._view(self._h, self, seen)

    @property
    def tensors(self) -> dict[str, np.ndarray]:
        """Each tensor as a read-only zero-copy view with its dtype and shape."""
        data = self.data
        return {name: data[off:off + n].view(dtype).reshape(shape)
                for name, off, n, dtype, shape in self._cache._layout.items}

    def release(self) -> None:
        """Give the hold back; a second release is a MisuseError.

        With ``XCACHE_CHECK_VIEWS=1``, a MisuseError (and the hold kept)
        while a view of the expert is still alive.  Interrupted (Ctrl-C, an
        exception from a signal handler), the hold is given back or kept
        exactly as C did it: ``_ref`` says which, and a release that did
        not reach C can be made again.
        """
        if CHECK_VIEWS and hasattr(self, "_live"):
            n = _alive(getattr(self, "_seen", None))
            if n:
                raise _views_alive_error(f"expert {self.key}", n)
        try:  # C cannot tell our hold from another's: claim it here first
            del self._live
        except AttributeError:
            raise misuse(f"expert {self.key} was released") from None
        cache, ref = self._cache, self._ref
        busy = cache._busy
        try:  # between claim and finally no signal handler can run
            busy.append(None)
            rc = cache._unhold(cache._ptr, ref)  # spends ref iff given back
        finally:  # no call before the unclaim: a signal could land there
            if ref.data:  # C did not give it back: still held, still ours
                self._live = True
            busy.pop()
        if rc:
            _lib.check(rc)
        _lib.ffi().gc(ref, None)  # disarmed; interrupted before: lost spent

    def _alive(self) -> None:
        if not hasattr(self, "_live"):
            raise misuse(f"expert {self.key} was released")

    def __enter__(self) -> Expert:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._released:
            self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return f"<Expert layer={self.key[0]} expert={self.key[1]} {state}>"


class HoldViews:
    """Per cache: the payload layout, spare C buffers and the two C calls.

    ``free[n]`` are :meth:`buffers` triples of n entries not in use; a
    list's ``pop``/``append`` are atomic under the GIL, so threads share
    them without a lock.  ``hold`` and ``unhold`` are the two C calls bound
    once (the hit path is a few hundred ns and lookups show);
    :meth:`refuse` swaps both for a function that raises, as
    ``ExpertCache.close`` and the fork handler do with the cache's own.
    ``busy`` is the cache's list of calls in progress and ``lose`` appends
    to its lost list (``engine.cache``).
    """

    __slots__ = ("free", "hold", "unhold", "ptr", "busy", "arena", "items",
                 "names", "lose")

    def __init__(self, lib: Any, ptr: Any, arena: np.ndarray,
                 layout: SlotLayout, n_slots: int, busy: list[None],
                 lose: Any = None) -> None:
        self.free: dict[int, list[tuple[Any, Any, np.ndarray]]] = {}
        self.hold = lib.xc_cache_hold_layer
        self.unhold = lib.xc_cache_unhold_many
        self.ptr = ptr
        self.busy = busy
        self.lose = lose
        #: the numpy arena (None once closed); a hold keeps the one it saw
        self.arena: np.ndarray | None = arena
        self.items = layout.items
        self.names = tuple(item[0] for item in layout.items)
        del n_slots  # the views are per hold now: nothing to bound

    def buffers(self, n: int) -> tuple[Any, Any, np.ndarray]:
        """New C arrays of n handles (all -1: none held) and n offsets, and
        the offsets as numpy.

        The numpy view shares the offsets' memory (``tolist`` reads them
        back faster than ``ffi.unpack``) and keeps the C array alive.
        """
        ffi = _lib.ffi()
        offsets = ffi.new("uint64_t[]", max(n, 1))
        return (ffi.new("int64_t[]", [-1] * max(n, 1)), offsets,
                np.frombuffer(ffi.buffer(offsets), np.uint64, n))

    def refuse(self, fail: Any) -> None:
        """From now on both C calls raise through ``fail``."""
        # ptr stays: a call that read the old functions (counted busy
        # before this swap, so close waits for it) still needs it
        self.hold = self.unhold = fail
        self.arena = None


class _Grip:
    """The C holds of one LayerHold: given back once, by release or when lost.

    ``bufs[0]`` holds the handles: -1 until xc_cache_hold_layer fills all
    of them, -1 again once xc_cache_unhold_many gave them back (C writes
    both), so ``bufs[0][0] != -1`` says whether the holds are taken.
    ``armed`` is ``bufs[0]`` armed before the C call (engine.cache "Holds
    owned before they exist"): when the grip is garbage it goes to the
    cache's lost list and the next call on the cache gives back whatever
    it still holds.  Apart from the LayerHold, only its views' bases refer
    to the grip, and it refers to neither.
    """

    # _live is set while held: the release that deletes it gives the holds back
    __slots__ = ("hv", "bufs", "armed", "pool", "n", "_live")

    def __init__(self, hv: HoldViews, bufs: tuple[Any, Any, np.ndarray],
                 armed: Any, pool: list[tuple[Any, Any, np.ndarray]],
                 n: int) -> None:
        self.hv, self.bufs, self.armed, self.pool = hv, bufs, armed, pool
        self.n = n
        self._live = True

    def give_back(self, owner: LayerHold | None) -> None:
        """Claim the holds and give them back in C, in one step as Python sees it.

        Released already: a MisuseError naming ``owner``'s experts, or
        nothing when ``owner`` is None.  The claim is here, not in the
        caller: between it and the C call no signal handler can run (a
        function's entry is a point where one does).
        """
        try:
            del self._live
        except AttributeError:
            if owner is None:
                return
            raise misuse(f"layer {owner.layer} experts {owner.experts} were "
                         f"released") from None
        hv, handles = self.hv, self.bufs[0]
        busy = hv.busy
        try:
            busy.append(None)
            rc = hv.unhold(hv.ptr, handles, self.n)  # -1s iff given back
        finally:  # no call before the unclaim: a signal could land there
            if handles[0] != -1:  # C did not give them back: still ours
                self._live = True
            busy.pop()
        if rc:
            _lib.check(rc)
        _lib.ffi().gc(self.armed, None)  # interrupted before: lost spent
        self.pool.append(self.bufs)  # disarmed: the buffers can serve again


class _Source:
    """Where one LayerHold's views come from: the arena, pinned to its grip."""

    __slots__ = ("grip", "arena", "base", "seen")

    def __init__(self, grip: _Grip, arena: np.ndarray) -> None:
        self.grip, self.arena = grip, arena
        self.base: memoryview | None = None
        self.seen: list[weakref.ref] | None = [] if CHECK_VIEWS else None

    def arrays(self, offset: int) -> dict[str, np.ndarray]:
        """Each tensor of the payload at arena ``offset`` as a read-only view."""
        if not hasattr(self.grip, "_live"):
            raise misuse("the hold of these views was released: the slot may "
                         "show another expert now")
        base = self.base
        if base is None:
            arena = self.arena
            base, ref = _pin(arena.ctypes.data, arena.nbytes, self.grip, arena)
            self.base = base
            if self.seen is not None:
                self.seen.append(ref)
        return {name: np.ndarray(shape, dtype, base, offset + off)
                for name, off, n, dtype, shape in self.grip.hv.items}

    def forget(self) -> int:
        """Drop the views this source made; how many of their bases live on."""
        self.base = None
        return _alive(self.seen)


class HeldTensors(Mapping):
    """One held expert's tensors by name: read-only numpy views, made when first read.

    Each view keeps the hold (a LayerHold dropped unreleased is given back
    only once its views are garbage); reading the mapping after the hold
    was released is a MisuseError.
    """

    __slots__ = ("_src", "_offset", "_arrays")

    def __init__(self, src: _Source, offset: int) -> None:
        self._src, self._offset = src, offset
        self._arrays: dict[str, np.ndarray] | None = None

    def __getitem__(self, name: str) -> np.ndarray:
        arrays = self._arrays
        if arrays is None or not hasattr(self._src.grip, "_live"):
            arrays = self._arrays = self._src.arrays(self._offset)
        return arrays[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._src.grip.hv.names)

    def __len__(self) -> int:
        return len(self._src.grip.hv.names)

    def __repr__(self) -> str:
        return f"<HeldTensors {list(self)}>"


def _expert_list(experts: Any) -> list[int]:
    """``experts`` (a sequence, an iterable or a numpy array) as a list of int.

    A boolean array or a bool item is refused: a router mask is not a list
    of ids (``[True, False]`` would otherwise read as experts 1 and 0).
    """
    if isinstance(experts, np.ndarray):
        if experts.dtype.kind == "b":
            raise misuse(f"experts must be expert ids, got a boolean array of "
                         f"shape {experts.shape} (a router mask? give "
                         "numpy.flatnonzero(mask))")
        if experts.ndim != 1:
            raise misuse(f"experts must be one-dimensional, got shape "
                         f"{experts.shape}")
        if experts.dtype.kind in "iu":  # Python ints already: nothing to check
            return experts.tolist()
        experts = experts.tolist()
    try:
        items = list(experts)
    except TypeError:
        raise misuse(f"experts must be an iterable of integers, got "
                     f"{type(experts).__name__} {experts!r}") from None
    for i, e in enumerate(items):
        if isinstance(e, (bool, np.bool_)):
            raise misuse(f"experts[{i}] must be an expert id, got the bool {e!r}")
        try:
            items[i] = operator.index(e)
        except TypeError:
            raise misuse(f"experts[{i}] must be an integer, got "
                         f"{type(e).__name__} {e!r}") from None
    return items


class LayerHold:
    """One layer's experts held at once; release them (or leave ``with``).

    ``views[i]`` is a read-only mapping of tensor name to zero-copy numpy
    view for ``experts[i]`` (:class:`HeldTensors`).  The views keep the
    hold: dropped without ``release()``, the holds are given back once the
    LayerHold and every view of it are garbage.  After ``release()`` the
    slot may hold another expert: reading ``views`` is then a MisuseError,
    and arrays taken before must not be used (``XCACHE_CHECK_VIEWS=1``
    makes the release refuse while one is alive).  The context manager
    yields ``views`` and releases on exit, an exception included.
    """

    # _grip owns the C holds (its _live says held); _src makes the views.
    # Neither refers back to the LayerHold or its views: no cycle.
    __slots__ = ("_grip", "_src", "layer", "experts", "views")

    def __init__(self, hv: HoldViews, layer: int, experts: list[int],
                 bufs: tuple[Any, Any, np.ndarray], armed: Any,
                 pool: list[tuple[Any, Any, np.ndarray]],
                 offsets: list[int]) -> None:
        grip = self._grip = _Grip(hv, bufs, armed, pool, len(offsets))
        src = self._src = _Source(grip, hv.arena)
        self.layer = layer
        self.experts = experts
        self.views: list[Mapping[str, np.ndarray]] = [
            HeldTensors(src, o) for o in offsets]

    @property
    def released(self) -> bool:
        """Whether the holds were given back."""
        return not hasattr(self._grip, "_live")

    def release(self) -> None:
        """Give every hold back in one C call; a second release is a MisuseError."""
        grip = self._grip
        if CHECK_VIEWS and hasattr(grip, "_live"):
            for v in self.views:
                v._arrays = None  # type: ignore[attr-defined]
            n = self._src.forget()
            if n:
                raise _views_alive_error(
                    f"layer {self.layer} experts {self.experts}", n)
        grip.give_back(self)

    def __enter__(self) -> list[Mapping[str, np.ndarray]]:
        return self.views

    def __exit__(self, *exc: object) -> None:
        if CHECK_VIEWS:
            if not self.released:
                self.release()
            return
        self._grip.give_back(None)  # released inside the block: nothing

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<LayerHold layer={self.layer} experts={self.experts} {state}>"


def hold_layer(cache: CacheCore, layer: int, experts: Iterable[int]
               ) -> LayerHold:
    """Hold ``experts`` of ``layer`` in one C call (docs/CACHE.md "hold_layer").

    Resident experts are hits, missing ones are read in parallel; every
    expert is held when this returns, and none when it raises.  Use as
    ``with cache.hold_layer(layer, experts) as views:``; ``views[i]`` maps
    each tensor name of ``experts[i]`` to its read-only numpy view, which
    keeps the hold (see :class:`LayerHold`).
    """
    if type(experts) is not list:
        experts = _expert_list(experts)
    n = len(experts)
    hv = cache._hold_views
    pool = hv.free.get(n)
    if pool is None:
        pool = hv.free.setdefault(n, [])
    try:
        bufs = pool.pop()
    except IndexError:  # none spare
        bufs = hv.buffers(n)
    # the owner first: armed before C fills it, so the holds are never
    # without one (engine.cache "Holds owned before they exist")
    armed = _lib.ffi().gc(bufs[0], hv.lose)
    busy = hv.busy
    try:
        busy.append(None)
        if cache._lost:
            cache._sweep()
        rc = hv.hold(hv.ptr, layer, experts, n, bufs[0], bufs[1])
    except (OverflowError, TypeError) as e:  # cffi refused an argument
        raise _args.conversion_error(
            e, [("layer", layer, *_args.INT32)] +
            [(f"experts[{i}]", x, *_args.INT32) for i, x in enumerate(experts)]
        ) from None
    finally:
        busy.pop()
    if rc:  # nothing held, nothing written: the buffers can serve again
        _lib.ffi().gc(armed, None)
        pool.append(bufs)
        _lib.check(rc)
    return LayerHold(hv, layer, experts, bufs, armed, pool, bufs[2].tolist())
