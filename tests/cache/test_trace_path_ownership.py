"""A trace_path never writes over what the user owns (docs/DESIGN.md).

The trace file may be new, empty, an earlier trace (it starts with the
trace magic) or a stream (a FIFO being read, a character device). Any other
file -- above all a file of the container being opened, however it is
reached -- refuses the open, naming the file, with its bytes unchanged and
nothing of the cache left behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import K3_LAYOUT, open_container
from xcache import engine
from xcache.faults.loops import Baseline
from xcache.oracle.traces import read_engine_trace

HEADER = 48
RECORD = 24


def digest(p: Path) -> str:
    """The SHA-256 of a file's bytes."""
    return hashlib.sha256(p.read_bytes()).hexdigest()


def refused(cont: engine.Container, path: Path, why: str) -> None:
    """A cache open with trace_path=path is MisuseError ending in why; no leak."""
    base = Baseline.now()
    with pytest.raises(engine.MisuseError) as info:
        engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, io_threads=1,
                           trace_path=path)
    assert str(info.value) == (
        f"cache open: refusing to write the trace to {path}: {why}")
    base.assert_back("refused trace path")


@pytest.fixture
def shard(k3_copy: Path) -> Path:
    """A private k3-mini shard (its bytes may be checked after a refusal)."""
    return k3_copy


@pytest.fixture
def cont(shard: Path):
    """The engine's container over the private shard."""
    c = open_container(shard)
    yield c
    c.close()


def test_the_containers_own_shard_is_refused_and_kept(cont, shard):
    """trace_path = the open shard: refused, naming it; the shard keeps every byte."""
    size, before = shard.stat().st_size, digest(shard)
    refused(cont, shard, f"it is the open container's own file {shard}")
    assert shard.stat().st_size == size == 59_776
    assert digest(shard) == before
    with engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4) as cache:
        with cache.get(0, 1) as e:
            assert e.data.nbytes == 1632


def test_a_hard_link_to_the_shard_is_the_shard(cont, shard, tmp_path):
    """Another name for the same inode is compared by device and inode: refused."""
    link = tmp_path / "run.xctrace"
    os.link(shard, link)
    before = digest(shard)
    refused(cont, link, f"it is the open container's own file {shard}")
    assert digest(shard) == before and shard.stat().st_nlink == 2


def test_a_symlink_to_the_shard_is_the_shard(cont, shard, tmp_path):
    """A symbolic link is followed before the comparison: refused, link kept."""
    link = tmp_path / "latest.xctrace"
    link.symlink_to(shard)
    before = digest(shard)
    refused(cont, link, f"it is the open container's own file {shard}")
    assert digest(shard) == before and link.is_symlink()


def test_the_index_of_an_open_folder_is_refused(mixtral_dir, tmp_path):
    """The index of a sharded container is one of its files too: refused, kept."""
    folder = Path(shutil.copytree(mixtral_dir, tmp_path / "mm"))
    index = folder / "model.safetensors.index.json"
    before = digest(index)
    base = Baseline.now()
    with pytest.raises(engine.MisuseError) as info:
        engine.ExpertCache.open(folder, n_slots=4, trace_path=index)
    assert str(info.value) == (
        f"cache open: refusing to write the trace to {index}: it is the open "
        f"container's own file {index}")
    assert digest(index) == before
    base.assert_back("refused index")


def test_a_users_text_file_is_refused_and_kept(cont, tmp_path):
    """A file that is not a trace is the user's: refused, its bytes as they were."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my results\n")
    refused(cont, notes, "the file exists and is not an xcache trace (it does "
                         "not start with XCTRACE1); remove it or name another file")
    assert notes.read_text() == "my results\n"
    assert sorted(p.name for p in tmp_path.iterdir())[-1] == "notes.txt"


def test_an_earlier_trace_is_replaced(cont, tmp_path):
    """A file starting with the trace magic is the project's: replaced."""
    trace = tmp_path / "t.xctrace"
    with engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                            trace_path=trace) as cache:
        for e in (1, 2, 3):
            cache.get(0, e).release()
    assert trace.stat().st_size == HEADER + 3 * RECORD
    with engine.ExpertCache(cont, **K3_LAYOUT, n_slots=6, top_k=4,
                            trace_path=trace) as cache:
        cache.get(0, 5).release()
    header, records = read_engine_trace(trace)
    assert header.n_slots == 6 and len(records) == 1
    assert trace.stat().st_size == HEADER + RECORD


def test_a_new_path_is_created(cont, tmp_path):
    """A path that names nothing yet is created with the trace."""
    trace = tmp_path / "new.xctrace"
    with engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                            trace_path=trace) as cache:
        cache.get(0, 1).release()
    assert trace.stat().st_size == HEADER + RECORD
    assert trace.read_bytes()[:8] == b"XCTRACE1"


def test_an_empty_file_is_written(cont, tmp_path):
    """An empty file holds nothing to lose (a file made by mktemp): written."""
    trace = tmp_path / "empty.xctrace"
    trace.touch()
    engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                       trace_path=trace).close()
    assert trace.stat().st_size == HEADER


def test_a_fifo_no_one_reads_is_refused_at_once(cont, tmp_path):
    """A FIFO without a reader would block the open: refused instead, nothing waits."""
    fifo = tmp_path / "t.fifo"
    os.mkfifo(fifo)
    refused(cont, fifo, "it is a FIFO that no process is reading (start the "
                        "reader first)")


def test_dev_null_is_a_stream_and_accepted(cont):
    """/dev/null, a character device, is a stream: accepted."""
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                               trace_path="/dev/null")
    cache.get(0, 1).release()
    cache.close()


# -- the trace ring's own message (issue 25, item 12) ------------------------

@pytest.mark.nosan  # AddressSanitizer aborts on an allocation this size
def test_a_trace_ring_too_big_to_allocate_is_named(cont, tmp_path):
    """A ring that fits size_t but not memory is named as the ring, not slots."""
    trace = tmp_path / "t.xctrace"
    records = 2**58
    with pytest.raises(engine.OutOfMemoryError) as info:
        engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                           trace_path=trace, trace_ring_records=records)
    assert str(info.value) == (
        f"cache open: no memory for the trace ring of {records} records of "
        f"{RECORD} bytes ({records * RECORD} bytes; trace_ring_records)")
    assert not trace.exists()
