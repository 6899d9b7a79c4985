"""The numpy oracle as a :class:`gate.backend.Backend`.

:class:`OracleBackend` drives the oracle's own safetensors reader and cache
model, modelling the engine's faults, its O_DIRECT loads (from
:mod:`oracle.reads`) and its files changed under it; its streams are
:class:`gate.oracle_stream.OracleStream`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gate import CannotRun
from gate.backend import (
    COUNTERS,
    Backend,
    Capabilities,
    Done,
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
from gate.backend_common import (
    IO_MAX_RETRIES,
    OracleOnly,
    holding,
    kind_of,
)
from gate.oracle_stream import OracleStream
from oracle.cache import POLICIES as ORACLE_POLICIES


class Changed(OracleOnly):
    """The oracle's view of a load refused because the file changed.

    It names the key whose load was refused, as the model's failure did
    (the engine's error record names it too: gate/error_fields.py).
    """

    kind = "changed"

    def __init__(self, failure: BaseException) -> None:
        super().__init__(str(failure))
        self.layer = getattr(failure, "layer", None)
        self.expert = getattr(failure, "expert", None)


class NoMemory(OracleOnly):
    """The oracle's view of an operation refused for want of memory."""

    kind = "nomem"


class OracleBackend(Backend):
    """The numpy oracle: its own reader feeding its own cache model."""

    name = "oracle"
    reference = True
    #: its model's policies; not the engine's counters of time and
    #: page-cache origin, which it has no model of (``queue_fallbacks`` it
    #: has only while the queue cannot fill: :data:`gate.backend_common.IO_DEPTH`)
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
        from oracle.cache import CacheModel  # noqa: PLC0415
        from oracle.safetensors import Container  # noqa: PLC0415

        self.layout = lay = target.layout
        self.reader = Container(folder)
        self.chunk_bytes = int(opts.get("chunk_bytes", 0))
        self.verify = bool(opts.get("verify"))
        # Reads go through descriptors opened now, as the engine's do, so a
        # file replaced later keeps serving the bytes validated at open.
        self.fds: dict[str, tuple[int, tuple[int, int, int]]] = {}
        for shard in self.reader.shards():
            fd = os.open(shard, os.O_RDONLY)
            self.fds[shard] = (fd, _identity(os.fstat(fd)))
        self.opened = {s: os.fstat(fd) for s, (fd, _) in self.fds.items()}
        #: the two modelled injectors (the first forwards to the second)
        self.faults: list[dict[str, Any] | None] = [None, None]
        self.alloc_fault = False
        #: which shards read with O_DIRECT; the bytes each key's last load asked
        self.direct = _direct_shards(self, bool(opts.get("direct")))
        self.asked: dict[tuple[int, int], int] = {}
        eb = target.quantities["expert_bytes"]
        model_cls = CacheModel
        if opts.get("trace"):  # it also lists the engine's trace records
            from oracle.trace_model import TracingCacheModel  # noqa: PLC0415

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
        self.streams: list[OracleStream] = []
        self.claims = not opts.get("io_threads")
        self.batch_threads = int(opts.get("batch_threads", 2))
        self.readers = int(opts.get("io_threads", 0))
        #: reads held under way by a stall, in the order they began:
        #: (kind "get" or "batch", key, bytes, failure, its pending call)
        #: -- bytes and failure None for a batch read queued behind one
        self.held: list[tuple[str, Key, bytes | None, str | None,
                              _Later | None]] = []
        #: calls made while a read is held, modelled as made at the release
        self.later: list[tuple[Any, tuple[Any, ...], _Later]] = []
        #: how many of them wait for a read held (the engine's would block)
        self.waiting = 0
        #: whether a stall fired during the current load
        self._stalled_now = False

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

    def _pread(self, want: int) -> int | str:
        """One pread through the modelled injectors (faults/io.py, xc_fault.c).

        Returns how many bytes it may return (``want``, or fewer for a
        ``partial`` fault), or ``"eof"``, ``"eio"`` or ``"eintr"``.  A fault
        counts the preads that reach it from its arming; the first injector's
        EOF, EIO or EINTR never reaches the second.
        """
        limit = want
        for f in self.faults:
            if f is None:
                continue
            f["reads"] += 1
            if not (f["reads"] == f["nth"] or
                    (f["persistent"] and f["reads"] > f["nth"])):
                continue
            f["fired"] = f.get("fired", 0) + 1
            if f["fault"] == "stall":  # the read goes on; it ends later
                self._stalled_now = True
                continue
            if f["fault"] in ("eof", "eio", "eintr"):
                return str(f["fault"])
            if f["fault"] == "partial" and 0 <= f["arg"] < limit:
                limit = int(f["arg"])
        return limit

    def _steady_limit(self) -> int | None:
        """The limit every further pread has, when only a persistent partial
        fault can still act (others have fired or only delay); else None.

        Then :meth:`_read_full` reads the rest at once and counts the preads
        the C loop makes (a 44 MB expert at 7 bytes a pread is 6.3 M of them).
        """
        limit = None
        for f in self.faults:
            if f is None or f["fault"] in ("delay", "stall"):
                continue
            if f["persistent"] and f["reads"] >= f["nth"]:
                if f["fault"] != "partial":
                    return None
                if f["arg"] >= 0:
                    limit = f["arg"] if limit is None else min(limit, f["arg"])
            elif f["reads"] < f["nth"]:
                return None  # still to fire
        return limit

    def _inert(self) -> bool:
        """Whether no armed fault can act on a further pread (none is armed,
        or each is a delay, or has fired once and is not persistent)."""
        return all(f is None or f["fault"] == "delay" or
                   (not f["persistent"] and f["reads"] >= f["nth"])
                   for f in self.faults)

    def _read_runs(self, reads: list[tuple[str, int, int]], key: Key
                   ) -> tuple[list[bytes] | None, str | None, str]:
        """The reads of one load when no fault can act: (parts, failure, shard).

        Each pread of the C loop then returns all it is asked up to end of
        file, so the reads back to back in one shard (a chunked run: 10,755
        reads of 4 KiB for a 44 MB expert) are one real read, cut as the
        chunks; the first read that meets end of file is the short one, and
        ``asked`` adds every read up to it, as read one at a time.
        Returns the shard of the failed read (or of the last one).
        """
        parts: list[bytes] = []
        i = 0
        while i < len(reads):
            shard, at, _ = reads[i]
            j, end = i, at
            while j < len(reads) and reads[j][0] == shard and reads[j][1] == end:
                end += reads[j][2]
                j += 1
            fd = self.fds[shard][0]
            data = os.pread(fd, end - at, at)
            while len(data) < end - at:  # a pread returns at most 2 GiB
                more = os.pread(fd, end - at - len(data), at + len(data))
                if not more:
                    break
                data += more
            arrived = at + len(data)
            preads = 0
            for _, offset, nbytes in reads[i:j]:
                self.asked[key] += nbytes
                preads += 1
                if offset + nbytes > arrived:  # a part, then a pread of 0 bytes
                    self._count_preads(preads + (arrived > offset))
                    return None, "short", shard
            self._count_preads(preads)
            parts.append(data)
            i = j
        return parts, None, reads[-1][0] if reads else ""

    def _count_preads(self, n: int) -> None:
        """Count ``n`` preads at every armed fault (as :meth:`_pread` does)."""
        for f in self.faults:
            if f is not None:
                f["reads"] += n

    def _read_full(self, fd: int, offset: int, n: int
                   ) -> tuple[bytes | None, str | None]:
        """The C read loop (xc_io.c ``read_loop``) over the modelled preads.

        Interrupted preads are retried (the ``IO_MAX_RETRIES``-th in a row
        is an I/O error), partial ones continue where they stopped, end of
        file before ``n`` bytes is a short read.
        """
        buf = bytearray()
        retries = 0
        while len(buf) < n:
            step = self._steady_limit()
            if step:  # every further pread returns at most step bytes: at once
                rest = n - len(buf)
                data = os.pread(fd, rest, offset + len(buf))
                calls = -(-len(data) // step) + (len(data) < rest)
                for f in self.faults:
                    if f is not None:
                        f["reads"] += calls
                if len(data) < rest:
                    return None, "short"
                return bytes(buf + data), None
            r = self._pread(n - len(buf))
            if r == "eintr":
                retries += 1
                if retries < IO_MAX_RETRIES:
                    continue
                return None, "io"
            if r == "eio":
                return None, "io"
            if r == "eof":
                return None, "short"
            assert isinstance(r, int)
            data = os.pread(fd, r, offset + len(buf))
            if not data:
                return None, "short"
            if not buf and len(data) == n:  # whole at once: no copies
                return data, None
            buf += data
            retries = 0
        return bytes(buf), None

    def _load(self, layer: int, expert: int, may_stall: bool = False
              ) -> tuple[bytes | None, str | None]:
        """Read an expert as the engine would: (bytes, None) or (None, failure).

        A read that meets a stall is CANNOT RUN unless ``may_stall`` (the
        caller holds it under way: a background get, a read-ahead): the
        engine's call would wait for the release.
        """
        self._stalled_now = False
        got = self._load_now(layer, expert)
        if self._stalled_now and not may_stall:
            raise CannotRun(f"a read of layer {layer} expert {expert} met a "
                            "stall in a call that waits for it (only a "
                            "background_get or a read-ahead may be held)")
        return got

    def _load_now(self, layer: int, expert: int
                  ) -> tuple[bytes | None, str | None]:
        """:meth:`_load`'s reads and end (the stall aside).

        A load makes the reads :func:`oracle.layout.expert_reads` lists (one
        per chunk of a contiguous expert or of a fused slice, one per
        per-expert tensor of a scattered expert), each through
        the C read loop's model (:meth:`_read_full`), and stops at the first
        that fails; armed faults meet the preads in that order.  When no
        armed fault can act (:meth:`_inert`), :meth:`_read_runs` reads the
        reads that lie back to back at once, with the same outcome.  Then, as
        the engine ends a load (faults/README.md "What the engine
        guarantees"): a failed read of a shard replaced or removed since
        open is ``"changed"`` (one resized in place keeps the read's own
        failure); with ``verify`` a load whose reads all succeeded is
        ``"changed"`` when any shard it read from changed in any way.  The
        bytes asked (``io_bytes``) are those of every read made either way.
        """
        from oracle.layout import expert_pieces, expert_reads  # noqa: PLC0415

        lay = self.layout
        pieces = expert_pieces(self.reader, lay["expert_template"],
                               lay["tensors"], lay["n_experts"], layer, expert)
        direct = _direct_load(self, pieces)
        if direct is not None:
            self.asked[(layer, expert)] = direct[2]
            return self._end_load([pieces[0].shard], *direct[:2])
        parts = []
        self.asked[(layer, expert)] = 0
        reads = expert_reads(pieces, self.chunk_bytes)
        if self._inert():
            got, failure, shard = self._read_runs(reads, (layer, expert))
            if got is None:
                return self._end_load([shard], None, failure)
            return self._end_load(list(dict.fromkeys(p.shard for p in pieces)),
                                  b"".join(got), None)
        for shard, offset, nbytes in reads:
            fd, _ = self.fds[shard]
            self.asked[(layer, expert)] += nbytes
            data, failure = self._read_full(fd, offset, nbytes)
            if failure is not None:
                return self._end_load([shard], None, failure)
            parts.append(data)
        return self._end_load(list(dict.fromkeys(p.shard for p in pieces)),
                              b"".join(parts), None)  # type: ignore[arg-type]

    def _end_load(self, shards: list[str], data: bytes | None,
                  failure: str | None) -> tuple[bytes | None, str | None]:
        """The load's outcome after the engine's file check (xc_load.c ``end_load``).

        ``shards`` are the shard of the failed read, or every shard a
        successful load read from.
        """
        if failure is None and not self.verify:
            return data, None
        for shard in shards:
            change = _shard_change(shard, self.opened[shard], self.fds[shard][0])
            if failure is None and change is not None:
                return None, "changed"
            if failure is not None and change == "identity":
                return None, "changed"
        return data, failure

    def _not_waiting(self, what: str, keys: list[Key]) -> None:
        """CannotRun when a call would wait for a read held under way.

        The engine's call would block until the stall's release: a scenario
        makes it a background call (``background_get``, ``background_next``)
        and releases the read (``unstall``) before joining it.
        """
        for key in keys:
            if self._in_flight(key):
                raise CannotRun(f"{what} of layer {key[0]} expert {key[1]} "
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
        except Exception as e:
            if failure == "changed":
                raise Changed(e) from e
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
            data, failure = self._load(layer, expert)
            try:
                ref = self.model.get(layer, expert, fail=_model_failure(failure))
            except Exception as e:
                if failure == "changed":
                    raise Changed(e) from e
                raise
            assert data is not None
            self._publish({key: data})
        self.model.release(ref)
        return self.payload[key]

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
        drain would wait for the stall).
        """
        from oracle.cache import UNDER_WAY  # noqa: PLC0415

        if self.alloc_fault:  # getmany allocates its key arrays first (F13)
            raise NoMemory("getmany: no memory for its key arrays")
        loaded: dict[tuple[int, int], bytes] = {}
        held_before = len(self.held)
        behind = False

        def read(k: tuple[int, int]) -> str | None:
            nonlocal behind
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
            if self._stalled_now:
                raise CannotRun("a read of a drained batch (getmany, or a "
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
        cannot be judged (``CannotRun``).
        """
        from oracle.cache import Misuse  # noqa: PLC0415

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
            raise CannotRun("the oracle models no hold_layer under a fault "
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
                raise Changed(e) from e
            raise
        finally:
            self._publish(loaded)
        return refs, [self.payload[k] for k in keys]

    def unhold_many(self, handle: Any) -> None:
        """Release every ref of one :meth:`hold_layer` (again: ``Misuse``)."""
        for ref in handle:
            self.model.release(ref)

    def copy_ref(self, ref: Any) -> Any:
        """The model's reference is a value: its copy is itself."""
        return ref

    def release_copy(self, copy: Any) -> None:
        """The model's ``release_copy``; a case it does not model cannot run."""
        from oracle.errors import NotModelled  # noqa: PLC0415

        try:
            self.model.release_copy(copy)
        except NotModelled as e:
            raise CannotRun(f"release_copy: {e}") from e

    def drain(self) -> None:
        """Nothing to wait for, unless a read-ahead is held by a stall."""
        if any(kind == "batch" for kind, *_ in self.held):
            raise CannotRun("drain waits for a read-ahead read held under "
                            "way by a stall: unstall first")

    def stream_begin(self, keys: list[tuple[int, int]]) -> Any:
        """A stream run to its end by the model: its held refs (no faults)."""
        loaded = {}
        for k in keys:
            if self.model.slot_of(*k) is None:
                data, failure = self._load(*k)
                if failure is not None:
                    raise CannotRun("the oracle models no failed stream read")
                loaded[k] = data
        refs = self.model.stream(keys)
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

    def stream_open(self, keys: list[Key]) -> Stream:
        """A stream of the model's held refs, yielded in the engine's order."""
        return OracleStream(self, keys)

    def hold(self, layer: int, expert: int) -> tuple[Any, bytes]:
        """The model's ``get`` (reading what a miss reads), kept held."""
        key = (layer, expert)
        self._not_waiting("a hold", [key])
        self._claim_deferred(key)
        model = self.model
        if model.slot_of(layer, expert) is not None:
            return model.get(layer, expert), self.payload[key]
        data, failure = self._load(layer, expert)
        try:
            ref = model.get(layer, expert, fail=_model_failure(failure))
        except Exception as e:
            if failure == "changed":
                raise Changed(e) from e
            raise
        assert data is not None
        self._publish({key: data})
        return ref, data

    def release(self, ref: Any) -> None:
        """The model's ``release`` of a reference :meth:`hold` took."""
        self.model.release(ref)

    def start_get(self, layer: int, expert: int) -> Pending:
        """The get made now: its read is the one under way.

        Under a stall: made while a read is held, it is made at the release
        (:meth:`start_call`; a hit after waiting if its key was the one
        held); a miss whose read meets the stall stays under way (reserved
        and counted now, published at the release).
        """
        key = (layer, expert)
        if self.held:
            waits = self._in_flight(key)
            self.waiting -= not waits  # start_call counts it as waiting
            return self.start_call(self._after_wait, key, waits)
        if self._stall_armed() and self._absent(key):
            try:
                self.model.begin_read(layer, expert)
            except Exception as e:  # noqa: BLE001 - the outcome is handed back
                return Done(False, e)
            data, failure = self._load(layer, expert, may_stall=True)
            if self._stalled_now:
                pending = _Later()
                self.held.append(("get", key, data, failure, pending))
                return pending
            return self._end_get(key, data, failure)
        try:
            return Done(True, self.get(layer, expert))
        except Exception as e:  # noqa: BLE001 - the outcome is handed back
            return Done(False, e)

    def _absent(self, key: Key) -> bool:
        try:
            return self.model.slot_of(*key) is None
        except Exception:  # noqa: BLE001 - a bad key: the get says so
            return False

    def _stall_armed(self) -> bool:
        """Whether a modelled stall may still meet a pread."""
        return any(f is not None and f["fault"] == "stall" and
                   (f["persistent"] or f["reads"] < f["nth"])
                   for f in self.faults)

    def _end_get(self, key: Key, data: bytes | None, failure: str | None
                 ) -> Done:
        """A demand read left under way ends: published (bytes) or failed."""
        try:
            ref = self.model.end_read(*key, fail=_model_failure(failure))
        except Exception as e:  # noqa: BLE001 - the outcome is handed back
            return Done(False, Changed(e) if failure == "changed" else e)
        assert data is not None and ref is not None
        self._publish({key: data})
        self.model.release(ref)
        return Done(True, data)

    def _after_wait(self, key: Key, waited: bool) -> bytes:
        """A get made at the release; a hit after waiting if ``waited``."""
        if waited and self.model.slot_of(*key) is not None:
            self._wait_hits += 1
            if hasattr(self.model, "wait_next"):
                self.model.wait_next = True
        return self.get(*key)

    def start_call(self, fn: Any, *args: Any) -> Pending:
        """``fn(*args)`` made now, or, while a read is held under way, at
        its release (:meth:`unstall`), in the order made: a scenario makes
        only calls that wait for the read held (docs/SCENARIOS.md)."""
        if self.held:
            pending = _Later()
            self.later.append((fn, args, pending))
            self.waiting += 1
            return pending
        try:
            return Done(True, fn(*args))
        except (CannotRun, AssertionError):
            raise
        except Exception as e:  # noqa: BLE001 - the outcome is handed back
            return Done(False, e)

    def unstall(self) -> None:
        """End every read held under way, in the order they began, then make
        the calls that waited for them, in the order made."""
        held, self.held = self.held, []
        for kind, key, data, failure, pending in held:
            if data is None and failure is None:  # queued behind: read now
                data, failure = self._load(*key, may_stall=True)
            else:  # the load ends now: its file check is made now
                data, failure = self._recheck(key, data, failure)
            if kind == "get":
                assert pending is not None
                pending.end(self._end_get(key, data, failure).outcome())
                continue
            self.model.end_read(*key, fail=_model_failure(failure))
            if failure is None:
                assert data is not None
                self._publish({key: data})
        later, self.later, self.waiting = self.later, [], 0
        for fn, args, pending in later:
            pending.end(self.start_call(fn, *args).outcome())

    def _recheck(self, key: Key, data: bytes | None, failure: str | None
                 ) -> tuple[bytes | None, str | None]:
        """A held load's end, made again at its release: a read that
        succeeded is refused (``changed``) if, with ``verify``, a shard it
        read from changed while it was held (xc_load.c ``end_load``)."""
        if failure is not None or not self.verify:
            return data, failure
        from oracle.layout import expert_pieces  # noqa: PLC0415

        lay = self.layout
        pieces = expert_pieces(self.reader, lay["expert_template"],
                               lay["tensors"], lay["n_experts"], *key)
        return self._end_load(list(dict.fromkeys(p.shard for p in pieces)),
                              data, None)

    def waiting_get(self, layer: int, expert: int) -> Pending:
        """A get made now; a hit after waiting when the key is resident."""
        self._not_waiting("a waiting_get", [(layer, expert)])
        was = self.model.slot_of(layer, expert) is not None
        done = self.start_get(layer, expert)
        self._wait_hits += was and done.outcome()[0]
        return done

    def reads_held(self) -> int:
        """Reads a stall holds now in the model (and those queued behind)."""
        return len(self.held)

    def await_waiting(self, count: int, bound_s: float) -> None:
        """Nothing to wait for: the background calls made while a read is
        held are made at its release; there must be ``count`` of them."""
        if self.waiting < count:
            raise Stuck(f"await_waiting: {self.waiting} of {count} "
                        "background calls wait for a read under way")

    def await_reads(self, count: int, bound_s: float) -> None:
        """Nothing is under way in the model, but a stall must have met the
        reads the engine's injector would (else the engine's wait is stuck)."""
        f = self.faults[0]
        if f is not None and f["fault"] == "stall" and f.get("fired", 0) < count:
            raise Stuck(f"await_read: the injector met {f.get('fired', 0)} "
                        f"of {count} armed preads within {bound_s:g} s")

    def wait_hits(self) -> int | None:
        """The :meth:`waiting_get` calls that found their key resident."""
        return self._wait_hits

    def trace_records(self) -> list[list[Any]]:
        """Every record the model says the engine has written so far."""
        records = getattr(self.model, "records", None)
        if records is None:
            raise CannotRun("a trace step needs \"trace\": true in the cache "
                            "options")
        return [list(r) for r in records]

    def break_check(self, what: str, a: Key | str | None, b: Key | None,
                    variant: int) -> str:
        """The invariant docs/CACHE.md says break ``what`` violates."""
        from gate.check_probe import expected_name  # noqa: PLC0415

        return expected_name(what, variant)

    def pin(self, layer: int, expert: int) -> None:
        """Pin a resident expert in the model."""
        self.model.pin(layer, expert)

    def unpin(self, layer: int, expert: int) -> None:
        """Undo one pin in the model."""
        self.model.unpin(layer, expert)

    def reset(self) -> None:
        """Start a new counter window."""
        self.model.reset_stats()

    def inject(self, step: dict[str, Any]) -> None:
        """Arm a modelled injector (``second``: the inner one), counting from now."""
        self.faults[1 if step.get("second") else 0] = {
            "fault": step["fault"], "nth": step.get("nth", 1),
            "persistent": step.get("persistent", False),
            "arg": step.get("arg", 0), "reads": 0, "fired": 0}

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
        from oracle.cache import INFLIGHT, READY  # noqa: PLC0415

        v: dict[str, Any] = dict(self.model.stats())
        v["queue_fallbacks"] = 0  # the queue cannot fill (IO_DEPTH)
        slots = self.model.slots()
        v["n_slots"] = len(slots)
        v["ready_slots"] = sum(s.state == READY for s in slots)
        v["inflight_slots"] = sum(s.state == INFLIGHT for s in slots)
        v["resident"] = sorted([list(k) for k in self.model.resident()])
        v["pinned"] = sorted([[*s.key, s.pins] for s in slots if s.pins])
        v["held"] = sum(s.holds for s in slots)
        v["holding"] = holding([(s.key, s.holds) for s in slots])
        v["direct_active"] = bool(self.direct) and all(self.direct.values())
        bad = self.model.check()
        v["invariants"] = "clean" if bad is None else bad
        return v

    def close(self) -> None:
        """Close the held descriptors."""
        for fd, _ in self.fds.values():
            os.close(fd)
        self.fds.clear()


class _Later(Pending):
    """A call the oracle makes at a stall's release (:meth:`OracleBackend.unstall`)."""

    def __init__(self) -> None:
        self._out: tuple[bool, Any] | None = None

    def end(self, outcome: tuple[bool, Any]) -> None:
        """The call was made: its (succeeded, value)."""
        self._out = outcome

    def wait(self, timeout: float) -> bool:
        """Whether it was made (never before the release: then it is stuck)."""
        return self._out is not None

    def outcome(self) -> tuple[bool, Any]:
        """(True, value) or (False, exception)."""
        assert self._out is not None
        return self._out


# -- the oracle's O_DIRECT loads ---------------------------------------------

def _direct_shards(backend: OracleBackend, want: bool) -> dict[str, bool]:
    """Which shards of the oracle backend read with O_DIRECT (probed as in C)."""
    from oracle.reads import probe_direct  # noqa: PLC0415

    return {s: want and probe_direct(s) for s in backend.fds}


def _direct_load(backend: OracleBackend, pieces: list[Any]
                 ) -> tuple[bytes | None, str | None, int] | None:
    """An O_DIRECT load of ``pieces``: (bytes or None, failure, bytes asked).

    None when the expert's shard does not read with O_DIRECT (the caller
    reads it buffered).  The widened pieces are read in order through the
    modelled injectors, each through the modelled C read loop that lets end
    of file end a piece quietly, whole only if the payload inside it
    arrived; the first failed one ends the load.
    """
    from oracle.layout import is_contiguous  # noqa: PLC0415
    from oracle.reads import direct_reads, window_ok  # noqa: PLC0415

    shard = pieces[0].shard
    if not backend.direct.get(shard):
        return None
    if not is_contiguous(pieces):
        raise CannotRun("the oracle models O_DIRECT reads of contiguous "
                        "experts only")
    offset, nbytes = pieces[0].offset, sum(p.nbytes for p in pieces)
    fd = backend.fds[shard][0]
    buf = bytearray()
    asked = 0
    for w in direct_reads(offset, nbytes, backend.chunk_bytes):
        asked += w.nbytes
        data, failure = _read_window(backend, fd, w.offset, w.nbytes)
        if failure is not None:
            return None, failure, asked
        if not window_ok(w, len(data)):
            return None, "short", asked
        buf += data
    lo = offset - offset % 4096
    return bytes(buf[offset - lo:offset - lo + nbytes]), None, asked


#: The logical block an O_DIRECT read's length must be a multiple of (the
#: smallest one devices have; the gate's partial faults cut to 1, 7 or 100).
_LOGICAL_BLOCK = 512


def _read_window(backend: OracleBackend, fd: int, offset: int, n: int
                 ) -> tuple[bytes, str | None]:
    """The C read loop with end of file allowed (xc_io.c ``read_loop``, eof_ok).

    Returns the bytes that arrived before end of file, or a failure.  The
    descriptor is O_DIRECT: a pread that a ``partial`` fault cut to a length
    that is not a multiple of the logical block (:data:`_LOGICAL_BLOCK`) is
    refused by the kernel (EINVAL: an I/O error), as the engine meets it.
    """
    buf = bytearray()
    retries = 0
    while len(buf) < n:
        r = backend._pread(n - len(buf))
        if r == "eintr":
            retries += 1
            if retries < IO_MAX_RETRIES:
                continue
            return bytes(buf), "io"
        if r == "eio":
            return bytes(buf), "io"
        if r == "eof":
            break
        if isinstance(r, int) and r < n - len(buf) and r % _LOGICAL_BLOCK:
            return bytes(buf), "io"
        data = os.pread(fd, int(r), offset + len(buf))
        if not data:
            break
        buf += data
        retries = 0
    return bytes(buf), None


def _identity(st: os.stat_result) -> tuple[int, int, int]:
    """What tells one file from its replacement: inode, size, mtime."""
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _shard_change(path: str, opened: os.stat_result, fd: int) -> str | None:
    """How the file at ``path`` changed since it was opened (``xc_st_shard_changed``).

    ``"identity"`` when the path names another file or none, ``"size"``,
    ``"mtime"`` or ``"ctime"`` for the same file changed in place (the size
    as the path and as the open descriptor see it), None when unchanged.
    """
    try:
        now = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "identity"
    if (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
        return "identity"
    if now.st_size != opened.st_size or os.fstat(fd).st_size != opened.st_size:
        return "size"
    if now.st_mtime_ns != opened.st_mtime_ns:
        return "mtime"
    if now.st_ctime_ns != opened.st_ctime_ns:
        return "ctime"
    return None


def _model_failure(failure: str | None) -> str | None:
    """The oracle model's failure kinds: a changed file is an I/O failure."""
    return None if failure is None else ("short" if failure == "short" else "io")
