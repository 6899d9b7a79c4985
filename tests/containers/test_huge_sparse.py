"""huge-sparse through the gate: memory bounded by the cache, not by the keys read.

huge-sparse has DeepSeek-V3's 44 MB experts in 8 sparse shards of about
20 GB.  ``replay.py --container huge-sparse`` failed on it for three causes
found by measuring (tracemalloc, cProfile):

* the oracle backend kept the bytes of every key it had ever loaded, not
  only of the keys its model holds (882 MiB after one scenario's 21 loads);
* ``Target.expected_bytes`` kept every expected payload (840 MiB more);
* every ``corrupt`` step and the ``replace`` step read a whole shard into
  memory and wrote it back dense (20 GB a corruption: the 23 GB run);

and the oracle reader's header parse cost a Python step per character for
its surrogate check (a DeepSeek-V3-sized header, 21,504 tensors: 5 s of a
cProfile run per open).  The first two are held here on k3-mini; the
corruptions on a sparse file in tests/faults/test_corruptions.py; the slow
test runs the scenarios that read, corrupt and replace most on huge-sparse.
"""

from __future__ import annotations

import contextlib
import io
import os

import pytest

import fixtures
from gate.backends import OracleBackend
from gate.containers import make_target


@pytest.fixture(scope="module")
def k3(tmp_path_factory):
    """The gate's Target over k3-mini (24 experts of 1,632 bytes)."""
    return make_target("k3-mini", tmp_path_factory.mktemp("k3-target"))


def test_the_oracle_backend_keeps_only_the_payloads_its_model_holds(k3):
    """24 loads through 5 slots: 5 payloads kept, the resident keys' own."""
    backend = OracleBackend(k3.pristine, k3, {"n_slots": 5})
    try:
        for key in k3.keys:
            assert backend.get(*key) == k3.expected_bytes(*key)
            assert set(backend.payload) == backend.model.resident()
        backend.getmany(k3.keys[:3])
        assert set(backend.payload) == backend.model.resident()
        assert len(backend.payload) == 5
        for key in backend.model.resident():  # the kept bytes are the right ones
            assert backend.payload[key] == k3.expected_bytes(*key)
    finally:
        backend.close()


def test_expected_payloads_are_kept_up_to_a_budget(k3, monkeypatch):
    """With room for 3 payloads, 10 keys asked keep the last 3, each exact."""
    nbytes = len(k3.expected_bytes(*k3.keys[0]))
    assert nbytes == 1632
    monkeypatch.setattr(k3, "KEPT_BYTES", 3 * nbytes)
    for key in k3.keys[:10]:
        k3.expected_bytes(*key)
    assert list(k3._bytes) == k3.keys[7:10]
    assert k3._kept == 3 * nbytes
    k3.expected_bytes(*k3.keys[8])  # asked again: the most recent
    assert list(k3._bytes) == [k3.keys[7], k3.keys[9], k3.keys[8]]
    for key in k3.keys[:10]:
        assert k3.expected_bytes(*key) == fixtures.expected_expert_bytes(
            k3.spec, *key)
    assert len(k3._bytes) == 3


def _allocated(folder) -> int:
    """Bytes the files under ``folder`` occupy on disk (holes not counted)."""
    return sum(os.stat(os.path.join(d, f)).st_blocks * 512
               for d, _, files in os.walk(folder) for f in files)


@pytest.mark.slow
@pytest.mark.nosan  # runs the gate's scenarios in process on 44 MB experts
def test_corrupt_replace_and_partial_reads_pass_on_huge_sparse(tmp_path):
    """faults-corrupt, faults-files and chunk-faults: every check passes on
    huge-sparse, and its scratch copies stay sparse (under 1 GB on disk)."""
    import engine
    from gate.report import Report
    from gate.scenarios import run_scenarios

    report = Report()
    with contextlib.redirect_stdout(io.StringIO()):
        names = run_scenarios(engine, tmp_path, report,
                              ["faults-corrupt", "faults-files", "chunk-faults"],
                              container="huge-sparse")
    assert names == ["chunk-faults", "faults-corrupt", "faults-files (no verify)",
                     "faults-files (verify)"]
    failed = [f"{c['scenario']} [{c['backend']}] {c['check']}: {c['detail']}"
              for c in report.failed]
    assert not failed, "\n".join(failed[:10])
    assert not report.skipped
    assert _allocated(tmp_path) < 1 << 30
