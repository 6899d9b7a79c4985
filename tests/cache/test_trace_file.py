"""The trace file: opened last, as any writer opens its path (docs/TRACE_FORMAT.md)."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import signal
import threading

import pytest

from tests.helpers import K3_LAYOUT, open_container
from xcache import engine
from xcache.engine import alloc
from xcache.faults.loops import Baseline, Run, alloc_hooks, countdown
from xcache.oracle.traces import read_engine_trace

HEADER = 48
RECORD = 24


@pytest.fixture
def cont(k3_shard):
    c = open_container(k3_shard)
    yield c
    c.close()


def names(d) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def test_open_publishes_the_trace_and_leaves_no_temporary(cont, tmp_path):
    """After a successful open the trace is at its path with its header, alone."""
    d = tmp_path / "traces"
    d.mkdir()
    trace = d / "t.xctrace"
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, io_threads=1,
                               trace_path=trace)
    assert names(d) == ["t.xctrace"]
    assert trace.stat().st_size == HEADER
    cache.get(0, 5).release()
    cache.close()
    assert trace.stat().st_size == HEADER + RECORD
    assert names(d) == ["t.xctrace"]


def test_an_earlier_trace_is_replaced_only_by_a_successful_open(cont, tmp_path):
    """An earlier trace keeps its bytes until an open succeeds, then is replaced."""
    trace = tmp_path / "t.xctrace"
    trace.write_bytes(b"XCTRACE1" + b"x" * 992)
    with pytest.raises(engine.MisuseError):
        engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=0, trace_path=trace)
    assert trace.read_bytes() == b"XCTRACE1" + b"x" * 992
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, trace_path=trace)
    assert trace.stat().st_size == HEADER
    cache.close()
    header, records = read_engine_trace(trace)
    assert header.n_slots == 8 and len(records) == 0


def test_a_trace_path_that_is_a_directory_fails_the_open(cont, tmp_path):
    """A directory at the path: EISDIR, nothing created, threads joined."""
    target = tmp_path / "a_directory"
    target.mkdir()
    base = Baseline.now()
    with pytest.raises(engine.EngineIOError) as info:
        engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, batch_threads=2,
                           io_threads=2, trace_path=target)
    assert str(info.value) == (
        f"cache open: cannot write trace file {target}: "
        f"{os.strerror(errno.EISDIR)} (errno {errno.EISDIR})")
    assert names(tmp_path) == ["a_directory"]
    assert names(target) == []
    base.assert_back("rename failure")
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4)
    with cache.get(0, 1) as e:
        assert e.data.nbytes == 1632
    cache.close()


@contextlib.contextmanager
def file_size_limit(n: int):
    """Writes past byte n fail with EFBIG (RLIMIT_FSIZE, SIGXFSZ ignored) inside."""
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (n, old_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)


def test_a_header_that_cannot_be_written_removes_the_file_it_created(cont,
                                                                     tmp_path):
    """EFBIG on the header: EngineIOError naming it, and the new file is gone."""
    trace = tmp_path / "t.xctrace"
    base = Baseline.now()
    with file_size_limit(10), pytest.raises(engine.EngineIOError) as info:
        engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, io_threads=1,
                           trace_path=trace)
    assert str(info.value) == (
        f"cache open: cannot write trace file {trace}: "
        f"{os.strerror(errno.EFBIG)} (errno {errno.EFBIG})")
    assert names(tmp_path) == []
    base.assert_back("header failure")


def test_a_header_that_cannot_be_written_keeps_an_earlier_file(cont, tmp_path):
    """EFBIG on the header over an existing trace: the file stays, its length kept."""
    trace = tmp_path / "t.xctrace"
    trace.write_bytes(b"XCTRACE1" + b"x" * 92)
    with file_size_limit(10), pytest.raises(engine.EngineIOError):
        engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, trace_path=trace)
    data = trace.read_bytes()
    assert len(data) == 100
    assert data[:8] == b"XCTRACE1"  # the header's first 10 bytes went in
    assert data[10:] == b"x" * 90
    assert names(tmp_path) == ["t.xctrace"]


def test_a_fifo_is_written_in_place(cont, tmp_path):
    """A FIFO being read is a stream: the trace goes through it, nothing created."""
    fifo = tmp_path / "t.fifo"
    os.mkfifo(fifo)
    got = bytearray()
    # the reader is there before the open (one without is refused at once)
    rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)

    def drain() -> None:
        os.set_blocking(rfd, True)
        with open(rfd, "rb") as f:
            while chunk := f.read(4096):
                got.extend(chunk)

    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, trace_path=fifo)
    reader = threading.Thread(target=drain)
    reader.start()
    for e in (1, 2, 1):
        cache.get(0, e).release()
    cache.close()
    reader.join(timeout=30)
    assert not reader.is_alive()
    assert len(got) == HEADER + 3 * RECORD
    assert bytes(got[:8]) == b"XCTRACE1"
    assert names(tmp_path) == ["t.fifo"]


# -- paths that are links or long names ------------------------------------

def test_a_symlinked_trace_path_writes_the_link_target(cont, tmp_path):
    """A symlink at trace_path stays a link; the trace lands in the file it names."""
    runs = tmp_path / "runs"
    runs.mkdir()
    target = runs / "run1.xctrace"
    target.write_bytes(b"XCTRACE1" + b"old" * 10)
    link = tmp_path / "latest.xctrace"
    link.symlink_to(target)
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, trace_path=link)
    cache.get(0, 3).release()
    cache.close()
    assert link.is_symlink()
    assert os.readlink(link) == str(target)
    assert target.stat().st_size == HEADER + RECORD
    assert target.read_bytes()[:8] == b"XCTRACE1"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "latest.xctrace", "runs"]
    assert sorted(p.name for p in runs.iterdir()) == ["run1.xctrace"]


def test_a_dangling_relative_symlink_creates_its_target(cont, tmp_path):
    """A link to a file not there yet (relative to the link's folder) creates it."""
    runs = tmp_path / "runs"
    runs.mkdir()
    link = tmp_path / "latest.xctrace"
    link.symlink_to(os.path.join("runs", "run2.xctrace"))
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, trace_path=link)
    cache.close()
    assert link.is_symlink()
    assert (runs / "run2.xctrace").stat().st_size == HEADER
    assert sorted(p.name for p in runs.iterdir()) == ["run2.xctrace"]


def test_a_failed_open_through_a_symlink_leaves_target_and_link(cont, tmp_path):
    """An open that fails leaves the link and the bytes of its target as they were."""
    runs = tmp_path / "runs"
    runs.mkdir()
    target = runs / "run1.xctrace"
    target.write_bytes(b"keep me")
    link = tmp_path / "latest.xctrace"
    link.symlink_to(target)
    with pytest.raises(engine.MisuseError):
        engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=0, trace_path=link)
    assert link.is_symlink() and target.read_bytes() == b"keep me"
    assert sorted(p.name for p in runs.iterdir()) == ["run1.xctrace"]


def test_a_trace_name_at_the_length_limit_opens(cont, tmp_path):
    """A file name of 250 bytes is valid and opens."""
    name = "t" * 242 + ".xctrace"
    assert len(name) == 250
    trace = tmp_path / name
    cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, trace_path=trace)
    cache.get(0, 1).release()
    cache.close()
    assert trace.stat().st_size == HEADER + RECORD
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_symlink_loop_fails_the_open_naming_eloop(cont, tmp_path):
    """Two links naming each other: XC_E_IO with ELOOP, as opening them would say."""
    a, b = tmp_path / "a.xctrace", tmp_path / "b.xctrace"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(engine.EngineIOError) as info:
        engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, trace_path=a)
    assert str(info.value) == (
        f"cache open: cannot write trace file {a}: "
        f"{os.strerror(errno.ELOOP)} (errno {errno.ELOOP})")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.xctrace", "b.xctrace"]


@pytest.mark.parametrize("long_name", [False, True])
def test_a_thread_start_failure_leaves_no_trace_file(cont, tmp_path,
                                                               long_name):
    """A thread-start failure leaves no trace file, whatever the name's length."""
    name = ("t" * 242 if long_name else "t") + ".xctrace"
    trace = tmp_path / name
    alloc.fail_thread_start(1)
    try:
        with pytest.raises(engine.OutOfMemoryError):
            engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, io_threads=1,
                               trace_path=trace)
    finally:
        alloc.disarm_thread_start()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_allocation_countdown_over_a_symlinked_trace_open(cont, tmp_path):
    """Each failing allocation: OOM, link and target as they were, nothing leaked."""
    runs = tmp_path / "runs"
    runs.mkdir()
    target = runs / "run1.xctrace"
    target.write_bytes(b"XCTRACE1 keep me")
    link = tmp_path / "latest.xctrace"
    link.symlink_to(os.path.join("runs", "run1.xctrace"))
    base = Baseline.now()

    def op() -> engine.ExpertCache:
        return engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4, io_threads=1,
                                  trace_path=link)

    def check(run: Run) -> None:
        assert link.is_symlink() and os.readlink(link) == os.path.join(
            "runs", "run1.xctrace")
        assert sorted(p.name for p in runs.iterdir()) == ["run1.xctrace"]
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            "latest.xctrace", "runs"]
        if run.error is None:
            run.result.close()
            assert target.stat().st_size == HEADER
        else:
            assert target.read_bytes() == b"XCTRACE1 keep me"
        base.assert_back(f"N={run.n}")

    arm, disarm = alloc_hooks()
    runs_done = countdown(op, arm, disarm, check, 200,
                          allowed=(engine.OutOfMemoryError,))
    assert len(runs_done) > 10 and runs_done[-1].error is None
