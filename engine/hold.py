"""Held references of an expert cache: one expert (:class:`Expert`) or one
layer's experts at once (:class:`LayerHold`), and their numpy views.

A slot's payload layout is fixed per container (:class:`SlotLayout`), so
the views of a payload at a given arena offset are made once and reused
by every later hold there (:class:`HoldViews`); a hold then costs two C
calls (``xc_cache_hold_layer``, ``xc_cache_unhold_many``) and a lookup per
expert.  Semantics in docs/CACHE.md "hold_layer"; lifetimes in the
``engine.cache`` docstring.
"""

from __future__ import annotations

import operator
import types
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from engine import _lib
from engine import errors as _err
from engine.container import NUMPY_DTYPES
from engine.errors import misuse

if TYPE_CHECKING:
    from engine.cache import ExpertCache


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

    # _h is the C handle of the hold (xc.h, xc_cache_hold): an int, so the
    # hit path allocates no xc_ref and the views are made only when asked.
    # _live is set while held: release() deletes it first, and deleting an
    # unset slot fails atomically, so of two racing releases exactly one
    # gives the hold back.
    __slots__ = ("_cache", "_h", "key", "_live")

    def __init__(self, cache: ExpertCache, handle: int,
                 key: tuple[int, int]) -> None:
        self._cache = cache
        self._h = handle
        self.key = key
        self._live = True

    @property
    def _released(self) -> bool:
        return not hasattr(self, "_live")

    @property
    def slot(self) -> int:
        """The slot that holds this expert."""
        return self._h & 0xFFFFFFFF

    @property
    def data(self) -> np.ndarray:
        """The whole payload as a read-only zero-copy uint8 view."""
        self._alive()
        return self._cache._view(self._h)

    @property
    def tensors(self) -> dict[str, np.ndarray]:
        """Each tensor as a read-only zero-copy view with its dtype and shape."""
        data = self.data
        return {name: data[off:off + n].view(dtype).reshape(shape)
                for name, off, n, dtype, shape in self._cache._layout.items}

    def release(self) -> None:
        """Give the hold back; a second release is a MisuseError."""
        try:  # C cannot tell our hold from another's: claim it here first
            del self._live
        except AttributeError:
            raise misuse(f"expert {self.key} was released") from None
        cache = self._cache
        busy = cache._busy
        busy.append(None)
        try:
            rc = cache._unhold(cache._ptr, self._h)
        except BaseException:
            self._live = True  # nothing was given back
            raise
        finally:
            busy.pop()
        if rc:
            self._live = True
            _lib.check(rc)

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
    """Per cache: tensor views by payload arena offset, spare C buffers, C calls.

    ``views[offset]`` is the read-only mapping of tensor name to numpy view
    for a payload starting at ``offset`` in the arena: made at the first
    hold there, reused after.  ``free[n]`` are :meth:`buffers` triples of
    n entries not in use; a list's ``pop``/``append`` are atomic under the
    GIL, so threads share them without a lock.  ``hold`` and ``unhold`` are
    the two C calls bound once (the hit path is a few hundred ns and
    lookups show); :meth:`refuse` swaps both for a function that raises,
    as ``ExpertCache.close`` and the fork handler do with the cache's own.
    ``busy`` is the cache's list of calls in progress (``engine.cache``).
    """

    __slots__ = ("views", "free", "hold", "unhold", "ptr", "busy",
                 "_arena", "_items", "_limit")

    def __init__(self, lib: Any, ptr: Any, arena: np.ndarray,
                 layout: SlotLayout, n_slots: int, busy: list[None]) -> None:
        self.views: dict[int, Mapping[str, np.ndarray]] = {}
        self.free: dict[int, list[tuple[Any, Any, np.ndarray]]] = {}
        self.hold = lib.xc_cache_hold_layer
        self.unhold = lib.xc_cache_unhold_many
        self.ptr = ptr
        self.busy = busy
        self._arena: np.ndarray | None = arena
        self._items = layout.items
        # O_DIRECT payloads start file_offset mod 4096 into their slot, so
        # one slot may show several offsets: bound the table all the same
        self._limit = 8 * max(n_slots, 1)

    def make(self, offset: int) -> Mapping[str, np.ndarray]:
        """The views of the payload at arena ``offset``, made and remembered."""
        arena = self._arena
        if arena is None:
            raise misuse("the cache is closed")
        if len(self.views) >= self._limit:
            self.views.clear()
        v = types.MappingProxyType({
            name: arena[offset + off:offset + off + n].view(dtype).reshape(shape)
            for name, off, n, dtype, shape in self._items})
        self.views[offset] = v
        return v

    def buffers(self, n: int) -> tuple[Any, Any, np.ndarray]:
        """New C arrays of n handles and n offsets, and the offsets as numpy.

        The numpy view shares the offsets' memory (``tolist`` reads them
        back faster than ``ffi.unpack``) and keeps the C array alive.
        """
        ffi = _lib.ffi()
        offsets = ffi.new("uint64_t[]", max(n, 1))
        return (ffi.new("int64_t[]", max(n, 1)), offsets,
                np.frombuffer(ffi.buffer(offsets), np.uint64, n))

    def refuse(self, fail: Any) -> None:
        """From now on both C calls raise through ``fail``; drop the views."""
        # ptr stays: a call that read the old functions (counted busy
        # before this swap, so close waits for it) still needs it
        self.hold = self.unhold = fail
        self._arena = None
        self.views = {}


def _expert_list(experts: Any) -> list[int]:
    """``experts`` (a sequence, an iterable or a numpy array) as a list of int."""
    if isinstance(experts, np.ndarray):
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
        try:
            items[i] = operator.index(e)
        except TypeError:
            raise misuse(f"experts[{i}] must be an integer, got "
                         f"{type(e).__name__} {e!r}") from None
    return items


class LayerHold:
    """One layer's experts held at once; release them (or leave ``with``).

    ``views[i]`` is a read-only mapping of tensor name to zero-copy numpy
    view for ``experts[i]``, valid while the hold lasts (afterwards the
    slot may hold another expert).  The context manager yields ``views``
    and releases on exit, an exception included.
    """

    # _live is set while held: release() deletes it first, and deleting an
    # unset slot fails atomically, so of two racing releases exactly one
    # gives the holds back.  _hv is the cache's HoldViews (its C calls and
    # busy list), _pool where the C buffers go back.
    __slots__ = ("_hv", "_bufs", "_pool", "layer", "experts", "views",
                 "_live")

    def __init__(self, hv: HoldViews, layer: int, experts: list[int],
                 bufs: tuple[Any, Any, np.ndarray],
                 pool: list[tuple[Any, Any, np.ndarray]],
                 views: list[Mapping[str, np.ndarray]]) -> None:
        self._hv = hv
        self._bufs = bufs
        self._pool = pool
        self.layer = layer
        self.experts = experts
        self.views = views
        self._live = True

    @property
    def released(self) -> bool:
        """Whether the holds were given back."""
        return not hasattr(self, "_live")

    def release(self) -> None:
        """Give every hold back in one C call; a second release is a MisuseError."""
        try:
            del self._live
        except AttributeError:
            raise misuse(f"layer {self.layer} experts {self.experts} were "
                         f"released") from None
        self._give_back()

    def _give_back(self) -> None:
        """The C release of every hold, once ``_live`` was claimed."""
        hv = self._hv
        busy = hv.busy
        busy.append(None)
        try:
            rc = hv.unhold(hv.ptr, self._bufs[0], len(self.views))
        except BaseException:
            self._live = True  # nothing was given back
            raise
        finally:
            busy.pop()
        if rc:
            self._live = True
            _lib.check(rc)
        self._pool.append(self._bufs)

    def __enter__(self) -> list[Mapping[str, np.ndarray]]:
        return self.views

    def __exit__(self, *exc: object) -> None:
        # release() inlined: this is every layer's exit on the hit path
        try:
            del self._live
        except AttributeError:  # released inside the block: nothing to do
            return
        hv = self._hv
        busy = hv.busy
        busy.append(None)
        try:
            rc = hv.unhold(hv.ptr, self._bufs[0], len(self.views))
        except BaseException:
            self._live = True  # nothing was given back
            raise
        finally:
            busy.pop()
        if rc:
            self._live = True
            _lib.check(rc)
        self._pool.append(self._bufs)

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<LayerHold layer={self.layer} experts={self.experts} {state}>"


def hold_layer(cache: ExpertCache, layer: int, experts: Iterable[int]
               ) -> LayerHold:
    """Hold ``experts`` of ``layer`` in one C call (docs/CACHE.md "hold_layer").

    Resident experts are hits, missing ones are read in parallel; every
    expert is held when this returns, and none when it raises.  Use as
    ``with cache.hold_layer(layer, experts) as views:``; ``views[i]`` maps
    each tensor name of ``experts[i]`` to its read-only numpy view.
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
    busy = hv.busy
    busy.append(None)
    try:
        rc = hv.hold(hv.ptr, layer, experts, n, bufs[0], bufs[1])
    except (OverflowError, TypeError) as e:  # cffi refused an argument
        raise _err.conversion_error(
            e, [("layer", layer, *_err.INT32)] +
            [(f"experts[{i}]", x, *_err.INT32) for i, x in enumerate(experts)]
        ) from None
    finally:
        busy.pop()
    if rc:
        pool.append(bufs)
        _lib.check(rc)
    offsets = bufs[2].tolist()
    try:
        views = list(map(hv.views.__getitem__, offsets))
    except KeyError:  # a payload offset seen for the first time
        get, make = hv.views.get, hv.make
        views = [get(o) or make(o) for o in offsets]
    return LayerHold(hv, layer, experts, bufs, pool, views)
