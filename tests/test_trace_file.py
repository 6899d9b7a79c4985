"""The trace file appears only when the cache opens (docs/TRACE_FORMAT.md)."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import signal
import threading

import pytest

import engine
from faults.loops import Baseline
from oracle.traces import read_engine_trace
from tests import k3

HEADER = 48
RECORD = 24


@pytest.fixture
def cont(tmp_path):
    (tmp_path / "model").mkdir()
    c = k3.open_container(k3.write_k3_mini(tmp_path / "model"))
    yield c
    c.close()


def names(d) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def test_open_publishes_the_trace_and_leaves_no_temporary(cont, tmp_path):
    """After a successful open the trace is at its path with its header, alone."""
    d = tmp_path / "traces"
    d.mkdir()
    trace = d / "t.xctrace"
    cache = engine.ExpertCache(cont, n_slots=8, top_k=4, io_threads=1,
                               trace_path=trace)
    assert names(d) == ["t.xctrace"]
    assert trace.stat().st_size == HEADER
    cache.get(0, 5).release()
    cache.close()
    assert trace.stat().st_size == HEADER + RECORD
    assert names(d) == ["t.xctrace"]


def test_an_earlier_trace_is_replaced_only_by_a_successful_open(cont, tmp_path):
    """A file at the path keeps its bytes until an open succeeds, then is replaced."""
    trace = tmp_path / "t.xctrace"
    trace.write_bytes(b"x" * 1000)
    with pytest.raises(engine.MisuseError):
        engine.ExpertCache(cont, n_slots=8, top_k=0, trace_path=trace)
    assert trace.read_bytes() == b"x" * 1000
    cache = engine.ExpertCache(cont, n_slots=8, top_k=4, trace_path=trace)
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
        engine.ExpertCache(cont, n_slots=8, top_k=4, batch_threads=2,
                           io_threads=2, trace_path=target)
    assert str(info.value) == (
        f"cache open: cannot write trace file {target}: "
        f"{os.strerror(errno.EISDIR)} (errno {errno.EISDIR})")
    assert names(tmp_path) == ["a_directory", "model"]
    assert names(target) == []
    base.assert_back("rename failure")
    cache = engine.ExpertCache(cont, n_slots=8, top_k=4)
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
        engine.ExpertCache(cont, n_slots=8, top_k=4, io_threads=1,
                           trace_path=trace)
    assert str(info.value) == (
        f"cache open: cannot write trace file {trace}: "
        f"{os.strerror(errno.EFBIG)} (errno {errno.EFBIG})")
    assert names(tmp_path) == ["model"]
    base.assert_back("header failure")


def test_a_header_that_cannot_be_written_keeps_an_earlier_file(cont, tmp_path):
    """EFBIG on the header over an existing trace: the file stays, its length kept."""
    trace = tmp_path / "t.xctrace"
    trace.write_bytes(b"x" * 100)
    with file_size_limit(10), pytest.raises(engine.EngineIOError):
        engine.ExpertCache(cont, n_slots=8, top_k=4, trace_path=trace)
    data = trace.read_bytes()
    assert len(data) == 100
    assert data[:8] == b"XCTRACE1"  # the header's first 10 bytes went in
    assert data[10:] == b"x" * 90
    assert names(tmp_path) == ["model", "t.xctrace"]


def test_a_fifo_is_written_in_place(cont, tmp_path):
    """A FIFO at the path is a stream: the trace goes through it, nothing created."""
    fifo = tmp_path / "t.fifo"
    os.mkfifo(fifo)
    got = bytearray()

    def drain() -> None:
        with open(fifo, "rb") as f:
            while chunk := f.read(4096):
                got.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    cache = engine.ExpertCache(cont, n_slots=8, top_k=4, trace_path=fifo)
    for e in (1, 2, 1):
        cache.get(0, e).release()
    cache.close()
    reader.join(timeout=30)
    assert not reader.is_alive()
    assert len(got) == HEADER + 3 * RECORD
    assert bytes(got[:8]) == b"XCTRACE1"
    assert names(tmp_path) == ["model", "t.fifo"]

