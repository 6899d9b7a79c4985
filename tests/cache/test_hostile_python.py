"""Hostile use of the Python face: no use-after-free, no lost hold, no hang.

Each test is a way a user can misuse the cache from plain Python (no ctypes
or cffi tricks) that once crashed, read freed memory, dropped another
holder's hold or hung (issue 15 items 1-5); docs/CACHE.md "Threads, fork
and lifetimes" states the rules they check.  The ones that crashed or hung
run in a child interpreter with a generous timeout, so that a crash or a
hang is a failure, not the end of the run.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from tests.helpers import K3_LAYOUT, ROOT, expert_bytes, open_container
from xcache import engine
from xcache.engine import _lib


def run_child(code: str, k3: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (engine, K3_LAYOUT and K3 given)."""
    prelude = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
               "import gc, os, threading\n"
               "from xcache import engine\n"
               "from tests.helpers import K3_LAYOUT, expert_bytes\n"
               f"K3 = {str(k3)!r}\n")
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def test_a_view_outlives_its_collected_cache(k3_shard):
    """A view returned from a function whose cache was collected shows its bytes."""
    r = run_child("""
        def f():
            c = engine.ExpertCache(engine.Container(K3), **K3_LAYOUT,
                                   n_slots=64, top_k=4)
            return c.get(0, 3).data
        v = f()
        gc.collect()
        junk = [bytearray(1 << 20) for _ in range(32)]  # reuse freed memory
        print(bytes(v) == expert_bytes(__import__("pathlib").Path(K3), 3),
              int(v.sum()) == sum(expert_bytes(__import__("pathlib").Path(K3), 3)))
    """, k3_shard)
    assert (r.returncode, r.stdout, r.stderr) == (0, "True True\n", "")


def test_a_view_survives_close_and_frees_the_arena_last(k3_shard):
    """After close() a view reads its expert's bytes; dropping it frees the arena."""
    lib = _lib.lib()
    cont = open_container(k3_shard)
    gc.collect()  # what earlier tests left is freed before counting
    live = lib.xc_alloc_live()
    c = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4)
    x = c.get(0, 3)
    views = [x.data, *x.tensors.values()]
    c.close()
    gc.collect()
    assert lib.xc_alloc_live() == live + 2  # the arena: its record and bytes
    assert bytes(views[0]) == expert_bytes(k3_shard, 3)
    assert b"".join(v.tobytes() for v in views[1:]) == expert_bytes(k3_shard, 3)
    assert not views[0].flags.writeable
    del views, x
    gc.collect()
    assert lib.xc_alloc_live() == live
    cont.close()


def test_close_waits_for_gets_in_progress(k3_shard):
    """close() under 8 threads in get/release: each ends with 'the cache is closed'."""
    r = run_child("""
        ends = []
        for _ in range(10):
            cont = engine.Container(K3)
            c = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=12, top_k=4)
            go = threading.Barrier(9)
            def worker(seed):
                go.wait()
                i = seed
                try:
                    while True:  # misses: reads are writing into the arena
                        x = c.get(0, i % 24)
                        x.data.sum()
                        x.release()
                        i += 7
                except engine.MisuseError as e:
                    ends.append(str(e))
            ts = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
            for t in ts:
                t.start()
            go.wait()
            for _ in range(3):
                c.getmany([(0, 1), (0, 5)])
            c.close()
            for t in ts:
                t.join()
            cont.close()
        print(sorted(set(ends)), len(ends))
    """, k3_shard)
    assert (r.returncode, r.stdout, r.stderr) == (
        0, "['the cache is closed'] 80\n", "")


def test_one_stream_from_two_threads_and_closed_under_next(k3_shard):
    """Two threads share one stream while a third closes it: each key once, no crash."""
    r = run_child("""
        from xcache.faults.io import Fault, IOFaults
        ok = True
        with IOFaults() as f:
            f.arm(Fault("delay", persistent=True, arg=2000))  # reads are slow
            cont = engine.Container(K3, io=f)
            for _ in range(30):
                c = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=14,
                                       top_k=4, io_threads=2)
                st = c.stream([(0, e) for e in range(12)])
                got, first = [], threading.Event()
                def take():
                    for x in st:
                        got.append(x.key)
                        x.release()
                        first.set()
                ts = [threading.Thread(target=take) for _ in range(2)]
                for t in ts:
                    t.start()
                first.wait(60)
                st.close()  # while the others wait in next() for a read
                for t in ts:
                    t.join()
                ok &= len(got) == len(set(got)) <= 12
                c.check()
                ok &= all(s["holds"] == 0 for s in c.slots())
                c.close()
            cont.close()
        print(ok)
    """, k3_shard, timeout=300)
    assert (r.returncode, r.stdout, r.stderr) == (0, "True\n", "")


def test_concurrent_double_release_gives_back_exactly_one_hold(k3_shard):
    """Four threads release one Expert at once: one succeeds, three get MisuseError."""
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # let threads interleave between bytecodes
    try:
        with open_container(k3_shard) as cont:
            c = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4)
            wins = errors = 0
            for _ in range(500):
                other = c.get(0, 3)  # another holder of the same slot
                x = c.get(0, 3)
                go = threading.Barrier(4)
                out: list[str] = []

                def rel(x=x, go=go, out=out):
                    go.wait()
                    try:
                        x.release()
                        out.append("ok")
                    except engine.MisuseError as e:
                        out.append(str(e))

                ts = [threading.Thread(target=rel) for _ in range(4)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                wins += out.count("ok")
                errors += out.count("expert (0, 3) was released")
                assert c.slots()[other.slot]["holds"] == 1
                other.release()
            c.close()
    finally:
        sys.setswitchinterval(switch)
    assert (wins, errors) == (500, 1500)


# GCC's AddressSanitizer allocator is not fork-safe: a lock one of the
# parent's threads held at fork() stays held in the child, whose next
# allocation of that size (a new thread's start) then waits forever
# (seen under load in CI); glibc's malloc resets its locks at fork
@pytest.mark.nosan
def test_fork_child_refuses_and_never_hangs(k3_shard):
    """In a fork() child every call is MisuseError, close() a no-op, exit prompt."""
    r = run_child("""
        cont = engine.Container(K3)
        c = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                               io_threads=2)
        held = c.get(0, 1)
        c.prefetch([(0, 2), (0, 3)])
        st = c.stream([(0, 4), (0, 5)])
        pid = os.fork()
        if pid == 0:
            lines = []
            for call in (lambda: c.get(0, 1), c.drain, c.stats,
                         lambda: held.data, held.release, lambda: next(st)):
                try:
                    call()
                    lines.append("no error")
                except engine.MisuseError as e:
                    lines.append(str(e).split(";")[1].strip()[:22])
                except StopIteration:
                    lines.append("stop")
            c.close()
            c.close()
            print(lines, flush=True)
            d = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4)
            print(bytes(d.get(0, 6).data) == expert_bytes(
                __import__("pathlib").Path(K3), 6), flush=True)
            sys.exit(0)  # caches alive: interpreter exit must not hang
        _, status = os.waitpid(pid, 0)
        c.drain()
        print("parent", os.waitstatus_to_exitcode(status),
              bytes(held.data) == expert_bytes(__import__("pathlib").Path(K3), 1))
        st.close()
        c.close()
    """, k3_shard, timeout=60)
    child = "this is a child proces"
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.splitlines() == [
        str([child] * 5 + ["stop"]), "True", "parent 0 True"]
