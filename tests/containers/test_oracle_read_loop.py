"""The oracle backend's model of the C read loop under a persistent partial fault.

A persistent ``partial`` fault makes every pread return at most ``arg``
bytes, so the C loop makes ``ceil(n / arg)`` preads for ``n`` bytes (one more,
returning 0, when the file ends first).  The gate's oracle backend models
each pread; on huge-sparse's 44 MB experts that was 6.3 M Python preads per
load at ``arg`` 7, and chunk-faults outlived its timeout.  Once only such a
fault can act, the model reads the rest at once and counts the preads: the
result, the failure and every fault's pread count must equal the
step-by-step model's, with one real read.
"""

from __future__ import annotations

import os
import random

import pytest

from xcache.gate.containers import make_target
from xcache.oracle import read_path
from xcache.oracle.reading_cache import ReadingCache

MIB = 1 << 20


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    """An oracle backend over k3-mini (only its read loop is used here)."""
    work = tmp_path_factory.mktemp("oracle-loop")
    target = make_target("k3-mini", work)
    return ReadingCache(target.pristine, target.layout,
                        target.quantities["expert_bytes"], {"n_slots": 8})


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    """(fd, bytes) of a 1 MiB file of random bytes."""
    path = tmp_path_factory.mktemp("oracle-loop-data") / "blob"
    want = random.Random(7).randbytes(MIB)
    path.write_bytes(want)
    fd = os.open(path, os.O_RDONLY)
    yield fd, want
    os.close(fd)


def _arm(b: ReadingCache, faults: list[dict | None]) -> None:
    b.faults = [None if f is None else {"nth": 1, "persistent": False, "arg": 0,
                                        **f, "reads": 0} for f in faults]


def _step_by_step(b: ReadingCache, monkeypatch, fd, offset, n):
    """The model with the shortcut off: one modelled pread at a time."""
    with monkeypatch.context() as m:
        m.setattr(ReadingCache, "_steady_limit", lambda self: None)
        return b._read_full(fd, offset, n)


CASES = [
    # (faults, offset, n): a persistent partial from the first or a later pread,
    # with an earlier one-shot fault, in the second injector, two at once, and
    # reads that meet end of file (the file is 1 MiB)
    ([{"fault": "partial", "arg": 7, "persistent": True}, None], 0, MIB),
    ([{"fault": "partial", "arg": 4096, "persistent": True, "nth": 3}, None],
     5, 300_001),
    ([{"fault": "partial", "arg": 10, "nth": 2},
      {"fault": "partial", "arg": 999, "persistent": True}], 17, 200_000),
    ([{"fault": "partial", "arg": 64, "persistent": True},
      {"fault": "partial", "arg": 9, "persistent": True, "nth": 4}], 0, 100_000),
    ([{"fault": "partial", "arg": 7, "persistent": True}, None], MIB - 20, 20),
    ([{"fault": "partial", "arg": 7, "persistent": True}, None], MIB - 10, 20),
    ([{"fault": "partial", "arg": 7, "persistent": True}, None], MIB - 14, 20),
    ([{"fault": "partial", "arg": 7, "persistent": True}, None], MIB, 20),
    ([{"fault": "delay", "arg": 1, "persistent": True},
      {"fault": "partial", "arg": 300, "persistent": True}], 1, 90_000),
]


@pytest.mark.parametrize(("faults", "offset", "n"), CASES)
def test_shortcut_equals_the_step_by_step_model(backend, data_file, monkeypatch,
                                                faults, offset, n):
    """Same bytes, failure and pread counts as one modelled pread at a time."""
    fd, want = data_file
    _arm(backend, faults)
    slow = _step_by_step(backend, monkeypatch, fd, offset, n)
    slow_reads = [f and f["reads"] for f in backend.faults]
    _arm(backend, faults)
    calls = []
    real = os.pread
    monkeypatch.setattr(read_path.os, "pread",
                        lambda *a: calls.append(a) or real(*a))
    fast = backend._read_full(fd, offset, n)
    assert fast == slow
    assert [f and f["reads"] for f in backend.faults] == slow_reads
    if fast[1] is None:
        assert fast[0] == want[offset:offset + n]
    # one modelled pread per pread until the last fault still to fire has
    # fired, then one read for the rest
    assert len(calls) <= max(f.get("nth", 1) for f in faults if f) + 1


def test_a_persistent_partial_load_counts_ceil_n_over_arg_preads(backend, data_file):
    """1 MiB at 7 bytes a pread: 149,797 preads counted, the bytes exact."""
    fd, want = data_file
    _arm(backend, [{"fault": "partial", "arg": 7, "persistent": True}, None])
    assert backend._read_full(fd, 0, MIB) == (want, None)
    assert backend.faults[0]["reads"] == -(-MIB // 7) == 149_797
