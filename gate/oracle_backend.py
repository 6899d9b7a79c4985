"""The oracle as a :class:`gate.backend_api.Backend`: a thin adapter, not a model.

The reference model lives in ``oracle/``: :class:`oracle.reading_cache.ReadingCache`
(the cache model fed by its own read path, :mod:`oracle.read_path`; its
streams :mod:`oracle.streams`; the bounds :mod:`oracle.bounds`).  This
adapter declares what the oracle can judge (:class:`Capabilities`), drives
the model through the gate's backend interface and translates: a case the
model does not decide (``NotModelled``) is ``CannotRun``, a wait nobody
would end ``Stuck``, a call's outcome a :class:`Pending`.  ``break_check``
answers from the gate's break table (:func:`gate.check_probe.expected_name`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from xcache.gate import CannotRun
from xcache.gate.backend_api import (
    COUNTERS,
    Backend,
    Capabilities,
    Errors,
    Fact,
    Fault,
    Key,
    Op,
    Option,
    Pending,
    Pins,
    Stream,
    Stuck,
)
from xcache.gate.check_probe import expected_name
from xcache.gate.failure_kinds import kind_of
from xcache.oracle.cache import POLICIES as ORACLE_POLICIES
from xcache.oracle.cache import Misuse
from xcache.oracle.call_outcomes import WaitsForever
from xcache.oracle.errors import NotModelled
from xcache.oracle.face import Face
from xcache.oracle.reading_cache import ReadingCache
from xcache.oracle.streams import ModelStream
from xcache.oracle.trace_model import TracingCacheModel, first_tensor_offsets


@contextmanager
def _judged() -> Iterator[None]:
    """The model's own words for what it cannot judge, in the gate's."""
    try:
        yield
    except NotModelled as e:
        raise CannotRun(str(e)) from e
    except WaitsForever as e:
        raise Stuck(str(e)) from e


class _Outcome(Pending):
    """A call the model made or will make at a stall's release."""

    def __init__(self, made: Any) -> None:
        self._made = made

    def wait(self, timeout: float) -> bool:
        """Whether the call was made (at once, or at the release)."""
        return bool(self._made.wait(timeout))

    def outcome(self) -> tuple[bool, Any]:
        """(True, value) or (False, exception)."""
        out: tuple[bool, Any] = self._made.outcome()
        return out


class _ModelStream(Stream):
    """The model's stream behind the gate's :class:`Stream`."""

    def __init__(self, stream: ModelStream) -> None:
        self._stream = stream

    def claimed(self, key: Key) -> None:
        """A get of ``key`` since the open (it may have read it for the stream)."""
        self._stream.claimed(key)

    def next(self) -> tuple[Key, bytes] | None:
        """The next expert's key and bytes (released), or None at the end."""
        with _judged():
            return self._stream.next()

    def rest(self) -> list[tuple[Key, bytes | BaseException]]:
        """Every expert not yet taken, then the first failure."""
        with _judged():
            return self._stream.rest()


def _trace_open_rule(folder: Path) -> None:
    """docs/TRACE_FORMAT.md at a traced cache's open: a regular file already at
    the trace path that is not empty and does not start with the trace's
    magic is a user's file, refused (misuse) and left as it is."""
    from xcache.gate.trace_check import trace_path  # noqa: PLC0415
    from xcache.oracle.traces.engine_dump import ENGINE_MAGIC  # noqa: PLC0415

    path = trace_path(folder)
    if path.is_file() and path.stat().st_size > 0:
        with open(path, "rb") as f:
            head = f.read(len(ENGINE_MAGIC))
        if head != ENGINE_MAGIC:
            raise Misuse(f"cache open: refusing to write the trace to {path}: "
                         "the file exists and is not an xcache trace")


def _as_model_call(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with the gate's CannotRun in the model's words (re-raised by it)."""
    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except CannotRun as e:
            raise NotModelled(str(e)) from e
    return call


class OracleBackend(Backend):
    """The numpy oracle: its own reader feeding its own cache model."""

    name = "oracle"
    reference = True
    #: its model's policies; not the engine's counters of time and
    #: page-cache origin, which it has no model of (``queue_fallbacks`` it
    #: has only while the queue cannot fill: oracle.bounds.IO_DEPTH_DEFAULT)
    capabilities = Capabilities(
        ops=frozenset(Op),
        options=frozenset(Option),
        counters=frozenset(COUNTERS) - {
            "spec_adjusted_hits", "load_ns",
            "page_cache_loads", "page_cache_bytes", "device_loads",
            "device_bytes", "unknown_loads"},
        policies=frozenset(ORACLE_POLICIES),
        facts=frozenset(Fact), pins=Pins.COUNT,
        faults=frozenset(Fault) - {Fault.OPEN},
        errors=Errors.TYPED)
    kind_of = staticmethod(kind_of)

    def __init__(self, folder: Path, target: Any, opts: dict[str, Any]) -> None:
        if opts.get("trace"):
            _trace_open_rule(folder)
        with _judged():
            #: the reference model this backend drives
            self.oracle = ReadingCache(folder, target.layout,
                                       target.quantities["expert_bytes"], opts)
            #: each key's first tensor offset as the oracle's reader found
            #: them at the open, for the trace's fingerprint (traced only)
            self._first_offsets = (
                first_tensor_offsets(self.oracle.reader, target.layout)
                if opts.get("trace") else None)

    def get(self, layer: int, expert: int) -> bytes:
        """``op:get`` in the model."""
        with _judged():
            return self.oracle.get(layer, expert)

    def victim_free(self) -> bool:
        """Whether the model has evicted nothing since it was opened (no
        value yet rests on a victim: gate/scenario_run.py)."""
        return self.oracle.victim_free()

    def refused_get(self, layer: int, expert: int) -> None:
        """A get answered with a failure and no read, counted in the model
        (a sticky failure played: gate/outside/designs.py)."""
        with _judged():
            self.oracle.refused_get(layer, expert)

    def getmany(self, keys: list[Key], speculative: bool = False,
                drained: bool = True) -> int:
        """``op:getmany`` in the model."""
        with _judged():
            return self.oracle.getmany(keys, speculative, drained)

    def prefetch(self, keys: list[Key]) -> int:
        """``op:prefetch`` in the model."""
        with _judged():
            return self.oracle.prefetch(keys)

    def prefetch_speculative(self, keys: list[Key]) -> int:
        """``op:prefetch_speculative`` in the model."""
        with _judged():
            return self.oracle.prefetch_speculative(keys)

    def hold_layer(self, layer: int, experts: list[int]) -> tuple[Any, list[bytes]]:
        """``op:hold_layer`` in the model."""
        with _judged():
            return self.oracle.hold_layer(layer, experts)

    def unhold_many(self, handle: Any, spent_at: int | None = None) -> None:
        """``op:hold_layer``: every hold given back in the model, all or
        none (``None``: the spent handle put at ``spent_at``)."""
        refs = list(handle)
        if spent_at is not None:
            refs.insert(spent_at, None)
        with _judged():
            self.oracle.unhold_many(refs)

    def copy_ref(self, ref: Any) -> Any:
        """``op:hold_copy`` in the model."""
        return self.oracle.copy_ref(ref)

    def release_copy(self, copy: Any) -> None:
        """``op:hold_copy`` in the model."""
        with _judged():
            self.oracle.release_copy(copy)

    def container_has(self, name: str) -> bool:
        """``op:lifetime``: whether the model's reader has a tensor ``name``
        (U+0000 is in no name: DESIGN.md §3)."""
        return name in self.oracle.reader.names()

    def container_read(self, name: str) -> bytes:
        """``op:lifetime``: the model's ``Container.read_bytes``."""
        with _judged():
            return self.oracle.container_read(name)

    def face(self) -> Face:
        """``op:lifetime``: the model's Python face over its reading cache."""
        return Face(self.oracle)

    def drain(self) -> None:
        """``op:drain`` in the model."""
        with _judged():
            self.oracle.drain()

    def stream_begin(self, keys: list[Key]) -> Any:
        """A stream run to its end by the model: its held refs."""
        with _judged():
            return self.oracle.stream_begin(keys)

    def stream_rest(self, refs: Any) -> list[tuple[Key, bytes | BaseException]]:
        """Each of :meth:`stream_begin`'s keys with its bytes, given back."""
        with _judged():
            return self.oracle.stream_rest(refs)

    def stream_open(self, keys: list[Key]) -> Stream:
        """``op:stream`` in the model."""
        with _judged():
            return _ModelStream(self.oracle.stream_open(keys))

    def hold(self, layer: int, expert: int) -> tuple[Any, bytes]:
        """``op:hold`` in the model."""
        with _judged():
            return self.oracle.hold(layer, expert)

    def release(self, ref: Any) -> None:
        """``op:hold``: the release in the model."""
        with _judged():
            self.oracle.release(ref)

    def pin(self, layer: int, expert: int) -> None:
        """``pins:count`` in the model."""
        with _judged():
            self.oracle.pin(layer, expert)

    def unpin(self, layer: int, expert: int) -> None:
        """``pins:count``: one pin undone in the model."""
        with _judged():
            self.oracle.unpin(layer, expert)

    def reset(self, keep_marks: bool = False) -> None:
        """``op:reset_stats`` in the model (``keep_marks``: a prefetched
        load not yet used stays a first use in the new window)."""
        self.oracle.reset(keep_marks)

    def start_get(self, layer: int, expert: int) -> Pending:
        """``op:concurrent``: a get made now in the model."""
        with _judged():
            return _Outcome(self.oracle.start_get(layer, expert))

    def waiting_get(self, layer: int, expert: int) -> Pending:
        """``op:concurrent``: a get of a key whose read is under way."""
        with _judged():
            return _Outcome(self.oracle.waiting_get(layer, expert))

    def start_call(self, fn: Callable[..., Any], *args: Any) -> Pending:
        """``op:concurrent``: ``fn(*args)`` now, or at the stall's release."""
        with _judged():
            return _Outcome(self.oracle.start_call(_as_model_call(fn), *args))

    def await_reads(self, count: int, bound_s: float) -> None:
        """``op:concurrent``: the modelled injector met ``count`` reads."""
        with _judged():
            self.oracle.await_reads(count, bound_s)

    def unstall(self) -> None:
        """``op:concurrent``: every held read ends, then the calls that waited."""
        with _judged():
            self.oracle.unstall()

    def reads_held(self) -> int:
        """``op:concurrent``: reads a stall holds in the model."""
        return self.oracle.reads_held()

    def await_waiting(self, count: int, bound_s: float) -> None:
        """``op:concurrent``: ``count`` background calls wait in the model."""
        with _judged():
            self.oracle.await_waiting(count, bound_s)

    def wait_hits(self) -> int | None:
        """``op:concurrent``: hits after waiting so far."""
        return self.oracle.wait_hits()

    def trace_records(self) -> list[list[Any]]:
        """``op:trace``: the records the model says the engine wrote."""
        with _judged():
            return self.oracle.trace_records()

    def _tracing(self, what: str) -> TracingCacheModel:
        """The model listing the trace, or CannotRun: the cache is untraced."""
        model = self.oracle.model
        if not isinstance(model, TracingCacheModel):
            raise CannotRun(f"a {what} step needs \"trace\": true in the "
                            "cache options")
        return model

    def trace_file(self) -> bytes:
        """``op:trace``: the bytes the model says the engine's file holds."""
        model = self._tracing("trace")
        assert self._first_offsets is not None  # set at a traced open
        return model.file_bytes(self._first_offsets)

    def set_step(self, step: int) -> None:
        """``op:trace``: the model's records are stamped with ``step`` from now."""
        with _judged():
            self._tracing("set_step").set_step(step)

    def break_check(self, what: str, a: Key | str | None, b: Key | None,
                    variant: int) -> str:
        """The invariant docs/CACHE.md says break ``what`` violates."""
        return expected_name(what, variant)

    def inject(self, step: dict[str, Any]) -> None:
        """``fault:io``: arm a modelled injector."""
        self.oracle.inject(step)

    def inject_alloc(self, step: dict[str, Any]) -> None:
        """``fault:alloc``: a modelled allocation failure."""
        self.oracle.inject_alloc(step)

    def clear(self) -> None:
        """Disarm every modelled fault (a stalled read goes on)."""
        with _judged():
            self.oracle.clear()

    def values(self) -> dict[str, Any]:
        """The model's counters and slot facts."""
        return self.oracle.values()

    def close(self) -> None:
        """Close the model's descriptors."""
        self.oracle.close()
