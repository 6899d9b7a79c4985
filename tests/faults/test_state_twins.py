"""State and counter contracts, checked by what the engine does.

Each test pins one contract a one-line engine bug breaks quietly (the
mutants of hunt/mutants/catalogue.py named in its docstring) by values
only: counters, slot states and holds, residents after a victim choice,
the class of an error, ``check()`` -- never a message's wording or a time.
k3-mini's expert e is the run [20608 + 1632 e, 22240 + 1632 e) of its shard.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import K3_LAYOUT
from xcache import engine
from xcache.engine import _lib
from xcache.faults.io import Fault, IOFaults
from xcache.faults.loops import k3_expected


@pytest.fixture()
def faults() -> Iterator[IOFaults]:
    """A fresh injector, closed after the test."""
    f = IOFaults()
    yield f
    f.close()


def _cache(c: engine.Container, n_slots: int = 8, **kw: Any) -> engine.ExpertCache:
    return engine.ExpertCache(c, **K3_LAYOUT, n_slots=n_slots, top_k=4,
                              batch_threads=1, **kw)


def _get(cache: engine.ExpertCache, e: int) -> bytes:
    with cache.get(0, e) as ex:
        return bytes(ex.data)


def _resident(cache: engine.ExpertCache) -> list[int]:
    return sorted(e for _, e in cache.resident())


def test_a_failed_load_counts_the_bytes_it_asked(k3_shard: Path,
                                                 faults: IOFaults) -> None:
    """An EIO on expert 0's one read: io_bytes 1,632 (M17)."""
    with engine.Container(str(k3_shard), io=faults.io) as c:
        cache = _cache(c)
        faults.arm(Fault("eio", nth=1))
        with pytest.raises(engine.EngineIOError):
            cache.get(0, 0)
        s = cache.stats()
        assert (s["io_bytes"], s["load_failures"], s["io_errors"]) == (1632, 1, 1)
        cache.check()
        cache.close()


def test_chunks_are_cut_at_file_offsets_and_count_the_bytes_asked(
        k3_shard: Path, faults: IOFaults) -> None:
    """4 KiB chunks: expert 2 is read as 704 + 928 bytes, cut at 24,576 (M10, M11)."""
    with engine.Container(str(k3_shard), io=faults.io) as c:
        cache = _cache(c, chunk_bytes=4096)
        faults.arm(Fault("eio", nth=1))
        with pytest.raises(engine.EngineIOError):
            cache.get(0, 2)
        assert cache.stats()["io_bytes"] == 704
        faults.arm(Fault("eof", nth=2))
        with pytest.raises(engine.ShortReadError):
            cache.get(0, 2)
        assert cache.stats()["io_bytes"] == 704 + 1632
        faults.disarm()
        assert _get(cache, 2) == k3_expected(2)
        faults.arm(Fault("eof", nth=2))  # expert 0 is one chunk: one pread
        assert _get(cache, 0) == k3_expected(0)
        s = cache.stats()
        assert (s["io_bytes"], s["short_reads"], s["io_errors"]) == (
            704 + 3 * 1632, 1, 1)
        cache.check()
        cache.close()


def test_reset_stats_clears_the_unused_prefetch_marks(k3_shard: Path) -> None:
    """After a batch and reset_stats no slot is marked; a hit is no first use (M21)."""
    with engine.Container(str(k3_shard)) as c:
        cache = _cache(c)
        assert cache.getmany([(0, e) for e in range(4)]) == 4
        cache.reset_stats()
        assert [s["unused_mark"] for s in cache.slots()] == [False] * 8
        assert cache.stats()["prefetch_unused_resident"] == 0
        cache.check()
        _get(cache, 0)
        s = cache.stats()
        assert (s["hits"], s["prefetch_first_uses"], s["adjusted_hits_exact"]) == (
            1, 0, 1)
        cache.close()


def _ref_get(cache: engine.ExpertCache, e: int) -> Any:
    ref = _lib.ffi().new("xc_ref *")
    _lib.check(_lib.lib().xc_cache_get(cache._ptr, 0, e, ref))
    return ref


def _ref_release(cache: engine.ExpertCache, ref: Any) -> None:
    _lib.check(_lib.lib().xc_cache_release(cache._ptr, ref))


def _holds(cache: engine.ExpertCache) -> list[tuple[int, int]]:
    return [(s["key"][1], s["holds"]) for s in cache.slots() if s["holds"]]


def test_release_gives_the_hold_back_and_a_stale_reference_takes_none(
        k3_shard: Path) -> None:
    """xc_cache_release drops the hold (M27); a reference whose slot was
    republished is refused and the new holder keeps its hold (M12)."""
    with engine.Container(str(k3_shard)) as c:
        cache = _cache(c, n_slots=5)
        a = _ref_get(cache, 0)
        assert _holds(cache) == [(0, 1)]
        _ref_release(cache, a)
        assert _holds(cache) == []
        for e in range(1, 6):  # expert 5 takes slot 0, expert 0's
            _get(cache, e)
        b = _ref_get(cache, 5)
        assert b.slot == a.slot == 0
        with pytest.raises(engine.MisuseError):
            _ref_release(cache, a)
        assert _holds(cache) == [(5, 1)]
        _ref_release(cache, b)
        assert _holds(cache) == []
        cache.check()
        cache.close()


def test_a_spent_reference_takes_no_other_holders_hold(k3_shard: Path) -> None:
    """A reference given back twice is refused while another hold of the same
    publish keeps the slot held (a second release never takes that hold)."""
    with engine.Container(str(k3_shard)) as c:
        cache = _cache(c, n_slots=5)
        a = _ref_get(cache, 0)
        _ref_release(cache, a)
        b = _ref_get(cache, 0)  # a hit: the same slot and generation as a
        assert (b.slot, b.generation) == (a.slot, a.generation)
        with pytest.raises(engine.MisuseError, match="released twice"):
            _ref_release(cache, a)
        assert _holds(cache) == [(0, 1)]
        assert a.data == _lib.ffi().NULL  # spent by its release
        _ref_release(cache, b)
        assert _holds(cache) == []
        cache.check()
        cache.close()


def test_a_key_named_twice_in_a_batch_is_touched_once(k3_shard: Path) -> None:
    """Batch [0, 1, 0] over residents: expert 0 stays older than 1 (M30)."""
    with engine.Container(str(k3_shard)) as c:
        cache = _cache(c, n_slots=5)
        for e in range(5):
            _get(cache, e)
        assert cache.getmany([(0, 0), (0, 1), (0, 0)]) == 0
        for e in range(5, 9):
            _get(cache, e)
        assert _resident(cache) == [1, 5, 6, 7, 8]
        cache.check()
        cache.close()


def test_a_prefetched_expert_is_published_with_freq_zero(k3_shard: Path) -> None:
    """LFU: the expert a batch loaded is the next victim, not the oldest (M13)."""
    with engine.Container(str(k3_shard)) as c:
        cache = _cache(c, n_slots=5, policy="lfu")
        for e in range(1, 5):
            _get(cache, e)
        assert cache.getmany([(0, 0)]) == 1
        _get(cache, 5)
        assert _resident(cache) == [1, 2, 3, 4, 5]
        cache.check()
        cache.close()


def test_a_stream_keeps_the_ticks_stamped_in_the_order_given(
        k3_shard: Path) -> None:
    """A stream miss claimed by a get stays younger than the earlier miss (M38)."""
    with engine.Container(str(k3_shard)) as c:
        cache = _cache(c, n_slots=5)
        for e in range(3):
            _get(cache, e)
        with cache.stream([(0, 3), (0, 4)]) as st:
            assert _get(cache, 4) == k3_expected(4)  # claims 4's read
            got = []
            for ex in st:
                with ex:
                    got.append(ex.key[1])
        assert got == [4, 3]
        for e in range(5, 9):
            _get(cache, e)
        assert _resident(cache) == [4, 5, 6, 7, 8]
        cache.check()
        cache.close()


@pytest.mark.parametrize("policy", ["arc", "s3fifo"])
def test_an_untold_insert_is_no_candidate_until_it_is_the_only_one(
        k3_shard: Path, policy: str) -> None:
    """A claimed stream miss waits for the earlier one; a victim only alone (M03)."""
    with engine.Container(str(k3_shard)) as c:
        cache = _cache(c, n_slots=5, policy=policy)
        for e in range(3):
            _get(cache, e)
        st = cache.stream([(0, 3), (0, 4)])
        _get(cache, 4)
        ex = next(st)
        assert ex.key == (0, 4)
        ex.release()
        cache.check()
        for e in range(3):
            cache.pin(0, e)
        assert _get(cache, 5) == k3_expected(5)
        assert cache.stats()["evictions"] == 1
        cache.check()
        rest = [ex.key[1] for ex in st]
        assert rest == [3]
        assert _resident(cache) == [0, 1, 2, 3, 5]
        cache.check()
        st.close()
        cache.close()


def test_a_widened_read_ending_before_the_payload_fails(
        k3_shard: Path, faults: IOFaults) -> None:
    """O_DIRECT: end of file in expert 4's first window is a short read (M08)."""
    with engine.Container(str(k3_shard), direct=True, io=faults.io) as c:
        if not c.direct_active:  # pragma: no cover - filesystem without O_DIRECT
            pytest.skip("the filesystem refuses O_DIRECT")
        cache = _cache(c)
        faults.arm(Fault("eof", nth=1))
        with pytest.raises(engine.ShortReadError):
            cache.get(0, 4)
        s = cache.stats()
        assert (s["io_bytes"], s["short_reads"], s["payload_bytes"]) == (8192, 1, 0)
        assert _resident(cache) == []
        faults.disarm()
        assert _get(cache, 4) == k3_expected(4)
        cache.check()
        cache.close()
