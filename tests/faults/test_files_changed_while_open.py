"""Files truncated, shrunk, replaced or removed while a container is open (F22-F27)."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.helpers import DATA_START, EXPERT_BYTES, FILE_BYTES, K3_LAYOUT
from xcache import engine
from xcache.faults import corrupt
from xcache.faults.io import Fault, IOFaults
from xcache.faults.loops import Baseline, k3_expected
from xcache.oracle.cache import CacheModel
from xcache.oracle.cache_types import COUNTERS
from xcache.oracle.errors import ShortRead

CUT = DATA_START + EXPERT_BYTES * 20  # 53,248: expert 20's payload


def _counters(stats: dict) -> dict:
    return {k: stats[k] for k in COUNTERS}


@pytest.mark.parametrize("threads", [1, 3])
def test_truncated_shard_publishes_nothing(k3_copy, threads):
    """Shard cut at expert 20 while open: 20-23 fail as short reads, 0 survives."""
    assert CUT == 53248
    base = Baseline.now()
    c = engine.Container(str(k3_copy))
    cache = engine.ExpertCache(c, **K3_LAYOUT,
                               n_slots=8, top_k=4, batch_threads=threads)
    model = CacheModel([0], 24, 4, expert_bytes=1632, n_slots=8)
    cache.get(0, 0).release()
    model.release(model.get(0, 0))
    corrupt.truncate_at(k3_copy, CUT)
    before = cache.stats()

    keys = [(0, 20), (0, 21), (0, 22), (0, 23)]
    assert cache.getmany(keys) == 0
    assert model.getmany(keys, failures=dict.fromkeys(keys, "short")) == 0
    after = cache.stats()
    assert all(k not in cache.resident() for k in keys)
    assert all(s["state"] != "inflight" for s in cache.slots())
    assert after["payload_bytes"] == before["payload_bytes"] == 1632
    assert (after["load_failures"], after["short_reads"]) == (4, 4)
    assert after["io_errors"] == 0
    assert _counters(after) == _counters(model.stats())
    cache.check()

    with pytest.raises(engine.ShortReadError) as info:
        cache.get(0, 23)
    e = info.value
    assert (e.layer, e.expert, e.kind) == (0, 23, "short_read")
    assert "layer 0 expert 23" in str(e) and str(k3_copy) in str(e)
    assert e.offset == DATA_START + 23 * EXPERT_BYTES
    assert "resized from 59776 to 53248 bytes" in str(e)
    with pytest.raises(ShortRead):
        model.get(0, 23, fail="short")
    last = cache.stats()
    assert (last["requests"], last["misses"], last["hits"]) == (
        after["requests"] + 1, after["misses"] + 1, after["hits"])
    assert (last["load_failures"], last["short_reads"]) == (5, 5)
    assert _counters(last) == _counters(model.stats())
    assert cache.resident() == {(0, 0)} == model.resident()
    with cache.get(0, 0) as x:
        assert x.data.tobytes() == k3_expected(0)
    cache.check()
    cache.close()
    c.close()
    base.assert_back("truncated shard")


def test_shrunk_in_place_is_a_short_read_naming_file_and_position(k3_copy):
    """ftruncate while open: a read past the new end is a ShortReadError at its byte."""
    with engine.Container(str(k3_copy)) as c:
        cache = engine.ExpertCache(c, **K3_LAYOUT, n_slots=8, top_k=4)
        corrupt.shrink_in_place(k3_copy, DATA_START + 5 * EXPERT_BYTES + 100)
        with pytest.raises(engine.ShortReadError) as info:
            cache.get(0, 5)
        at = DATA_START + 5 * EXPERT_BYTES
        assert info.value.offset == at + 100
        assert f"100 of 1632 bytes at byte {at}" in str(info.value)
        assert str(k3_copy) in str(info.value)
        with cache.get(0, 4) as x:  # below the new end: still the old bytes
            assert x.data.tobytes() == k3_expected(4)
        assert cache.resident() == {(0, 4)}
        with pytest.raises(engine.FileChangedError, match="resized from 59776"):
            c.verify_unchanged()
        cache.check()
        cache.close()


def test_replaced_file_keeps_serving_the_old_inode(k3_copy):
    """Renamed over while open: reads keep the old inode; verify_unchanged says so."""
    base = Baseline.now()
    with engine.Container(str(k3_copy)) as c:
        cache = engine.ExpertCache(c, **K3_LAYOUT, n_slots=8, top_k=4)
        c.verify_unchanged()
        old = k3_copy.read_bytes()
        corrupt.replace_same_size(k3_copy)
        new = k3_copy.read_bytes()  # every data byte inverted, the header kept
        assert new[:DATA_START] == old[:DATA_START] and len(new) == len(old)
        assert all(a ^ b == 0xFF for a, b in zip(old[DATA_START:],
                                                 new[DATA_START:], strict=True))
        at = DATA_START + 6 * EXPERT_BYTES
        assert new[at:at + EXPERT_BYTES] != k3_expected(6)  # the path's bytes
        with cache.get(0, 6) as x:
            assert x.data.tobytes() == k3_expected(6)  # the validated file
        with pytest.raises(engine.FileChangedError) as info:
            c.verify_unchanged()
        assert info.value.kind == "changed" and str(k3_copy) in str(info.value)
        assert "was replaced by another file" in str(info.value)
        assert info.value.offset == FILE_BYTES
        cache.close()
    base.assert_back("replaced")


@pytest.mark.parametrize("threads", [1, 3])
def test_replaced_file_fails_loads_under_verify(k3_copy, threads):
    """verify=True: a load after a replacement fails FileChangedError, unpublished."""
    with engine.Container(str(k3_copy), verify=True) as c:
        cache = engine.ExpertCache(c, **K3_LAYOUT,
                                   n_slots=8, top_k=4, batch_threads=threads)
        model = CacheModel([0], 24, 4, expert_bytes=1632, n_slots=8)
        cache.get(0, 0).release()
        model.release(model.get(0, 0))
        corrupt.replace_same_size(k3_copy)
        with pytest.raises(engine.FileChangedError) as info:
            cache.get(0, 7)
        assert (info.value.layer, info.value.expert) == (0, 7)
        assert "layer 0 expert 7: not published" in str(info.value)
        assert str(k3_copy) in str(info.value)
        with pytest.raises(OSError):
            model.get(0, 7, fail="io")
        keys = [(0, 8), (0, 9)]
        assert cache.getmany(keys) == 0
        model.getmany(keys, failures=dict.fromkeys(keys, "io"))
        st = cache.stats()
        assert (st["load_failures"], st["io_errors"], st["short_reads"]) == (3, 3, 0)
        assert _counters(st) == _counters(model.stats())
        assert cache.resident() == {(0, 0)}
        with cache.get(0, 0) as x:  # resident before the change: a hit
            assert x.data.tobytes() == k3_expected(0)
        cache.check()
        cache.close()


def test_failed_read_of_a_replaced_file_is_changed(k3_copy):
    """A read failing after the path was replaced is FileChangedError, not short."""
    with IOFaults() as faults:
        with engine.Container(str(k3_copy), io=faults) as c:
            cache = engine.ExpertCache(c, **K3_LAYOUT, n_slots=8, top_k=4)
            corrupt.replace_same_size(k3_copy)
            faults.arm(Fault("eof", nth=1))
            with pytest.raises(engine.FileChangedError) as info:
                cache.get(0, 3)
            assert "read failed and" in str(info.value)
            assert "was replaced by another file" in str(info.value)
            st = cache.stats()
            assert (st["load_failures"], st["io_errors"]) == (1, 1)
            cache.check()
            cache.close()


def test_removed_file_is_reported(k3_copy):
    """Unlinked while open: reads still work; verify_unchanged says it was removed."""
    with engine.Container(str(k3_copy)) as c:
        cache = engine.ExpertCache(c, **K3_LAYOUT, n_slots=8, top_k=4)
        os.remove(k3_copy)
        with cache.get(0, 2) as x:
            assert x.data.tobytes() == k3_expected(2)
        with pytest.raises(engine.FileChangedError, match="was removed") as info:
            c.verify_unchanged()
        assert info.value.offset is None
        cache.close()


def test_rewritten_in_place_is_caught_by_verify(k3_copy, tmp_path):
    """Same inode and size, new bytes and mtime: verify=True refuses to publish them."""
    with engine.Container(str(k3_copy), verify=True) as c:
        cache = engine.ExpertCache(c, **K3_LAYOUT, n_slots=8, top_k=4)
        other = tmp_path / "other"
        shutil.copyfile(k3_copy, other)
        with open(k3_copy, "r+b") as f:
            f.seek(DATA_START)
            f.write(bytes(b ^ 0xFF for b in other.read_bytes()[DATA_START:]))
        st = os.stat(k3_copy)
        os.utime(k3_copy, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        with pytest.raises(engine.FileChangedError, match="was modified"):
            cache.get(0, 1)
        with pytest.raises(engine.FileChangedError, match="was modified"):
            c.verify_unchanged()
        assert cache.resident() == set()
        cache.check()
        cache.close()
