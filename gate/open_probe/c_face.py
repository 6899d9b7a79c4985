"""``open-c-face``: ``xc_cache_open`` with the layouts only a C caller can give."""

from __future__ import annotations

from typing import Any

from xcache.gate.open_probe.files import FUSED_TEMPLATE, LAYERS, MAX_N, tensor_names
from xcache.gate.open_probe.leaks import c_opts
from xcache.gate.open_probe.params import valid_policies
from xcache.gate.open_probe.probe import Probe

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
    odd = tensor_names(LAYERS[0], 1)[0]
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
