"""Trace paths that are links or long names (docs/TRACE_FORMAT.md)."""

from __future__ import annotations

import errno
import os

import pytest

import engine
from engine import alloc
from faults.loops import Baseline, Run, alloc_hooks, countdown
from tests import k3

HEADER = 48
RECORD = 24


@pytest.fixture
def cont(tmp_path):
    (tmp_path / "model").mkdir()
    c = k3.open_container(k3.write_k3_mini(tmp_path / "model"))
    yield c
    c.close()


def test_a_symlinked_trace_path_writes_the_link_target(cont, tmp_path):
    """A symlink at trace_path stays a link; the trace lands in the file it names."""
    runs = tmp_path / "runs"
    runs.mkdir()
    target = runs / "run1.xctrace"
    target.write_bytes(b"old" * 10)
    link = tmp_path / "latest.xctrace"
    link.symlink_to(target)
    cache = engine.ExpertCache(cont, n_slots=8, top_k=4, trace_path=link)
    cache.get(0, 3).release()
    cache.close()
    assert link.is_symlink()
    assert os.readlink(link) == str(target)
    assert target.stat().st_size == HEADER + RECORD
    assert target.read_bytes()[:8] == b"XCTRACE1"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "latest.xctrace", "model", "runs"]
    assert sorted(p.name for p in runs.iterdir()) == ["run1.xctrace"]


def test_a_dangling_relative_symlink_creates_its_target(cont, tmp_path):
    """A link to a file not there yet (relative to the link's folder) creates it."""
    runs = tmp_path / "runs"
    runs.mkdir()
    link = tmp_path / "latest.xctrace"
    link.symlink_to(os.path.join("runs", "run2.xctrace"))
    cache = engine.ExpertCache(cont, n_slots=8, top_k=4, trace_path=link)
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
        engine.ExpertCache(cont, n_slots=8, top_k=0, trace_path=link)
    assert link.is_symlink() and target.read_bytes() == b"keep me"
    assert sorted(p.name for p in runs.iterdir()) == ["run1.xctrace"]


def test_a_trace_name_at_the_length_limit_opens(cont, tmp_path):
    """A file name of 250 bytes is valid and opens."""
    name = "t" * 242 + ".xctrace"
    assert len(name) == 250
    trace = tmp_path / name
    cache = engine.ExpertCache(cont, n_slots=8, top_k=4, trace_path=trace)
    cache.get(0, 1).release()
    cache.close()
    assert trace.stat().st_size == HEADER + RECORD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", name]


def test_a_symlink_loop_fails_the_open_naming_eloop(cont, tmp_path):
    """Two links naming each other: XC_E_IO with ELOOP, as opening them would say."""
    a, b = tmp_path / "a.xctrace", tmp_path / "b.xctrace"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(engine.EngineIOError) as info:
        engine.ExpertCache(cont, n_slots=8, top_k=4, trace_path=a)
    assert str(info.value) == (
        f"cache open: cannot write trace file {a}: "
        f"{os.strerror(errno.ELOOP)} (errno {errno.ELOOP})")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.xctrace", "b.xctrace", "model"]


@pytest.mark.parametrize("long_name", [False, True])
def test_a_thread_start_failure_leaves_no_trace_file(cont, tmp_path,
                                                               long_name):
    """A thread-start failure leaves no trace file, whatever the name's length."""
    name = ("t" * 242 if long_name else "t") + ".xctrace"
    trace = tmp_path / name
    alloc.fail_thread_start(1)
    try:
        with pytest.raises(engine.OutOfMemoryError):
            engine.ExpertCache(cont, n_slots=8, top_k=4, io_threads=1,
                               trace_path=trace)
    finally:
        alloc.disarm_thread_start()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_allocation_countdown_over_a_symlinked_trace_open(cont, tmp_path):
    """Each failing allocation: OOM, link and target as they were, nothing leaked."""
    runs = tmp_path / "runs"
    runs.mkdir()
    target = runs / "run1.xctrace"
    target.write_bytes(b"keep me")
    link = tmp_path / "latest.xctrace"
    link.symlink_to(os.path.join("runs", "run1.xctrace"))
    base = Baseline.now()

    def op() -> engine.ExpertCache:
        return engine.ExpertCache(cont, n_slots=8, top_k=4, io_threads=1,
                                  trace_path=link)

    def check(run: Run) -> None:
        assert link.is_symlink() and os.readlink(link) == os.path.join(
            "runs", "run1.xctrace")
        assert sorted(p.name for p in runs.iterdir()) == ["run1.xctrace"]
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            "latest.xctrace", "model", "runs"]
        if run.error is None:
            run.result.close()
            assert target.stat().st_size == HEADER
        else:
            assert target.read_bytes() == b"keep me"
        base.assert_back(f"N={run.n}")

    arm, disarm = alloc_hooks()
    runs_done = countdown(op, arm, disarm, check, 200,
                          allowed=(engine.OutOfMemoryError,))
    assert len(runs_done) > 10 and runs_done[-1].error is None
