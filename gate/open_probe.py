"""The open probe: opening things, and the C face only a C caller reaches.

Every scenario and program opens its containers and caches once, with
memory to spare, through the Python face, so the paths of an *open* that
goes wrong were never run by the gate.  This probe runs them on small
containers it writes itself (:class:`Files`), five check lines:

- ``open-nomem``: an allocation countdown (the engine's fault seam,
  ``engine.alloc``): for n = 1, 2, ... the n-th allocation is refused over
  ``Container()`` (one file whose header is out of data order, an index
  of two shards, O_DIRECT and verify), ``ExpertCache()`` with every policy
  and option set (threads, read-ahead, chunking, budget, mlock, a trace
  ring; per-expert, sharded and fused layouts), the simulator for every
  policy and mode, and ``hold_layer``, until the call no longer meets the
  fault.  Every refusal must be ``nomem`` with no offset, layer or expert
  and a message of the documented forms naming what ran out (exact
  numbers); the engine's live allocations must be back at the baseline;
  an open that met a refusal must not succeed (``hold_layer``'s per-read
  error records are the one allocation allowed to fail: it must then
  still hold every expert, byte-exact); and the open that finally
  succeeds must behave (every expert byte-exact, ``check()`` clean, the
  simulator's counts the oracle's).
- ``open-leaks``: open, use and close through the C face and the Python
  face leave the live-allocation count where it was.
- ``open-params``: every parameter of every policy at its range's ends,
  one past each end, and values that are not unsigned decimals, through
  the cache and the simulator: accepted or refused, and the whole message,
  as the oracle's spec parser (``oracle.policies.parse_policy``) says;
  budgets of top_k + 1 slots accepted, one slot or one byte less refused
  with the contract's message (xc.h, ``xc_cache_open``).
- ``open-c-face``: ``xc_cache_open`` called through the cffi lib with the
  layouts the Python face refuses before C sees them: exactly 2**31 - 1
  keys (accepted: the tables' allocation is refused by the countdown, so
  nothing large is ever allocated), 2**31 keys (too many), a tensor the
  container lacks, an expert whose tensor has another size, or the same
  size with its dimensions in another order, layers not ascending, NULL
  arguments, an unknown policy, and each refused allocation of an open:
  the status, every field of the raw error record (offsets of -1: the
  Python face shows any negative one as None) and the message as xc.h's
  contract says.
- ``open-messages``: whole messages against the text derived from the
  oracle's own tables (the valid policies and their parameters) or the
  contract: an unknown policy, a bad parameter, a key outside the cache,
  an expert not published because its file changed (verify), the mlock
  note's byte count (``n_slots * stride``), and containers at paths that
  do not exist (``not_found`` naming the path).

All of it takes well under a second.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import re
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: The layout every container of the probe holds (per expert, or fused).
LAYERS = (1, 3)
N_EXPERTS = 3
TENSORS = (("up", "F32", (2, 4)), ("down", "F16", (4, 2)))
TEMPLATE = "layers.{layer}.experts.{expert}.{tensor}"
FUSED_TEMPLATE = "layers.{layer}.experts.{tensor}"
_DTYPE_BYTES = {"F32": 4, "F16": 2}
#: XC_ALIGN: a slot's stride is the expert's bytes plus two alignments,
#: rounded up to one (xc_load.c).
ALIGN = 4096
#: Every policy with parameters other than its defaults, as the countdown
#: opens them.
POLICY_SPECS = ("lru", "fifo", "lfu", "lfru:sample=2,seed=5",
                "hotness:period=3", "s3fifo:small=50,ghost=20,promote=3",
                "arc")
#: The most allocations one countdown may need before it ends.
MAX_N = 400


def _names(layer: int, expert: int) -> list[str]:
    return [TEMPLATE.format(layer=layer, expert=expert, tensor=t)
            for t, _, _ in TENSORS]


def _nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    n = _DTYPE_BYTES[dtype]
    for d in shape:
        n *= d
    return n


def tensor_bytes(layer: int, expert: int, t: int) -> bytes:
    """The payload of tensor ``t`` of an expert: a pattern no two share."""
    _, dt, shape = TENSORS[t]
    base = (layer * 7 + expert * 3 + t * 11) % 251
    return bytes((base + i * 13) % 256 for i in range(_nbytes(dt, shape)))


def expert_bytes(layer: int, expert: int) -> bytes:
    """An expert's payload as a slot holds it: its tensors in list order."""
    return b"".join(tensor_bytes(layer, expert, t) for t in range(len(TENSORS)))


EXPERT_BYTES = len(expert_bytes(LAYERS[0], 0))
STRIDE = (EXPERT_BYTES + 3 * ALIGN - 1) // ALIGN * ALIGN
N_KEYS = len(LAYERS) * N_EXPERTS


def write_safetensors(path: Path, tensors: list[tuple[str, str, list[int],
                                                      bytes]],
                      header_order: list[str] | None = None) -> None:
    """Write ``tensors`` (name, dtype, shape, bytes) in data order; the header
    lists them in ``header_order`` (default: data order)."""
    placed: dict[str, dict[str, Any]] = {}
    data = b""
    for name, dt, shape, b in tensors:
        placed[name] = {"dtype": dt, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    order = header_order or [t[0] for t in tensors]
    head = json.dumps({n: placed[n] for n in order}).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + data)


def _experts(layers: tuple[int, ...] = LAYERS
             ) -> list[tuple[str, str, list[int], bytes]]:
    return [(name, dt, list(shape), tensor_bytes(layer, e, t))
            for layer in layers for e in range(N_EXPERTS)
            for t, (name, (_, dt, shape)) in enumerate(
                zip(_names(layer, e), TENSORS, strict=True))]


@dataclass
class Files:
    """The probe's containers, written under ``folder``."""

    folder: Path
    one: Path = field(init=False)
    index: Path = field(init=False)
    fused: Path = field(init=False)
    shape: Path = field(init=False)
    perm: Path = field(init=False)
    perm3: Path = field(init=False)

    def __post_init__(self) -> None:
        f = self.folder
        ts = _experts()
        # one file whose header lists the tensors against data order (the
        # reader sorts them: its allocations run too)
        self.one = f / "one.safetensors"
        write_safetensors(self.one, ts, [t[0] for t in reversed(ts)])
        # an index of two shards; layer 3 expert 0's first tensor sits in
        # the first shard, so that expert straddles both
        d = f / "index"
        d.mkdir()
        cut = N_EXPERTS * len(TENSORS) + 1
        write_safetensors(d / "b.safetensors", ts[cut:])
        write_safetensors(d / "a.safetensors", ts[:cut])
        wmap = {t[0]: "a.safetensors" for t in ts[:cut]}
        wmap.update({t[0]: "b.safetensors" for t in ts[cut:]})
        (d / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": sum(len(t[3]) for t in ts)},
             "weight_map": wmap}), encoding="utf-8")
        self.index = d
        # fused: one tensor per (layer, tensor), expert e its slice e
        fused = []
        for layer in LAYERS:
            for t, (tn, dt, shape) in enumerate(TENSORS):
                fused.append((FUSED_TEMPLATE.format(layer=layer, tensor=tn),
                              dt, [N_EXPERTS, *shape],
                              b"".join(tensor_bytes(layer, e, t)
                                       for e in range(N_EXPERTS))))
        self.fused = f / "fused.safetensors"
        write_safetensors(self.fused, fused)
        # layer 1 expert 1's "up" of another size, and of the same size
        # with its dimensions swapped
        self.shape = f / "shape.safetensors"
        self.perm = f / "perm.safetensors"
        odd = _names(LAYERS[0], 1)[0]
        for path, shape in ((self.shape, [2, 2]), (self.perm, [4, 2])):
            changed = [(n, dt, shape if n == odd else s,
                        b[:_nbytes(dt, tuple(shape))] if n == odd else b)
                       for n, dt, s, b in ts]
            write_safetensors(path, changed)
        # one tensor "w" of [2, 3, 4]; layer 1 expert 1's is [2, 4, 3]: the
        # first dimension agrees, so only a walk over every one tells
        self.perm3 = f / "perm3.safetensors"
        write_safetensors(self.perm3, [
            (TEMPLATE.format(layer=layer, expert=e, tensor="w"), "F32",
             [2, 4, 3] if (layer, e) == (LAYERS[0], 1) else [2, 3, 4],
             bytes(96)) for layer in LAYERS for e in range(N_EXPERTS)])


# -- the engine's seams ------------------------------------------------------

class Probe:
    """The engine under test, its allocation seam and the failures found."""

    def __init__(self, engine: Any, files: Files) -> None:
        self.engine = engine
        self.files = files
        self.alloc = importlib.import_module("engine.alloc")
        self.sim = importlib.import_module("engine.sim")
        lib_mod = importlib.import_module("engine._lib")
        self.lib, self.ffi = lib_mod.lib(), lib_mod.ffi()
        self.failures: list[str] = []
        self.cases = 0

    def fail(self, what: str) -> None:
        """Record one failure."""
        self.failures.append(what)

    def live(self) -> int:
        """The engine's live allocations (after collecting garbage if asked)."""
        return self.alloc.live()

    def settled_live(self, base: int) -> int:
        """Allocations made since ``base`` still live, or 0.

        Garbage is collected before a leak is believed (an arena goes with
        the last view of it); fewer than ``base`` (an older object collected
        meanwhile) is no leak of this call.
        """
        d = self.live() - base
        if d > 0:
            gc.collect()
            d = self.live() - base
        return max(d, 0)

    def c_error(self) -> tuple[int, int, int, int, str]:
        """This thread's C error record: (code, offset, layer, expert, msg)."""
        e = self.lib.xc_last_error()
        return (int(e.code), int(e.offset), int(e.layer), int(e.expert),
                self.ffi.string(e.message).decode("utf-8", "replace"))


@dataclass
class Outcome:
    """One run of a countdown: the n armed, its result or error, refusals."""

    n: int
    result: Any = None
    error: Any = None
    fired: int = 0
    leaked: int = 0


def countdown(p: Probe, what: str, op: Callable[[], Any],
              close: Callable[[Any], None], nomem_ok: Callable[[str], bool],
              may_survive: bool = False) -> Outcome | None:
    """Refuse the n-th allocation of ``op`` for n = 1, 2, ... until none is met.

    Each refused run must raise the engine's ``nomem`` error with no offset,
    layer or expert and a message ``nomem_ok`` accepts, and leave the live
    count at its baseline (``close`` undoes a success first); a run that met
    a refusal must fail unless ``may_survive``.  Returns the first run that
    met no refusal (its result still open), or None after a failure.
    """
    err_t = p.engine.EngineError
    for n in range(1, MAX_N + 1):
        p.cases += 1
        base = p.live()
        f0 = p.alloc.stats().failures
        out = Outcome(n)
        p.alloc.fail_alloc(n)
        try:
            out.result = op()
        except err_t as e:
            out.error = e
        finally:
            p.alloc.disarm()
        out.fired = p.alloc.stats().failures - f0
        if out.fired == 0:
            if out.error is not None:
                p.fail(f"{what}: fails without a refused allocation "
                       f"(n={n}): {out.error}")
                return None
            return out
        if out.error is None:
            ok = may_survive
            if not ok:
                p.fail(f"{what}: allocation {n} was refused yet the open "
                       "succeeded")
            close(out.result)
            out.result = None
            if not ok:
                return None
        else:
            e = out.error
            fields = (e.kind, e.offset, e.layer, e.expert)
            if fields != ("nomem", None, None, None):
                p.fail(f"{what}: allocation {n} refused: error (kind, offset, "
                       f"layer, expert) {fields}, not ('nomem', None, None, "
                       f"None): {e}")
                return None
            if not nomem_ok(str(e)):
                p.fail(f"{what}: allocation {n} refused: message {str(e)!r} "
                       "is none of the documented no-memory forms")
                return None
            out.error = None
        del out.result
        leaked = p.settled_live(base)
        if leaked:
            p.fail(f"{what}: allocation {n} refused: {leaked} allocation(s) "
                   "left behind")
            return None
    p.fail(f"{what}: still meets a refused allocation at n={MAX_N}")
    return None


# -- open-nomem ----------------------------------------------------------------

def _container_nomem(paths: list[Path]) -> Callable[[str], bool]:
    names = "|".join(re.escape(str(x)) for x in paths)
    form = re.compile(rf"(?:{names}): (?:out of memory \([a-z_ ]+\)|no memory "
                      r"for the [A-Za-z_ ]+)")
    return lambda msg: form.fullmatch(msg) is not None


def _cache_nomem(n_slots: int, policy: str, trace: int | None
                 ) -> Callable[[str], bool]:
    name = policy.split(":")[0]
    slots = f"cache open: no memory for {n_slots} slots of {STRIDE} bytes"
    ok = {"cache open: no memory",
          f"no memory for the expert tables of {N_KEYS} keys",
          f"policy {name}: no memory for {N_KEYS} keys",
          f"policy {name}: no memory for {N_KEYS} key counts", slots}
    if trace is not None:
        ok.add(f"{slots} and a trace ring of {trace:,} records "
               f"({trace * 24:,} bytes)")
        ok.add(f"cache open: no memory for the trace ring of {trace} records "
               f"of 24 bytes ({trace * 24} bytes; trace_ring_records)")
    return ok.__contains__


def _check_cache(p: Probe, what: str, cache: Any) -> None:
    """Every expert byte-exact (gets and a hold_layer), then check()."""
    for layer in LAYERS:
        for e in range(N_EXPERTS):
            x = cache.get(layer, e)
            views = x.tensors
            got = b"".join(views[t].tobytes() for t, _, _ in TENSORS)
            del views
            x.release()
            if got != expert_bytes(layer, e):
                p.fail(f"{what}: layer {layer} expert {e} reads other bytes")
                return
    cache.check()


def _open_cache(p: Probe, cont: Any, fused: bool, **opts: Any) -> Any:
    return p.engine.ExpertCache(
        cont, expert_template=FUSED_TEMPLATE if fused else TEMPLATE,
        tensors=[t for t, _, _ in TENSORS], layers=list(LAYERS),
        n_experts=N_EXPERTS, **opts)


def _close(x: Any) -> None:
    if x is not None:
        x.close()


def nomem(p: Probe) -> None:
    """The allocation countdowns of ``open-nomem``."""
    f = p.files
    shards = [f.index / "a.safetensors", f.index / "b.safetensors"]
    conts = [("one file", f.one, {}, [f.one]),
             ("index", f.index, {}, [f.index, *shards,
                                     f.index / "model.safetensors.index.json"]),
             ("one file, direct and verify", f.one,
              {"direct": True, "verify": True}, [f.one])]
    for label, path, kw, named in conts:
        what = f"Container({label})"
        out = countdown(p, what,
                        lambda path=path, kw=kw: p.engine.Container(
                            str(path), **kw),
                        _close, _container_nomem(named))
        if out is not None:
            c = out.result
            if len(c) != N_KEYS * len(TENSORS):
                p.fail(f"{what}: {len(c)} tensors, not {N_KEYS * len(TENSORS)}")
            c.close()
    trace = str(f.folder / "trace.xct")
    option_sets: list[tuple[str, dict[str, Any], int, int | None]] = [
        ("3 slots, 1 thread", {"n_slots": 3, "batch_threads": 1}, 3, None),
        ("a budget, batch pool, read-ahead, chunks",
         {"budget_bytes": 4 * STRIDE + 7, "batch_threads": 3, "io_threads": 2,
          "io_depth": 4, "split_min_misses": 2, "chunk_bytes": 16}, 4, None),
        ("mlock and a trace ring",
         {"n_slots": 2, "lock_memory": True, "trace_path": trace,
          "trace_ring_records": 8}, 2, 8),
    ]
    runs: list[tuple[str, Path, bool, str, tuple[str, dict[str, Any], int,
                                                 int | None]]] = []
    for spec in POLICY_SPECS:
        for os_ in option_sets:
            runs.append(("one file", f.one, False, spec, os_))
    for spec in ("lru", "s3fifo"):
        runs.append(("index", f.index, False, spec, option_sets[1]))
        runs.append(("fused", f.fused, True, spec, option_sets[0]))
    conts_open: dict[Path, Any] = {}
    try:
        for label, path, fused, spec, (olabel, opts, n_slots, tr) in runs:
            cont = conts_open.get(path)
            if cont is None:
                cont = conts_open[path] = p.engine.Container(str(path))
            what = f"ExpertCache({label}, {spec}, {olabel})"
            out = countdown(
                p, what,
                lambda cont=cont, fused=fused, spec=spec, opts=opts: _open_cache(
                    p, cont, fused, policy=spec, top_k=1, **opts),
                _close, _cache_nomem(n_slots, spec, tr))
            if out is None:
                continue
            cache = out.result
            try:
                if cache.n_slots != n_slots:
                    p.fail(f"{what}: {cache.n_slots} slots, not {n_slots}")
                _check_cache(p, what, cache)
            finally:
                cache.close()
            if os.path.exists(trace):
                os.unlink(trace)
        hold_nomem(p, conts_open[f.one])
    finally:
        for c in conts_open.values():
            c.close()
    sim_nomem(p)


def hold_nomem(p: Probe, cont: Any) -> None:
    """hold_layer under the countdown: NOMEM cleanly, or every expert held."""
    err_t = p.engine.EngineError
    layer, experts = LAYERS[1], [2, 0, 1]
    for n in range(1, MAX_N + 1):
        p.cases += 1
        base = p.live()
        cache = _open_cache(p, cont, False, n_slots=4, top_k=1,
                            batch_threads=2)
        try:
            f0 = p.alloc.stats().failures
            p.alloc.fail_alloc(n)
            held = error = None
            try:
                held = cache.hold_layer(layer, experts)
            except err_t as e:
                error = e
            finally:
                p.alloc.disarm()
            fired = p.alloc.stats().failures - f0
            what = f"hold_layer({layer}, {experts}) with allocation {n} refused"
            if error is not None:
                fields = (error.kind, error.offset, error.layer, error.expert)
                if fired == 0 or fields[:2] != ("nomem", None) or \
                        fields[2] != layer:
                    p.fail(f"{what}: {fields}: {error}")
                    return
            else:
                views = held.views
                for i, e in enumerate(experts):
                    got = b"".join(views[i][t].tobytes() for t, _, _ in TENSORS)
                    if got != expert_bytes(layer, e):
                        p.fail(f"{what}: expert {e} holds other bytes")
                        return
                held.release()
                del views
            del held
            cache.check()
            if cache.resident() != ({(layer, e) for e in experts}
                                    if error is None else set()):
                p.fail(f"{what}: resident {sorted(cache.resident())}")
                return
        finally:
            cache.close()
        del cache
        left = p.settled_live(base)
        if left:
            p.fail(f"hold_layer with allocation {n} refused, the cache "
                   f"closed: {left} allocation(s) left")
            return
        if fired == 0:
            return
    p.fail(f"hold_layer: still meets a refused allocation at n={MAX_N}")


#: The simulator's countdown: a small trace of two layers.
SIM_KEYS = tuple((7 * i * i + 3 * i) % 10 for i in range(48))
SIM_N_EXPERTS = 5


def sim_expected() -> dict[tuple[str, str, bool], dict[str, int]]:
    """The oracle simulator's counts for every case of :func:`sim_nomem`."""
    from oracle.sim import simulate  # noqa: PLC0415
    from oracle.traces import Trace  # noqa: PLC0415
    keys = np.array(SIM_KEYS)
    tr = Trace(np.arange(len(keys)) // 2, keys // SIM_N_EXPERTS,
               keys % SIM_N_EXPERTS, 2, SIM_N_EXPERTS, 2)
    out = {}
    for spec, mode, per_layer in _sim_cases():
        r = simulate(tr, spec, 2 if per_layer else 4, mode, per_layer)
        out[spec, mode, per_layer] = {k: int(getattr(r, k)) for k in
                                      ("requests", "hits", "misses",
                                       "compulsory", "evictions")}
    return out


def _sim_cases() -> list[tuple[str, str, bool]]:
    return [(s, m, pl) for s in (*POLICY_SPECS, "belady")
            for m, pl in (("plain", False), ("step", False), ("step", True))]


def sim_nomem(p: Probe) -> None:
    """engine.sim.simulate under the countdown, then its counts the oracle's."""
    keys = np.array(SIM_KEYS)
    data = (np.arange(len(keys)) // 2, keys // SIM_N_EXPERTS,
            keys % SIM_N_EXPERTS, SIM_N_EXPERTS)
    expected = sim_expected()
    sim_form = re.compile(r"sim: no memory .*|policy [a-z0-9]+: no memory "
                          r"for \d+ key(?:s| counts)")
    for spec, mode, per_layer in _sim_cases():
        what = f"simulate({spec}, {mode}{', per layer' if per_layer else ''})"
        out = countdown(p, what,
                        lambda spec=spec, mode=mode, pl=per_layer:
                        p.sim.simulate(data, spec, 2 if pl else 4, mode, pl),
                        lambda _r: None,
                        lambda m: sim_form.fullmatch(m) is not None)
        if out is None:
            continue
        got = {k: out.result[k] for k in expected[spec, mode, per_layer]}
        if got != expected[spec, mode, per_layer]:
            p.fail(f"{what}: counts {got}, oracle "
                   f"{expected[spec, mode, per_layer]}")


# -- open-leaks -----------------------------------------------------------------

@contextmanager
def c_opts(p: Probe, *, template: str = TEMPLATE,
           tensors: tuple[str, ...] = ("up", "down"),
           layers: tuple[int, ...] = LAYERS, n_experts: int = N_EXPERTS,
           n_slots: int = 3, top_k: int = 1, policy: str = "lru",
           **more: Any) -> Iterator[Any]:
    """An ``xc_cache_opts`` for the C face (its strings kept alive)."""
    ffi = p.ffi
    keep = [ffi.new("char[]", t.encode()) for t in tensors]
    o = ffi.new("xc_cache_opts *")
    o.n_slots = n_slots
    o.top_k = top_k
    pol = ffi.new("char[]", policy.encode())
    tmpl = ffi.new("char[]", template.encode())
    names = ffi.new("const char *[]", keep)
    lay = ffi.new("int32_t[]", list(layers))
    o.policy, o.expert_template, o.tensors = pol, tmpl, names
    o.n_tensors, o.layers, o.n_layers = len(tensors), lay, len(layers)
    o.n_experts = n_experts
    o.batch_threads = 1
    for k, v in more.items():
        setattr(o, k, v)
    yield o


def leaks(p: Probe) -> None:
    """Open, use and close leave the live count where it was."""
    f = p.files
    for path in (f.one, f.index, f.fused):
        cont = p.engine.Container(str(path))
        try:
            fused = path == f.fused
            for spec in POLICY_SPECS:
                p.cases += 1
                # the C face: open, one get, close
                with c_opts(p, policy=spec, batch_threads=2, io_threads=1,
                            template=FUSED_TEMPLATE if fused else TEMPLATE) as o:
                    base = p.live()
                    out = p.ffi.new("xc_cache **")
                    rc = p.lib.xc_cache_open(cont._ptr, o, out)
                    if rc != 0:
                        p.fail(f"C open of {path.name} ({spec}): {p.c_error()}")
                        continue
                    ref = p.ffi.new("xc_ref *")
                    if p.lib.xc_cache_get(out[0], LAYERS[0], 1, ref) != 0:
                        p.fail(f"C get on {path.name} ({spec}): {p.c_error()}")
                    else:
                        p.lib.xc_cache_release(out[0], ref)
                    p.lib.xc_cache_close(out[0])
                    left = p.settled_live(base)
                    if left:
                        p.fail(f"xc_cache_open/close over {path.name} ({spec}):"
                               f" {left} allocation(s) live after close")
                # the Python face: every expert, a hold_layer, close
                base = p.live()
                cache = _open_cache(p, cont, fused, n_slots=4, top_k=1,
                                    policy=spec)
                _check_cache(p, f"ExpertCache({path.name}, {spec})", cache)
                with cache.hold_layer(LAYERS[0], [0, 2]):
                    pass
                cache.close()
                del cache
                left = p.settled_live(base)
                if left:
                    p.fail(f"ExpertCache({path.name}, {spec}) closed: {left} "
                           "allocation(s) live")
        finally:
            cont.close()
    base = p.live()
    p.engine.Container(str(f.index)).close()
    if p.settled_live(base):
        p.fail("Container(index) closed: allocations live")


# -- open-params ---------------------------------------------------------------

def param_specs() -> list[str]:
    """Every spec open-params tries: each parameter of each policy at the
    range's ends, one past each, and wrong types; unknown names and keys."""
    from oracle.policies import POLICIES  # noqa: PLC0415

    top = 2**64 - 1
    values = ["0", "1", "2", "3", "4", "99", "100", "101", str(top),
              str(top + 1), "-1", "x", "", "1.5", " 1", "1 ", "0x3", "+1",
              "0" * 31 + "1", "0" * 32 + "1", "1e2"]
    specs = ["", "lru:", "LRU", "lru ", "belady", "s3fifo:", "s3fifo:,",
             "s3fifo:small=1,", "lfu:sample=1", "arc:x=1", "fifo:=1"]
    for name, params in POLICIES.items():
        specs.append(name)
        specs.append(f"{name}:nope=1")
        for k in params:
            specs += [f"{name}:{k}={v}" for v in values]
            specs.append(f"{name}:{k}")
            specs.append(f"{name}:{k}=1,{k}=0")
    return specs


#: The engine's policy table in its order (docs/CACHE.md's table, the
#: order its "valid:" list shows; the oracle's registry is alphabetical).
TABLE_ORDER = ("lru", "fifo", "lfu", "lfru", "hotness", "s3fifo", "arc")


def valid_policies() -> str:
    """The oracle's policies and parameters as the engine lists them."""
    from oracle.policies import POLICIES  # noqa: PLC0415

    if set(POLICIES) != set(TABLE_ORDER):
        raise AssertionError(f"the oracle's policies {sorted(POLICIES)} are "
                             f"not TABLE_ORDER's {sorted(TABLE_ORDER)}")
    return ", ".join(n + (":" + ",".join(f"{k}=N" for k in POLICIES[n])
                          if POLICIES[n] else "") for n in TABLE_ORDER)


def oracle_verdict(spec: str) -> str | None:
    """The oracle parser's Misuse message for ``spec``, or None if it accepts.

    The list of an unknown policy's message is given in the engine's table
    order (:func:`valid_policies`).
    """
    from oracle.errors import Misuse  # noqa: PLC0415
    from oracle.policies import parse_policy, valid_specs  # noqa: PLC0415

    try:
        parse_policy(spec)
    except Misuse as e:
        msg = str(e)
        if msg.startswith("unknown policy "):
            head, sep, tail = msg.rpartition("; valid: ")
            assert sep and tail == valid_specs(), msg
            msg = f"{head}; valid: {valid_policies()}"
        return msg
    return None


def params(p: Probe) -> None:
    """Policy specs (cache and simulator) and budgets against their contracts."""
    cont = p.engine.Container(str(p.files.one))
    err_t = p.engine.EngineError
    try:
        for spec in param_specs():
            want = oracle_verdict(spec)
            sim_only = spec == "belady"
            faces: list[tuple[str, Callable[[], Any]]] = [
                ("simulate", lambda spec=spec: p.sim.simulate(
                    np.array([0, 1, 2, 0]), spec, 2, "plain"))]
            if not sim_only:
                faces.append(("ExpertCache", lambda spec=spec: _open_cache(
                    p, cont, False, n_slots=3, top_k=1, policy=spec)))
            for face, op in faces:
                p.cases += 1
                try:
                    r = op()
                except err_t as e:
                    got: str | None = str(e)
                    if e.kind != "misuse":
                        got = f"{e.kind}: {e}"
                else:
                    got = None
                    if face == "ExpertCache":
                        r.close()
                if sim_only:
                    want = None  # the simulator's own policy
                if got != want:
                    p.fail(f"{face} policy={spec!r}: "
                           + ("accepted" if got is None else repr(got))
                           + ", oracle: "
                           + ("accepted" if want is None else repr(want)))
        budgets(p, cont)
    finally:
        cont.close()


def budget_message(top_k: int, *, n_slots: int | None = None,
                   budget_bytes: int | None = None) -> str:
    """xc_cache_open's XC_E_BUDGET message (its contract in xc.h)."""
    need = top_k + 1
    if n_slots is not None:
        return (f"cache budget too small: top_k {top_k} needs at least {need} "
                f"slots, n_slots gives {n_slots}; n_slots={need} or "
                f"budget_bytes={need * STRIDE} (stride {STRIDE} bytes) works")
    assert budget_bytes is not None
    return (f"cache budget too small: top_k {top_k} needs at least {need} "
            f"slots, budget_bytes={budget_bytes} holds "
            f"{budget_bytes // STRIDE} slots of {STRIDE} bytes; the smallest "
            f"budget_bytes that works is {need * STRIDE}")


def budgets(p: Probe, cont: Any) -> None:
    """top_k + 1 slots open; one slot, or one byte, less is XC_E_BUDGET."""
    err_t = p.engine.EngineError
    for top_k in (1, 2, 4):
        need = top_k + 1
        cases: list[tuple[dict[str, int], str | None]] = [
            ({"n_slots": need}, None),
            ({"n_slots": need - 1}, budget_message(top_k, n_slots=need - 1)),
            ({"budget_bytes": need * STRIDE}, None),
            ({"budget_bytes": need * STRIDE - 1},
             budget_message(top_k, budget_bytes=need * STRIDE - 1)),
        ]
        if top_k == 1:
            cases.append(({"n_slots": 0 + 1},
                          budget_message(1, n_slots=1)))
        for opts, want in cases:
            p.cases += 1
            try:
                c = _open_cache(p, cont, False, top_k=top_k, **opts)
            except err_t as e:
                got = (e.kind, e.offset, e.layer, e.expert, str(e))
            else:
                got = None
                if c.n_slots != need:
                    got = ("opened", c.n_slots)
                c.close()
            exp = None if want is None else ("budget", None, None, None, want)
            if got != exp:
                p.fail(f"ExpertCache(top_k={top_k}, {opts}): {got}, not {exp}")


# -- open-c-face -----------------------------------------------------------------

#: Status codes of xc.h.
XC_E_NOMEM, XC_E_NOT_FOUND, XC_E_MISUSE = -1, -5, -7


def c_open(p: Probe, st: Any, opts: Any, refuse_from: int = 0,
           persistent: bool = True
           ) -> tuple[int, tuple[int, int, int, int, str] | None]:
    """``xc_cache_open`` through the lib: (rc, the error record or None).

    ``refuse_from`` > 0 refuses every allocation from that one on (the
    cache's own struct is the first; only that one unless ``persistent``).
    A cache that opens is closed; the live count must come back to where
    it was.
    """
    base = p.live()
    out = p.ffi.new("xc_cache **")
    if refuse_from:
        p.alloc.fail_alloc(refuse_from, persistent=persistent)
    try:
        rc = p.lib.xc_cache_open(st, opts, out)
    finally:
        p.alloc.disarm()
    rec = None if rc == 0 else p.c_error()
    if rc == 0:
        p.lib.xc_cache_close(out[0])
    left = p.settled_live(base)
    if left:
        p.fail(f"xc_cache_open (rc {rc}): {left} allocation(s) left behind")
    return rc, rec


def c_face(p: Probe) -> None:
    """xc_cache_open with the layouts only a C caller can give."""
    f = p.files
    one = p.engine.Container(str(f.one))
    shape = p.engine.Container(str(f.shape))
    perm = p.engine.Container(str(f.perm))
    perm3 = p.engine.Container(str(f.perm3))
    odd = _names(LAYERS[0], 1)[0]
    big = 2**31 - 1
    cases: list[tuple[str, Any, dict[str, Any], int, int,
                      tuple[int, int, int, int, str] | None]] = [
        ("exactly 2**31 - 1 keys (the tables' allocation refused)", one,
         {"template": FUSED_TEMPLATE, "layers": (1,), "n_experts": big}, 2,
         XC_E_NOMEM,
         (XC_E_NOMEM, -1, -1, -1,
          f"no memory for the expert tables of {big} keys")),
        ("2**31 keys", one,
         {"template": FUSED_TEMPLATE, "layers": (1, 3), "n_experts": 2**30},
         2, XC_E_MISUSE,
         (XC_E_MISUSE, -1, -1, -1,
          f"2 layers x {2**30} experts is too many keys")),
        ("3 layers x 2**31 - 1 experts", one,
         {"layers": (1, 2, 3), "n_experts": big}, 2, XC_E_MISUSE,
         (XC_E_MISUSE, -1, -1, -1,
          f"3 layers x {big} experts is too many keys")),
        ("a tensor the container lacks", one,
         {"tensors": ("up", "gate")}, 0, XC_E_NOT_FOUND,
         (XC_E_NOT_FOUND, -1, LAYERS[0], 0,
          f"layer {LAYERS[0]} expert 0: tensor 'gate' "
          f"(layers.{LAYERS[0]}.experts.0.gate) is not in the container")),
        ("layers not ascending", one, {"layers": (3, 1)}, 0, XC_E_MISUSE,
         (XC_E_MISUSE, -1, 1, -1,
          "layers must be strictly ascending: 1 follows 3")),
        ("n_experts 0", one, {"n_experts": 0}, 0, XC_E_MISUSE,
         (XC_E_MISUSE, -1, -1, -1, "n_experts must be at least 1 (got 0)")),
        ("an expert whose tensor has another size", shape, {}, 0, XC_E_MISUSE,
         (XC_E_MISUSE, -1, LAYERS[0], 1,
          f"layer {LAYERS[0]} expert 1: tensor '{odd}' has dtype F32 ndim 2 "
          "(16 bytes), unlike the first expert's F32 ndim 2 (32 bytes); every "
          "expert must share one layout")),
        ("an expert whose tensor has its dimensions in another order", perm,
         {}, 0, XC_E_MISUSE,
         (XC_E_MISUSE, -1, LAYERS[0], 1,
          f"layer {LAYERS[0]} expert 1: tensor '{odd}' has dtype F32 ndim 2 "
          "(32 bytes), unlike the first expert's F32 ndim 2 (32 bytes); every "
          "expert must share one layout")),
        ("an expert whose 3-d tensor has its last two dimensions swapped",
         perm3, {"tensors": ("w",)}, 0, XC_E_MISUSE,
         (XC_E_MISUSE, -1, LAYERS[0], 1,
          f"layer {LAYERS[0]} expert 1: tensor 'layers.{LAYERS[0]}.experts.1."
          "w' has dtype F32 ndim 3 (96 bytes), unlike the first expert's F32 "
          "ndim 3 (96 bytes); every expert must share one layout")),
        ("a fused template over per-expert tensors", one,
         {"template": FUSED_TEMPLATE}, 0, XC_E_NOT_FOUND,
         (XC_E_NOT_FOUND, -1, LAYERS[0], -1,
          f"layer {LAYERS[0]}: fused tensor 'up' (layers.{LAYERS[0]}.experts."
          "up) is not in the container")),
        ("top_k 0", one, {"top_k": 0}, 0, XC_E_MISUSE,
         (XC_E_MISUSE, -1, -1, -1, "cache open: top_k must be >= 1 (got 0) "
          "and batch_threads 1..256 (got 1)")),
    ]
    try:
        for what, cont, kw, refuse, want_rc, want in cases:
            p.cases += 1
            with c_opts(p, **kw) as o:
                rc, rec = c_open(p, cont._ptr, o, refuse)
            if (rc, rec) != (want_rc, want):
                p.fail(f"xc_cache_open, {what}: status {rc} {rec}, contract: "
                       f"{want_rc} {want}")
        p.cases += 1
        out = p.ffi.new("xc_cache **")
        with c_opts(p) as o:
            got = [p.lib.xc_cache_open(p.ffi.NULL, o, out),
                   p.lib.xc_cache_open(one._ptr, p.ffi.NULL, out),
                   p.lib.xc_cache_open(one._ptr, o, p.ffi.NULL)]
        rec = p.c_error()
        want_null = (XC_E_MISUSE, -1, -1, -1,
                     "cache open: NULL container, options or out")
        if got != [XC_E_MISUSE] * 3 or rec != want_null:
            p.fail(f"xc_cache_open with a NULL argument: {got} {rec}")
        c_countdown(p, one)
    finally:
        for c in (one, shape, perm, perm3):
            c.close()


def c_countdown(p: Probe, cont: Any) -> None:
    """Every refused allocation of a C open: the raw record is XC_E_NOMEM
    with offset, layer and expert -1 (the Python face maps any negative
    offset to None, so only this face shows them); an unknown policy's
    misuse likewise."""
    for spec in ("lfu", "s3fifo"):
        for n in range(1, MAX_N + 1):
            p.cases += 1
            f0 = p.alloc.stats().failures
            with c_opts(p, policy=spec, batch_threads=2) as o:
                rc, rec = c_open(p, cont._ptr, o, n, persistent=False)
            if p.alloc.stats().failures == f0:
                if rc != 0:
                    p.fail(f"xc_cache_open ({spec}) without a refusal: {rec}")
                break
            if rec is None or rc != XC_E_NOMEM or rec[:4] != (
                    XC_E_NOMEM, -1, -1, -1):
                p.fail(f"xc_cache_open ({spec}) with allocation {n} refused: "
                       f"status {rc}, record {rec}; contract: XC_E_NOMEM "
                       "(-1), offset, layer and expert -1")
                break
    p.cases += 1
    with c_opts(p, policy="nope") as o:
        rc, rec = c_open(p, cont._ptr, o)
    want = (XC_E_MISUSE, -1, -1, -1,
            f"unknown policy 'nope'; valid: {valid_policies()}")
    if (rc, rec) != (XC_E_MISUSE, want):
        p.fail(f"xc_cache_open (policy 'nope'): status {rc} {rec}, contract "
               f"{XC_E_MISUSE} {want}")


# -- open-messages ---------------------------------------------------------------

def messages(p: Probe) -> None:
    """Whole messages: policies from the oracle's tables, keys, changes, mlock."""
    from oracle.policies import POLICIES  # noqa: PLC0415

    err_t = p.engine.EngineError
    cont = p.engine.Container(str(p.files.one))
    try:
        specs = ["nope", "lfr", "lruu", "s3fifo2:small=1", "ARC"]
        specs += [f"{n}:bogus=1" for n in POLICIES]
        specs += [f"{n}:{k}=x" for n, ps in POLICIES.items() for k in ps]
        for spec in specs:
            p.cases += 1
            want = oracle_verdict(spec)
            try:
                _open_cache(p, cont, False, n_slots=3, top_k=1,
                            policy=spec).close()
                got = None
            except err_t as e:
                got = str(e)
            if got != want:
                p.fail(f"policy={spec!r}: message {got!r}, oracle {want!r}")
        cache = _open_cache(p, cont, False, n_slots=3, top_k=1)
        try:
            for layer, e in ((2, 0), (0, 0), (4, 1), (1, 3), (3, -1)):
                p.cases += 1
                want = (f"({layer}, {e})", f"(layer {layer}, expert {e}) is "
                        f"not a key of this cache ({len(LAYERS)} layers from "
                        f"{LAYERS[0]} to {LAYERS[-1]}, {N_EXPERTS} experts "
                        "each)")
                try:
                    cache.get(layer, e).release()
                    got = "accepted"
                except err_t as x:
                    got = str(x)
                if got != want[1]:
                    p.fail(f"get{want[0]}: {got!r}, contract {want[1]!r}")
        finally:
            cache.close()
    finally:
        cont.close()
    not_published(p)
    mlock_note(p)
    missing_paths(p)


def missing_paths(p: Probe) -> None:
    """Containers at paths that do not exist, or a folder of no shard:
    NOT_FOUND with no offset, layer or expert, naming the path."""
    err_t = p.engine.EngineError
    f = p.files.folder
    empty = f / "empty"
    empty.mkdir(exist_ok=True)
    cases = [(f / "missing.safetensors", "no such file or folder"),
             (f / "no" / "where", "no such file or folder"),
             (p.files.one / "below", "no such file or folder"),
             (empty, "the folder holds no .safetensors file and no "
              "model.safetensors.index.json")]
    for path, what in cases:
        p.cases += 1
        try:
            p.engine.Container(str(path)).close()
            got: Any = "opened"
        except err_t as e:
            got = (e.kind, e.offset, e.layer, e.expert, str(e))
        want = ("not_found", None, None, None, f"{path}: {what}")
        if got != want:
            p.fail(f"Container({path}): {got}, contract {want}")


def not_published(p: Probe) -> None:
    """A verified load of a file whose mtime moved since open: CHANGED, named."""
    src = p.files.one
    path = p.files.folder / "changed.safetensors"
    shutil.copyfile(src, path)
    err_t = p.engine.EngineError
    p.cases += 1
    cont = p.engine.Container(str(path), verify=True)
    try:
        before = os.stat(path).st_mtime_ns
        after = before + 1_234_567_891
        os.utime(path, ns=(after, after))
        cache = _open_cache(p, cont, False, n_slots=3, top_k=1)
        try:
            try:
                cache.get(LAYERS[0], 2).release()
                got: Any = "published"
            except err_t as e:
                got = (e.kind, e.offset, e.layer, e.expert, str(e))
        finally:
            cache.close()
    finally:
        cont.close()
        path.unlink()

    def ts(ns: int) -> str:
        return f"{ns // 10**9}.{ns % 10**9:09d}"

    want = ("changed", os.path.getsize(src), LAYERS[0], 2,
            f"layer {LAYERS[0]} expert 2: not published: {path} was modified "
            f"while the container was open (mtime {ts(after)}, was "
            f"{ts(before)})")
    if got != want:
        p.fail(f"verify after a changed mtime: {got}, contract {want}")


def mlock_note(p: Probe) -> None:
    """The mlock note names the arena's bytes, n_slots x stride."""
    cont = p.engine.Container(str(p.files.one))
    try:
        for n_slots in (2, 5):
            p.cases += 1
            cache = _open_cache(p, cont, False, n_slots=n_slots, top_k=1,
                                lock_memory=True)
            note, active = cache.mlock_note, cache.mlock_active
            cache.close()
            b = n_slots * STRIDE
            ok = (note == f"mlock active on {b} bytes" if active else
                  re.fullmatch(rf"mlock of {b} bytes refused: .*", note))
            if not ok:
                p.fail(f"lock_memory with {n_slots} slots of {STRIDE} bytes: "
                       f"note {note!r} (active {active})")
    finally:
        cont.close()


# -- the checks -------------------------------------------------------------------

#: (check name, what it runs, its description).
CHECKS: tuple[tuple[str, Callable[[Probe], None], str], ...] = (
    ("open-nomem", nomem, "refused allocations during opens, hold_layer and "
     "the simulator"),
    ("open-leaks", leaks, "opens and closes through the C and Python faces"),
    ("open-params", params, "policy parameters and budgets"),
    ("open-c-face", c_face, "xc_cache_open with layouts only C can give"),
    ("open-messages", messages, "messages against the oracle's tables and "
     "the contract"),
)


def run_checks(engine: Any, work: Path, report: Any) -> list[str]:
    """Run every check of the probe; one line each in ``report``."""
    shm = Path("/dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="xc-open-probe-",
                                   dir=shm if shm.is_dir() else work))
    names = []
    try:
        files = Files(folder)
        for name, run, what in CHECKS:
            p = Probe(engine, files)
            gc.collect()  # older garbage goes now, not in a measurement
            try:
                run(p)
            except p.engine.EngineError as e:
                p.fail(f"raised {type(e).__name__} ({e.kind}): {e}")
            finally:
                p.alloc.disarm()
            detail = (f"{p.cases} cases: {what}" if not p.failures else
                      f"{len(p.failures)} failure(s) in {p.cases} cases; "
                      f"first: {p.failures[0]}")
            report.add(name, "engine", name, not p.failures, detail, 0,
                       len(p.failures))
            names.append(name)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return names
