"""An outside cache, built from its adapter, behind :class:`gate.backend_api.Backend`.

:class:`OutsideBackend` calls the shim's table (``xcs_shim.h``) through the
cffi module :func:`gate.outside.build.build` made; its capabilities are the
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
    Errors,
    Fact,
    Fault,
    Key,
    Op,
    Option,
    Pins,
)
from xcache.gate.operations import OPEN_FAULTS
from xcache.gate.outside.build import Manifest

#: the shim's stats bits (xcs_shim.h), by counter or fact name
STATS = ("requests", "hits", "misses", "evictions", "payload_bytes",
         "io_bytes", "prefetch_loads", "load_failures", "short_reads",
         "io_errors", "ready_slots", "inflight_slots")

#: the failure kind of each typed shim code (faults/kinds.py words)
KINDS = {-1: "failed", -2: "misuse", -3: "io", -4: "short_read", -5: "nomem",
         -6: "all_pinned", -7: "format"}

#: the table entry each declared operation needs
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
            errors=Errors(c.get("errors", "failed")))
    except ValueError as e:
        raise CannotRun(f"{where}: {e}") from e
    bad = [s for s in caps.counters | {f.value for f in caps.facts}
           if s not in STATS and s not in ("n_slots", "resident", "held",
                                           "holding")]
    if bad:
        raise CannotRun(f"{where}: the shim cannot report {sorted(bad)}")
    return caps


def check_table(lib: Any, ffi: Any, caps: Capabilities, m: Manifest) -> None:
    """Refuse a declaration naming an operation the shim's table leaves NULL."""
    vt = lib.xcs_shim()
    if vt.abi != lib.XCS_ABI:
        raise CannotRun(f"{m.shim}: shim ABI {vt.abi}, the gate's is "
                        f"{lib.XCS_ABI}")
    need = [e for op in caps.ops for e in ENTRIES.get(op, ())]
    if caps.pins is not Pins.NONE:
        need += ["pin", "unpin"]
    if Fact.RESIDENT in caps.facts:
        need.append("resident")
    for e in ["open", "close", "stats", *need]:
        if getattr(vt, e) == ffi.NULL:
            raise CannotRun(f"{m.shim}: the manifest declares what needs "
                            f"the entry {e}, which the shim leaves NULL")


class OutsideBackend(Backend):
    """One outside cache over a scenario's container copy, through its shim."""

    name = "cache"

    def __init__(self, ffi: Any, lib: Any, caps: Capabilities, folder: Path,
                 target: Any, opts: dict[str, Any]) -> None:
        self.ffi, self.lib, self.vt, self.caps = ffi, lib, lib.xcs_shim(), caps
        self.typed = caps.errors is Errors.TYPED
        lay = target.layout
        self.layers = list(lay["layers"])
        self.n_experts = int(lay["n_experts"])
        keys = [(la, e) for la in self.layers for e in range(self.n_experts)]
        per_key = [target.pieces(*k) for k in keys]
        n_pieces = len(per_key[0])
        if any(len(p) != n_pieces for p in per_key):
            raise CannotRun("outside caches need the same pieces per expert")
        keep = []  # the C strings must outlive the open call
        pieces = ffi.new("xcs_piece[]", len(keys) * n_pieces)
        paths: dict[str, Any] = {}
        for i, ps in enumerate(per_key):
            for j, p in enumerate(ps):
                path = str(Path(folder) / Path(p.shard).name)
                if path not in paths:
                    paths[path] = ffi.new("char[]", path.encode())
                pc = pieces[i * n_pieces + j]
                pc.path, pc.offset, pc.length = paths[path], p.offset, p.nbytes
        keep += [folder_c := ffi.new("char[]", str(folder).encode()),
                 policy := ffi.new("char[]", str(opts.get("policy", "lru"))
                                   .encode()),
                 ids := ffi.new("int[]", self.layers)]
        eb = int(target.quantities["expert_bytes"])
        layout = ffi.new("xcs_layout *", {
            "folder": folder_c, "n_layers": len(self.layers), "layer_ids": ids,
            "n_experts": self.n_experts, "n_pieces": n_pieces,
            "pieces": pieces, "expert_bytes": eb,
            "n_slots": int(opts["n_slots"]), "slot_bytes": eb,
            "policy": policy})
        self.n_slots = int(opts["n_slots"])
        out = ffi.new("void **")
        self._rc("open", self.vt.open(layout, out))
        self.h = out[0]
        del keep, paths
        #: holds taken by hold() and not given back: reference -> key
        self.refs: dict[int, Key] = {}
        self.serial = 0

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

    def _keys(self, keys: list[Key]) -> Any:
        flat = [v for la, e in keys for v in (self._pos(la), e)]
        return self.ffi.new("int[]", flat or [0])

    def _take(self, layer: int, expert: int) -> bytes:
        data, n = self.ffi.new("const void **"), self.ffi.new("size_t *")
        self._rc("get", self.vt.get(self.h, self._pos(layer), expert,
                                    data, n))
        return bytes(self.ffi.buffer(data[0], n[0]))

    def get(self, layer: int, expert: int) -> bytes:
        """A demand access, its bytes copied, then released."""
        got = self._take(layer, expert)
        self._rc("release", self.vt.release(self.h, self._pos(layer), expert))
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
        self._rc("release", self.vt.release(self.h, self._pos(key[0]), key[1]))

    def getmany(self, keys: list[Key]) -> int:
        """The shim's getmany: how many it published."""
        return self._rc("getmany", self.vt.getmany(self.h, self._keys(keys),
                                                   len(keys)))

    def prefetch(self, keys: list[Key]) -> int:
        """The shim's prefetch: loads started or published."""
        return self._rc("prefetch", self.vt.prefetch(self.h, self._keys(keys),
                                                     len(keys)))

    def drain(self) -> None:
        """The shim's drain."""
        self._rc("drain", self.vt.drain(self.h))

    def pin(self, layer: int, expert: int) -> None:
        """The shim's pin."""
        self._rc("pin", self.vt.pin(self.h, self._pos(layer), expert))

    def unpin(self, layer: int, expert: int) -> None:
        """The shim's unpin."""
        self._rc("unpin", self.vt.unpin(self.h, self._pos(layer), expert))

    def reset(self) -> None:
        """The shim's reset: a new counter window."""
        self._rc("reset", self.vt.reset(self.h))

    def inject(self, step: dict[str, Any]) -> None:
        """Arm the linked-in injector the step names (``second``: the inner one)."""
        kind = ("partial", "eof", "eio", "eintr", "delay").index(step["fault"])
        assert step["fault"] in FAULT_KINDS
        self._rc("inject", self.lib.xcs_fault_arm(
            1 if step.get("second") else 0, kind + 1, int(step.get("nth", 1)),
            int(bool(step.get("persistent", False))), int(step.get("arg", 0))))

    def clear(self) -> None:
        """Disarm every injector (nothing without fault:io or fault:open)."""
        if self.caps.faults & {Fault.IO, Fault.OPEN}:
            self.lib.xcs_fault_disarm()

    def values(self) -> dict[str, Any]:
        """The counters the stats mask marks present, and the declared facts."""
        st = self.ffi.new("xcs_stats *")
        self._rc("stats", self.vt.stats(self.h, st))
        v: dict[str, Any] = {name: int(st.v[i]) for i, name in enumerate(STATS)
                             if st.present >> i & 1}
        v["n_slots"] = self.n_slots
        if self.vt.resident != self.ffi.NULL:
            v["resident"] = sorted(
                [la, e] for i, la in enumerate(self.layers)
                for e in range(self.n_experts)
                if self.vt.resident(self.h, i, e) > 0)
        counts: dict[Key, int] = {}
        for k in self.refs.values():
            counts[k] = counts.get(k, 0) + 1
        v["held"] = len(self.refs)
        v["holding"] = sorted([*k, n] for k, n in counts.items())
        if self.vt.check != self.ffi.NULL:
            msg = self.ffi.new("char[]", 256)
            bad = self.vt.check(self.h, msg, 256)
            v["invariants"] = ("clean" if bad == 0 else
                               self.ffi.string(msg).decode(errors="replace"))
        return v

    def close(self) -> None:
        """The shim's close, the injectors disarmed."""
        self.clear()
        if self.h is not None:
            self.vt.close(self.h)
            self.h = None


@dataclasses.dataclass(frozen=True)
class OutsideFactory(BackendFactory):
    """The runner's factory of an outside cache.

    ``partial_checks``: a check pinning values this backend lacks judges the
    ones it has (the rest named N/A in its line) instead of being N/A whole.
    ``lib``: the built module's library, whose open injector and descriptor
    count the ``open_fault`` step uses before any backend is open.
    """

    partial_checks: bool = True
    lib: Any = None
    #: [True] between inject_open and the open it is for
    _armed: list[bool] = dataclasses.field(default_factory=lambda: [False],
                                           repr=False)

    def __call__(self, folder: Path) -> Backend:
        """Open the cache over ``folder``, every injector disarmed first.

        The injectors are one per process: a run left behind by the
        watchdog must not leave a fault armed under the next one.  An open
        fault armed for this open (``inject_open``) stays.
        """
        if not self._armed[0] and self.lib is not None:
            self.lib.xcs_fault_disarm()
        self._armed[0] = False
        return self.open(folder)

    def inject_open(self, step: dict[str, Any]) -> None:
        """Arm the open injector with the step's fault (``fault:open``)."""
        kind = OPEN_FAULTS.index(step["fault"]) + 1
        rc = self.lib.xcs_fault_arm(2, kind, int(step.get("nth", 1)),
                                    int(bool(step.get("persistent", False))), 0)
        assert rc == 0, rc
        self._armed[0] = True

    def open_files(self) -> int:
        """The descriptors the cache's wrapped opens handed out and it kept."""
        return int(self.lib.xcs_fault_open_files())

    def clear_open(self) -> None:
        """Disarm every injector."""
        self.lib.xcs_fault_disarm()


def outside_factory(ffi: Any, lib: Any, caps: Capabilities, label: str,
                    target: Any, opts: dict[str, Any]) -> OutsideFactory:
    """The factory opening the built cache over a container copy."""
    return OutsideFactory(
        label, caps,
        lambda folder: OutsideBackend(ffi, lib, caps, folder, target, opts),
        OutsideBackend.kind_of, False, lib=lib)
