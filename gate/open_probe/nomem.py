"""``open-nomem``: refused allocations in opens, ``hold_layer``, the simulator."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from xcache.gate.open_probe.files import (
    LAYERS,
    MAX_N,
    N_KEYS,
    POLICY_SPECS,
    STRIDE,
    TENSORS,
    expert_bytes,
)
from xcache.gate.open_probe.probe import (
    Probe,
    check_cache,
    close_if_open,
    countdown,
    open_cache,
)


def container_nomem(paths: list[Path]) -> Callable[[str], bool]:
    """Whether a message is a refused allocation of opening one of ``paths``."""
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
                        close_if_open, container_nomem(named))
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
                lambda cont=cont, fused=fused, spec=spec, opts=opts: open_cache(
                    p, cont, fused, policy=spec, top_k=1, **opts),
                close_if_open, _cache_nomem(n_slots, spec, tr))
            if out is None:
                continue
            cache = out.result
            try:
                if cache.n_slots != n_slots:
                    p.fail(f"{what}: {cache.n_slots} slots, not {n_slots}")
                check_cache(p, what, cache)
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
        cache = open_cache(p, cont, False, n_slots=4, top_k=1,
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
    from xcache.oracle.sim import simulate  # noqa: PLC0415
    from xcache.oracle.traces import Trace  # noqa: PLC0415
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
