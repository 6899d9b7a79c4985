"""I/O faults on every read path: O_DIRECT, chunks, tensors, read-ahead, stream.

Faults come from ``faults.io.IOFaults`` handed to ``engine.Container(io=...)``.
Offsets in the golden values: k3-mini's data starts at 20,608, expert e at
20,608 + 1,632 e; under O_DIRECT a read is widened down to a 4,096 boundary.
"""

from __future__ import annotations

import pytest

from tests.helpers import K3_LAYOUT, write_reversed_k3_mini
from xcache import engine
from xcache.faults.io import Fault, IOFaults
from xcache.faults.loops import k3_expected

W1 = "language_model.model.layers.0.block_sparse_moe.experts.0.w1.weight_packed"


@pytest.fixture()
def faults():
    """A fresh injector, closed after the test."""
    f = IOFaults()
    yield f
    f.close()


def test_direct_probe_read_failure_falls_back_and_says_why(k3_shard, faults):
    """An EIO on the O_DIRECT probe read: buffered reads, the note quotes the error."""
    faults.arm(Fault("eio", nth=1))
    with engine.Container(str(k3_shard), direct=True, io=faults) as c:
        assert c.direct_active is False
        assert c.direct_note == (
            f"{k3_shard}: O_DIRECT probe read failed ({k3_shard}: read of 4096 bytes "
            "at byte 0 failed after 0 bytes: Input/output error (errno 5)); "
            "using buffered reads")
        faults.disarm()
        assert c.read_bytes(W1) == k3_expected(0)[:512]


def test_direct_probe_at_end_of_file_still_counts(k3_shard, faults):
    """A probe read meeting end of file proved the reads work: O_DIRECT stays on."""
    faults.arm(Fault("eof", nth=1))
    with engine.Container(str(k3_shard), direct=True, io=faults) as c:
        assert c.direct_active is True
        assert c.direct_note == "O_DIRECT active on 1 shard(s), 4096-byte alignment"


@pytest.mark.parametrize("kind,exc,message", [
    ("eio", engine.EngineIOError,
     "read of 4096 bytes at byte 28672 failed after 0 bytes: Input/output "
     "error (errno 5)"),
    ("eof", engine.ShortReadError,
     "short read: 0 of 4096 bytes at byte 28672 (end of file at byte 28672)"),
    ("eintr", engine.EngineIOError,
     "read of 4096 bytes at byte 28672 failed after 0 bytes: Interrupted "
     "system call (errno 4)"),
])
def test_direct_expert_read_fault(k3_shard, faults, kind, exc, message):
    """A widened O_DIRECT load failing: its kind, the aligned offset, no slot."""
    with engine.Container(str(k3_shard), direct=True, io=faults) as c:
        assert c.direct_active
        cache = engine.ExpertCache(c, **K3_LAYOUT, n_slots=8, top_k=4)
        faults.arm(Fault(kind, nth=1, persistent=True))
        with pytest.raises(exc) as ei:
            cache.get(0, 5)
        faults.disarm()
        e = ei.value
        assert type(e) is exc
        assert (e.offset, e.layer, e.expert) == (28672, 0, 5)
        assert str(e) == f"layer 0 expert 5: {k3_shard}: {message}"
        cache.check()
        assert cache.resident() == set()
        st = cache.stats()
        assert (st["load_failures"], st["short_reads"], st["io_errors"]) == (
            (1, 1, 0) if kind == "eof" else (1, 0, 1))
        with cache.get(0, 5) as ex:  # the next try reads it whole
            assert ex.data.tobytes() == k3_expected(5)
        cache.close()


def test_direct_partial_read_cannot_continue_unaligned(k3_shard, faults):
    """Under O_DIRECT a 100-byte partial read leaves an unaligned rest: EINVAL."""
    with engine.Container(str(k3_shard), direct=True, io=faults) as c:
        cache = engine.ExpertCache(c, **K3_LAYOUT, n_slots=8, top_k=4)
        faults.arm(Fault("partial", nth=1, arg=100))
        with pytest.raises(engine.EngineIOError) as ei:
            cache.get(0, 5)
        faults.disarm()
        assert str(ei.value) == (
            f"layer 0 expert 5: {k3_shard}: read of 4096 bytes at byte 28672 "
            "failed after 0 bytes: Invalid argument (errno 22)")
        cache.check()
        cache.close()


@pytest.mark.parametrize("kind,exc,text", [
    ("eof", engine.ShortReadError,
     "short read: 0 of 512 bytes at byte 20608 (end of file at byte 20480)"),
    ("eintr", engine.EngineIOError,
     "read of 4096 bytes at byte 20480 failed after 0 bytes: Interrupted "
     "system call (errno 4)"),
])
def test_direct_tensor_read_fault(k3_shard, faults, kind, exc, text):
    """Container.read under O_DIRECT: faults of the bounce read name the tensor."""
    with engine.Container(str(k3_shard), direct=True, io=faults) as c:
        faults.arm(Fault(kind, nth=1, persistent=True))
        with pytest.raises(exc) as ei:
            c.read_bytes(W1)
        faults.disarm()
        assert ei.value.offset == 20480
        assert str(ei.value) == (f'tensor "{W1}" (shard 0, bytes 20608..21120): '
                                 f"{k3_shard}: {text}")
        assert c.read_bytes(W1) == k3_expected(0)[:512]


# Chunks end on absolute multiples of chunk_bytes: expert 3 starts at 25,504,
# so its chunks are [25504, 25600), [25600, 26112), [26112, 26624), ...
@pytest.mark.parametrize("kind,nth,exc,offset", [
    ("eof", 2, engine.ShortReadError, 25600),
    ("eio", 3, engine.EngineIOError, 26112),
])
def test_chunked_load_fault_names_the_chunk(k3_shard, faults, kind, nth, exc,
                                            offset):
    """With 512-byte chunks the nth chunk's fault is reported at that chunk's byte."""
    with engine.Container(str(k3_shard), io=faults) as c:
        cache = engine.ExpertCache(c, **K3_LAYOUT, n_slots=8, top_k=4, chunk_bytes=512)
        faults.arm(Fault(kind, nth=nth))
        with pytest.raises(exc) as ei:
            cache.get(0, 3)
        assert faults.fired == 1
        faults.disarm()
        assert (ei.value.offset, ei.value.layer,
                ei.value.expert) == (offset, 0, 3)
        cache.check()
        assert cache.resident() == set()
        with cache.get(0, 3) as ex:
            assert ex.data.tobytes() == k3_expected(3)
        cache.close()


def test_chunked_load_completes_partial_reads(k3_shard, faults):
    """Partial reads of 100 bytes inside chunks are continued: the payload is exact."""
    with engine.Container(str(k3_shard), io=faults) as c:
        cache = engine.ExpertCache(c, **K3_LAYOUT, n_slots=8, top_k=4, chunk_bytes=512)
        faults.arm(Fault("partial", nth=1, persistent=True, arg=100))
        with cache.get(0, 7) as ex:
            assert ex.data.tobytes() == k3_expected(7)
        # chunks of 224, 512, 512, 384 bytes (expert 7 starts at 32,032),
        # each read 100 bytes at a time: 3 + 6 + 6 + 4 reads
        assert faults.fired == 19
        faults.disarm()
        cache.close()


def test_per_tensor_load_fault(tmp_path, faults):
    """An expert stored tensor by tensor: the third tensor's EIO fails the load."""
    path = write_reversed_k3_mini(tmp_path)
    with engine.Container(str(path), io=faults) as c:
        cache = engine.ExpertCache(c, **K3_LAYOUT, n_slots=8, top_k=4)
        assert not cache.contiguous(0, 2)
        faults.arm(Fault("eio", nth=3))
        with pytest.raises(engine.EngineIOError) as ei:
            cache.get(0, 2)
        faults.disarm()
        assert (ei.value.layer, ei.value.expert) == (0, 2)
        cache.check()
        assert cache.stats()["io_errors"] == 1 and cache.resident() == set()
        with cache.get(0, 2) as ex:
            assert ex.data.tobytes() == k3_expected(2)
        cache.close()


def test_read_ahead_failure_is_counted_not_published(k3_shard, faults):
    """A read-ahead read failing on a reader thread: counted, slot empty."""
    with engine.Container(str(k3_shard), io=faults) as c:
        cache = engine.ExpertCache(c, **K3_LAYOUT, n_slots=8, top_k=4, io_threads=1,
                                   io_depth=4)
        faults.arm(Fault("eio", nth=1))
        assert cache.prefetch([(0, 8), (0, 9)]) == 2  # started
        cache.drain()
        faults.disarm()
        cache.check()
        st = cache.stats()
        assert (st["load_failures"], st["io_errors"],
                st["prefetch_loads"]) == (1, 1, 1)
        assert len(cache.resident()) == 1
        cache.close()


@pytest.mark.parametrize("io_threads", [0, 1])
def test_stream_reports_the_failed_key(k3_shard, faults, io_threads):
    """A stream whose first read fails yields the others, then raises for that key."""
    with engine.Container(str(k3_shard), io=faults) as c:
        cache = engine.ExpertCache(c, **K3_LAYOUT,
                                   n_slots=8, top_k=4, io_threads=io_threads)
        cache.get(0, 0).release()
        faults.arm(Fault("eio", nth=1))
        got = []
        with pytest.raises(engine.EngineIOError) as ei:
            for ex in cache.stream([(0, 0), (0, 10), (0, 11)]):
                assert ex.data.tobytes() == k3_expected(ex.key[1])
                got.append(ex.key)
                ex.release()
        faults.disarm()
        assert got == [(0, 0), (0, 11)]  # the stream goes on past a failure
        assert (ei.value.layer, ei.value.expert) == (0, 10)
        assert str(ei.value).startswith("layer 0 expert 10: ")
        cache.check()
        assert cache.stats()["io_errors"] == 1
        cache.close()
