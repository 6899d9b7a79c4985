"""The C boundary called as an embedding C program would: every NULL and range check.

The Python face never passes a NULL array, a NULL options struct or an
out-of-range reference, so these contracts of ``xc.h`` are only reachable
through the cffi ``lib``.  Each refusal is asserted with its exact status and
sentence, and each call that must change nothing is checked to have changed
nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import K3_LAYOUT, K3_TEMPLATE, K3_TENSORS, raised
from xcache import engine
from xcache.engine import _lib

MISUSE = engine.MisuseError


@pytest.fixture()
def cont(k3_shard: Path):
    """An open k3-mini container."""
    with engine.Container(str(k3_shard)) as c:
        yield c


def c_opts(**overrides: Any) -> tuple[Any, list[Any]]:
    """A k3-mini xc_cache_opts built by hand, and the buffers it points into."""
    ffi = _lib.ffi()
    names = [ffi.new("char[]", t.encode()) for t in K3_TENSORS]
    keep = [names, ffi.new("char[]", K3_TEMPLATE.encode()),
            ffi.new("const char *[]", names), ffi.new("int32_t[]", [0])]
    o = ffi.new("xc_cache_opts *")
    o.n_slots, o.top_k, o.batch_threads = 8, 4, 1
    o.expert_template, o.tensors, o.n_tensors = keep[1], keep[2], len(names)
    o.layers, o.n_layers, o.n_experts = keep[3], 1, 24
    for k, v in overrides.items():
        setattr(o, k, v)
    return o, keep


def open_refused(cont: engine.Container, exc: type[engine.EngineError],
                 **overrides: Any) -> str:
    """xc_cache_open with these options must fail with exc; its message."""
    ffi, lib = _lib.ffi(), _lib.lib()
    o, _keep = c_opts(**overrides)
    out = ffi.new("xc_cache **")
    msg = str(raised(exc, lib.xc_cache_open, cont._ptr, o, out))
    assert out[0] == ffi.NULL  # *out written only on success
    return msg


# -- xc_cache_open ------------------------------------------------------------

def test_open_with_hand_built_options_works(cont):
    """The hand-built options open a working cache: the baseline for the refusals."""
    ffi, lib = _lib.ffi(), _lib.lib()
    o, _keep = c_opts()
    out = ffi.new("xc_cache **")
    assert lib.xc_cache_open(cont._ptr, o, out) == 0
    assert lib.xc_cache_n_slots(out[0]) == 8
    lib.xc_cache_close(out[0])


def test_open_refuses_null_options_or_out(cont):
    """A NULL options struct or out pointer is MISUSE, whatever else is given."""
    ffi, lib = _lib.ffi(), _lib.lib()
    o, _keep = c_opts()
    out = ffi.new("xc_cache **")
    for args in ((cont._ptr, ffi.NULL, out), (cont._ptr, o, ffi.NULL)):
        assert str(raised(MISUSE, lib.xc_cache_open, *args)) == (
            "cache open: NULL container, options or out")
    assert out[0] == ffi.NULL


@pytest.mark.parametrize("field,value,message", [
    ("batch_threads", 0, "cache open: top_k must be >= 1 (got 4) and "
                         "batch_threads 1..256 (got 0)"),
    ("io_threads", 65, "cache open: io_threads must be 0..64 (got 65), "
                       "io_depth and split_min_misses >= 0 (got 0, 0)"),
    ("io_threads", -1, "cache open: io_threads must be 0..64 (got -1), "
                       "io_depth and split_min_misses >= 0 (got 0, 0)"),
    ("io_depth", -3, "cache open: io_threads must be 0..64 (got 0), "
                     "io_depth and split_min_misses >= 0 (got -3, 0)"),
    ("split_min_misses", -2, "cache open: io_threads must be 0..64 (got 0), "
                             "io_depth and split_min_misses >= 0 (got 0, -2)"),
])
def test_open_refuses_thread_and_queue_options(cont, field, value, message):
    """Each thread or queue option out of range is MISUSE naming every value."""
    assert open_refused(cont, MISUSE, **{field: value}) == message


def test_open_refuses_null_template_tensors_or_layers(cont):
    """A NULL template, tensor list, tensor name or layer list is MISUSE."""
    ffi = _lib.ffi()
    need = ("cache options need an expert_template, at least one tensor and "
            "at least one layer")
    for field in ("expert_template", "tensors", "layers"):
        assert open_refused(cont, MISUSE, **{field: ffi.NULL}) == need, field
    names = [ffi.new("char[]", K3_TENSORS[0].encode())]
    with_null = ffi.new("const char *[]", [names[0], ffi.NULL])
    assert open_refused(cont, MISUSE, tensors=with_null,
                        n_tensors=2) == "tensor 1 is NULL"


def test_open_refuses_a_slot_count_past_the_address_space(cont):
    """n_slots whose arena size overflows size_t is BudgetError, not a huge malloc."""
    assert open_refused(cont, engine.BudgetError, n_slots=2**60) == (
        f"cache budget of {2**60} slots of 12288 bytes is too large for this "
        "machine")


# -- references, batches and streams ------------------------------------------

def test_release_refuses_null_negative_and_stale_references(cont):
    """NULL, negative slot, EMPTY slot, moved pointer, spent hold: all MISUSE."""
    ffi, lib = _lib.ffi(), _lib.lib()
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, batch_threads=1)
    p = cache._ptr
    real = ffi.new("xc_ref *")
    assert lib.xc_cache_get(p, 0, 5, real) == 0
    assert str(raised(MISUSE, lib.xc_cache_release, p, ffi.NULL)) == (
        "release: not a reference of this cache")
    ref = ffi.new("xc_ref *")
    ref.slot = -1
    assert str(raised(MISUSE, lib.xc_cache_release, p, ref)) == (
        "release: not a reference of this cache")

    def stale(slot: int, generation: int, data: Any) -> str:
        ref.slot, ref.generation, ref.data = slot, generation, data
        return str(raised(MISUSE, lib.xc_cache_release, p, ref))

    def sentence(slot: int, generation: int) -> str:
        return (f"release: slot {slot} holds no reference of generation "
                f"{generation} at that address (released twice, or a "
                "reference of another cache)")

    empty = next(i for i, s in enumerate(cache.slots()) if s["state"] == "empty")
    assert stale(empty, 0, real.data) == sentence(empty, 0)
    assert stale(real.slot, real.generation, real.data + 1) == sentence(
        real.slot, real.generation)
    ref.data = real.data
    assert lib.xc_cache_release(p, real) == 0
    # the same reference again: the slot is READY, same generation, no hold
    assert stale(real.slot, real.generation, real.data) == sentence(
        real.slot, real.generation)
    slots = cache.slots()
    assert [s["holds"] for s in slots] == [0] * 8
    assert cache.resident() == {(0, 5)}
    cache.check()
    cache.close()


def test_handles_refuse_negative_and_stale_values(cont):
    """unhold of a negative, foreign or spent handle is MISUSE; hold_data NULL."""
    ffi, lib = _lib.ffi(), _lib.lib()
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, batch_threads=1)
    p = cache._ptr
    h = lib.xc_cache_hold(p, 0, 2)
    assert h >= 0
    assert lib.xc_cache_hold_data(p, h) != ffi.NULL
    assert lib.xc_cache_unhold(p, h) == 0
    for bad in (-5, h, h | 0xFF, h + (1 << 32)):
        assert lib.xc_cache_unhold(p, bad) == lib.XC_E_MISUSE, bad
        assert lib.xc_cache_hold_data(p, bad) == ffi.NULL, bad
    assert [s["holds"] for s in cache.slots()] == [0] * 8
    cache.check()
    cache.close()


def test_batch_calls_refuse_one_null_array_and_accept_a_null_count(cont):
    """getmany/prefetch: one NULL array is MISUSE; a NULL count pointer is allowed."""
    ffi, lib = _lib.ffi(), _lib.lib()
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, batch_threads=1)
    p = cache._ptr
    layers = ffi.new("int32_t[]", [0, 0])
    experts = ffi.new("int32_t[]", [7, 8])
    for fn, extra in ((lib.xc_cache_getmany, ()), (lib.xc_cache_prefetch, (0,))):
        for a, b in ((layers, ffi.NULL), (ffi.NULL, experts)):
            assert str(raised(MISUSE, fn, p, a, b, 2, *extra, ffi.NULL)) == (
                "getmany: NULL key arrays")
    assert cache.stats()["prefetch_loads"] == 0
    assert lib.xc_cache_getmany(p, layers, experts, 2, ffi.NULL) == 0
    assert cache.resident() == {(0, 7), (0, 8)}
    assert cache.stats()["prefetch_loads"] == 2
    # zero keys need no arrays at all
    assert lib.xc_cache_getmany(p, ffi.NULL, ffi.NULL, 0, ffi.NULL) == 0
    cache.close()


def test_stream_begin_refuses_a_null_out_or_array(cont):
    """stream_begin: NULL out or one NULL array is MISUSE; zero keys need none."""
    ffi, lib = _lib.ffi(), _lib.lib()
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, batch_threads=1)
    p = cache._ptr
    layers = ffi.new("int32_t[]", [0])
    experts = ffi.new("int32_t[]", [1])
    out = ffi.new("xc_stream **")
    for a, b, o in ((layers, experts, ffi.NULL), (layers, ffi.NULL, out),
                    (ffi.NULL, experts, out)):
        assert str(raised(MISUSE, lib.xc_cache_stream_begin, p, a, b, 1,
                          o)) == "stream: NULL key arrays or out"
    assert out[0] == ffi.NULL
    assert lib.xc_cache_stream_begin(p, ffi.NULL, ffi.NULL, 0, out) == 0
    ref = ffi.new("xc_ref *")
    assert lib.xc_cache_stream_next(out[0], ref, ffi.NULL) == lib.XC_STREAM_END
    lib.xc_cache_stream_end(out[0])
    lib.xc_cache_stream_end(ffi.NULL)  # documented no-op
    assert cache.stats()["requests"] == 0
    cache.check()
    cache.close()


# -- container, simulator and fault injector -------------------------------------

def test_container_open_with_null_options_uses_the_defaults(k3_shard):
    """NULL opts means the defaults (buffered, no verify); NULL out is MISUSE."""
    ffi, lib = _lib.ffi(), _lib.lib()
    out = ffi.new("xc_st **")
    path = str(k3_shard).encode()
    assert str(raised(MISUSE, lib.xc_st_open, path, ffi.NULL, ffi.NULL)) == (
        "xc_st_open: path and out must not be NULL")
    assert lib.xc_st_open(path, ffi.NULL, out) == 0
    st = out[0]
    assert lib.xc_st_n_tensors(st) == 144
    assert lib.xc_st_direct_active(st) == 0
    assert lib.xc_st_check_files(st) == 0
    lib.xc_st_close(st)


def test_simulator_refuses_each_null_pointer():
    """A NULL result, or NULL keys for a non-empty trace, is MISUSE; empty is fine."""
    ffi, lib = _lib.ffi(), _lib.lib()
    o = ffi.new("xc_sim_opts *")
    o.n_slots, o.n_keys, o.mode = 2, 4, lib.XC_SIM_PLAIN
    keys = ffi.new("uint32_t[]", [1, 2])
    out = ffi.new("xc_sim_result *")
    for k, r in ((keys, ffi.NULL), (ffi.NULL, out)):
        assert lib.xc_sim_run(o, k, ffi.NULL, 2, r) == lib.XC_E_MISUSE
        assert _lib.last_error()[4] == "sim: NULL options, result or keys"
    assert lib.xc_sim_run(o, ffi.NULL, ffi.NULL, 0, out) == 0
    assert (out.requests, out.hits, out.misses) == (0, 0, 0)
    o.mode = lib.XC_SIM_STEP  # step mode with no accesses needs no step flags
    assert lib.xc_sim_run(o, ffi.NULL, ffi.NULL, 0, out) == 0


def test_fault_injector_over_an_explicit_inner_vtable(k3_shard):
    """An injector over the default vtable given explicitly reads like one over NULL."""
    ffi, lib = _lib.ffi(), _lib.lib()
    out = ffi.new("xc_fault **")
    assert lib.xc_fault_open(lib.xc_io_default(), out) == 0
    f = out[0]
    opts = ffi.new("xc_st_opts *")
    opts.io = lib.xc_fault_io(f)
    st = ffi.new("xc_st **")
    # an empty filter matches every file, like NULL
    assert lib.xc_fault_arm(f, lib.XC_FAULT_EOF, 1, 0, 0, b"") == 0
    assert str(raised(engine.ShortReadError, lib.xc_st_open, str(k3_shard).encode(),
                      opts, st)).startswith(f"{k3_shard}: ")
    assert lib.xc_fault_fired(f) == 1
    assert lib.xc_fault_open_handles(f) == 0
    lib.xc_fault_disarm(f)
    assert lib.xc_st_open(str(k3_shard).encode(), opts, st) == 0
    assert lib.xc_st_n_tensors(st[0]) == 144
    assert lib.xc_fault_open_handles(f) == 1
    lib.xc_st_close(st[0])
    lib.xc_fault_close(f)
