"""The one interface every cache under test implements, and what it declares.

A scenario runs against a :class:`Backend`: the project's engine and its
oracle (:mod:`gate.backend_factory`), an outside cache through its adapter
(:mod:`gate.outside`).  Each backend class declares its :class:`Capabilities` -- the
operations it offers, the cache options it takes, the policies it runs,
the counters and slot facts it reports, the faults that can be put under
its reads and its error model -- and the runner never asks which backend
it has: a scenario step or a check value that needs a capability the
backend lacks is reported ``N/A`` with that capability named
(:mod:`gate.ops` says what each needs).

A capability is named by a string ``"<family>:<name>"`` (:data:`FAMILIES`):
``op:hold``, ``option:direct``, ``policy:arc``, ``counter:short_reads``,
``fact:pinned``, ``pins:count``, ``fault:alloc``, ``errors:typed``,
``exact:victims``.
:meth:`Capabilities.has` answers for one such name; :func:`is_capability`
tells whether a name means anything at all.

This module imports nothing of ``engine`` or ``oracle``.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

Key = tuple[int, int]


class Op(enum.Enum):
    """An operation of the cache a backend may offer."""

    #: demand access to one expert, released at once (get and release)
    GET = "get"
    #: a batch of keys read and published together
    GETMANY = "getmany"
    #: a reference taken now and released by a later call (get ... release)
    HOLD = "hold"
    #: a copy of a held reference, made before the reference was given
    #: back, given back after it (the C struct face: refused as the slot
    #: allows, by its generation or its holds)
    HOLD_COPY = "hold_copy"
    #: a whole layer held at once and given back together (hold_layer,
    #: unhold_many)
    HOLD_LAYER = "hold_layer"
    #: pin and unpin a resident expert (how pins nest: :class:`Pins`)
    PIN = "pin"
    #: read-ahead of keys without waiting for them
    PREFETCH = "prefetch"
    #: read-ahead counted apart as speculative (``prefetch(speculative=True)``)
    PREFETCH_SPECULATIVE = "prefetch_speculative"
    #: wait for every read-ahead under way
    DRAIN = "drain"
    #: a stream of keys consumed one expert at a time, closable early
    STREAM = "stream"
    #: start a new counter window
    RESET_STATS = "reset_stats"
    #: the cache's own invariant check (the ``invariants`` fact)
    CHECK = "check"
    #: deliberate breaks of one invariant that check() must name
    BREAK_CHECK = "break_check"
    #: a recorded trace of every access, read back record by record
    TRACE = "trace"
    #: the cache reads the shards' safetensors headers itself at open, so a
    #: malformed one can be refused (``corrupt``); a cache handed every
    #: expert's file, offset and length lacks it
    READER = "reader"
    #: the cache reads the container's index (``model.safetensors.index.json``)
    #: at open, so a malformed one is refused (the ``index_*`` corruptions);
    #: a cache that finds its shards by listing the folder lacks it
    READER_INDEX = "reader_index"
    #: it refuses a tensor whose dtype is none of the format's (a reader
    #: that lets a dtype it does not know through, unchecked, lacks it)
    READER_DTYPE = "reader_dtype"
    #: calls from other threads while a read is under way: a get that waits
    #: for it and counts a hit after waiting (the ``wait_hits`` value)
    CONCURRENT = "concurrent"
    #: the Python face's objects and their lifetimes: held experts, layer
    #: holds and streams' yields read through their views, released (twice:
    #: misuse), dropped, left by a ``with`` block (:meth:`Backend.face`)
    LIFETIME = "lifetime"


class Option(enum.Enum):
    """A cache option a backend may take (the scenario's ``cache`` fields)."""

    #: reads of at most ``chunk_bytes`` each
    CHUNKING = "chunk_bytes"
    #: the container read with O_DIRECT where the filesystem allows
    DIRECT = "direct"
    #: every read checks that the file is still the one opened
    VERIFY = "verify"
    #: read-ahead reader threads (``io_threads`` above 0)
    READ_AHEAD = "io_threads"
    #: the batch pool's thread count (``batch_threads``)
    BATCH_THREADS = "batch_threads"
    #: the read-ahead queue's depth (``io_depth``: reads queued or under way)
    IO_DEPTH = "io_depth"


class Fact(enum.Enum):
    """A slot fact a backend's :meth:`Backend.values` may report."""

    N_SLOTS = "n_slots"
    READY_SLOTS = "ready_slots"
    INFLIGHT_SLOTS = "inflight_slots"
    RESIDENT = "resident"
    PINNED = "pinned"
    HELD = "held"
    HOLDING = "holding"
    DIRECT_ACTIVE = "direct_active"
    #: the keys of the READY slots whose unused-prefetch mark is set (a
    #: read-ahead load nobody has asked for yet: its first use is to come)
    MARKED = "marked"


class Pins(enum.Enum):
    """How a backend's pins behave."""

    #: no pins at all
    NONE = "none"
    #: a pin is a flag: pinning twice is pinning once
    FLAG = "flag"
    #: pins nest: each pin needs its own unpin (the ``pinned`` counts)
    COUNT = "count"


class Fault(enum.Enum):
    """A fault the gate can put under a backend's reads or allocations."""

    #: the pread injector (``inject``): eof, eio, eintr, partial, delay,
    #: stall (a read held under way until ``unstall``)
    IO = "io"
    #: a second injector behind the first (``"second": true``)
    IO_SECOND = "io_second"
    #: a refused allocation (``inject_alloc``)
    ALLOC = "alloc"
    #: an open of a file that fails (``open_fault``: ENOENT, EACCES, EMFILE,
    #: EINTR), and the count of the descriptors the cache holds
    #: (``open_files``)
    OPEN = "open"
    #: I/O faults and a truncated shard under an expert stored as several
    #: runs apart: the runs are read one after another in the layout's
    #: order, and one failed run fails the whole expert (without it, the
    #: ``inject`` and ``truncate`` steps of such a container are N/A)
    SCATTERED = "scattered"
    #: an I/O fault placed at one byte of a file (``inject`` with
    #: ``place``): only the reads covering that byte meet it, whatever
    #: order, windows or alignment the cache reads in; an outside cache has
    #: it with ``io`` (the gate's wrappers see every read's file and range)
    PLACED = "placed"
    #: a miss whose read fails has evicted its victim already, leaving the
    #: slot empty (docs/CACHE.md ``get`` step 4); a cache that reads aside
    #: and keeps the victim lacks it, and a fault that fails a read while
    #: every slot is taken is then not compared
    EVICT_FIRST = "evict_first"


class Errors(enum.Enum):
    """A backend's error model."""

    #: failures carry a kind of ``faults/kinds.py`` (``short``, ``io``,
    #: ``misuse``, ``format`` ...), a format error the byte it names
    TYPED = "typed"
    #: a failure is only a failure: every kind reads ``failed``
    FAILED = "failed"


#: Every counter a backend's ``stats()`` may report (docs/CACHE.md
#: "Counters"); a backend declares the ones it has.
COUNTERS = (
    "requests", "hits", "misses", "evictions", "hit_rate",
    "payload_bytes", "io_bytes", "load_failures", "short_reads", "io_errors",
    "prefetch_loads", "prefetch_first_uses", "prefetch_unused_resident",
    "prefetch_evicted_unused", "adjusted_hits_aggregate", "adjusted_hits_exact",
    "adjusted_hit_rate_aggregate", "adjusted_hit_rate_exact",
    "spec_issued", "spec_loads", "spec_used", "spec_unused_resident",
    "spec_evicted_unused", "spec_adjusted_hits", "queue_fallbacks",
    "load_ns", "page_cache_loads", "page_cache_bytes", "device_loads",
    "device_bytes", "unknown_loads",
)

#: The families of capability names, and the names each admits (``policy``
#: admits any policy name).
FAMILIES: dict[str, tuple[str, ...] | None] = {
    "op": tuple(o.value for o in Op),
    "option": tuple(o.value for o in Option),
    "policy": None,
    "counter": COUNTERS,
    "fact": tuple(f.value for f in Fact),
    "pins": ("flag", "count"),
    "fault": tuple(f.value for f in Fault),
    "errors": ("typed",),
    "exact": ("victims", "io_bytes"),
}


def is_capability(name: str) -> bool:
    """Whether ``name`` (``"family:name"``) is a capability a backend could declare."""
    family, sep, rest = name.partition(":")
    if not sep or not rest or family not in FAMILIES:
        return False
    allowed = FAMILIES[family]
    return allowed is None or rest in allowed


@dataclass(frozen=True)
class Capabilities:
    """What one backend supports; anything not named here it lacks."""

    ops: frozenset[Op] = frozenset()
    options: frozenset[Option] = frozenset()
    #: the policy names it runs (the part of a spec before ``:``)
    policies: frozenset[str] = frozenset()
    counters: frozenset[str] = frozenset()
    facts: frozenset[Fact] = frozenset()
    pins: Pins = Pins.NONE
    faults: frozenset[Fault] = frozenset()
    errors: Errors = Errors.FAILED
    #: what the oracle cannot know of this backend's choices: ``victims``
    #: when its victims are its own (a sampled policy, a failed slot kept:
    #: gate/outside/designs.py), so every value resting on them is N/A;
    #: ``io_bytes`` when it reads more than the engine would (aligned
    #: windows whatever the options)
    inexact: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.counters) - set(COUNTERS))
        if unknown:
            raise ValueError(f"capabilities: unknown counters {unknown}; "
                             "gate/backend_api.py COUNTERS lists the known ones")

    def has(self, need: str) -> bool:
        """Whether the backend has capability ``need`` (``"family:name"``)."""
        if not is_capability(need):
            raise ValueError(f"{need!r} is not a capability name "
                             f"(families: {', '.join(FAMILIES)})")
        family, _, name = need.partition(":")
        if family == "op":
            return Op(name) in self.ops
        if family == "option":
            # an option sizing only an operation the backend lacks is
            # honoured by any value: the batch pool without getmany
            return Option(name) in self.options or (
                name == Option.BATCH_THREADS.value
                and Op.GETMANY not in self.ops)
        if family == "policy":
            return name in self.policies
        if family == "counter":
            return name in self.counters
        if family == "fact":
            return Fact(name) in self.facts
        if family == "pins":
            return (self.pins is Pins.COUNT or
                    (name == "flag" and self.pins is Pins.FLAG))
        if family == "fault":
            return Fault(name) in self.faults
        if family == "exact":
            return name not in self.inexact
        return self.errors is Errors.TYPED  # errors:typed

    def missing(self, needs: Iterable[str]) -> list[str]:
        """The capabilities of ``needs`` the backend lacks, in order, once each."""
        return [n for n in dict.fromkeys(needs) if not self.has(n)]

    def without(self, *lacking: str) -> Capabilities:
        """These capabilities less the named ones (a backend that lacks more)."""
        ops, options, counters = set(self.ops), set(self.options), set(self.counters)
        facts, faults, policies = set(self.facts), set(self.faults), set(self.policies)
        pins, errors, inexact = self.pins, self.errors, set(self.inexact)
        for need in lacking:
            if not is_capability(need):
                raise ValueError(f"{need!r} is not a capability name")
            family, _, name = need.partition(":")
            if family == "op":
                ops.discard(Op(name))
            elif family == "option":
                options.discard(Option(name))
            elif family == "policy":
                policies.discard(name)
            elif family == "counter":
                counters.discard(name)
            elif family == "fact":
                facts.discard(Fact(name))
            elif family == "pins":
                pins = (Pins.NONE if name == "flag" else
                        min(pins, Pins.FLAG, key=_PIN_ORDER.index))
            elif family == "fault":
                faults.discard(Fault(name))
            elif family == "exact":
                inexact.add(name)
            else:
                errors = Errors.FAILED
        return Capabilities(frozenset(ops), frozenset(options),
                            frozenset(policies), frozenset(counters),
                            frozenset(facts), pins, frozenset(faults), errors,
                            frozenset(inexact))


_PIN_ORDER = [Pins.NONE, Pins.FLAG, Pins.COUNT]


def option_needs(opts: dict[str, Any]) -> list[str]:
    """The capabilities a scenario's cache options need of a backend."""
    needs = [f"policy:{str(opts.get('policy', 'lru')).split(':')[0]}"]
    if opts.get("chunk_bytes"):
        needs.append("option:chunk_bytes")
    if opts.get("direct"):
        needs.append("option:direct")
    if opts.get("verify"):
        needs.append("option:verify")
    if opts.get("io_threads"):
        needs.append("option:io_threads")
    if opts.get("io_depth"):
        needs.append("option:io_depth")
    if "batch_threads" in opts:
        needs.append("option:batch_threads")
    if opts.get("trace"):
        needs.append("op:trace")
    if opts.get("faults"):
        needs.append("fault:io")
    return needs


#: The fault kinds an ``inject`` step may arm (faults/io.py).
FAULT_KINDS = ("eof", "eio", "eintr", "partial", "delay", "stall", "eagain",
               "eintr_burst", "eagain_burst", "nowait_partial",
               "nowait_eagain", "nowait_eof", "nowait_eio")


def holding(slots: list[tuple[Any, int]]) -> list[list[int]]:
    """The ``holding`` fact: sorted ``[layer, expert, holds]`` of slots with holds."""
    return sorted([[*key, holds] for key, holds in slots if holds])


class Declined(Exception):
    """A backend refused at open the options of a run, which it may (an
    outside cache offered values it cannot honour: xcs_shim.h
    ``xcs_options``): the run is N/A, naming ``needs``, never a FAIL."""

    def __init__(self, needs: list[str]) -> None:
        super().__init__(", ".join(needs))
        self.needs = needs


class Stuck(Exception):
    """A call that did not return within its bound (a waiter nobody woke)."""


class NoSlot(LookupError):
    """A ``break_check`` names a slot the cache does not have.

    ``which`` is ``"empty"`` (no slot is empty) or the key that holds no slot.
    """

    def __init__(self, which: Key | str) -> None:
        super().__init__(which)
        self.which = which


class Pending:
    """A call started on a backend, perhaps still running (``start_get``)."""

    def wait(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds; True once the call has ended."""
        return True

    def outcome(self) -> tuple[bool, Any]:
        """(True, the served bytes) or (False, the exception) of an ended call."""
        raise NotImplementedError


class Done(Pending):
    """A call that ended before it was handed back (a backend without threads)."""

    def __init__(self, ok: bool, value: Any) -> None:
        self._outcome = (ok, value)

    def outcome(self) -> tuple[bool, Any]:
        """The call's (succeeded, bytes or exception)."""
        return self._outcome


class Stream(ABC):
    """A stream of experts begun by :meth:`Backend.stream_open`."""

    def claimed(self, key: Key) -> None:  # noqa: B027 - most streams need not know
        """A ``get`` of ``key`` since the open (it may have read it for the stream)."""

    @abstractmethod
    def next(self) -> tuple[Key, bytes] | None:
        """The next expert's key and bytes (released at once), or None at the end."""

    @abstractmethod
    def rest(self) -> list[tuple[Key, bytes | BaseException]]:
        """Every expert not yet taken (the first failure last), then closed."""


class Backend(ABC):
    """One cache under test behind the scenario operations.

    A subclass sets :attr:`name` and :attr:`capabilities` and implements
    the operations its capabilities name; an operation it does not declare
    is never called.  Keys are ``(layer id, expert)``.
    """

    #: the label of its check lines and of its ``expect_<name>`` pins
    name: ClassVar[str] = ""
    #: whether its values are the expected ones of a derived run (the judge)
    reference: ClassVar[bool] = False
    capabilities: ClassVar[Capabilities] = Capabilities()

    @staticmethod
    def kind_of(exc: BaseException) -> str:
        """The failure kind of one of its exceptions (``failed`` if untyped)."""
        return "failed"

    @abstractmethod
    def values(self) -> dict[str, Any]:
        """Its counters and slot facts now (those its capabilities name)."""

    @abstractmethod
    def close(self) -> None:
        """Free the cache and everything it opened."""

    # -- operations (each needs the capability named) -----------------------

    def get(self, layer: int, expert: int) -> bytes:
        """``op:get``: the served payload of one demand access, released."""
        raise NotImplementedError

    def getmany(self, keys: list[Key]) -> int:
        """``op:getmany``: read and publish a batch; how many it published."""
        raise NotImplementedError

    def prefetch(self, keys: list[Key]) -> int:
        """``op:prefetch``: read ahead without waiting; reads started or published."""
        raise NotImplementedError

    def prefetch_speculative(self, keys: list[Key]) -> int:
        """``op:prefetch_speculative``: read ahead counted as speculative."""
        raise NotImplementedError

    def hold_layer(self, layer: int, experts: list[int]
                   ) -> tuple[Any, list[bytes]]:
        """``op:hold_layer``: hold ``experts`` of ``layer``; (handle, bytes each)."""
        raise NotImplementedError

    def container_has(self, name: str) -> bool:
        """``op:lifetime``: ``name in container`` (the container's face)."""
        raise NotImplementedError

    def container_read(self, name: str) -> bytes:
        """``op:lifetime``: the tensor ``name``'s bytes read through the
        container's face (``Container.read_bytes``)."""
        raise NotImplementedError

    def unhold_many(self, handle: Any, spent_at: int | None = None) -> None:
        """``op:hold_layer``: give back every hold a :meth:`hold_layer` took,
        all or none; with ``spent_at``, a spent handle put among them at
        that index (misuse: nothing may change)."""
        raise NotImplementedError

    def drain(self) -> None:
        """``op:drain``: wait for every read-ahead under way."""
        raise NotImplementedError

    def face(self) -> Any:
        """``op:lifetime``: the cache's Python face -- ``get``, ``hold_layer``
        and ``stream`` returning the objects whose lifetimes docs/CACHE.md
        "The Python face: lifetimes" gives (gate/face_ops.py drives them)."""
        raise NotImplementedError

    def stream_open(self, keys: list[Key]) -> Stream:
        """``op:stream``: begin a stream of ``keys`` (counted and reserved now)."""
        raise NotImplementedError

    def hold(self, layer: int, expert: int) -> tuple[Any, bytes]:
        """``op:hold``: a held reference and the bytes it shows."""
        raise NotImplementedError

    def release(self, ref: Any) -> None:
        """``op:hold``: give back a reference :meth:`hold` took."""
        raise NotImplementedError

    def copy_ref(self, ref: Any) -> Any:
        """``op:hold_copy``: a copy of a reference :meth:`hold` took, still held."""
        raise NotImplementedError

    def release_copy(self, copy: Any) -> None:
        """``op:hold_copy``: give back a :meth:`copy_ref` of a released reference."""
        raise NotImplementedError

    def pin(self, layer: int, expert: int) -> None:
        """``pins:flag``: pin a resident expert."""
        raise NotImplementedError

    def unpin(self, layer: int, expert: int) -> None:
        """``pins:flag``: undo one pin."""
        raise NotImplementedError

    def reset(self) -> None:
        """``op:reset_stats``: start a new counter window."""
        raise NotImplementedError

    def start_get(self, layer: int, expert: int) -> Pending:
        """``op:concurrent``: a get started now, perhaps on another thread."""
        raise NotImplementedError

    def waiting_get(self, layer: int, expert: int) -> Pending:
        """``op:concurrent``: a get of a key whose read is under way."""
        raise NotImplementedError

    def await_reads(self, count: int, bound_s: float) -> None:
        """``op:concurrent``: wait until the first injector met ``count`` reads."""
        raise NotImplementedError

    def start_call(self, fn: Callable[..., Any], *args: Any) -> Pending:
        """``op:concurrent``: ``fn(*args)`` started now, perhaps on another thread."""
        raise NotImplementedError

    def unstall(self) -> None:
        """``op:concurrent``: let every read a ``stall`` fault holds go on."""
        raise NotImplementedError

    def reads_held(self) -> int:
        """``op:concurrent``: how many reads a ``stall`` holds now (0: none)."""
        raise NotImplementedError

    def await_waiting(self, count: int, bound_s: float) -> None:
        """``op:concurrent``: wait until ``count`` background calls wait for a read."""
        raise NotImplementedError

    def wait_hits(self) -> int | None:
        """``op:concurrent``: hits after waiting so far (None: not counted now)."""
        raise NotImplementedError

    def trace_records(self) -> list[list[Any]]:
        """``op:trace``: every ``[layer, expert, kind, outcome]`` recorded so far."""
        raise NotImplementedError

    def trace_file(self) -> bytes:
        """``op:trace``: the whole trace file's bytes so far (written out
        first; the oracle: the bytes the engine's file must hold)."""
        raise NotImplementedError

    def set_step(self, step: int) -> None:
        """``op:trace``: stamp the trace records from now on with ``step``."""
        raise NotImplementedError

    def break_check(self, what: str, a: Key | str | None, b: Key | None,
                    variant: int) -> str:
        """``op:break_check``: the invariant check() names for break ``what``."""
        raise NotImplementedError

    def inject(self, step: dict[str, Any]) -> None:
        """``fault:io``: arm the pread fault the step describes."""
        raise NotImplementedError

    def inject_alloc(self, step: dict[str, Any]) -> None:
        """``fault:alloc``: make the step's nth allocation from now fail."""
        raise NotImplementedError

    def clear(self) -> None:  # noqa: B027 - a backend without faults has none
        """Disarm every fault (nothing when it has none)."""


@dataclass(frozen=True)
class BackendFactory:
    """How the runner opens one backend kind over a scenario's container copy."""

    name: str
    capabilities: Capabilities
    #: ``open(folder)``: the backend over the container copy in ``folder``
    open: Callable[[Path], Backend] = field(repr=False)
    kind_of: Callable[[BaseException], str] = field(repr=False,
                                                    default=Backend.kind_of)
    reference: bool = False
    #: each run in a forked process of its own (gate/contained.py): the
    #: engine's, whose abort or signal would otherwise end the gate
    contained: bool = False

    def __call__(self, folder: Path) -> Backend:
        """Open the backend over ``folder``."""
        return self.open(folder)

    def inject_open(self, step: dict[str, Any]) -> None:
        """``fault:open``: arm the step's open fault before the backend opens."""
        raise NotImplementedError

    def open_files(self) -> int:
        """``fault:open``: how many descriptors the cache holds now."""
        raise NotImplementedError

    def clear_open(self) -> None:
        """``fault:open``: disarm the open fault (nothing without one)."""

    @classmethod
    def of(cls, backend_cls: type[Backend], open_: Callable[[Path], Backend]
           ) -> BackendFactory:
        """The factory of ``backend_cls`` with its declared name and capabilities."""
        return cls(backend_cls.name, backend_cls.capabilities, open_,
                   backend_cls.kind_of, backend_cls.reference)
