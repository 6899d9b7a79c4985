"""What the engine's recorded trace must hold, from the cache model.

:class:`TracingCacheModel` is :class:`oracle.cache.CacheModel` that also
lists, in ``records``, every record an engine cache opened with a trace path
must write for the same calls (docs/TRACE_FORMAT.md): ``(layer, expert,
kind, outcome)`` with the names of :data:`oracle.traces.ENGINE_TRACE_KINDS`
and :data:`oracle.traces.ENGINE_TRACE_OUTCOMES`, and in ``steps`` the step
each was stamped with (the last :meth:`~TracingCacheModel.set_step`, 0
before any).  The whole file follows: :meth:`~TracingCacheModel.header`
(every header field, the container fingerprint from the first tensor's
offset of each key, :func:`first_tensor_offsets`) and
:meth:`~TracingCacheModel.file_bytes`, the exact bytes the engine's trace
file must hold -- a cache opened over an earlier, longer trace replaces it,
so they are this cache's header and records only.

The header's fields, from the format's table: ``layer_limit`` is the last
MoE layer's index + 1 (the layers are ascending, docs/CACHE.md), ``top_k``
and ``n_slots`` the cache's, ``n_experts`` per layer; a record's ``layer``
is the layer's index in the model (``key_of``), never its place in the
cache's list of layers.

The rules, from the format's description:

* a demand access (one that moves ``requests``) is one record: ``hit`` when
  the key was resident, else ``miss`` (recorded when its slot is reserved,
  so a load that then fails keeps it); kind ``get``, or ``stream`` for every
  key of a stream, those resolved later as gets included; a get that finds
  no slot or names a bad key writes nothing;
* a batch (``getmany`` / ``prefetch``; kind ``prefetch``, or ``speculative``)
  writes one record per key named, in the order given: ``duplicate`` for a
  key named earlier in the call, ``resident`` for a resident one, ``issued``
  when a slot was reserved for it, ``no_slot`` when none was free.

The model reaches every decision through the same few steps (``_count_demand``
for demand, ``_touch`` and ``_victim`` inside a batch's reserve pass), so the
records are taken there and cannot drift from the model's own choices.
A batch key whose read is under way (``begin_read``) is ``inflight``, and
``wait_hit`` occurs only when the caller says so: a get that, in the engine,
claims a stream's reservation nobody has read yet reads it and then hits as
after a wait (docs/CACHE.md "Claiming"); the caller sets ``wait_next``
before that get.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from xcache.oracle.cache import CacheModel, Misuse
from xcache.oracle.cache_types import READY, Ref, StreamOpen
from xcache.oracle.layout import expert_pieces
from xcache.oracle.traces import (
    ENGINE_TRACE_KINDS,
    ENGINE_TRACE_OUTCOMES,
    EngineTraceHeader,
    engine_fingerprint,
    engine_trace_bytes,
)

# The oracle's own names (its one copy, in oracle.traces, written from the
# format's description, never read from the engine: the gate compares them
# with the engine's own, which come from csrc/xc_kinds.h).
GET, PREFETCH, SPECULATIVE, STREAM = ENGINE_TRACE_KINDS
HIT, MISS, WAIT_HIT, RESIDENT, _INFLIGHT, ISSUED, NO_SLOT, DUPLICATE = (
    ENGINE_TRACE_OUTCOMES)

__all__ = ["TracingCacheModel", "TraceRecord", "first_tensor_offsets",
           "TRACE_VERSION", "TRACE_RECORD_BYTES"]

#: One record: (layer, expert, kind name, outcome name).
TraceRecord = tuple[int, int, str, str]

#: The header's version and record size (docs/TRACE_FORMAT.md, version 1).
TRACE_VERSION = 1
TRACE_RECORD_BYTES = 24
#: A step is a u64.
MAX_STEP = (1 << 64) - 1


def first_tensor_offsets(reader: Any, layout: Mapping[str, Any]) -> list[int]:
    """The absolute file offset of each key's first tensor, in key-id order.

    Key ids run layer by layer in the order of ``layout["layers"]``, expert
    by expert; the first tensor is ``layout["tensors"][0]`` (the cache's
    first, not the first in file order), a fused tensor's being the
    expert's slice of it.  ``reader`` is the oracle's
    :class:`oracle.safetensors.Container` of the container.
    """
    return [expert_pieces(reader, layout["expert_template"],
                          layout["tensors"][:1], layout["n_experts"], layer,
                          expert)[0].offset
            for layer in layout["layers"]
            for expert in range(layout["n_experts"])]


class TracingCacheModel(CacheModel):
    """The cache model, also listing the engine trace records its calls make."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: every record so far, in the order the engine must write them
        self.records: list[TraceRecord] = []
        #: the step each record of ``records`` carries
        self.steps: list[int] = []
        #: the step records are stamped with now (``set_step``)
        self.step = 0
        self._demand_kind = GET
        #: the next demand hit is one after a wait (set by the caller)
        self.wait_next = False
        #: inside a batch's reserve pass: its decisions (None outside)
        self._decisions: list[str] | None = None

    def _record(self, key: int, kind: str, outcome: str) -> None:
        layer, expert = self.key_of(key)
        self.records.append((layer, expert, kind, outcome))
        self.steps.append(self.step)

    # -- the file ------------------------------------------------------------
    def set_step(self, step: int) -> None:
        """Stamp the records from now on with ``step`` (a u64; ``Misuse`` else)."""
        if type(step) is not int or not 0 <= step <= MAX_STEP:
            raise Misuse(f"step {step!r} is not a u64")
        self.step = step

    def header(self, first_offsets: Sequence[int]) -> EngineTraceHeader:
        """The header the engine writes for this cache, given each key's
        first tensor offset (:func:`first_tensor_offsets`)."""
        n_keys = len(self.layers) * self.n_experts
        if len(first_offsets) != n_keys:
            raise ValueError(f"{len(first_offsets)} offsets for {n_keys} keys")
        keys = [(self.key_of(k)[0], int(first_offsets[k]))
                for k in range(n_keys)]
        return EngineTraceHeader(
            version=TRACE_VERSION, record_bytes=TRACE_RECORD_BYTES,
            fingerprint=engine_fingerprint(self.expert_bytes, self.n_experts,
                                           keys),
            layer_limit=self.layers[-1] + 1, n_experts=self.n_experts,
            top_k=self.top_k, n_slots=self.n_slots)

    def file_records(self) -> list[tuple[int, int, int, str, str]]:
        """Every record in full: ``(step, layer, expert, kind, outcome)``."""
        if len(self.steps) != len(self.records):
            raise ValueError(f"{len(self.records)} records but "
                             f"{len(self.steps)} steps: records were changed "
                             "by hand")
        return [(step, *rec) for step, rec in zip(self.steps, self.records,
                                                   strict=True)]

    def file_bytes(self, first_offsets: Sequence[int]) -> bytes:
        """The exact bytes the engine's trace file holds after these calls
        (flushed): this cache's header, then its records."""
        return engine_trace_bytes(self.header(first_offsets),
                                  self.file_records())

    # -- hooks on the model's own steps -------------------------------------
    def _count_demand(self, key: int) -> None:
        slot = self._index.get(key)
        hit = slot is not None and self._state[slot] == READY
        waited, self.wait_next = self.wait_next, False
        self._record(key, self._demand_kind,
                     (WAIT_HIT if waited else HIT) if hit else MISS)
        super()._count_demand(key)

    def _touch(self, slot: int) -> None:
        if self._decisions is not None:
            self._decisions.append(RESIDENT)
        super()._touch(slot)

    def _skip_inflight(self, slot: int) -> None:
        if self._decisions is not None:
            self._decisions.append(_INFLIGHT)
        super()._skip_inflight(slot)

    def _victim(self) -> int | None:
        slot = super()._victim()
        if self._decisions is not None:
            self._decisions.append(NO_SLOT if slot is None else ISSUED)
        return slot

    # -- calls --------------------------------------------------------------
    @contextmanager
    def as_stream(self) -> Iterator[None]:
        """Demand records made inside are of kind ``stream`` (a plain stream's gets)."""
        self._demand_kind = STREAM
        try:
            yield
        finally:
            self._demand_kind = GET

    def stream(self, keys: Iterable[tuple[int, int]],
               split_min_misses: int = 1,
               no_slot: list[tuple[int, int]] | None = None) -> list[Ref]:
        """As the model's stream; every demand record is of kind ``stream``
        (the gets of keys that found no slot too, made inside it; given
        ``no_slot`` they are the caller's, made later)."""
        self._demand_kind = STREAM
        try:
            return super().stream(keys, split_min_misses, no_slot=no_slot)
        finally:
            self._demand_kind = GET

    def open_stream(self, keys: Iterable[tuple[int, int]],
                    split_min_misses: int = 1) -> StreamOpen | None:
        """As the model's open_stream; every demand record is of kind ``stream``."""
        kind, self._demand_kind = self._demand_kind, STREAM
        try:
            return super().open_stream(keys, split_min_misses)
        finally:
            self._demand_kind = kind

    def getmany(self, keys: Iterable[tuple[int, int]],
                failures: Mapping[tuple[int, int], str] | None = None,
                speculative: bool = False,
                read: Callable[[tuple[int, int]], str | None] | None = None,
                stamped: bool = False) -> int:
        """As the model's getmany, recording one batch record per key named."""
        keys = list(keys)
        ids = [self.key_id(layer, expert) for layer, expert in keys]
        # a key's decision is the first event its reserve step makes: a
        # touch (resident) or a victim choice; publishing comes after all
        self._decisions = []
        try:
            n = super().getmany(keys, failures, speculative, read, stamped)
            decisions = self._decisions
        finally:
            self._decisions = None
        kind = SPECULATIVE if speculative else PREFETCH
        seen: set[int] = set()
        it = iter(decisions)
        for key in ids:
            if key in seen:
                self._record(key, kind, DUPLICATE)
                continue
            seen.add(key)
            self._record(key, kind, next(it))
        return n
