"""verify=True sees a same-size rewrite with its mtime put back (F29)."""

from __future__ import annotations

import os
import time

import pytest

from tests.helpers import DATA_START, K3_LAYOUT, K3_TEMPLATE, K3_TENSORS
from xcache import engine


def _stamp(ns: int) -> str:
    """A timestamp as the engine prints it: seconds.nanoseconds."""
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


def _rewrite_and_put_mtime_back(path, before: os.stat_result) -> os.stat_result:
    """Flips the payload in place, same size, then restores atime and mtime.

    Repeats (bounded) until the status change time differs from before's:
    the kernel stamps times from a coarse clock, so a change within one tick
    of the open could keep it.
    """
    data = path.read_bytes()
    for _ in range(500):
        with open(path, "r+b") as f:
            f.seek(DATA_START)
            f.write(bytes(b ^ 0xFF for b in data[DATA_START:]))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        now = os.stat(path)
        if now.st_ctime_ns != before.st_ctime_ns:
            break
        time.sleep(0.01)
    assert (now.st_size, now.st_mtime_ns, now.st_ino) == (
        before.st_size, before.st_mtime_ns, before.st_ino)
    assert now.st_ctime_ns != before.st_ctime_ns
    return now


def _why(path, before: os.stat_result, now: os.stat_result) -> str:
    return (f"{path} was changed while the container was open (ctime "
            f"{_stamp(now.st_ctime_ns)}, was {_stamp(before.st_ctime_ns)}; "
            f"mtime as at open)")


def test_a_cache_load_refuses_a_rewrite_with_its_mtime_put_back(k3_copy):
    """Same inode, size and mtime, new bytes: the load fails, naming ctime."""
    with engine.Container(str(k3_copy), verify=True) as c:
        before = os.stat(k3_copy)
        cache = engine.ExpertCache(c, **K3_LAYOUT, n_slots=8, top_k=4)
        cache.get(0, 0).release()
        now = _rewrite_and_put_mtime_back(k3_copy, before)
        with pytest.raises(engine.FileChangedError) as ei:
            cache.get(0, 1)
        assert str(ei.value) == (
            f"layer 0 expert 1: not published: {_why(k3_copy, before, now)}")
        with pytest.raises(engine.FileChangedError) as ei:
            c.verify_unchanged()
        assert str(ei.value) == _why(k3_copy, before, now)
        assert cache.resident() == {(0, 0)}
        cache.check()
        cache.close()


def test_a_container_read_refuses_a_rewrite_with_its_mtime_put_back(k3_copy):
    """Container.read under verify=True checks the shard after it reads."""
    name = K3_TEMPLATE.format(layer=0, expert=3, tensor=K3_TENSORS[0])
    with engine.Container(str(k3_copy), verify=True) as c:
        before = os.stat(k3_copy)
        good = c.read_bytes(name)
        now = _rewrite_and_put_mtime_back(k3_copy, before)
        for read in (c.read, c.read_bytes):
            with pytest.raises(engine.FileChangedError) as ei:
                read(name)
            assert str(ei.value) == (
                f'tensor "{name}": not returned: {_why(k3_copy, before, now)}')
    with engine.Container(str(k3_copy)) as c:
        assert c.read_bytes(name) == bytes(b ^ 0xFF for b in good)


def test_a_container_read_without_verify_is_not_checked(k3_copy):
    """Without verify, Container.read serves what the file holds now, as documented."""
    name = K3_TEMPLATE.format(layer=0, expert=3, tensor=K3_TENSORS[0])
    with engine.Container(str(k3_copy)) as c:
        before = os.stat(k3_copy)
        good = c.read_bytes(name)
        _rewrite_and_put_mtime_back(k3_copy, before)
        assert c.read_bytes(name) == bytes(b ^ 0xFF for b in good)
