"""Misuse and bad options at the C boundary: each refused with its exact message.

Most go straight through the cffi ``lib`` (as an embedding C engine would),
because the Python face filters some of them out before C sees them.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import DATA_START, K3_LAYOUT, raised
from xcache import engine
from xcache.engine import _lib
from xcache.engine.sim import simulate

W1 = "language_model.model.layers.0.block_sparse_moe.experts.0.w1.weight_packed"


@pytest.fixture()
def cont(k3_shard: Path):
    """An open k3-mini container."""
    with engine.Container(str(k3_shard)) as c:
        yield c


# -- cache options -----------------------------------------------------------

@pytest.mark.parametrize("kw,message", [
    ({"tensors": ()}, "cache options need an expert_template, at least one "
                      "tensor and at least one layer"),
    ({"layers": ()}, "cache options need an expert_template, at least one "
                     "tensor and at least one layer"),
    ({"n_experts": 0}, "n_experts must be at least 1 (got 0)"),
    ({"layers": (1, 0)}, "layers must be strictly ascending: 0 follows 1"),
    ({"layers": (0, 1, 2), "n_experts": 2**31 - 1},
     "3 layers x 2147483647 experts is too many keys"),
    ({"top_k": 0}, "cache open: top_k must be >= 1 (got 0) and batch_threads "
                   "1..256 (got 2)"),
    ({"batch_threads": 300}, "batch_threads must be from 1 to 256, got 300"),
])
def test_bad_cache_options(cont, kw, message):
    """Each bad option is MisuseError with its own sentence."""
    opts = {"n_slots": 8, "top_k": 4, **K3_LAYOUT, **kw}
    with pytest.raises(engine.MisuseError) as ei:
        engine.ExpertCache(cont, **opts)
    assert str(ei.value) == message and ei.value.kind == "misuse"


def test_budget_too_large_for_the_machine(cont):
    """A budget of 2**62 bytes is BudgetError naming the slot count and stride."""
    with pytest.raises(engine.BudgetError) as ei:
        engine.ExpertCache(cont, **K3_LAYOUT, budget_bytes=2**62, top_k=4)
    assert str(ei.value) == (f"cache budget of {2**62 // 12288} slots of 12288 "
                             "bytes is too large for this machine")


def test_template_naming_a_missing_layer(cont):
    """A layer the container lacks is NotFoundError naming layer, expert, tensor."""
    with pytest.raises(engine.NotFoundError) as ei:
        engine.ExpertCache(cont, **{**K3_LAYOUT, "layers": (0, 1)}, n_slots=8,
                           top_k=4)
    e = ei.value
    assert (e.layer, e.expert) == (1, 0)
    assert str(e) == ("layer 1 expert 0: tensor 'w1.weight_packed' (" +
                      W1.replace("layers.0", "layers.1") +
                      ") is not in the container")


def test_template_too_long_for_a_name(cont):
    """A template expanding past the name buffer is MisuseError at (0, 0)."""
    with pytest.raises(engine.MisuseError) as ei:
        engine.ExpertCache(cont, **{**K3_LAYOUT,
                                    "expert_template": "x" * 5000 + "{layer}"},
                           n_slots=8, top_k=4)
    assert (ei.value.layer, ei.value.expert) == (0, 0)
    assert str(ei.value).startswith("layer 0 expert 0: tensor name from "
                                    "template 'xxxx")


def _two_experts(path: Path, a: tuple[str, list[int]], b: tuple[str, list[int]]) -> str:
    """A file holding e.0.0.t and e.0.1.t with the given dtypes and shapes."""
    hdr, off = {}, 0
    for e, (dt, shape) in enumerate((a, b)):
        n = int(np.prod(shape)) * (2 if dt == "F16" else 1)
        hdr[f"e.0.{e}.t"] = {"dtype": dt, "shape": shape,
                             "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(hdr).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + bytes(off))
    return str(path)


@pytest.mark.parametrize("a,b,text", [
    (("U8", [4]), ("I8", [4]), "dtype I8 ndim 1 (4 bytes), unlike the first "
                               "expert's U8 ndim 1 (4 bytes)"),
    (("U8", [4]), ("U8", [2, 2]), "dtype U8 ndim 2 (4 bytes), unlike the "
                                  "first expert's U8 ndim 1 (4 bytes)"),
    (("U8", [4, 1]), ("U8", [1, 4]), "dtype U8 ndim 2 (4 bytes), unlike the "
                                     "first expert's U8 ndim 2 (4 bytes)"),
    (("U8", [4]), ("U8", [6]), "dtype U8 ndim 1 (6 bytes), unlike the first "
                               "expert's U8 ndim 1 (4 bytes)"),
])
def test_experts_must_share_one_layout(tmp_path, a, b, text):
    """An expert whose tensor differs from expert 0's in dtype, rank, shape or size."""
    path = _two_experts(tmp_path / "m.safetensors", a, b)
    with engine.Container(path) as c, pytest.raises(engine.MisuseError) as ei:
        engine.ExpertCache(c, n_slots=3, top_k=1, n_experts=2, tensors=("t",),
                           layers=(0,), expert_template="e.{layer}.{expert}.{tensor}")
    assert (ei.value.layer, ei.value.expert) == (0, 1)
    assert str(ei.value) == (f"layer 0 expert 1: tensor 'e.0.1.t' has {text}; "
                             "every expert must share one layout")


# -- calls out of contract ---------------------------------------------------

def test_cache_calls_with_bad_arguments(cont):
    """Bad refs, NULL arrays, indexes out of range: MisuseError, nothing changes."""
    ffi, lib = _lib.ffi(), _lib.lib()
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4)
    ex = cache.get(0, 3)
    p = cache._ptr
    ref = ffi.new("xc_ref *")
    ref.slot = 99
    assert str(raised(engine.MisuseError, lib.xc_cache_release, p, ref)) == (
        "release: not a reference of this cache")
    real = ffi.new("xc_ref *")
    assert lib.xc_cache_get(p, 0, 3, real) == 0  # a second hold, as a struct
    ref.slot = real.slot
    ref.generation = real.generation + 1
    ref.data = real.data
    assert str(raised(engine.MisuseError, lib.xc_cache_release, p, ref)) == (
        f"release: slot {ref.slot} holds no reference of generation "
        f"{ref.generation} at that address (released twice, or a reference "
        "of another cache)")
    assert lib.xc_cache_release(p, real) == 0
    out = ffi.new("size_t *")
    assert str(raised(engine.MisuseError, lib.xc_cache_getmany, p, ffi.NULL,
                      ffi.NULL, 2, out)) == "getmany: NULL key arrays"
    assert str(raised(engine.MisuseError, lib.xc_cache_prefetch, p, ffi.NULL,
                      ffi.NULL, 2, 0, out)) == "getmany: NULL key arrays"
    assert str(raised(engine.MisuseError, lib.xc_cache_stream_begin, p,
                      ffi.NULL, ffi.NULL, 2, ffi.NULL)) == (
        "stream: NULL key arrays or out")
    null = ffi.NULL
    assert str(raised(engine.MisuseError, lib.xc_cache_slot, p, 99, null, null,
                      null, null, null, null)) == "slot 99 out of range (8 slots)"
    assert lib.xc_cache_slot(p, ex.slot, null, null, null, null, null,
                             null) == 0
    info = ffi.new("xc_slot_tensor *")
    assert str(raised(engine.MisuseError, lib.xc_cache_tensor, p, 6, info)) == (
        "tensor 6 out of range (6 tensors)")
    with pytest.raises(engine.MisuseError) as ei:
        cache.contiguous(0, 99)
    assert str(ei.value) == ("(layer 0, expert 99) is not a key of this cache "
                             "(1 layers from 0 to 0, 24 experts each)")
    assert str(raised(engine.MisuseError, lib.xc_cache_open, null, null,
                      null)) == "cache open: NULL container, options or out"
    lib.xc_cache_close(null)  # documented no-op
    ex.release()
    cache.check()
    # two demand requests: the Expert's and the struct reference's hit
    assert cache.stats()["requests"] == 2 and cache.stats()["hits"] == 1
    assert cache.resident() == {(0, 3)}
    cache.close()


def test_container_calls_with_bad_arguments(cont):
    """Tensor, metadata and shard accessors out of range."""
    ffi, lib = _lib.ffi(), _lib.lib()
    p = cont._ptr
    ti = ffi.new("xc_tensor_info *")
    assert str(raised(engine.MisuseError, lib.xc_st_tensor, p, 999, ti)) == (
        "tensor index 999 out of range (144 tensors)")
    k, v = ffi.new("const char **"), ffi.new("const char **")
    assert str(raised(engine.MisuseError, lib.xc_st_metadata, p, 5, k, v)) == (
        "metadata index 5 out of range (0 entries)")
    buf = ffi.new("uint8_t[4]")
    assert str(raised(engine.MisuseError, lib.xc_st_read_tensor, p, 999, buf,
                      4)) == "tensor index 999 out of range (144 tensors)"
    assert str(raised(engine.MisuseError, lib.xc_st_read_tensor, p, 0, buf,
                      4)) == (f'tensor "{W1}" is 512 bytes; the buffer holds 4')
    assert lib.xc_st_shard_data_start(p, 0) == DATA_START
    assert lib.xc_st_shard_header_bytes(p, 0) == DATA_START - 8
    assert lib.xc_st_shard_data_start(p, 1) == 0
    assert lib.xc_st_shard_header_bytes(p, 1) == 0
    assert lib.xc_st_shard_path(p, 1) == ffi.NULL
    assert lib.xc_st_shard_handle(p, 1) == -1
    assert lib.xc_st_shard_direct(p, 1) == 0
    assert str(raised(engine.MisuseError, lib.xc_st_open, ffi.NULL, ffi.NULL,
                      ffi.NULL)) == "xc_st_open: path and out must not be NULL"
    lib.xc_st_close(ffi.NULL)  # documented no-op


def test_status_and_dtype_names_out_of_range():
    """Unknown status codes are "unknown"; dtypes out of range have no name or bits."""
    ffi, lib = _lib.ffi(), _lib.lib()
    assert [ffi.string(lib.xc_status_name(c)).decode() for c in (0, -999, 5)] == [
        "ok", "unknown", "unknown"]
    assert lib.xc_dtype_name(-1) == ffi.NULL and lib.xc_dtype_name(999) == ffi.NULL
    assert lib.xc_dtype_bits(-1) == 0 and lib.xc_dtype_bits(999) == 0


# -- policy specs ------------------------------------------------------------

LFRU_PARAMS = "valid parameters: sample, seed (as key=unsigned integer)"


@pytest.mark.parametrize("spec,message", [
    ("lfru:sample", f"policy lfru: bad parameter 'sample'; {LFRU_PARAMS}"),
    ("lfru:sample=", f"policy lfru: bad parameter 'sample='; {LFRU_PARAMS}"),
    ("lfru:sample=x", f"policy lfru: bad parameter 'sample=x'; {LFRU_PARAMS}"),
    ("lfru:sample=3x", f"policy lfru: bad parameter 'sample=3x'; {LFRU_PARAMS}"),
    ("lfru:sample=99999999999999999999",
     f"policy lfru: bad parameter 'sample=99999999999999999999'; {LFRU_PARAMS}"),
    ("lfru:sample=1234567890123456789012345678901",
     "policy lfru: bad parameter 'sample=1234567890123456789012345678901'; "
     f"{LFRU_PARAMS}"),
    ("lfru:bogus=1", f"policy lfru: bad parameter 'bogus=1'; {LFRU_PARAMS}"),
    ("lru:x=1", "policy lru: bad parameter 'x=1'; valid parameters: none (as "
                "key=unsigned integer)"),
    ("s3fifo:small=101", "policy s3fifo: small is a percentage 0..100"),
    ("s3fifo:ghost=101", "policy s3fifo: ghost is a percentage 0..100"),
    ("s3fifo:promote=0", "policy s3fifo: promote is a hit count 1..3"),
    ("s3fifo:promote=4", "policy s3fifo: promote is a hit count 1..3"),
    ("nope", "unknown policy 'nope'; valid: lru, fifo, lfu, lfru:sample=N,"
             "seed=N, hotness:period=N, s3fifo:small=N,ghost=N,promote=N, arc, sieve"),
])
def test_bad_policy_specs(spec, message):
    """Every malformed policy spec is MisuseError quoting it and the valid forms."""
    with pytest.raises(engine.MisuseError) as ei:
        simulate(np.array([1, 2, 1]), spec, 2)
    assert str(ei.value) == message


def test_empty_policy_spec_is_lru():
    """An empty spec means the default, LRU: the same counts exactly."""
    keys = np.array([1, 2, 3, 1, 2, 4, 1])
    assert {k: v for k, v in simulate(keys, "", 2).items() if k != "policy"} == {
        k: v for k, v in simulate(keys, "lru", 2).items() if k != "policy"}


# -- simulator options -------------------------------------------------------

def _sim(opts_kw: dict, keys: list[int], starts: list[int] | None):
    ffi, lib = _lib.ffi(), _lib.lib()
    o = ffi.new("xc_sim_opts *")
    o.policy = ffi.NULL
    o.n_slots, o.n_keys, o.n_experts, o.mode = 2, 4, 4, lib.XC_SIM_STEP
    for k, v in opts_kw.items():
        setattr(o, k, v)
    karr = ffi.new("uint32_t[]", keys or [0])
    sarr = ffi.NULL if starts is None else ffi.new("uint8_t[]", starts)
    out = ffi.new("xc_sim_result *")
    return lib.xc_sim_run(o, karr, sarr, len(keys), out), out


def test_simulator_refuses_bad_options():
    """Key past n_keys, bad mode, missing step flags, per-layer without experts."""
    rc, _ = _sim({}, [1, 9], [1, 1])
    assert rc == _lib.lib().XC_E_MISUSE
    assert _lib.last_error()[1] == 1  # the offending access
    assert _lib.last_error()[4] == "sim: access 1 has key 9 >= n_keys 4"
    for kw, starts in (({"mode": 7}, [1]), ({}, None),
                       ({"per_layer": 1, "n_experts": 0}, [1]),
                       ({"n_slots": 0}, [1]), ({"n_keys": 0}, [1])):
        rc, _ = _sim(kw, [1], starts)
        assert rc == _lib.lib().XC_E_MISUSE, kw
    ffi, lib = _lib.ffi(), _lib.lib()
    assert lib.xc_sim_run(ffi.NULL, ffi.NULL, ffi.NULL, 0, ffi.NULL) == lib.XC_E_MISUSE


def test_simulator_plain_mode_needs_no_step_flags():
    """PLAIN mode with NULL step flags runs: LRU 2 slots over 1 2 1 3 1 -> 2 hits."""
    rc, out = _sim({"mode": _lib.lib().XC_SIM_PLAIN}, [1, 2, 1, 3, 1], None)
    assert rc == 0
    assert (out.requests, out.hits, out.misses, out.evictions) == (5, 2, 3, 1)


# -- the trace recorder's failures ----------------------------------------

def test_trace_file_that_cannot_be_written_fails_the_open(cont):
    """/dev/full takes the open but not the header: EngineIOError naming errno 28."""
    with pytest.raises(engine.EngineIOError) as ei:
        engine.ExpertCache(cont, **K3_LAYOUT,
                           n_slots=8, top_k=4, trace_path="/dev/full")
    assert str(ei.value) == ("cache open: cannot write trace file /dev/full: "
                             "No space left on device (errno 28)")


def test_trace_write_failure_stops_recording_and_is_reported(cont):
    """A trace into a pipe whose reader left: EPIPE reported, the cache serves on."""
    r, w = os.pipe()
    try:
        cache = engine.ExpertCache(cont, **K3_LAYOUT,
                                   n_slots=8, top_k=4, trace_ring_records=2,
                                   trace_path=f"/proc/self/fd/{w}")
        os.close(r)
        cache.get(0, 1).release()
        msg = "trace write failed, recording stopped: Broken pipe (errno 32)"
        for _ in range(2):  # the failure sticks
            with pytest.raises(engine.EngineIOError) as ei:
                cache.trace_flush()
            assert str(ei.value) == msg
        for e in (2, 3, 4):  # fills the 2-record ring: no write attempted
            cache.get(0, e).release()
        cache.check()
        assert cache.stats()["misses"] == 4
        cache.close()
    finally:
        os.close(w)
