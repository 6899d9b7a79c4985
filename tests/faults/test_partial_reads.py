"""Partial reads that end short: every read path fails the load, by behaviour.

docs/CACHE.md "Reads": each piece of a load (a chunk of a contiguous run, a
tensor, an O_DIRECT window) must arrive whole; a piece that ends short fails
the load even if a later read would make the total add up, the first failed
piece ends the load (later pieces are not asked for), and the slot goes back
to EMPTY with ``load_failures`` and ``short_reads`` counted.  These tests
check that by what the engine does -- the exception class and its
(layer, expert, offset), the reads asked of io, ``io_bytes``, the slot
states, the bytes of the other residents, ``check()`` -- never by an error
message's wording.

Two injectors are chained (``IOFaults(inner)``): the outer one makes a read
return fewer bytes than asked (``partial``), the inner one makes the read
that continues it meet end of file (``eof``); every later read is normal, so
a loop that retried, or went on to the next piece, would make the bytes
count up.  k3-mini's expert e starts at byte 20,608 + 1,632 e; with
``chunk_bytes`` 512 expert 3 ([25504, 27136)) is read in chunks of 96, 512,
512 and 512 bytes, cut at 25,600, 26,112 and 26,624.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import K3_LAYOUT
from xcache import engine
from xcache.faults.io import Fault, IOFaults
from xcache.faults.loops import k3_expected

#: Experts made resident before the faulted load, oldest first: the load's
#: victim under LRU is the first of them, in slot 0.
RESIDENTS = [(0, 10), (0, 11), (0, 12), (0, 13)]


@dataclass(frozen=True)
class Case:
    """One short piece: where the faults fall and what the engine must report."""

    name: str
    key: int                  # the expert (layer 0) whose load meets the faults
    chunk_bytes: int
    direct: bool
    partial_nth: int          # outer injector: this read returns partial_bytes
    partial_bytes: int
    eof_nth: int              # inner injector: this read returns 0
    offset: int               # the error's offset: where the file "ended"
    reads: int                # preads asked of io by the load
    io_bytes: int             # bytes asked of io by the load


CASES = [
    # the middle chunk [25600, 26112): 100 bytes, then end of file
    Case("mid-chunk", 3, 512, False, 2, 100, 3, 25700, 3, 96 + 512),
    # the third chunk [26112, 26624) ends at once; the fourth is never asked
    Case("chunk-eof", 3, 512, False, 0, 0, 3, 26112, 3, 96 + 512 + 512),
    # one unchunked read of 1,632 bytes: 100 arrive, then end of file
    Case("unchunked", 3, 0, False, 1, 100, 2, 25604, 2, 1632),
    # a tensor-by-tensor load would be per tensor; k3-mini is contiguous.
    # O_DIRECT: expert 2 [23872, 25504) widens to [20480, 28672); the
    # first aligned block arrives, the second meets end of file
    Case("direct", 2, 0, True, 1, 4096, 2, 24576, 2, 8192),
    # O_DIRECT in 4,096-byte chunks: the first chunk ends at once, so the
    # second (which would arrive whole) is never asked for
    Case("direct-chunked", 2, 4096, True, 0, 0, 1, 20480, 1, 4096),
]


@dataclass
class Rig:
    """A k3-mini cache over two chained injectors, primed with RESIDENTS."""

    outer: IOFaults
    inner: IOFaults
    container: engine.Container
    cache: engine.ExpertCache

    def arm(self, case: Case) -> None:
        """Arm the case's partial read (outer) and end of file (inner)."""
        if case.partial_nth:
            self.outer.arm(Fault("partial", nth=case.partial_nth,
                                 arg=case.partial_bytes))
        else:  # count the reads all the same: a partial read of every byte
            self.outer.arm(Fault("partial", nth=1, persistent=True, arg=1 << 30))
        self.inner.arm(Fault("eof", nth=case.eof_nth))


@pytest.fixture()
def rig_factory(k3_shard: Path) -> Iterator[Callable[..., Rig]]:
    """Build rigs; everything is closed after the test, in the right order."""
    made: list[Rig] = []

    def make(case: Case, **cache_kw: object) -> Rig:
        inner = IOFaults()
        outer = IOFaults(inner)
        cont = engine.Container(str(k3_shard), io=outer, direct=case.direct)
        if case.direct and not cont.direct_active:
            cont.close()
            outer.close()
            inner.close()
            pytest.skip(f"O_DIRECT is not available here: {cont.direct_note}")
        kw = {"n_slots": 4, "top_k": 2, "chunk_bytes": case.chunk_bytes,
              **cache_kw}
        cache = engine.ExpertCache(cont, **K3_LAYOUT, **kw)
        for key in RESIDENTS:
            cache.get(*key).release()
        cache.reset_stats()
        rig = Rig(outer, inner, cont, cache)
        made.append(rig)
        return rig

    yield make
    for rig in made:
        rig.cache.close()
        rig.container.close()
        rig.outer.close()
        rig.inner.close()


def assert_failed_cleanly(rig: Rig, case: Case, *, demand: bool) -> None:
    """The load failed: EMPTY slot, counters, residents intact, nothing more read."""
    c = rig.cache
    assert rig.outer.reads == case.reads, "pieces after the short one were read"
    assert rig.inner.fired == 1
    rig.outer.disarm()
    rig.inner.disarm()
    c.check()
    slots = c.slots()
    # the victim (the oldest resident, slot 0) was evicted; its slot is EMPTY
    assert [(s["state"], s["key"], s["holds"], s["pins"]) for s in slots] == [
        ("empty", None, 0, 0), ("ready", (0, 11), 0, 0),
        ("ready", (0, 12), 0, 0), ("ready", (0, 13), 0, 0)]
    st = c.stats()
    got = {k: st[k] for k in ("requests", "misses", "hits", "evictions",
                              "load_failures", "short_reads", "io_errors",
                              "payload_bytes", "io_bytes", "prefetch_loads",
                              "spec_loads")}
    assert got == {"requests": int(demand), "misses": int(demand), "hits": 0,
                   "evictions": 1, "load_failures": 1, "short_reads": 1,
                   "io_errors": 0, "payload_bytes": 0,
                   "io_bytes": case.io_bytes, "prefetch_loads": 0,
                   "spec_loads": 0}
    for key in RESIDENTS[1:]:  # the earlier residents' bytes are untouched
        with c.get(*key) as x:
            assert x.data.tobytes() == k3_expected(key[1])
    with c.get(0, case.key) as x:  # the next try reads it whole, in slot 0
        assert x.slot == 0
        assert x.data.tobytes() == k3_expected(case.key)
    c.check()


def assert_error(e: BaseException, case: Case) -> None:
    """A ShortReadError of the right expert at the byte where the file ended."""
    assert type(e) is engine.ShortReadError
    assert (e.layer, e.expert, e.offset) == (0, case.key, case.offset)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_get_fails_a_load_with_a_short_piece(rig_factory, case):
    """get: ShortReadError for the expert, nothing published, nothing more read."""
    rig = rig_factory(case)
    rig.arm(case)
    with pytest.raises(engine.EngineIOError) as ei:
        rig.cache.get(0, case.key)
    assert_error(ei.value, case)
    assert_failed_cleanly(rig, case, demand=True)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_getmany_publishes_nothing_for_a_short_piece(rig_factory, case, threads):
    """getmany: 0 published, the failure counted, the slot EMPTY."""
    rig = rig_factory(case, batch_threads=threads)
    rig.arm(case)
    assert rig.cache.getmany([(0, case.key)]) == 0
    assert_failed_cleanly(rig, case, demand=False)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_read_ahead_publishes_nothing_for_a_short_piece(rig_factory, case):
    """prefetch on a reader thread: one read started, none published."""
    rig = rig_factory(case, io_threads=1)
    rig.arm(case)
    assert rig.cache.prefetch([(0, case.key)]) == 1
    rig.cache.drain()
    assert_failed_cleanly(rig, case, demand=False)


@pytest.mark.parametrize("io_threads", [0, 1])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_stream_raises_for_a_short_piece(rig_factory, case, io_threads):
    """stream (consumer or reader reads it): nothing yielded, the error raised."""
    rig = rig_factory(case, io_threads=io_threads)
    rig.arm(case)
    yielded = []
    with pytest.raises(engine.EngineIOError) as ei:
        for x in rig.cache.stream([(0, case.key)]):
            yielded.append(x.data.tobytes())
            x.release()
    assert yielded == []
    assert_error(ei.value, case)
    assert_failed_cleanly(rig, case, demand=True)


def test_partial_reads_that_end_whole_are_not_short(rig_factory):
    """The same partial reads without the end of file: the load is exact."""
    case = CASES[0]
    rig = rig_factory(case)
    rig.outer.arm(Fault("partial", nth=1, persistent=True, arg=100))
    with rig.cache.get(0, case.key) as x:
        assert x.data.tobytes() == k3_expected(case.key)
    # chunks of 96, 512, 512, 512 bytes, 100 at a time: 1 + 6 + 6 + 6 reads
    assert rig.outer.reads == 19
    st = rig.cache.stats()
    assert (st["load_failures"], st["short_reads"], st["io_bytes"],
            st["payload_bytes"]) == (0, 0, 1632, 1632)
    rig.outer.disarm()
    rig.cache.check()
