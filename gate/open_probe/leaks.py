"""``open-leaks``: opens and closes through both faces leave no allocation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from xcache.gate.open_probe.files import (
    FUSED_TEMPLATE,
    LAYERS,
    N_EXPERTS,
    POLICY_SPECS,
    TEMPLATE,
)
from xcache.gate.open_probe.probe import Probe, check_cache, open_cache


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
                cache = open_cache(p, cont, fused, n_slots=4, top_k=1,
                                    policy=spec)
                check_cache(p, f"ExpertCache({path.name}, {spec})", cache)
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
