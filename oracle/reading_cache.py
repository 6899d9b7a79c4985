"""The oracle's cache fed by its own reads: the reference the gate judges by.

:class:`ReadingCache` drives the oracle's cache model
(:class:`oracle.cache.CacheModel`, docs/CACHE.md) with the bytes its own
read path reads (:class:`oracle.read_path.ReadPath`: faults, O_DIRECT,
files changed under it); its streams are :class:`oracle.streams.ModelStream`;
the calls held behind a stalled read and made at its release are here
(docs/CACHE.md "Threads, fork and lifetimes").  A call's outcome is handed
back, and its model-only failures, are :mod:`oracle.call_outcomes`; a case
the model does not decide raises :class:`oracle.errors.NotModelled`.
Never imports ``engine`` or ``gate``: the gate's adapter
(gate/oracle_backend.py) drives it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xcache.oracle.bounds import IO_DEPTH_DEFAULT
from xcache.oracle.cache import CacheModel, Misuse
from xcache.oracle.cache_types import INFLIGHT, READY, UNDER_WAY
from xcache.oracle.call_outcomes import (
    AtRelease,
    FileChanged,
    OutOfMemory,
)
from xcache.oracle.errors import IOFailure, NotModelled, ShortRead
from xcache.oracle.held_reads import HeldReads, _model_failure
from xcache.oracle.read_path import Key, ReadPath
from xcache.oracle.streams import ModelStream
from xcache.oracle.trace_model import TracingCacheModel


class ReadingCache(HeldReads, ReadPath):
    """The oracle's cache model fed by its own reader.

    ``layout`` names the experts (the gate's target layout: ``layers``,
    ``n_experts``, ``top_k``, ``expert_template``, ``tensors``);
    ``opts`` are a scenario's cache options.
    """

    def __init__(self, folder: Path, layout: dict[str, Any], expert_bytes: int,
                 opts: dict[str, Any]) -> None:
        self.layout = lay = layout
        self._open_reads(folder, opts)
        self.alloc_fault = False
        eb = expert_bytes
        model_cls: type[CacheModel] = CacheModel
        if opts.get("trace"):  # it also lists the engine's trace records
            model_cls = TracingCacheModel
        self.model = model_cls(list(lay["layers"]), lay["n_experts"],
                               lay["top_k"], expert_bytes=eb,
                               n_slots=opts["n_slots"],
                               policy=opts.get("policy", "lru"),
                               io_bytes_per_load=lambda k: self.asked.get(k, eb))
        #: the bytes of each resident key (only those: see :meth:`_publish`)
        self.payload: dict[tuple[int, int], bytes] = {}
        self._wait_hits = 0
        #: the streams open now; with no read-ahead threads a stream's miss
        #: is a reservation nobody reads until a get claims it
        self.streams: list[ModelStream] = []
        self.claims = not opts.get("io_threads")
        self.batch_threads = int(opts.get("batch_threads", 2))
        self.readers = int(opts.get("io_threads", 0))
        #: the read-ahead queue's depth (reads queued or under way at most)
        self.io_depth = int(opts.get("io_depth", 0)) or IO_DEPTH_DEFAULT
        #: read-ahead reads the caller made because the queue was full, and
        #: whether that count is known (:meth:`_queue`)
        self.fallbacks = 0
        self.fallbacks_known = True
        #: read-ahead reads the model ended at once that the engine may
        #: still have queued or under way (none after a drain)
        self.maybe_queued = 0
        #: reads held under way by a stall, in the order they began:
        #: (kind "get" or "batch", key, bytes, failure, its pending call)
        #: -- bytes and failure None for a batch read queued behind one
        self.held: list[tuple[str, Key, bytes | None, str | None,
                              AtRelease | None]] = []
        #: calls made while a read is held, modelled as made at the release
        self.later: list[tuple[Any, tuple[Any, ...], AtRelease]] = []
        #: how many of them wait for a read held (the engine's would block)
        self.waiting = 0

    def _publish(self, loaded: dict[tuple[int, int], bytes]) -> None:
        """Keep the bytes of the loaded keys the model made resident, and
        drop those of every key it no longer holds.

        The payloads are the model's slots: kept for evicted keys too they
        grew without bound (huge-sparse's 44 MB experts: 882 MiB after one
        scenario of 21 loads, on top of the engine's own arena).
        """
        resident = self.model.resident()
        for k, data in loaded.items():
            if k in resident:
                self.payload[k] = data
        for k in [k for k in self.payload if k not in resident]:
            del self.payload[k]

    def _not_waiting(self, what: str, keys: list[Key]) -> None:
        """NotModelled when a call would wait for a read held under way.

        The engine's call would block until the stall's release: a scenario
        makes it a background call (``background_get``, ``background_next``)
        and releases the read (``unstall``) before joining it.
        """
        for key in keys:
            if self._in_flight(key):
                raise NotModelled(f"{what} of layer {key[0]} expert {key[1]} "
                                "waits for its read held under way by a "
                                "stall: make it a background call and "
                                "unstall before the join")

    def _in_flight(self, key: Key) -> bool:
        """Whether ``key``'s read is held under way in the model (by a stall;
        not a stream's miss nobody has read, :meth:`_unread`)."""
        try:
            return (self.model.in_flight(*key)
                    and not self.model.stream_unread(*key))
        except Exception:  # noqa: BLE001 - a bad key: the call says so
            return False

    def _unread(self, key: Key) -> bool:
        """Whether ``key`` is an open stream's miss that nobody has read yet."""
        try:
            return self.model.stream_unread(*key)
        except Exception:  # noqa: BLE001 - a bad key: the call says so
            return False

    def _read_unread(self, key: Key) -> tuple[Any, bytes]:
        """Read a stream's miss nobody has read (the model's ``end_read``):
        its held ref and bytes, or the failure raised (counted)."""
        data, failure = self._load(*key)
        try:
            ref = self.model.end_read(*key, fail=_model_failure(failure))
        except IOFailure as e:
            if failure == "changed":
                raise FileChanged(e) from e
            raise
        assert data is not None and ref is not None
        self._publish({key: data})
        return ref, data

    def _claim_unread(self, key: Key) -> bool:
        """A call that needs ``key`` reads an open stream's unread miss of it
        for that stream (docs/CACHE.md "Claiming"); whether it published."""
        for st in self.streams:
            if st.deferred and st.unread(key):
                return st.read_for(key)
        return False

    def get(self, layer: int, expert: int) -> bytes:
        """Demand access through the model, reading what a miss would read."""
        key = (layer, expert)
        self._not_waiting("a get", [key])
        self._claim_deferred(key)
        if self.model.slot_of(layer, expert) is not None:
            ref = self.model.get(layer, expert)
        else:
            ref, _ = self._get_missed(layer, expert)
        self.model.release(ref)
        return self.payload[key]

    def _get_missed(self, layer: int, expert: int) -> tuple[Any, bytes]:
        """The model's ``get`` of a key it lacks: read it, then (ref, bytes).

        The slot is reserved first, as the engine's ``get`` does (step 4
        before step 5): with none to take the get is refused
        (``AllPinned``) before anything is read -- no pread meets a fault,
        no file is checked.  The read's failure is the model's (a file
        changed: :class:`FileChanged`).
        """
        self.model.begin_read(layer, expert)
        data, failure = self._load(layer, expert)
        try:
            ref = self.model.end_read(layer, expert,
                                      fail=_model_failure(failure))
        except IOFailure as e:
            if failure == "changed":
                raise FileChanged(e) from e
            raise
        assert data is not None
        self._publish({(layer, expert): data})
        return ref, data

    def stream_get(self, key: Key) -> tuple[Any, bytes]:
        """A plain stream's ``get`` of ``key``, held (its trace record a stream's)."""
        as_stream = getattr(self.model, "as_stream", None)
        if as_stream is None:
            return self.hold(*key)
        with as_stream():
            return self.hold(*key)

    def _claim_deferred(self, key: Key) -> None:
        """A get (or hold) of an open stream's unread miss reads it for the
        stream first, then hits as after a wait; a failed read leaves the
        key absent, and the get misses (reads it again)."""
        if self._claim_unread(key):
            self._wait_hits += 1
            if hasattr(self.model, "wait_next"):
                self.model.wait_next = True

    def getmany(self, keys: list[tuple[int, int]], speculative: bool = False,
                drained: bool = True) -> int:
        """Batch prefetch through the model with the reads it would make.

        A read-ahead (``drained`` False, with readers) whose read meets a
        stall leaves it under way until :meth:`unstall`, and with one reader
        the reads queued behind it too; a drained one cannot (the engine's
        drain would wait for the stall).  The queue's fill decides which
        reads the caller makes itself (:meth:`_queue`); such a read ends
        before the call returns.
        """
        if self.alloc_fault:  # getmany allocates its key arrays first (F13)
            raise OutOfMemory("getmany: no memory for its key arrays")
        loaded: dict[tuple[int, int], bytes] = {}
        held_before = len(self.held)
        ahead = self.readers and not drained
        # the one reader is held by a stall: every read queues behind it
        behind = bool(ahead and self.readers == 1 and self._queued())
        # (a gate getmany with readers is a read-ahead, then a drain)
        fill = self._fill() if self.readers else None

        def read(k: tuple[int, int]) -> str | None:
            nonlocal behind
            if fill is not None and not self._queue(fill):  # the caller's
                data, failure = self._load(*k)
                if failure is not None:
                    return _model_failure(failure)
                assert data is not None
                loaded[k] = data
                return None
            if behind:  # queued behind the stalled read on the one reader
                self.held.append(("batch", k, None, None, None))
                return UNDER_WAY
            # every key reserved, in reservation order: one resident at the
            # call may have been evicted by an earlier key and reserved again
            data, failure = self._load(*k, may_stall=True)
            if self._stalled_now and self.readers and not drained:
                self.held.append(("batch", k, data, failure, None))
                behind = self.readers == 1
                return UNDER_WAY
            if ahead:  # ended here at once; in the engine perhaps not yet
                self.maybe_queued += 1
            if self._stalled_now:
                raise NotModelled("a read of a drained batch (getmany, or a "
                                "prefetch without readers) met a stall: the "
                                "call would wait for its release")
            if failure is not None:
                return _model_failure(failure)
            assert data is not None
            loaded[k] = data
            return None

        n = self.model.getmany(keys, speculative=speculative, read=read,
                               stamped=bool(self.readers) and not drained)
        self._publish(loaded)
        return n + len(self.held) - held_before  # reads started, with readers

    def prefetch(self, keys: list[tuple[int, int]]) -> int:
        """Read-ahead: drained or not, the model's meaning is ``getmany``'s."""
        return self.getmany(keys, drained=False)

    def prefetch_speculative(self, keys: list[Key]) -> int:
        """A speculative read-ahead: ``getmany``'s reads, the speculative marks."""
        return self.getmany(keys, speculative=True, drained=False)

    def hold_layer(self, layer: int, experts: list[int]) -> tuple[Any, list[bytes]]:
        """docs/CACHE.md "hold_layer": the model's all-or-none hold of the keys.

        Validation, counting, the reads and the all-or-none refusal (a key
        that finds no slot, a failed read) as :meth:`CacheModel.hold_layer`;
        its reads are this backend's (faults modelled) in the order given,
        which is the engine's order with one batch thread.  Under an armed
        fault with more batch threads, or a refused allocation, the call
        cannot be judged (``NotModelled``).
        """
        keys = [(layer, e) for e in experts]
        for k in keys:
            self.model.key_id(*k)
        self._not_waiting("a hold_layer", keys)
        if len(set(experts)) != len(experts):
            raise Misuse(f"hold_layer: layer {layer} names an expert twice")
        if len(experts) > self.model.n_slots:
            raise Misuse(f"hold_layer: {len(experts)} experts cannot be held "
                         f"at once in {self.model.n_slots} slots")
        if not keys:
            return [], []
        if self.alloc_fault or (any(self.faults) and self.batch_threads > 1):
            raise NotModelled("the oracle models no hold_layer under a fault "
                            "with its reads in parallel")
        for k in keys:  # the engine's step 2: it reads them for the stream
            self._claim_unread(k)
        loaded: dict[Key, bytes] = {}
        changed: list[Key] = []

        def read(k: Key) -> str | None:
            data, failure = self._load(*k)
            if failure is None:
                assert data is not None
                loaded[k] = data
                return None
            if failure == "changed":
                changed.append(k)
            return _model_failure(failure)

        as_stream = getattr(self.model, "as_stream", None)
        try:
            if as_stream is None:
                refs = self.model.hold_layer(keys, read=read)
            else:
                with as_stream():
                    refs = self.model.hold_layer(keys, read=read)
        except Exception as e:
            if (getattr(e, "layer", None), getattr(e, "expert", None)) in changed:
                raise FileChanged(e) from e
            raise
        finally:
            self._publish(loaded)
        return refs, [self.payload[k] for k in keys]

    def unhold_many(self, handle: Any) -> None:
        """Release every ref of one :meth:`hold_layer`, all or none
        (``xc_cache_unhold_many``): ``Misuse``, nothing changed, when any
        of them holds nothing now (given back already, or ``None``: a spent
        handle the caller put among them)."""
        refs = list(handle)
        for i, ref in enumerate(refs):
            if ref is None or not self.model.holds_ref(ref):
                raise Misuse(f"unhold_many: handle {i} of {len(refs)} holds "
                             "nothing now")
        for ref in refs:
            self.model.release(ref)

    def copy_ref(self, ref: Any) -> Any:
        """The model's reference is a value: its copy is itself."""
        return ref

    def release_copy(self, copy: Any) -> None:
        """The model's ``release_copy``; a case it does not model cannot run."""
        try:
            self.model.release_copy(copy)
        except NotModelled as e:
            raise NotModelled(f"release_copy: {e}") from e

    def drain(self) -> None:
        """Nothing to wait for, unless a read-ahead is held by a stall."""
        if any(kind == "batch" for kind, *_ in self.held):
            raise NotModelled("drain waits for a read-ahead read held under "
                            "way by a stall: unstall first")
        self.maybe_queued = 0

    def stream_begin(self, keys: list[tuple[int, int]],
                     no_slot: list[tuple[int, int]] | None = None) -> Any:
        """A stream run to its end by the model: its held refs (no faults);
        given ``no_slot``, the keys that found no slot are put there, not
        got (:meth:`CacheModel.stream`)."""
        loaded = {}
        for k in keys:
            if self.model.slot_of(*k) is None:
                data, failure = self._load(*k)
                if failure is not None:
                    raise NotModelled("the oracle models no failed stream read")
                loaded[k] = data
        misses = self.model.counters["misses"]
        refs = self.model.stream(keys, no_slot=no_slot)
        if self.readers:  # each miss reserved (a key resident at the call
            # may be an earlier miss's victim) is offered to the queue; the
            # consumer waits for them all before its end
            fill = self._fill()
            for _ in range(self.model.counters["misses"] - misses):
                self._queue(fill)
        self._publish(loaded)
        return refs

    def stream_rest(self, refs: Any
                    ) -> list[tuple[tuple[int, int], bytes | BaseException]]:
        """Each of the stream's keys with its bytes; every hold given back."""
        out: list[tuple[tuple[int, int], bytes | BaseException]] = []
        for ref in refs:
            out.append(((ref.layer, ref.expert),
                        self.payload[(ref.layer, ref.expert)]))
            self.model.release(ref)
        return out

    def stream_open(self, keys: list[Key]) -> ModelStream:
        """A stream of the model's held refs, yielded in the engine's order."""
        return ModelStream(self, keys)

    def hold(self, layer: int, expert: int) -> tuple[Any, bytes]:
        """The model's ``get`` (reading what a miss reads), kept held."""
        key = (layer, expert)
        self._not_waiting("a hold", [key])
        self._claim_deferred(key)
        model = self.model
        if model.slot_of(layer, expert) is not None:
            return model.get(layer, expert), self.payload[key]
        return self._get_missed(layer, expert)

    def release(self, ref: Any) -> None:
        """The model's ``release`` of a reference :meth:`hold` took."""
        self.model.release(ref)

    def trace_records(self) -> list[list[Any]]:
        """Every record the model says the engine has written so far."""
        records = getattr(self.model, "records", None)
        if records is None:
            raise NotModelled("a trace step needs \"trace\": true in the cache "
                            "options")
        return [list(r) for r in records]

    def pin(self, layer: int, expert: int) -> None:
        """Pin a resident expert in the model."""
        self.model.pin(layer, expert)

    def unpin(self, layer: int, expert: int) -> None:
        """Undo one pin in the model."""
        self.model.unpin(layer, expert)

    def reset(self, keep_marks: bool = False) -> None:
        """Start a new counter window (``keep_marks``: as
        :meth:`~oracle.cache.CacheModel.reset_stats`)."""
        self.model.reset_stats(keep_marks)
        self.fallbacks, self.fallbacks_known = 0, True

    def container_read(self, name: str) -> bytes:
        """``Container.read_bytes(name)`` (``xc_st_read_tensor``): the
        tensor's bytes read now through the descriptor opened at the open,
        faults modelled; a failed read of a shard replaced or removed since
        is ``changed``, and with ``verify`` so is a read whose shard changed
        in any way (checked after it, as a load's).  Its failures name no
        key (``ShortRead`` / ``IOFailure`` / ``FileChanged``)."""
        t = self.reader.tensor(name)
        data, failure = self._read_full(self.fds[t.shard][0], t.offset,
                                        t.nbytes, t.shard)
        data, failure = self._end_load([t.shard], data, failure)
        if failure is None:
            assert data is not None
            return data
        where = f"tensor {name!r} ({t.shard}, byte {t.offset})"
        if failure == "changed":
            raise FileChanged(IOFailure(f"{where}: the file changed", None, None))
        if failure == "short":
            raise ShortRead(f"{where}: short read", None, None)  # type: ignore[arg-type]
        raise IOFailure(f"{where}: I/O error", None, None)  # type: ignore[arg-type]

    def _queued(self) -> int:
        """Read-ahead reads a stall holds under way, or queued behind one."""
        return sum(1 for kind, *_ in self.held if kind == "batch")

    def _fill(self) -> list[int]:
        """The read-ahead queue's fill at a call's start, as [least, most]
        reads queued or under way: the held ones, and as many more as the
        model ended that the engine may not have (none after a drain)."""
        held = self._queued()
        return [held, held + self.maybe_queued]

    def _queue(self, fill: list[int]) -> bool:
        """One read of a call offered to the queue (docs/CACHE.md prefetch
        step 3, stream step 3): whether it is queued, else the caller reads
        it (``queue_fallbacks``).  The engine queues a call's reads under
        its lock, so none ends meanwhile and the fill only grows; where the
        least and most fill disagree on it the count is unknown from then
        on (:meth:`values` leaves it out until :meth:`reset`)."""
        full = [n >= self.io_depth for n in fill]
        if full[0] != full[1]:
            self.fallbacks_known = False
        if full[0]:
            self.fallbacks += 1
            return False
        fill[0] += 1
        fill[1] += 1
        return True

    def victim_free(self) -> bool:
        """Whether the model has evicted nothing since it was opened: every
        value so far is the same for any choice of victims."""
        return self.model.evictions_ever() == 0

    def refused_get(self, layer: int, expert: int) -> None:
        """Count a get answered with a failure and no read (the model's
        :meth:`~oracle.cache.CacheModel.refused_get`)."""
        self.model.refused_get(layer, expert)

    def inject(self, step: dict[str, Any]) -> None:
        """Arm a modelled injector (``second``: the inner one), counting from now."""
        place = step.get("place")
        self.faults[1 if step.get("second") else 0] = {
            "fault": step["fault"], "nth": step.get("nth", 1),
            "persistent": step.get("persistent", False),
            "arg": step.get("arg", 0), "reads": 0, "fired": 0,
            "progress": step.get("progress", 0),
            # placed: (the shard's file name, the byte's offset in it)
            "place": None if place is None else (
                Path(place["path"]).name, int(place["offset"]))}

    def inject_alloc(self, step: dict[str, Any]) -> None:
        """Model an allocation failure: only getmany allocates (F12, F13)."""
        self.alloc_fault = True

    def clear(self) -> None:
        """Disarm every fault (which lets a stalled read go, as in C)."""
        self.faults = [None, None]
        self.alloc_fault = False
        if self.held:
            self.unstall()

    def values(self) -> dict[str, Any]:
        """Counters and slot facts a check may pin."""
        v: dict[str, Any] = dict(self.model.stats())
        if self.fallbacks_known:  # else left out: no check judges it
            v["queue_fallbacks"] = self.fallbacks
        slots = self.model.slots()
        v["n_slots"] = len(slots)
        v["ready_slots"] = sum(s.state == READY for s in slots)
        v["inflight_slots"] = sum(s.state == INFLIGHT for s in slots)
        v["resident"] = sorted([list(k) for k in self.model.resident()])
        v["pinned"] = sorted([[*s.key, s.pins] for s in slots if s.pins])
        v["held"] = sum(s.holds for s in slots)
        v["holding"] = sorted([[*s.key, s.holds] for s in slots if s.holds])
        v["direct_active"] = bool(self.direct) and all(self.direct.values())
        v["marked"] = sorted([list(s.key) for s in slots
                              if s.state == READY and s.mark])
        bad = self.model.check()
        v["invariants"] = "clean" if bad is None else bad
        return v

    def close(self) -> None:
        """Close the held descriptors."""
        self._close_reads()
