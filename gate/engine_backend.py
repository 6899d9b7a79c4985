"""The freshly built engine as a :class:`gate.backend_api.Backend`.

:class:`EngineBackend` drives the engine tree :func:`gate.build.load_engine`
bound, with the fault injectors of ``faults/`` under it (docs/DESIGN.md,
"The gate").
"""

from __future__ import annotations

import os
import threading
import time
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
    NoSlot,
    Op,
    Option,
    Pending,
    Pins,
    Stream,
    Stuck,
    holding,
)
from xcache.gate.failure_kinds import kind_of


class EngineBackend(Backend):
    """The freshly built engine behind the scenario operations."""

    name = "engine"
    #: every operation; policies: those of the bound engine and every one
    #: the oracle judges (:func:`factory`)
    capabilities = Capabilities(
        ops=frozenset(Op),
        options=frozenset(Option), counters=frozenset(COUNTERS),
        facts=frozenset(Fact), pins=Pins.COUNT,
        faults=frozenset(Fault) - {Fault.OPEN},
        errors=Errors.TYPED)
    kind_of = staticmethod(kind_of)

    def __init__(self, engine: Any, folder: Path, target: Any,
                 opts: dict[str, Any]) -> None:
        from xcache.engine import alloc  # noqa: PLC0415 - the tree load_engine chose
        from xcache.faults.io import IOFaults  # noqa: PLC0415

        self.alloc = alloc
        # two injectors, the first forwarding to the second: a pread meets
        # the first one's fault, then (if it got through) the second one's
        self.faults2 = IOFaults() if opts.get("faults") else None
        self.faults = (IOFaults(inner=self.faults2) if opts.get("faults")
                       else None)
        self.container = engine.Container(
            str(folder), io=self.faults, verify=bool(opts.get("verify")),
            direct=bool(opts.get("direct")))
        from xcache.gate.trace_check import trace_path  # noqa: PLC0415

        #: the trace file (``"trace": true`` in the options), else None
        self.trace_path = trace_path(folder) if opts.get("trace") else None
        self.cache = engine.ExpertCache(
            self.container, n_slots=opts["n_slots"],
            policy=opts.get("policy", "lru"),
            expert_template=target.layout["expert_template"],
            tensors=list(target.layout["tensors"]),
            layers=list(target.layout["layers"]),
            n_experts=target.layout["n_experts"],
            top_k=target.layout["top_k"],
            chunk_bytes=opts.get("chunk_bytes", 0),
            batch_threads=opts.get("batch_threads", 2),
            io_threads=opts.get("io_threads", 0),
            io_depth=opts.get("io_depth", 0),
            trace_path=self.trace_path)
        self.read_ahead = opts.get("io_threads", 0) > 0
        #: the calls started on threads of their own (race ops), so that
        #: close waits for them instead of freeing the cache under them
        self.threads: list[_Thread] = []

    def get(self, layer: int, expert: int) -> bytes:
        """Demand access; return the served payload and release it."""
        with self.cache.get(layer, expert) as ex:
            return bytes(ex.data)

    def getmany(self, keys: list[tuple[int, int]]) -> int:
        """Batch prefetch; with reader threads, read-ahead then drain."""
        if not self.read_ahead:
            return self.cache.getmany(keys)
        before = self.cache.stats()["prefetch_loads"]
        self.cache.prefetch(keys)
        self.cache.drain()
        return int(self.cache.stats()["prefetch_loads"] - before)

    def prefetch(self, keys: list[tuple[int, int]]) -> int:
        """Read-ahead without draining: reads started (readers) or published."""
        return self.cache.prefetch(keys)

    def drain(self) -> None:
        """Wait for every queued read-ahead read."""
        self.cache.drain()

    def prefetch_speculative(self, keys: list[Key]) -> int:
        """A speculative read-ahead without draining (``spec_*`` counters)."""
        return self.cache.prefetch(keys, speculative=True)

    def hold_layer(self, layer: int, experts: list[int]) -> tuple[Any, list[bytes]]:
        """``xc_cache_hold_layer``: its handles and each held expert's bytes."""
        from xcache.engine import _lib  # noqa: PLC0415 - the tree load_engine chose

        ffi, lib = _lib.ffi(), _lib.lib()
        ptr, n = self.cache._ptr, len(experts)
        handles = ffi.new("int64_t[]", max(n, 1))
        offsets = ffi.new("uint64_t[]", max(n, 1))
        _lib.check(lib.xc_cache_hold_layer(
            ptr, layer, ffi.new("int32_t[]", experts or [0]), n, handles,
            offsets))
        nbytes = int(lib.xc_cache_expert_bytes(ptr))
        data = [bytes(ffi.buffer(lib.xc_cache_hold_data(ptr, handles[i]), nbytes))
                for i in range(n)]
        return (handles, n), data

    def unhold_many(self, handle: Any, spent_at: int | None = None) -> None:
        """``xc_cache_unhold_many`` of the handles one :meth:`hold_layer` took
        (with ``spent_at``: of a copy with a spent handle, -1, at that index)."""
        from xcache.engine import _lib  # noqa: PLC0415

        handles, n = handle
        if spent_at is not None:  # a copy of the array, a spent handle in it
            given = [int(handles[i]) for i in range(n)]
            given.insert(min(spent_at, n), -1)
            handles, n = _lib.ffi().new("int64_t[]", given), n + 1
        _lib.check(_lib.lib().xc_cache_unhold_many(self.cache._ptr, handles, n))

    def face(self) -> Any:
        """The engine's Python face itself: its ``ExpertCache``."""
        return self.cache

    def container_has(self, name: str) -> bool:
        """``name in`` the container the cache reads."""
        return name in self.container

    def container_read(self, name: str) -> bytes:
        """``Container.read_bytes`` of the container the cache reads."""
        return self.container.read_bytes(name)

    def stream_begin(self, keys: list[tuple[int, int]]) -> Any:
        """Begin a stream of ``keys`` (counted and reserved now)."""
        return self.cache.stream(keys)

    def stream_rest(self, stream: Any
                    ) -> list[tuple[tuple[int, int], bytes | BaseException]]:
        """Consume the stream: each yielded key with its bytes, then its error."""
        out: list[tuple[tuple[int, int], bytes | BaseException]] = []
        try:
            for ex in stream:
                with ex:
                    out.append((tuple(ex.key), bytes(ex.data)))
        except Exception as e:  # noqa: BLE001 - the stream's first failure
            out.append(((-1, -1), e))
        finally:
            stream.close()
        return out

    def stream_open(self, keys: list[Key]) -> Stream:
        """Begin a stream of ``keys``, taken expert by expert."""
        return _EngineStream(self, self.cache.stream(keys))

    def hold(self, layer: int, expert: int) -> tuple[Any, bytes]:
        """``xc_cache_get``: a held ``xc_ref`` and the payload bytes it shows."""
        from xcache.engine import _lib  # noqa: PLC0415 - the tree load_engine chose

        ffi, lib = _lib.ffi(), _lib.lib()
        ref = ffi.new("xc_ref *")
        _lib.check(lib.xc_cache_get(self.cache._ptr, layer, expert, ref))
        return ref, bytes(ffi.buffer(ref.data, ref.nbytes))

    def release(self, ref: Any) -> None:
        """``xc_cache_release`` of a reference :meth:`hold` took."""
        from xcache.engine import _lib  # noqa: PLC0415

        _lib.check(_lib.lib().xc_cache_release(self.cache._ptr, ref))

    def copy_ref(self, ref: Any) -> Any:
        """A second ``xc_ref`` with the same fields: not spent by ``ref``'s release."""
        from xcache.engine import _lib  # noqa: PLC0415

        copy = _lib.ffi().new("xc_ref *")
        copy[0] = ref[0]
        return copy

    def release_copy(self, copy: Any) -> None:
        """``xc_cache_release`` of a copy: the slot's generation and holds judge it."""
        self.release(copy)

    def start_get(self, layer: int, expert: int) -> Pending:
        """A ``get`` on a daemon thread of its own, returning at once."""
        return self.start_call(self.get, layer, expert)

    def waiting_get(self, layer: int, expert: int) -> Pending:
        """A ``get`` of a key under way: on a thread, so a lost wake-up is seen."""
        return self.start_call(self.get, layer, expert)

    def start_call(self, fn: Any, *args: Any) -> Pending:
        """``fn(*args)`` on a daemon thread of its own, returning at once."""
        t = _Thread(fn, *args)
        self.threads.append(t)
        return t

    def await_waiting(self, count: int, bound_s: float) -> None:
        """Wait until ``count`` of the calls started on threads are blocked
        waiting for a read under way (else ``Stuck``).

        The kernel says where each thread is blocked
        (``/proc/self/task/<tid>/syscall``: the futex word of a wait); one
        blocked inside the cache's wait condition
        (``xc_testhook_wait_span``) waits for a read.  No timing decides
        the outcome: a call that never gets there is a failure after the
        bound.
        """
        from xcache.engine import _lib  # noqa: PLC0415 - the tree load_engine chose

        ffi, lib = _lib.ffi(), _lib.lib()
        addr, size = ffi.new("uint64_t *"), ffi.new("uint64_t *")
        _lib.check(lib.xc_testhook_wait_span(self.cache._ptr, addr, size))
        lo, hi = int(addr[0]), int(addr[0]) + int(size[0])
        if not os.path.isdir("/proc/self/task"):
            raise CannotRun("await_waiting needs /proc/self/task (Linux)")
        end = time.monotonic() + bound_s
        while True:
            waiting = sum(_blocked_in(t.tid, lo, hi) for t in self.threads
                          if t.tid is not None and t.thread.is_alive())
            if waiting >= count:
                return
            if time.monotonic() > end:
                raise Stuck(f"await_waiting: {waiting} of {count} background "
                            f"calls wait for a read under way within "
                            f"{bound_s:g} s (one ended, or never got there)")
            time.sleep(0.001)

    def reads_held(self) -> int:
        """Preads a stall holds now, in either injector."""
        if self.faults is None or self.faults2 is None:
            return 0
        return self.faults.stalled + self.faults2.stalled

    def unstall(self) -> None:
        """Let every read stalled in either injector go on (``stall`` faults)."""
        if self.faults is None or self.faults2 is None:
            raise CannotRun("an unstall step needs \"faults\": true in the "
                            "cache")
        self.faults.release()
        self.faults2.release()

    def await_reads(self, count: int, bound_s: float) -> None:
        """Wait until the first injector met ``count`` preads (else ``Stuck``)."""
        if self.faults is None:
            raise CannotRun("await_read needs \"faults\": true in the cache")
        end = time.monotonic() + bound_s
        while self.faults.fired < count:
            if time.monotonic() > end:
                raise Stuck(f"await_read: the injector met {self.faults.fired} "
                            f"of {count} armed preads within {bound_s:g} s")
            time.sleep(0.001)

    def wait_hits(self) -> int | None:
        """The ``wait_hit`` records of its trace so far (None without a trace)."""
        if self.trace_path is None:
            return None
        from xcache.oracle.traces import (  # noqa: PLC0415
            ENGINE_TRACE_OUTCOMES,
            read_engine_trace,
        )

        self.cache.trace_flush()
        _, rec = read_engine_trace(self.trace_path)
        return int((rec["outcome"] ==
                    ENGINE_TRACE_OUTCOMES.index("wait_hit")).sum())

    def trace_records(self) -> list[list[Any]]:
        """Every record of its trace file so far, read back by the oracle's reader."""
        from xcache.gate.trace_check import engine_records  # noqa: PLC0415

        return engine_records(self)

    def trace_file(self) -> bytes:
        """Its trace file's bytes, after ``trace_flush()``."""
        from xcache.gate.trace_check import engine_file  # noqa: PLC0415

        return engine_file(self)

    def set_step(self, step: int) -> None:
        """``set_step`` of its cache (a traced one: the step is recorded)."""
        if self.trace_path is None:
            raise CannotRun("a set_step step needs \"trace\": true in the "
                            "cache options")
        self.cache.set_step(step)

    def break_check(self, what: str, a: Key | str | None, b: Key | None,
                    variant: int) -> str:
        """Break one field through ``xc_testhook_break_check``; what check() named."""
        from xcache.engine import _lib  # noqa: PLC0415 - the tree load_engine chose

        lib = _lib.lib()
        ia = self._slot(a) if a is not None else -1
        ib = self._slot(b) if b is not None else variant
        number = getattr(lib, "XC_TH_" + what)
        hook = (lib.xc_testhook_break_cross if number >= lib.XC_TH_CROSS_FIRST
                else lib.xc_testhook_break_check)
        rc = int(hook(self.cache._ptr, number, ia, ib))
        #: check()'s message for the last break (gate.check_probe compares it)
        self.break_message = _lib.last_error()[4] if rc > 0 else ""
        if rc == 0:
            return "clean"
        if rc < 0:
            return "misuse"
        return _lib.invariant_names().get(rc, f"INV-{rc}")

    def _slot(self, which: Key | str) -> int:
        """The slot holding key ``which``, or the lowest empty one (``"empty"``)."""
        slots = self.cache.slots()
        if which == "empty":
            states = [s["state"] for s in slots]
            if "empty" not in states:
                raise NoSlot("empty")
            return states.index("empty")
        for i, s in enumerate(slots):
            if s["key"] is not None and tuple(s["key"]) == which:
                return i
        raise NoSlot(which)

    def pin(self, layer: int, expert: int) -> None:
        """Pin a resident expert."""
        self.cache.pin(layer, expert)

    def unpin(self, layer: int, expert: int) -> None:
        """Undo one pin."""
        self.cache.unpin(layer, expert)

    def reset(self) -> None:
        """Start a new counter window."""
        self.cache.reset_stats()

    def inject(self, step: dict[str, Any]) -> None:
        """Arm an I/O fault under the C read loop (``second``: the inner one)."""
        from xcache.faults.io import Fault  # noqa: PLC0415

        if self.faults is None or self.faults2 is None:
            raise CannotRun("an inject step needs \"faults\": true in the cache")
        which = self.faults2 if step.get("second") else self.faults
        place = step.get("place")
        which.arm(Fault(step["fault"], nth=step.get("nth", 1),
                        persistent=step.get("persistent", False),
                        arg=step.get("arg", 0),
                        progress=step.get("progress", 0),
                        path_filter=Path(place["path"]).name if place else "",
                        at=place["offset"] if place else None))

    def inject_alloc(self, step: dict[str, Any]) -> None:
        """Make the nth engine allocation from now fail."""
        self.alloc.fail_alloc(step.get("nth", 1),
                                     step.get("persistent", False))

    def clear(self) -> None:
        """Disarm every fault."""
        self.alloc.disarm()
        if self.faults is not None and self.faults2 is not None:
            self.faults.disarm()
            self.faults2.disarm()

    def values(self) -> dict[str, Any]:
        """Counters and slot facts a check may pin."""
        v: dict[str, Any] = dict(self.cache.stats())
        slots = self.cache.slots()
        v["n_slots"] = len(slots)
        v["ready_slots"] = sum(s["state"] == "ready" for s in slots)
        v["inflight_slots"] = sum(s["state"] == "inflight" for s in slots)
        v["resident"] = sorted([list(k) for k in self.cache.resident()])
        v["pinned"] = sorted([[*s["key"], s["pins"]] for s in slots
                              if s["pins"]])
        v["held"] = sum(s["holds"] for s in slots)
        v["holding"] = holding([(s["key"], s["holds"]) for s in slots])
        v["direct_active"] = self.container.direct_active
        v["marked"] = sorted([list(s["key"]) for s in slots
                              if s["state"] == "ready" and s["unused_mark"]])
        try:
            self.cache.check()
            v["invariants"] = "clean"
        except Exception as e:  # noqa: BLE001 - reported as a value
            v["invariants"] = str(e)
        return v

    def close(self) -> None:
        """Free the cache, the container and the injector.

        A read still stalled is let go first and every call started on a
        thread is waited for (bounded); one still running keeps everything
        open (freed with the process, never under the call).
        """
        self.alloc.disarm()
        if self.faults is not None and self.faults2 is not None:
            self.faults.disarm()  # a stalled read is let go
            self.faults2.disarm()
        from xcache.gate.race_ops import DEFAULT_BOUND_S  # noqa: PLC0415

        if not all(t.wait(DEFAULT_BOUND_S) for t in self.threads):
            _RUNNING.append(self)
            return
        self.cache.close()
        self.container.close()
        if self.faults is not None and self.faults2 is not None:
            self.faults.close()
            self.faults2.close()


def _blocked_in(tid: int, lo: int, hi: int) -> bool:
    """Whether thread ``tid`` of this process is blocked in a system call
    whose first argument (a futex word) lies in ``[lo, hi)``."""
    try:
        with open(f"/proc/self/task/{tid}/syscall") as f:
            fields = f.read().split()
    except OSError:  # the thread has ended
        return False
    if len(fields) < 2 or fields[0] == "running":
        return False
    try:
        return lo <= int(fields[1], 16) < hi
    except ValueError:
        return False


#: Engine backends a call still runs in at close: never freed under it.
_RUNNING: list[EngineBackend] = []


class _EngineStream(Stream):
    """An engine ``Stream`` taken expert by expert, or all at once."""

    def __init__(self, backend: EngineBackend, stream: Any) -> None:
        self.backend, self.stream = backend, stream

    def next(self) -> tuple[Key, bytes] | None:
        """The next expert, released once its bytes are copied."""
        ex = next(self.stream, None)
        if ex is None:
            return None
        with ex:
            return tuple(ex.key), bytes(ex.data)

    def rest(self) -> list[tuple[Key, bytes | BaseException]]:
        """Every expert left, then the stream's first failure; closed."""
        return self.backend.stream_rest(self.stream)


class _Thread(Pending):
    """A backend call on a daemon thread of its own."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self.out: list[tuple[bool, Any]] = []

        #: the kernel's id of the thread (``/proc/self/task/<tid>``)
        self.tid: int | None = None

        def body() -> None:
            self.tid = threading.get_native_id()
            try:
                self.out.append((True, fn(*args)))
            except Exception as e:  # noqa: BLE001 - recorded like _attempt does
                self.out.append((False, e))

        self.thread = threading.Thread(target=body, daemon=True,
                                       name=f"race {args}")
        self.thread.start()

    def wait(self, timeout: float) -> bool:
        """Join the thread for at most ``timeout`` s; whether it ended."""
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def outcome(self) -> tuple[bool, Any]:
        """(True, bytes) or (False, exception)."""
        return self.out[0]
