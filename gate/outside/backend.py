"""An outside cache, built from its adapter, behind :class:`gate.backend_api.Backend`.

:class:`OutsideBackend` calls the shim's table (``xcs_shim.h``) of the cffi
module :func:`gate.outside.build.compile_module` made, loaded in the
cache's own process (:class:`gate.outside.host.Host`); its capabilities are the
manifest's declaration (:func:`capabilities_of`), refused when it names an
operation whose entry is NULL.  Keys reach the shim as (layer position,
expert); a layer id outside the layout becomes a position outside
``0 .. n_layers-1`` so that the shim sees the bad key.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from xcache.gate import CannotRun
from xcache.gate.backend_api import (
    FAULT_KINDS,
    Backend,
    BackendFactory,
    Capabilities,
    Declined,
    Errors,
    Fact,
    Fault,
    Key,
    Op,
    Option,
    Pins,
)
from xcache.gate.backend_factory import factory
from xcache.gate.operations import OPEN_FAULTS
from xcache.gate.outside.build import Manifest
from xcache.gate.outside.designs import Design, designed
from xcache.gate.outside.host import Host, Session

#: the shim's stats bits (xcs_shim.h), by counter or fact name
STATS = ("requests", "hits", "misses", "evictions", "payload_bytes",
         "io_bytes", "prefetch_loads", "load_failures", "short_reads",
         "io_errors", "ready_slots", "inflight_slots", "prefetch_first_uses")

#: the failure kind of each typed shim code (faults/kinds.py words)
KINDS = {-1: "failed", -2: "misuse", -3: "io", -4: "short_read", -5: "nomem",
         -6: "all_pinned", -7: "format", -8: "not_found", -9: "changed"}

#: the read faults of the outside injectors, by their kind number - 1
#: (xcs_faults.c)
INJECTED = ("partial", "eof", "eio", "eintr", "delay")

#: the shim ABI from which ``xcs_layout.options`` is given (xcs_shim.h)
OPTIONS_ABI = 2

#: the table entry each declared operation needs (with ``[design] holds =
#: "whole-set"``, release_all instead of release)
ENTRIES = {Op.GET: ("get", "release"), Op.HOLD: ("get", "release"),
           Op.GETMANY: ("getmany",), Op.PREFETCH: ("prefetch",),
           Op.DRAIN: ("drain",), Op.RESET_STATS: ("reset",),
           Op.CHECK: ("check",)}


class ShimError(Exception):
    """A negative code from the shim, with the kind it names."""

    def __init__(self, call: str, rc: int, typed: bool) -> None:
        self.rc = rc
        self.kind = KINDS.get(rc, "failed") if typed else "failed"
        super().__init__(f"{call}: shim code {rc} ({self.kind})")


def capabilities_of(m: Manifest) -> Capabilities:
    """The manifest's declaration as :class:`Capabilities` (bad name: ``CannotRun``)."""
    c = m.capabilities
    where = f"{m.folder}/xcs.toml [capabilities]"
    try:
        caps = Capabilities(
            ops=frozenset(Op(o) for o in c.get("ops", [])),
            options=frozenset(Option(o) for o in c.get("options", [])),
            policies=frozenset(c.get("policies", ["lru"])),
            counters=frozenset(c.get("counters", [])),
            facts=frozenset(Fact(f) for f in c.get("facts", [])),
            pins=Pins(c.get("pins", "none")),
            faults=frozenset(Fault(f) for f in c.get("faults", [])),
            errors=Errors(c.get("errors", "failed")),
            inexact=m.design.inexact_names())
    except ValueError as e:
        raise CannotRun(f"{where}: {e}") from e
    if Fault.IO in caps.faults:  # the gate's wrappers place a fault by
        # the file and range of each read they see, whatever the cache's order
        caps = dataclasses.replace(caps, faults=caps.faults | {Fault.PLACED})
    if Op.CONCURRENT in caps.ops:
        raise CannotRun(f"{where}: op:concurrent cannot be judged on an "
                        "outside cache (xcs_shim.h: calls come from one "
                        "thread at a time)")
    bad = [s for s in caps.counters | {f.value for f in caps.facts}
           if s not in STATS and s not in ("n_slots", "resident", "held",
                                           "holding")]
    if bad:
        raise CannotRun(f"{where}: the shim cannot report {sorted(bad)}")
    return caps


def check_table(table: dict[str, Any], caps: Capabilities, m: Manifest
                ) -> None:
    """Refuse a declaration naming an operation the shim's table leaves NULL.

    ``table``: what the cache's process read of ``xcs_shim()``
    (:meth:`gate.outside.host.Host.start`).
    """
    abi, gate, oldest = table["abi"], table["gate_abi"], table["oldest_abi"]
    if not oldest <= abi <= gate:
        raise CannotRun(f"{m.shim}: shim ABI {abi}; the gate runs ABI "
                        f"{oldest} to {gate} (set .abi = XCS_ABI and build "
                        "against this gate's xcs_shim.h)")
    if abi < OPTIONS_ABI and caps.options:
        raise CannotRun(
            f"{m.shim}: shim ABI {abi} is given no options, yet the manifest "
            f"declares options {sorted(o.value for o in caps.options)} "
            f"honoured: options reach a shim of ABI {OPTIONS_ABI} "
            "(xcs_layout.options); set .abi = XCS_ABI and read them")
    need = [e for op in caps.ops for e in ENTRIES.get(op, ())]
    if m.design.holds == "whole-set":
        if abi < 3:
            raise CannotRun(f"{m.shim}: design.holds = \"whole-set\" needs "
                            f"the entry release_all of ABI 3; the shim is "
                            f"ABI {abi}")
        need = [e for e in need if e != "release"] + ["release_all"]
    if m.design.io == "callback" and abi < 3:
        raise CannotRun(f"{m.shim}: design.io = \"callback\" needs "
                        f"xcs_layout.fetch of ABI 3; the shim is ABI {abi}")
    if caps.pins is not Pins.NONE:
        need += ["pin", "unpin"]
    if Fact.RESIDENT in caps.facts:
        need.append("resident")
    for e in ["open", "close", "stats", *need]:
        if e in table["null"]:
            raise CannotRun(f"{m.shim}: the manifest declares what needs "
                            f"the entry {e}, which the shim leaves NULL")


def relations(v: dict[str, Any]) -> list[str]:
    """What must hold among a cache's values whatever its design, broken.

    The demand requests are the hits and misses; no more residents than
    slots, each published once (the ``resident`` list against
    ``ready_slots``); no fewer bytes asked of the files than published.
    """
    out = []
    if all(k in v for k in ("requests", "hits", "misses")) and \
            v["requests"] != v["hits"] + v["misses"]:
        out.append(f"requests {v['requests']} != hits {v['hits']} + misses "
                   f"{v['misses']}")
    n = v["n_slots"]
    if v.get("ready_slots", 0) > n or len(v.get("resident", [])) > n:
        out.append(f"more residents than the {n} slots")
    if "resident" in v and "ready_slots" in v and \
            len(v["resident"]) != v["ready_slots"]:
        out.append(f"{len(v['resident'])} keys resident in "
                   f"{v['ready_slots']} ready slots")
    if "io_bytes" in v and "payload_bytes" in v and \
            v["io_bytes"] < v["payload_bytes"]:
        out.append(f"io_bytes {v['io_bytes']} < payload_bytes "
                   f"{v['payload_bytes']} published")
    return out


def options_of(target: Any, opts: dict[str, Any]) -> dict[str, int]:
    """``xcs_options`` of one run: the model's top-k and every cache option
    the scenario gives (0 when it gives none)."""
    out = {"top_k": int(target.layout["top_k"])}
    for o in Option:
        out[o.value] = int(opts.get(o.value) or 0)
    return out


class OutsideBackend(Backend):
    """One outside cache over a scenario's container copy, through its shim.

    Every call runs in the cache's own process (:class:`Host`); what it
    returns is bounded there before a byte is copied.  ``fetch``: the
    cache is given the gate's fetch (``[design] io = "callback"``).
    """

    name = "cache"

    def __init__(self, host: Host, session: Session, caps: Capabilities,
                 folder: Path, target: Any, opts: dict[str, Any],
                 fetch: bool = False) -> None:
        self.host, self.session, self.caps = host, session, caps
        #: holds whose bytes had changed when they were given back
        self.held_changed = 0
        self.typed = caps.errors is Errors.TYPED
        self.h: int | None = None
        lay = target.layout
        self.layers = list(lay["layers"])
        self.n_experts = int(lay["n_experts"])
        keys = [(la, e) for la in self.layers for e in range(self.n_experts)]
        per_key = [target.pieces(*k) for k in keys]
        n_pieces = len(per_key[0])
        if any(len(p) != n_pieces for p in per_key):
            raise CannotRun("outside caches need the same pieces per expert")
        pieces = [[(str(Path(folder) / Path(p.shard).name), p.offset, p.nbytes)
                   for p in ps] for ps in per_key]
        self.expert_bytes = int(target.quantities["expert_bytes"])
        self.n_slots = int(opts["n_slots"])
        layout = {"folder": str(folder), "layer_ids": self.layers,
                  "n_experts": self.n_experts, "n_pieces": n_pieces,
                  "pieces": pieces,
                  "paths": sorted({p for ps in pieces for p, _, _ in ps}),
                  "expert_bytes": self.expert_bytes, "n_slots": self.n_slots,
                  "policy": str(opts.get("policy", "lru")),
                  "options": options_of(target, opts),
                  "fetch": fetch}
        rc, hid, host.cap = self._call("open", "open", layout)
        given = {k: v for k, v in layout["options"].items()
                 if k != "top_k" and v}
        if rc == -2 and given:  # XCS_EMISUSE: options it cannot honour
            raise Declined([f"option:{k} ({v} refused at open)"
                            for k, v in given.items()])
        self._rc("open", rc)
        self.h = hid
        session.open.add(hid)
        #: holds taken by hold() and not given back: reference -> key
        self.refs: dict[int, Key] = {}
        self.serial = 0

    def _call(self, what: str, op: str, *args: Any) -> Any:
        return self.host.call(self.session, what, op, *args)

    @staticmethod
    def kind_of(exc: BaseException) -> str:
        """The kind a shim failure names (``failed`` when untyped)."""
        if isinstance(exc, ShimError):
            return exc.kind
        raise exc

    def _rc(self, call: str, rc: int) -> int:
        if rc < 0:
            raise ShimError(call, rc, self.typed)
        return rc

    def _pos(self, layer: int) -> int:
        """The shim's layer position of a layer id (outside the range if unknown)."""
        if layer in self.layers:
            return self.layers.index(layer)
        if layer < self.layers[0]:
            return -1
        return len(self.layers) + layer - self.layers[-1] - 1

    def _keyed(self, entry: str, layer: int, expert: int) -> int:
        """An entry of one key: its code (a negative one raised)."""
        return self._rc(entry, self._call(
            f"{entry}(layer {layer}, expert {expert})", "call", entry,
            self.h, self._pos(layer), expert))

    def _batch(self, entry: str, keys: list[Key]) -> int:
        flat = [v for la, e in keys for v in (self._pos(la), e)]
        shown = ", ".join(f"({la}, {e})" for la, e in keys[:4]) + \
            (", ..." if len(keys) > 4 else "")
        return self._rc(entry, self._call(f"{entry}([{shown}])", "batch",
                                          entry, self.h, flat))

    def _take(self, layer: int, expert: int) -> bytes:
        rc, data = self._call(f"get(layer {layer}, expert {expert})", "get",
                              self.h, self._pos(layer), expert,
                              self.expert_bytes)
        self._rc("get", rc)
        return data

    def _release(self, layer: int, expert: int) -> None:
        """The shim's release of one hold of the key, its bytes checked first."""
        rc, changed = self._call(f"release(layer {layer}, expert {expert})",
                                 "release", self.h, self._pos(layer), expert)
        self.held_changed += bool(changed)
        self._rc("release", rc)

    def get(self, layer: int, expert: int) -> bytes:
        """A demand access, its bytes copied, then released."""
        got = self._take(layer, expert)
        self._release(layer, expert)
        return got

    def hold(self, layer: int, expert: int) -> tuple[Any, bytes]:
        """A get kept held, under a reference of its own."""
        got = self._take(layer, expert)
        self.serial += 1
        self.refs[self.serial] = (layer, expert)
        return self.serial, got

    def release(self, ref: Any) -> None:
        """The shim's release of the key of a live reference hold() took.

        A reference given back already is misuse, refused here: the shim
        releases by key, and the key may be held again by another holder,
        whose hold a stale reference must not take.
        """
        key = self.refs.pop(ref, None)
        if key is None:
            raise ShimError("release", -2, self.typed)
        self._release(*key)

    def release_set(self, refs: list[Any]) -> None:
        """The shim's release_all (``[design] holds = "whole-set"``): every
        hold of ``refs`` -- all the cache has -- given back at once."""
        for ref in refs:
            self.refs.pop(ref, None)
        rc, changed = self._call("release_all()", "release_all", self.h)
        self.held_changed += int(changed)
        self._rc("release_all", rc)

    def getmany(self, keys: list[Key]) -> int:
        """The shim's getmany: how many it published."""
        return self._batch("getmany", keys)

    def prefetch(self, keys: list[Key]) -> int:
        """The shim's prefetch: loads started or published."""
        return self._batch("prefetch", keys)

    def drain(self) -> None:
        """The shim's drain."""
        self._rc("drain", self._call("drain()", "call", "drain", self.h))

    def pin(self, layer: int, expert: int) -> None:
        """The shim's pin."""
        self._keyed("pin", layer, expert)

    def unpin(self, layer: int, expert: int) -> None:
        """The shim's unpin."""
        self._keyed("unpin", layer, expert)

    def reset(self) -> None:
        """The shim's reset: a new counter window."""
        self._rc("reset", self._call("reset()", "call", "reset", self.h))

    def inject(self, step: dict[str, Any]) -> None:
        """Arm the linked-in injector the step names (``second``: the inner one)."""
        assert step["fault"] in FAULT_KINDS
        if step["fault"] not in INJECTED:  # a stall: needs op:concurrent,
            # which no outside cache is judged on (gate/operations.py)
            raise CannotRun(f"inject {step['fault']}: the outside injectors "
                            f"break reads with {', '.join(INJECTED)} only")
        kind = INJECTED.index(step["fault"])
        which = 1 if step.get("second") else 0
        self._rc("inject", self._call(
            "xcs_fault_arm", "fault", "arm", which,
            kind + 1, int(step.get("nth", 1)),
            int(bool(step.get("persistent", False))), int(step.get("arg", 0))))
        place = step.get("place")
        if place is not None:
            self._rc("inject", self._call(
                "xcs_fault_place", "fault", "place", which, place["path"],
                int(place["offset"])))

    def clear(self) -> None:
        """Disarm every injector (nothing without fault:io or fault:open)."""
        if self.caps.faults & {Fault.IO, Fault.OPEN}:
            self._call("xcs_fault_disarm", "fault", "disarm")

    def values(self) -> dict[str, Any]:
        """The counters the stats mask marks present, and the declared facts."""
        rc, present, got, resident, verdict = self._call(
            "stats, resident and check", "values", self.h, len(self.layers),
            self.n_experts)
        self._rc("stats", rc)
        v: dict[str, Any] = {name: got[i] for i, name in enumerate(STATS)
                             if present >> i & 1}
        v["n_slots"] = self.n_slots
        if resident is not None:
            v["resident"] = sorted([self.layers[i], e] for i, e in resident)
        counts: dict[Key, int] = {}
        for k in self.refs.values():
            counts[k] = counts.get(k, 0) + 1
        v["held"] = len(self.refs)
        v["holding"] = sorted([*k, n] for k, n in counts.items())
        if verdict is not None:
            v["invariants"] = verdict
        v["relations"] = relations(v)
        v["held_changed"] = self.held_changed
        return v

    def close(self) -> None:
        """The shim's close, the injectors disarmed (nothing if its process
        ended: what it held ended with it)."""
        h, self.h = self.h, None
        if h is None:
            return
        self.session.open.discard(h)
        if not self.host.alive_for(self.session):
            return
        self.clear()
        self._call("close", "close", h)


@dataclasses.dataclass(frozen=True)
class OutsideFactory(BackendFactory):
    """The runner's factory of an outside cache: one run's :class:`Session`.

    ``partial_checks``: a check pinning values this backend lacks judges the
    ones it has (the rest named N/A in its line) instead of being N/A whole.
    ``host``: the cache's process, whose open injector and descriptor count
    the ``open_fault`` step uses before any backend is open; ``session``
    this run's share of it (its deadline).
    """

    partial_checks: bool = True
    #: the failure kinds a typed shim can name: an expected kind of the
    #: format checks (``offsets``, ``too_short`` ...) is compared as
    #: ``format`` (gate/scenario_run.py)
    kinds: frozenset[str] = frozenset(KINDS.values())
    host: Any = None
    session: Any = None
    #: a sampled policy's bound: its hits within this share of the requests
    #: of the exact policy's (gate/scenario_run.py), else None
    hit_bound: float | None = None
    #: [True] between inject_open and the open it is for
    _armed: list[bool] = dataclasses.field(default_factory=lambda: [False],
                                           repr=False)

    def _fault(self, what: str, *args: int) -> int:
        return int(self.host.call(self.session, f"xcs_fault_{what}", "fault",
                                  what, *args))

    def __call__(self, folder: Path) -> Backend:
        """Open the cache over ``folder``, every injector disarmed first.

        The injectors are one per process: what a run armed must not stay
        armed under the next one.  An open fault armed for this open
        (``inject_open``) stays.
        """
        if not self._armed[0] and self.capabilities.faults & {Fault.IO,
                                                              Fault.OPEN}:
            self._fault("disarm")
        self._armed[0] = False
        return self.open(folder)

    def inject_open(self, step: dict[str, Any]) -> None:
        """Arm the open injector with the step's fault (``fault:open``)."""
        kind = OPEN_FAULTS.index(step["fault"]) + 1
        rc = self._fault("arm", 2, kind, int(step.get("nth", 1)),
                         int(bool(step.get("persistent", False))), 0)
        assert rc == 0, rc
        self._armed[0] = True

    def open_files(self) -> int:
        """The descriptors the cache's wrapped opens handed out and it kept."""
        return self._fault("open_files")

    def clear_open(self) -> None:
        """Disarm every injector."""
        self._fault("disarm")


def outside_factory(host: Host, caps: Capabilities, label: str, target: Any,
                    opts: dict[str, Any], bound: float = 60.0,
                    design: Any = None) -> BackendFactory:
    """The factory opening the cache over a container copy, for one run whose
    calls must all return within ``bound`` seconds of its first, seen
    through the cache's declared ``design`` (gate/outside/designs.py)."""
    design = design or Design()
    session = Session(bound)
    made = OutsideFactory(
        label, caps,
        lambda folder: OutsideBackend(host, session, caps, folder, target,
                                      opts, design.io == "callback"),
        OutsideBackend.kind_of, False, host=host, session=session,
        hit_bound=design.hit_bound if design.policy == "sampled" else None)
    if design.declared():
        return designed(made, design, target, judge=False)
    return made


def judge_factory(target: Any, opts: dict[str, Any], caps: Capabilities,
                  design: Any = None) -> BackendFactory:
    """The oracle's factory, playing the cache's declared ``design`` and,
    when the cache's pins are a flag, flag pins."""
    design = design or Design()
    made = factory("oracle", None, target, opts)
    flag = caps.pins is Pins.FLAG
    if design.declared() or flag:
        return designed(made, design, target, judge=True, flag_pins=flag)
    return made
