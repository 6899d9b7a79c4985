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

Then ``counter-window`` and ``policies`` outlived the gate's 120 s on it
for work, not memory: every served payload was compared with a 44 MB
expected payload made in Python for it (184 ms each, 320 a policy: a
minute), and a load in 4 KiB chunks was 10,755 modelled preads.  Served
bytes are now judged against the fixture's written extents (768 bytes an
expert, made once a key), and a load no armed fault can act on reads each
run at once; the tests below count the bytes made and the preads.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
from pathlib import Path

import pytest

from xcache import fixtures
from xcache.fixtures import content
from xcache.gate.backend_api import BackendFactory
from xcache.gate.backend_factory import EngineBackend, OracleBackend
from xcache.gate.containers import Target, _layout_of_spec, make_target
from xcache.gate.report import Report
from xcache.gate.scenario_run import ScenarioRun
from xcache.oracle import read_path
from xcache.oracle.reading_cache import ReadingCache


@pytest.fixture(scope="module")
def k3(tmp_path_factory):
    """The gate's Target over k3-mini (24 experts of 1,632 bytes)."""
    return make_target("k3-mini", tmp_path_factory.mktemp("k3-target"))


def test_the_oracle_backend_keeps_only_the_payloads_its_model_holds(k3):
    """24 loads through 5 slots: 5 payloads kept, the resident keys' own."""
    backend = OracleBackend(k3.pristine, k3, {"n_slots": 5}).oracle
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


def test_a_served_huge_sparse_expert_is_judged_from_its_written_bytes(
        tmp_path, monkeypatch):
    """Three 44 MB payloads served, one wrong in a hole: 768 bytes made a key."""
    spec = fixtures.preset("huge-sparse")
    target = Target("huge-sparse", tmp_path, _layout_of_spec(spec), spec)
    key, other = (3, 0), (16, 255)
    served = fixtures.expected_expert_bytes(spec, *key)
    assert len(served) == spec.expert_nbytes == 44_050_944
    wrong = bytearray(served)
    wrong[len(wrong) // 2] = 1  # the middle of the gate tensor's hole
    made = []
    real = content.expected_range
    monkeypatch.setattr(fixtures.content, "expected_range",
                        lambda sp, td, b, e: made.append(e - b) or real(sp, td, b, e))
    run = ScenarioRun({"name": "probe", "steps": []}, {}, [], target, tmp_path,
                      BackendFactory.of(EngineBackend, lambda folder: None),
                      Report())
    run.served(key, served)
    run.served(key, bytes(wrong))
    run.served(key, served[:-1])
    assert (run.reads, run.wrong) == (3, 2)
    # 6 tensors (3 weights, 3 block scales), their first and last 64 bytes
    # each: made once for the key, however often it is served
    assert made == [64] * 12
    length, parts = content.expert_extents(spec, *key)
    assert length == 44_050_944
    w, sc = 14_680_064, 3_584
    assert [(o, len(c)) for o, c in parts] == [
        (at + edge, 64) for at, n in ((0, w), (w, sc), (w + sc, w), (2 * w + sc, sc),
                                      (2 * w + 2 * sc, w), (3 * w + 2 * sc, sc))
        for edge in (0, n - 64)]
    run.served(other, fixtures.expected_expert_bytes(spec, *other)[:8] + bytes(8))
    assert (run.reads, run.wrong) == (4, 3)


def _preads(monkeypatch) -> list[tuple[int, int, int]]:
    """Record every os.pread the gate's backends make: (fd, n, offset)."""
    calls: list[tuple[int, int, int]] = []
    real = os.pread
    monkeypatch.setattr(read_path.os, "pread",
                        lambda fd, n, at: calls.append((fd, n, at)) or real(fd, n, at))
    return calls


def test_a_chunked_load_no_fault_can_act_on_is_one_read(k3, monkeypatch):
    """k3-mini's 1,632-byte expert in 64-byte chunks: one pread, 1,632 bytes asked."""
    backend = OracleBackend(k3.pristine, k3, {"n_slots": 8, "chunk_bytes": 64}).oracle
    try:
        calls = _preads(monkeypatch)
        assert backend._load(0, 5) == (k3.expected_bytes(0, 5), None)
        assert [n for _, n, _ in calls] == [1632]
        assert backend.asked[(0, 5)] == 1632
        # a one-shot fault that has fired acts no more: one read again
        backend.inject({"fault": "eio", "nth": 1})
        assert backend._load(0, 6) == (None, "io")
        calls.clear()
        assert backend._load(0, 7) == (k3.expected_bytes(0, 7), None)
        assert [n for _, n, _ in calls] == [1632]
    finally:
        backend.close()


@pytest.mark.parametrize("cut", [0, 1, 64, 100, 1632, 2000])
def test_reading_runs_at_once_equals_the_read_by_read_model(k3, tmp_path,
                                                            monkeypatch, cut):
    """A shard cut inside, at and past chunk ends: the same outcome, the same
    bytes asked and the same pread counts as one modelled read at a time."""
    scratch = tmp_path / "scratch"
    k3.populate(scratch)
    piece = k3.pieces(0, 9)[0]
    outcomes = []
    for inert in (False, True):
        backend = OracleBackend(scratch, k3, {"n_slots": 8, "chunk_bytes": 64}).oracle
        try:
            with open(scratch / Path(piece.shard).name, "r+b") as f:
                f.truncate(piece.offset + cut)
            backend.inject({"fault": "delay", "nth": 1, "persistent": True})
            with monkeypatch.context() as m:
                if not inert:
                    m.setattr(ReadingCache, "_inert", lambda self: False)
                got = backend._load(0, 9)
            outcomes.append((got, backend.asked[(0, 9)], backend.faults[0]["reads"]))
        finally:
            backend.close()
        k3.populate(scratch)
    assert outcomes[0] == outcomes[1]
    (data, failure), asked, _ = outcomes[1]
    if cut >= 1632:
        assert (data, failure, asked) == (k3.expected_bytes(0, 9), None, 1632)
    else:
        assert (data, failure) == (None, "short")
        # the reads up to the chunk holding the cut, each of 64 bytes but
        # the first (the expert starts 20,608 + 9 * 1,632 = 35,296 = 551 * 64 + 32)
        assert piece.offset == 35_296
        assert asked == (32 + 64 * ((cut + 32) // 64) if cut >= 32 else 32)


def _allocated(folder) -> int:
    """Bytes the files under ``folder`` occupy on disk (holes not counted)."""
    return sum(os.stat(os.path.join(d, f)).st_blocks * 512
               for d, _, files in os.walk(folder) for f in files)


@pytest.mark.slow
@pytest.mark.nosan  # runs the gate's scenarios in process on 44 MB experts
def test_corrupt_replace_and_partial_reads_pass_on_huge_sparse(tmp_path):
    """faults-corrupt, faults-files and chunk-faults: every check passes on
    huge-sparse, and its scratch copies stay sparse (under 1 GB on disk)."""
    from xcache import engine
    from xcache.gate.report import Report
    from xcache.gate.scenarios import run_scenarios

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


#: the seeded sample of scenarios the normal suite runs on huge-sparse
#: (``XC_HUGE_SEED``, ``XC_HUGE_SAMPLE``; ``XC_HUGE_SCENARIOS`` names them
#: instead, comma-separated; the whole set: ``replay.py --container huge-sparse``)
HUGE_SEED = int(os.environ.get("XC_HUGE_SEED", 20261202))
HUGE_SAMPLE = int(os.environ.get("XC_HUGE_SAMPLE", 3))


def _huge_sample() -> list[str]:
    """The scenario names the sampled test runs: named, or a seeded sample."""
    from xcache.gate.scenarios import load_scenarios

    names = [sc["name"] for sc in load_scenarios([])]
    named = [n.strip() for n in os.environ.get("XC_HUGE_SCENARIOS", "").split(",")
             if n.strip()]
    if named:
        unknown = [n for n in named if n not in names]
        if unknown:
            raise pytest.UsageError(f"XC_HUGE_SCENARIOS: no scenario {unknown[0]!r}")
        return named
    return sorted(random.Random(HUGE_SEED).sample(names, min(HUGE_SAMPLE, len(names))))


HUGE_SCENARIOS = _huge_sample()
print(f"huge-sparse sample: XC_HUGE_SEED={HUGE_SEED} XC_HUGE_SAMPLE={HUGE_SAMPLE}: "
      f"{', '.join(HUGE_SCENARIOS)}")


@pytest.mark.nosan  # runs the gate's scenarios in process on 44 MB experts
def test_a_seeded_sample_of_scenarios_passes_on_huge_sparse(tmp_path, monkeypatch):
    """`replay.py --container huge-sparse` on a seeded sample of scenarios:
    every check passes, nothing is skipped, and the scratch copies stay sparse."""
    from xcache import engine
    from xcache.gate import scenarios
    from xcache.gate.scenarios import run_scenarios

    files = scenarios.scenario_files  # exact names (stream-claim is in
    # stream-claim-kinds): run_scenarios reads the files through it
    monkeypatch.setattr(scenarios, "scenario_files", lambda only, folder=None: [
        (p, sc) for p, sc in files(only, folder) if sc["name"] in only])
    report = Report()
    with contextlib.redirect_stdout(io.StringIO()):
        ran = run_scenarios(engine, tmp_path, report, HUGE_SCENARIOS,
                            container="huge-sparse")
    rerun = (f"(XC_HUGE_SEED={HUGE_SEED} XC_HUGE_SAMPLE={HUGE_SAMPLE}; rerun: "
             f"XC_HUGE_SCENARIOS={','.join(HUGE_SCENARIOS)})")
    skipped = {s["scenario"]: s["reason"] for s in report.skipped}
    assert sorted({n.split(" (")[0] for n in ran} | set(skipped)) == HUGE_SCENARIOS
    failed = [f"{c['scenario']} [{c['backend']}] {c['check']}: {c['detail']}"
              for c in report.failed]
    assert not failed, rerun + "\n" + "\n".join(failed[:10])
    # only a scenario for contiguous experts skips: huge-sparse's are
    # dtype-sorted (each weight's block scales lie apart from it)
    by_name = {sc["name"]: sc for _, sc in files([])}
    for name, reason in skipped.items():
        assert "contiguous == 1" in by_name[name].get("requires", []), (name, rerun)
        assert reason.startswith("requires contiguous == 1"), (name, reason)
    assert _allocated(tmp_path) < 1 << 30
