"""The child process an outside cache runs in: it serves the gate's calls over a pipe.

``python -m xcache.gate.outside.worker RFD WFD MODULE.so MODNAME`` loads
the cffi module :func:`gate.outside.build.compile_module` made (the cache,
its shim and the injectors) and answers one request at a time from the
pipe ``RFD`` on ``WFD`` (:class:`multiprocessing.connection.Connection`
framing).  It judges nothing: the gate (:mod:`gate.outside.host`) keeps
the judging in its own process, and only this process dies when the cache
calls ``exit``, aborts, faults, hangs or exhausts its address space
(``RLIMIT_AS``, set at start and again at every open).

Nothing the shim returns is copied before it is bounded: a payload
pointer that is NULL, or a length above the expert's size, is refused
(``("violation", text)``) without reading a byte.  This module imports
nothing of the gate: the child starts in a few tens of milliseconds.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import sys
from multiprocessing.connection import Connection
from typing import Any

#: the address space a cache may take beyond what it has at start or at an
#: open, plus four times its slots (``RLIMIT_AS``): a blow-up past it
#: fails an allocation instead of the machine
HEADROOM = 1 << 30

#: the longest invariant message or name read from the shim
MSG_CAP = 256

#: the fields of ``xcs_options`` (ABI 2) the gate fills from the layout's
#: ``options``: the model's top-k and the scenario's cache options
OPTION_FIELDS = ("top_k", "direct", "chunk_bytes", "io_threads",
                 "batch_threads", "verify")


class Violation(Exception):
    """A reply of the shim that breaks the contract before any byte is read."""


def _vm_bytes() -> int:
    """This process's address-space size now (``/proc/self/statm``)."""
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def limit_memory(extra: int) -> int:
    """Cap the address space at its size now plus ``HEADROOM`` plus ``extra``."""
    cap = _vm_bytes() + HEADROOM + extra
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    return cap


class Worker:
    """The loaded module and the caches it has open, by handle number."""

    def __init__(self, ffi: Any, lib: Any) -> None:
        self.ffi, self.lib, self.vt = ffi, lib, ffi.NULL
        self.handles: dict[int, Any] = {}
        #: each handle's fetch context (xcs_fetch.c), freed after its close
        self.fetch: dict[int, Any] = {}
        #: each handle's holds not given back: (position, expert) -> the
        #: (pointer, bytes served) of each, checked when it is given back
        self.held: dict[int, dict[tuple[int, int], list[tuple[Any, bytes]]]] = {}
        self.serial = 0
        self.abi = 0

    def table(self) -> dict[str, Any]:
        """The shim's table: its ABI, its name and the entries it leaves NULL."""
        vt = self.lib.xcs_shim()
        if vt == self.ffi.NULL:
            raise Violation("xcs_shim() returned NULL, not its table")
        self.vt = vt
        name = ("" if vt.name == self.ffi.NULL else
                self.ffi.string(vt.name, MSG_CAP).decode(errors="replace"))
        entries = ["open", "close", "get", "release", "getmany", "prefetch",
                   "drain", "pin", "unpin", "reset", "stats", "resident",
                   "check"]
        self.abi = int(vt.abi)
        if self.abi >= 3:  # entries past an older table's end are not read
            entries.append("release_all")
        return {"abi": int(vt.abi), "gate_abi": int(self.lib.XCS_ABI),
                "oldest_abi": int(self.lib.XCS_ABI_OLDEST), "name": name,
                "null": [e for e in entries if getattr(vt, e) == self.ffi.NULL]}

    def open(self, lay: dict[str, Any]) -> tuple[int, int | None, int]:
        """``open`` over the layout: (its code, the new handle's number or
        None, the address-space cap set for it)."""
        ffi = self.ffi
        cap = limit_memory(4 * int(lay["n_slots"]) * int(lay["expert_bytes"]))
        n_pieces = int(lay["n_pieces"])
        per_key = lay["pieces"]
        keep = {p: ffi.new("char[]", p.encode()) for p in lay["paths"]}
        pieces = ffi.new("xcs_piece[]", max(1, len(per_key) * n_pieces))
        for i, ps in enumerate(per_key):
            for j, (path, offset, length) in enumerate(ps):
                pc = pieces[i * n_pieces + j]
                pc.path, pc.offset, pc.length = keep[path], offset, length
        folder = ffi.new("char[]", lay["folder"].encode())
        policy = ffi.new("char[]", lay["policy"].encode())
        ids = ffi.new("int[]", lay["layer_ids"])
        layout = ffi.new("xcs_layout *", {
            "folder": folder, "n_layers": len(lay["layer_ids"]),
            "layer_ids": ids, "n_experts": lay["n_experts"],
            "n_pieces": n_pieces, "pieces": pieces,
            "expert_bytes": lay["expert_bytes"], "n_slots": lay["n_slots"],
            "slot_bytes": lay["expert_bytes"], "policy": policy})
        o = lay.get("options", {})
        options = ffi.new("xcs_options *", {
            "size": ffi.sizeof("xcs_options"),
            **{k: int(o.get(k) or 0) for k in OPTION_FIELDS}})
        layout.options = options
        ctx = ffi.NULL
        if self.abi >= 3 and lay.get("fetch"):
            ctx = self.lib.xcs_fetch_new(layout)
            if ctx == ffi.NULL:
                return -3, None, cap  # XCS_EIO: a file the gate cannot open
            layout.fetch = ffi.cast("xcs_fetch_fn",
                                    ffi.addressof(self.lib, "xcs_fetch"))
            layout.fetch_ctx = ctx
        out = ffi.new("void **")
        rc = int(self.vt.open(layout, out))
        if rc < 0:
            self.lib.xcs_fetch_free(ctx)
            return rc, None, cap
        self.serial += 1
        self.handles[self.serial] = out[0]
        self.fetch[self.serial] = ctx
        self.held[self.serial] = {}
        return rc, self.serial, cap

    def close(self, hid: int) -> None:
        """``close`` of a handle (an unknown one: nothing)."""
        h = self.handles.pop(hid, None)
        self.held.pop(hid, None)
        if h is not None:
            self.vt.close(h)
            self.lib.xcs_fetch_free(self.fetch.pop(hid, self.ffi.NULL))

    def get(self, hid: int, pos: int, expert: int, most: int
            ) -> tuple[int, bytes | None]:
        """``get``: its code and the payload, bounded by ``most`` bytes first."""
        data, n = self.ffi.new("const void **"), self.ffi.new("size_t *")
        rc = int(self.vt.get(self.handles[hid], pos, expert, data, n))
        if rc < 0:
            return rc, None
        if data[0] == self.ffi.NULL:
            raise Violation(f"get returned {rc} with a NULL data pointer "
                            f"(length {int(n[0])})")
        if int(n[0]) > most:
            raise Violation(f"get returned a length of {int(n[0])} bytes for "
                            f"an expert of {most} bytes (nothing read)")
        got = bytes(self.ffi.buffer(data[0], int(n[0])))
        self.held[hid].setdefault((pos, expert), []).append((data[0], got))
        return rc, got

    def _changed(self, ptr: Any, served: bytes) -> bool:
        """Whether the bytes at a held payload differ from those served."""
        return bytes(self.ffi.buffer(ptr, len(served))) != served

    def release(self, hid: int, pos: int, expert: int) -> tuple[int, bool]:
        """``release`` of one hold of the key: (its code, whether the
        bytes of the hold it gives back changed while held)."""
        holds = self.held[hid].get((pos, expert), [])
        changed = bool(holds) and self._changed(*holds[-1])
        rc = int(self.vt.release(self.handles[hid], pos, expert))
        if rc >= 0 and holds:
            holds.pop()
        return rc, changed

    def release_all(self, hid: int) -> tuple[int, int]:
        """``release_all`` (ABI 3): (its code, how many of the holds it
        gives back had their bytes changed while held)."""
        changed = sum(self._changed(*h) for holds in self.held[hid].values()
                      for h in holds)
        rc = int(self.vt.release_all(self.handles[hid]))
        if rc >= 0:
            self.held[hid].clear()
        return rc, changed

    def call(self, entry: str, hid: int, *args: int) -> int:
        """An entry taking the handle and integers: its code."""
        return int(getattr(self.vt, entry)(self.handles[hid], *args))

    def batch(self, entry: str, hid: int, flat: list[int]) -> int:
        """``getmany`` or ``prefetch`` of the flat (position, expert) pairs."""
        keys = self.ffi.new("int[]", flat or [0])
        return int(getattr(self.vt, entry)(self.handles[hid], keys,
                                           len(flat) // 2))

    def values(self, hid: int, n_layers: int, n_experts: int
               ) -> tuple[int, int, list[int], list[list[int]] | None,
                          str | None]:
        """``stats`` (code, present mask, values), ``resident`` of every
        key and ``check``'s verdict, in one reply."""
        ffi, vt, h = self.ffi, self.vt, self.handles[hid]
        st = ffi.new("xcs_stats *")
        rc = int(vt.stats(h, st))
        resident = None
        if vt.resident != ffi.NULL:
            resident = [[i, e] for i in range(n_layers)
                        for e in range(n_experts) if vt.resident(h, i, e) > 0]
        verdict = None
        if vt.check != ffi.NULL:
            msg = ffi.new("char[]", MSG_CAP)
            bad = vt.check(h, msg, MSG_CAP)
            msg[MSG_CAP - 1] = b"\0"
            verdict = ("clean" if bad == 0 else
                       ffi.string(msg).decode(errors="replace"))
        return rc, int(st.present), [int(x) for x in st.v], resident, verdict

    def fault(self, what: str, *args: int | str) -> int:
        """An injector call (``arm``, ``place``, ``disarm``, ``fired``,
        ``open_files``; a path as text); 0 in a module built without them."""
        fn = getattr(self.lib, f"xcs_fault_{what}", None)
        if fn is None:
            return 0
        got = fn(*(os.fsencode(a) if isinstance(a, str) else a for a in args))
        return 0 if got is None else int(got)


def main(argv: list[str]) -> int:
    """Serve requests until the gate closes the pipe."""
    rfd, wfd, so, modname = argv
    rx = Connection(int(rfd), writable=False)
    tx = Connection(int(wfd), readable=False)
    cap = limit_memory(0)
    try:
        spec = importlib.util.spec_from_file_location(modname, so)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except Exception as e:  # noqa: BLE001 - a module that will not load
        tx.send(("load_error", f"{type(e).__name__}: {e}"))
        return 1
    w = Worker(mod.ffi, mod.lib)
    tx.send(("ready", cap))
    while True:
        try:
            op, args = rx.recv()
        except EOFError:
            return 0
        try:
            reply: tuple[str, Any] = ("ok", getattr(w, op)(*args))
        except Violation as e:
            reply = ("violation", str(e))
        except MemoryError:
            reply = ("violation", "the reply did not fit the address-space "
                                  "limit of the cache's process")
        except Exception as e:  # noqa: BLE001 - the gate's own mistake
            reply = ("error", f"{type(e).__name__}: {e}")
        tx.send(reply)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
