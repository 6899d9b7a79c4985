"""Opening the C cache: ExpertCache's options checked and converted, then xc_cache_open.

Every keyword of :class:`~engine.cache.ExpertCache` (or its ``layout``) is
checked here, each refusal a MisuseError that names the option, and copied
into an ``xc_cache_opts``; the key count is checked against what the
container can hold before C sizes its tables, and C's "no memory" for
those tables names the trace ring when there is one.
:func:`open_cache` returns the opened cache, which ``ExpertCache`` wraps.
"""

from __future__ import annotations

import os
from typing import Any

from xcache.engine import _lib
from xcache.engine import args as _args
from xcache.engine import errors as _err
from xcache.engine._lib import misuse
from xcache.engine.layout import cache_keywords
from xcache.engine.layout_core import FUSED, check_family

__all__ = ["check_key_count", "open_cache"]


def check_key_count(container: Any, template: Any, n_layers: int,
                    n_experts: int, n_tensors: int) -> None:
    """MisuseError when layers x n_experts cannot be what the container holds.

    The C core sizes its expert tables by that product before it looks a
    single name up, so a mistaken ``n_experts=10**8`` would fail as "no
    memory" (or, past 32 bits, as too many keys).  An unfused layout needs
    a tensor of its own for every key, so more keys than the container has
    tensors is refused here, naming the numbers.
    """
    n_keys = n_layers * n_experts
    if n_keys > _lib.lib().XC_MAX_KEYS:
        return  # C refuses it: "... is too many keys"
    fused = isinstance(template, str) and check_family(
        "expert_template", template) == FUSED
    try:
        held = len(container)
    except (TypeError, _err.EngineError):
        return  # not countable (or closed: the open says so)
    if not fused and n_tensors and n_keys > held:
        raise misuse(f"n_experts={n_experts} x {n_layers} layers is "
                     f"{n_keys:,} experts, each with tensors of its own, but "
                     f"the container holds {held:,} tensors in all")


def open_cache(container: Any, *, layout: Any, n_slots: int | None,
               budget_bytes: int | None, top_k: Any, expert_template: Any,
               tensors: Any, layers: Any, n_experts: Any, policy: str,
               chunk_bytes: int, batch_threads: int, io_threads: int,
               io_depth: int, split_min_misses: int, lock_memory: bool,
               trace_path: str | os.PathLike[str] | None,
               trace_ring_records: int) -> tuple[Any, tuple[Any, ...]]:
    """Check the options of :class:`~engine.cache.ExpertCache` and open its C cache.

    Returns the ``xc_cache *`` (closed by ``xc_cache_close`` when collected)
    and the layout facts it was opened with: ``(layers, n_experts, top_k,
    policy)``.  A bad option is a MisuseError naming it, before C is
    called; C's own refusals are raised through ``_lib.check``.
    """
    ffi, lib = _lib.ffi(), _lib.lib()
    kw = cache_keywords(layout, {
        "expert_template": expert_template, "tensors": tensors,
        "layers": layers, "n_experts": n_experts, "top_k": top_k})
    expert_template, tensors = kw["expert_template"], kw["tensors"]
    layers, n_experts, top_k = kw["layers"], kw["n_experts"], kw["top_k"]
    if (n_slots is None) == (budget_bytes is None):
        raise misuse("give exactly one of n_slots and budget_bytes")
    handle = getattr(container, "_handle", None)
    if handle is None and not hasattr(container, "_ptr"):
        raise misuse(f"container must be an engine.Container, got "
                     f"{type(container).__name__} {container!r}")
    o = ffi.new("xc_cache_opts *")
    ci, u64, i32 = _args.check_int, _args.U64, _args.INT32
    o.n_slots = ci("n_slots", n_slots, *u64) if n_slots is not None else 0
    o.budget_bytes = (ci("budget_bytes", budget_bytes, *u64)
                      if budget_bytes is not None else 0)
    o.top_k = ci("top_k", top_k, *i32)
    # its own range here: C checks it in one message with top_k's
    ci("batch_threads", batch_threads, 1, lib.XC_MAX_BATCH_THREADS)
    if isinstance(tensors, (str, bytes)):
        raise misuse(f"tensors must be a sequence of str, got "
                     f"{type(tensors).__name__} {tensors!r}")
    try:
        tensor_list = list(tensors)
        layer_list = list(layers)
    except TypeError as e:
        raise misuse(f"tensors and layers must be sequences: {e}") from None
    names = [ffi.new("char[]", _args.check_text(f"tensors[{i}]", t))
             for i, t in enumerate(tensor_list)]
    keep = {
        "policy": ffi.new("char[]", _args.check_text("policy", policy)),
        "template": ffi.new("char[]", _args.check_text("expert_template",
                                                      expert_template)),
        "names": names,
        "tensors": ffi.new("const char *[]", names),
        "layers": ffi.new("int32_t[]", [ci(f"layers[{i}]", v, *i32)
                                        for i, v in enumerate(layer_list)]),
        "trace": (ffi.new("char[]", _args.check_path("trace_path",
                                                    trace_path))
                  if trace_path is not None else ffi.NULL),
    }
    o.policy = keep["policy"]
    o.expert_template = keep["template"]
    o.tensors = keep["tensors"]
    o.n_tensors = len(names)
    o.layers = keep["layers"]
    o.n_layers = len(layer_list)
    o.n_experts = ci("n_experts", n_experts, *i32)
    check_key_count(container, expert_template, len(layer_list),
                    o.n_experts, len(tensor_list))
    o.chunk_bytes = ci("chunk_bytes", chunk_bytes, *u64)
    o.batch_threads = ci("batch_threads", batch_threads, *i32)
    o.io_threads = ci("io_threads", io_threads, *i32)
    o.io_depth = ci("io_depth", io_depth, *i32)
    o.split_min_misses = ci("split_min_misses", split_min_misses, *i32)
    o.lock_memory = int(_args.check_flag("lock_memory", lock_memory))
    o.trace_path = keep["trace"]
    o.trace_ring_records = ci("trace_ring_records", trace_ring_records,
                              0, 2**64 - 1)
    out = ffi.new("xc_cache **")
    cptr = handle() if handle is not None else container._ptr  # closed: misuse
    rc = lib.xc_cache_open(cptr, o, out)
    _lib.check(rc)
    return (ffi.gc(out[0], lib.xc_cache_close),
            (tuple(layer_list), int(o.n_experts), int(o.top_k), str(policy)))
