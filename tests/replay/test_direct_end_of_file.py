"""docs/CACHE.md "O_DIRECT and end of file": a read at end of file ends the piece.

The last expert of k3-mini ends 2,432 bytes into its widened 4,096-byte
O_DIRECT piece, where the file ends.  The first pread returns those bytes,
the whole payload; the second starts at end of file.  A ``partial`` fault
cutting that second pread to 100 bytes (a length the kernel refuses under
O_DIRECT before end of file) changes nothing: a read at end of file returns
no bytes whatever its length, and the expert, whole, is served by the
engine and the oracle alike.  The same cut on the first pread, before end
of file, is an I/O error for both.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from xcache import engine
from xcache.gate.backend_factory import EngineBackend, OracleBackend
from xcache.gate.containers import Target, make_target
from xcache.oracle.layout import expert_pieces
from xcache.oracle.reads import direct_reads

OPTS = {"n_slots": 6, "direct": True, "faults": True, "batch_threads": 1}
LAST = (0, 23)


@pytest.fixture(scope="module")
def k3(tmp_path_factory: pytest.TempPathFactory) -> Target:
    """The k3-mini preset as the gate generates it."""
    return make_target("k3-mini", tmp_path_factory.mktemp("k3-direct"))


def _both(k3: Target, tmp_path: Path) -> list[Any]:
    """The engine and the oracle over one copy, O_DIRECT where it works."""
    folder = tmp_path / "c"
    shutil.copytree(k3.pristine, folder)
    both = [EngineBackend(engine, folder, k3, OPTS), OracleBackend(folder, k3, OPTS)]
    if not all(b.values()["direct_active"] for b in both):
        for b in both:
            b.close()
        pytest.skip("the temporary folder's filesystem refuses O_DIRECT")
    return both


def test_the_last_experts_piece_runs_past_end_of_file(k3, tmp_path):
    """Its one widened piece is [57,344, 61,440); the file ends at 59,776."""
    orc = OracleBackend(k3.pristine, k3, {"n_slots": 6}).oracle
    try:
        lay = k3.layout
        pieces = expert_pieces(orc.reader, lay["expert_template"],
                               lay["tensors"], lay["n_experts"], *LAST)
        start, n = pieces[0].offset, sum(p.nbytes for p in pieces)
        assert (start, n) == (58_144, 1_632)
        assert [(w.offset, w.nbytes, w.need_end)
                for w in direct_reads(start, n)] == [(57_344, 4_096, 59_776)]
        assert os.path.getsize(pieces[0].shard) == 59_776
    finally:
        orc.close()


@pytest.mark.parametrize("arg", [100, 7, 512])
def test_a_cut_read_at_end_of_file_serves_the_whole_expert(k3, tmp_path, arg):
    """The second pread, at end of file, cut to ``arg`` bytes: both serve it."""
    for b in _both(k3, tmp_path):
        try:
            b.inject({"fault": "partial", "nth": 2, "arg": arg})
            assert b.get(*LAST) == k3.expected_bytes(*LAST)
            v = b.values()
            assert (v["io_bytes"], v["payload_bytes"], v["load_failures"],
                    v["short_reads"], v["io_errors"]) == (4096, 1632, 0, 0, 0)
            if isinstance(b, OracleBackend):
                assert b.oracle.faults[0]["reads"] == 2
        finally:
            b.close()


def test_the_same_cut_before_end_of_file_is_an_io_error(k3, tmp_path):
    """The first pread cut to 100 bytes (before end of file): an I/O error for both."""
    for b in _both(k3, tmp_path):
        try:
            b.inject({"fault": "partial", "nth": 1, "arg": 100})
            with pytest.raises(OSError):
                b.get(*LAST)
            v = b.values()
            assert (v["io_bytes"], v["payload_bytes"], v["load_failures"],
                    v["short_reads"], v["io_errors"]) == (4096, 0, 1, 0, 1)
            assert b.kind_of(_failure(b)) == "io"
        finally:
            b.close()


def _failure(b: Any) -> BaseException:
    """The exception a get of the last expert raises now (its read cut again)."""
    b.inject({"fault": "partial", "nth": 1, "arg": 100})
    try:
        b.get(*LAST)
    except Exception as e:  # noqa: BLE001 - the failure is the value
        return e
    raise AssertionError("the get was served")
