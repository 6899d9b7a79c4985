"""Trace replay through the C simulator (``xc_sim_run``): the live cache's
own policy code over a routing trace, without bytes or threads.

:func:`simulate` takes keys, or a trace's ``(token, layer, expert)`` arrays
(any object with those attributes and ``n_experts``, such as
``oracle.traces.Trace``; this package never imports ``oracle``), and returns
the counts of one run as a dict. Semantics: docs/CACHE.md "Trace replay".

Progress: ``simulate(..., progress=fn)`` has the C loop call ``fn(done)``
every ``progress_every`` accesses and at the end (an ``extern "Python"``
callback of the engine's own build, so it works in any process or thread).
An exception raised by ``fn`` -- a ``KeyboardInterrupt`` arriving while the
replay runs in the main thread included -- stops the replay at that call and
is raised again, with its traceback, once the C call has returned; a true
return value stops it too, as :class:`SimulationStopped`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from xcache.engine import _lib
from xcache.engine.errors import EngineError

__all__ = ["CURVE_POLICIES", "MODES", "POLICIES", "PROGRESS_EVERY",
           "SimulationStopped", "curve", "simulate", "trace_arrays"]

MODES = ("plain", "step")
#: Every policy the simulator runs: the C table's cache policies in its
#: order, then Belady.
POLICIES: tuple[str, ...] = (*_lib.policy_table(), "belady")
#: The policies :func:`curve` gives at every size in one pass (stack algorithms).
CURVE_POLICIES = ("lru", "belady")
#: Accesses between two progress calls unless ``progress_every`` says.
PROGRESS_EVERY: int = int(_lib.lib().XC_SIM_PROGRESS_EVERY)


class SimulationStopped(EngineError):
    """The progress callback returned a true value: the replay stopped there.

    ``done`` is how many accesses were replayed, ``partial`` the counts of
    those accesses (the dict :func:`simulate` returns, for them alone).
    """

    def __init__(self, message: str, done: int, partial: dict[str, Any]) -> None:
        super().__init__(message, status=int(_lib.lib().XC_SIM_STOPPED),
                         kind="stopped")
        self.done, self.partial = done, partial


class _Hook:
    """One replay's progress callable and what it raised (the C ctx's handle)."""

    def __init__(self, fn: Callable[[int], Any]) -> None:
        self.fn, self.error = fn, None


#: An exception raised before the hook's own ``try`` (a signal arriving at
#: its first line), per thread, kept by the callback's ``onerror``.
_stray = threading.local()
#: The engine builds (their ffi) whose extern "Python" hook is defined.
_hooked: list[Any] = []


def _on_error(exc_type: Any, exc: BaseException | None, tb: Any) -> int:
    """The callback's error handler: keep what escaped, and stop the run."""
    if exc is not None:
        _stray.error = exc.with_traceback(tb)
    return 1


def _define_hook(ffi: Any) -> None:
    """Define ``_xc_sim_py_progress`` on this engine build, once."""
    if any(f is ffi for f in _hooked):
        return

    @ffi.def_extern(name="_xc_sim_py_progress", onerror=_on_error)
    def _progress(ctx: Any, done: int) -> int:
        hook = ffi.from_handle(ctx)
        try:
            return 1 if hook.fn(int(done)) else 0
        except BaseException as exc:  # noqa: BLE001 - raised again after C
            hook.error = exc
            return 1

    _hooked.append(ffi)


def _check_every(progress_every: Any) -> int:
    """``progress_every`` as a period of accesses; errors name the parameter."""
    if isinstance(progress_every, bool) or not isinstance(
            progress_every, (int, np.integer)):
        raise TypeError("progress_every must be a whole number of accesses, "
                        f"not {type(progress_every).__name__} "
                        f"{progress_every!r}")
    if not 1 <= int(progress_every) < 2**64:
        raise ValueError("progress_every must be at least 1 access (and "
                         f"below 2**64), got {int(progress_every)}")
    return int(progress_every)


def trace_arrays(data: Any, n_experts: int | None = None,
                 ) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Return (keys uint32, step starts uint8, n_keys, n_experts) for ``data``.

    ``data`` is a trace-like object (attributes ``token``, ``layer``,
    ``expert`` and ``n_experts``, optionally ``n_layers``), a tuple
    ``(token, layer, expert)``, or a 1-D array of keys (each access its own
    step; ``n_experts`` then only matters for ``per_layer``).
    """
    if hasattr(data, "token") and hasattr(data, "expert"):
        token, layer, expert = data.token, data.layer, data.expert
        n_experts = int(data.n_experts)
        n_layers = getattr(data, "n_layers", None)
    elif isinstance(data, tuple) and len(data) in (3, 4):
        token, layer, expert = (np.asarray(a, np.int64) for a in data[:3])
        if len(data) == 4:
            n_experts = int(data[3])
        n_experts = int(n_experts if n_experts is not None
                        else (expert.max() + 1 if len(expert) else 1))
        n_layers = None
    else:
        keys = np.asarray(data)
        if keys.ndim != 1 or (len(keys) and (keys.min() < 0 or
                                             keys.max() >= 2**32 - 1)):
            raise ValueError("keys must be a 1-D array of non-negative ids")
        keys = keys.astype(np.uint32)
        n_keys = int(keys.max()) + 1 if len(keys) else 1
        n_experts = int(n_experts) if n_experts else n_keys
        n_keys = -(-n_keys // n_experts) * n_experts
        return keys, np.ones(len(keys), np.uint8), n_keys, n_experts
    token = np.asarray(token, np.int64)
    layer = np.asarray(layer, np.int64)
    expert = np.asarray(expert, np.int64)
    if len(layer) and (layer.min() < 0 or expert.min() < 0
                       or expert.max() >= n_experts):
        raise ValueError("layer and expert ids must be >= 0, experts < n_experts")
    n_layers = int(n_layers if n_layers is not None
                   else (layer.max() + 1 if len(layer) else 1))
    keys = (layer * n_experts + expert).astype(np.uint32)
    starts = np.ones(len(keys), np.uint8)
    if len(keys) > 1:
        starts[1:] = (token[1:] != token[:-1]) | (layer[1:] != layer[:-1])
    return keys, starts, max(n_layers * n_experts, 1), n_experts


def simulate(keys_or_trace_arrays: Any, policy: str, slots: int,
             mode: str = "step", per_layer: bool = False, *,
             n_experts: int | None = None, step_starts: Any = None,
             fast_path: bool = True,
             progress: Callable[[int], Any] | None = None,
             progress_every: int = PROGRESS_EVERY) -> dict[str, Any]:
    """Replay a trace through ``policy`` (a cache policy spec or ``belady``).

    ``slots`` is the capacity (per layer with ``per_layer``). Returns
    ``policy, slots, mode, per_layer, requests, hits, misses, compulsory,
    reloads, evictions, hit_rate, miss_ratio``. ``step_starts`` overrides
    the step boundaries (nonzero at each step's first access);
    ``fast_path=False`` sends lru / fifo through their ``to_evict`` too.
    ``progress(done)`` is called with the accesses replayed so far at every
    multiple of ``progress_every`` below their number and once at the end
    (per_layer: counted over the layers in order); an exception it raises
    stops the replay and propagates, a true return value stops it as
    :class:`SimulationStopped`.  Raises ``engine.MisuseError`` for a bad
    policy, size or step.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    every = _check_every(progress_every)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable, not "
                        f"{type(progress).__name__}")
    keys, starts, n_keys, n_exp = trace_arrays(keys_or_trace_arrays, n_experts)
    if step_starts is not None:
        starts = np.asarray(step_starts).astype(np.uint8)
        if starts.shape != keys.shape:
            raise ValueError("step_starts must have one flag per access")
    keys = np.ascontiguousarray(keys, np.uint32)
    starts = np.ascontiguousarray(starts, np.uint8)
    ffi, lib = _lib.ffi(), _lib.lib()
    spec = ffi.new("char[]", policy.encode())
    opts = ffi.new("xc_sim_opts *")
    opts.policy = spec
    opts.n_slots = int(slots) if slots > 0 else 0
    opts.n_keys = n_keys
    opts.n_experts = n_exp
    opts.mode = lib.XC_SIM_STEP if mode == "step" else lib.XC_SIM_PLAIN
    opts.per_layer = int(per_layer)
    opts.no_fast_path = int(not fast_path)
    hook = handle = None
    if progress is not None:
        _define_hook(ffi)
        hook = _Hook(progress)
        handle = ffi.new_handle(hook)
        opts.progress = lib._xc_sim_py_progress
        opts.progress_ctx = handle
        opts.progress_every = every
        _stray.error = None
    out = ffi.new("xc_sim_result *")
    rc = lib.xc_sim_run(opts, ffi.from_buffer("uint32_t[]", keys),
                        ffi.from_buffer("uint8_t[]", starts), len(keys), out)
    if hook is not None:
        error, hook.error = hook.error or _stray.error, None
        _stray.error = None
        if error is not None:
            try:
                raise error
            finally:
                error = None  # no cycle through this frame
    _lib.check(rc)
    r = {name: int(getattr(out, name)) for name in
         ("requests", "hits", "misses", "compulsory", "reloads", "evictions")}
    req = r["requests"]
    row = {"policy": policy, "slots": int(slots), "mode": mode,
           "per_layer": bool(per_layer), **r,
           "hit_rate": r["hits"] / req if req else 0.0,
           "miss_ratio": r["misses"] / req if req else 0.0}
    if rc == lib.XC_SIM_STOPPED:
        raise SimulationStopped(
            f"sim: the progress callback stopped the replay after {req} of "
            f"{len(keys)} accesses", done=req, partial=row)
    return row


def curve(keys_or_trace_arrays: Any, policy: str, mode: str = "step",
          per_layer: bool = False, *, n_experts: int | None = None,
          step_starts: Any = None) -> np.ndarray:
    """Misses of ``policy`` (``lru`` or ``belady``) at every size, in one pass.

    Returns an int64 array ``m`` of one entry per size from 1 to the
    working set (the distinct keys; per layer: the most any layer has):
    ``m[c - 1]`` is what ``simulate(..., policy, c, mode, per_layer)[
    "misses"]`` gives, for every ``c``; past the working set every size
    misses the first accesses only.  A size the mode refuses (step mode
    below the largest step's distinct keys) is -1.  Arguments as for
    :func:`simulate`; another policy or mode is ``ValueError``.  Exact
    (docs/LABS.md "Exact curves"); LRU in O(n log W), Belady in O(n D),
    D the mean stack depth of an access (xc_curve.c).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if policy not in CURVE_POLICIES:
        raise ValueError(f"curve: policy must be one of {CURVE_POLICIES} "
                         f"(stack algorithms), not {policy!r}")
    keys, starts, n_keys, n_exp = trace_arrays(keys_or_trace_arrays, n_experts)
    if step_starts is not None:
        starts = np.asarray(step_starts).astype(np.uint8)
        if starts.shape != keys.shape:
            raise ValueError("step_starts must have one flag per access")
    keys = np.ascontiguousarray(keys, np.uint32)
    starts = np.ascontiguousarray(starts, np.uint8)
    ffi, lib = _lib.ffi(), _lib.lib()
    spec = ffi.new("char[]", policy.encode())
    opts = ffi.new("xc_curve_opts *")
    opts.policy = spec
    opts.n_keys = n_keys
    opts.n_experts = n_exp
    opts.mode = lib.XC_SIM_STEP if mode == "step" else lib.XC_SIM_PLAIN
    opts.per_layer = int(per_layer)
    bound = min(n_exp if per_layer else n_keys, len(keys))
    misses = np.zeros(max(bound, 1), np.uint64)
    out = ffi.new("xc_curve_result *")
    _lib.check(lib.xc_curve_run(opts, ffi.from_buffer("uint32_t[]", keys),
                                ffi.from_buffer("uint8_t[]", starts),
                                len(keys), ffi.from_buffer("uint64_t[]", misses),
                                bound, out))
    m = misses[:int(out.working_set)]
    refused = m == np.uint64(2**64 - 1)
    m = m.astype(np.int64)
    m[refused] = -1
    return m
