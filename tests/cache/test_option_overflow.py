"""Sizes computed from cache options are overflow-checked at open (issue 15, item 6)."""

from __future__ import annotations

import pytest

from tests.helpers import K3_LAYOUT, K3_TENSORS, expert_bytes, open_container
from xcache import engine
from xcache.oracle.traces import read_engine_trace

#: The trace record size of docs/TRACE_FORMAT.md, and the most records whose
#: buffer size fits in 64 bits.
RECORD = 24
MAX_RECORDS = (2**64 - 1) // RECORD


@pytest.fixture
def cont(k3_shard):
    c = open_container(k3_shard)
    yield c
    c.close()


@pytest.mark.parametrize("records", [2**61 + 1, MAX_RECORDS + 1, 2**64 - 1])
def test_a_trace_ring_whose_size_wraps_is_refused(cont, tmp_path, records):
    """A ring of more than 2**64 bytes is misuse naming the option; no file is made."""
    trace = tmp_path / "t.xctrace"
    with pytest.raises(engine.MisuseError) as ei:
        engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                           trace_path=trace, trace_ring_records=records)
    assert str(ei.value) == (
        f"cache open: trace_ring_records {records} is too large (at most "
        f"{MAX_RECORDS} records of {RECORD} bytes)")
    assert not trace.exists()


@pytest.mark.nosan  # AddressSanitizer aborts on an allocation this size
def test_the_largest_trace_ring_that_fits_is_only_out_of_memory(cont, tmp_path):
    """A ring whose size fits but cannot be allocated is OutOfMemoryError."""
    trace = tmp_path / "t.xctrace"
    with pytest.raises(engine.OutOfMemoryError):
        engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                           trace_path=trace, trace_ring_records=MAX_RECORDS)
    assert not trace.exists()


def test_a_small_trace_ring_still_records_every_access(cont, tmp_path):
    """A one-record ring writes each access as it comes: nothing lost, nothing extra."""
    trace = tmp_path / "t.xctrace"
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                               trace_path=trace, trace_ring_records=1)
    for ex in (3, 3, 5):
        cache.get(0, ex).release()
    cache.close()
    _, records = read_engine_trace(trace)
    assert len(records) == 3


def test_a_trace_ring_is_not_checked_without_a_trace(cont):
    """Without trace_path the ring size is unused, so any value opens."""
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                               trace_ring_records=2**64 - 1)
    cache.close()


def test_a_chunk_size_near_the_top_of_64_bits_reads_each_expert_whole(cont, k3_shard):
    """chunk_bytes of 2**64 - 1 cannot wrap the next cut: each expert reads exact."""
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                               chunk_bytes=2**64 - 1)
    with cache.get(0, 7) as ex:
        assert ex.data.tobytes() == expert_bytes(k3_shard, 7)
    cache.close()


def test_a_budget_whose_slots_overflow_the_arena_is_refused(cont):
    """n_slots whose arena size wraps is a BudgetError saying it is too large."""
    with pytest.raises(engine.BudgetError) as ei:
        engine.ExpertCache(cont, **K3_LAYOUT, n_slots=2**62, top_k=4)
    assert str(ei.value).startswith(f"cache budget of {2**62} slots of ")
    assert str(ei.value).endswith(" bytes is too large for this machine")


def test_a_huge_top_k_names_the_budget_it_needs_without_wrapping(cont):
    """top_k whose byte need is printed is computed without a wrap."""
    with pytest.raises(engine.BudgetError) as ei:
        engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=2**31 - 1)
    with engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4) as ok:
        stride = ok.stride
    assert str(ei.value) == (
        "cache budget too small: top_k 2147483647 needs at least 2147483648 "
        f"slots, n_slots gives 8; n_slots=2147483648 or budget_bytes="
        f"{2**31 * stride} (stride {stride} bytes) works")

def test_a_repeated_tensor_list_is_counted_without_a_wrap(cont, k3_shard):
    """The same tensor listed many times only makes a bigger expert, summed exactly."""
    layout = dict(K3_LAYOUT, tensors=list(K3_TENSORS) * 3)
    cache = engine.ExpertCache(cont, **layout, n_slots=8, top_k=4)
    with cache.get(0, 2) as ex:
        assert ex.data.tobytes() == expert_bytes(k3_shard, 2) * 3
    cache.close()


@pytest.mark.parametrize("call", ["xc_cache_getmany", "xc_cache_stream_begin"])
def test_a_key_count_no_array_can_hold_is_refused(cont, call):
    """getmany and stream refuse a key count whose arrays' sizes would wrap."""
    from xcache.engine import _lib

    lib, ffi = _lib.lib(), _lib.ffi()
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4)
    layers, experts = ffi.new("int32_t[1]"), ffi.new("int32_t[1]")
    out = ffi.new("size_t *") if call == "xc_cache_getmany" else ffi.new(
        "xc_stream **")
    before = cache.stats()
    rc = getattr(lib, call)(cache._ptr, layers, experts, 2**64 - 1, out)
    assert rc == lib.XC_E_MISUSE
    what = "getmany" if call == "xc_cache_getmany" else "stream"
    assert _lib.last_error()[4] == (
        f"{what}: {2**64 - 1} keys is more than memory can index")
    assert cache.stats() == before and cache.slots()[0]["state"] == "empty"
    cache.close()
