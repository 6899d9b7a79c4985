"""The contract scenarios: new ops, the oracle's pread model, bounds, overlap."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xcache.gate import CannotRun
from xcache.gate.backend_api import BackendFactory
from xcache.gate.backend_factory import EngineBackend, OracleBackend
from xcache.gate.containers import Target, make_target
from xcache.gate.corruptions import make_overlap
from xcache.gate.report import Report
from xcache.gate.scenario_run import ScenarioRun
from xcache.gate.steps import compile_steps
from xcache.oracle.bounds import IO_MAX_RETRIES

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.nosan  # runs the replay tool, not the C core


@pytest.fixture(scope="module")
def k3(tmp_path_factory) -> Target:
    """The k3-mini preset as the gate generates it."""
    return make_target("k3-mini", tmp_path_factory.mktemp("k3"))


def _oracle(target: Target, chunk_bytes: int = 0) -> OracleBackend:
    return OracleBackend(target.pristine, target,
                         {"n_slots": 8, "chunk_bytes": chunk_bytes})


def _arm(o: OracleBackend, fault: str, nth: int = 1, persistent: bool = False,
         arg: int = 0, second: bool = False) -> None:
    o.inject({"fault": fault, "nth": nth, "persistent": persistent,
              "arg": arg, "second": second})


def test_oracle_partial_pread_then_eof_is_a_short_read(k3):
    """A pread returning 100 bytes, then end of file on the next: short."""
    o = _oracle(k3)
    try:
        _arm(o, "partial", nth=1, arg=100)
        _arm(o, "eof", nth=2, second=True)
        assert o.oracle._load(0, 1) == (None, "short")
        assert [f["reads"] for f in o.oracle.faults] == [2, 2]
    finally:
        o.close()


def test_oracle_partial_preads_continue_to_exact_bytes(k3):
    """Every pread returning 7 bytes: 234 preads for 1,632 bytes, bytes exact."""
    o = _oracle(k3)
    try:
        _arm(o, "partial", nth=1, arg=7, persistent=True)
        data, failure = o.oracle._load(0, 3)
        assert failure is None and data == k3.expected_bytes(0, 3)
        assert o.oracle.faults[0]["reads"] == 234  # ceil(1632 / 7)
    finally:
        o.close()


def test_oracle_chunked_eof_on_a_middle_chunk_fails_the_load(k3):
    """With 256-byte chunks, an empty second chunk fails though later ones arrive."""
    o = _oracle(k3, chunk_bytes=256)
    try:
        _arm(o, "eof", nth=2)
        assert o.oracle._load(0, 0) == (None, "short")
        assert o.oracle.faults[0]["reads"] == 2  # the load stops at the failed chunk
    finally:
        o.close()


def test_oracle_eintr_storm_gives_up_after_the_retry_limit(k3):
    """Persistent EINTR: the 1000th interrupted pread in a row is an I/O error."""
    o = _oracle(k3)
    try:
        _arm(o, "eintr", nth=1, persistent=True)
        assert o.oracle._load(0, 0) == (None, "io")
        assert o.oracle.faults[0]["reads"] == IO_MAX_RETRIES == 1000
    finally:
        o.close()


def test_oracle_first_injector_failure_never_reaches_the_second(k3):
    """EOF from the first injector: the second one counts no pread."""
    o = _oracle(k3)
    try:
        _arm(o, "eof", nth=1)
        _arm(o, "eio", nth=1, second=True)
        assert o.oracle._load(0, 0) == (None, "short")
        assert [f["reads"] for f in o.oracle.faults] == [1, 0]
    finally:
        o.close()


def _scenario(steps: list[dict]) -> dict:
    return {"name": "probe", "container": "k3-mini", "cache": {"n_slots": 8},
            "steps": steps}


def test_raw_keys_are_taken_as_written(k3):
    """Raw keys are layer ids and experts, never checked against the layout."""
    steps = compile_steps(_scenario([
        {"op": "pin", "raw": [["layer_first-1", 0], ["layer_last", "E"]]},
        {"op": "getmany", "raw": [["layer_last+1", -1]]}]), k3)
    assert steps[0]["keys"] == [(-1, 0), (0, 24)]
    assert steps[1]["batches"] == [[(1, -1)]]


def test_stream_get_first_and_truncate_at_are_compiled(k3):
    """A stream's get_first are flat indices; truncate's at is an expression."""
    steps = compile_steps(_scenario([
        {"op": "stream", "keys": [0, 1, 2], "get_first": ["k-2"]},
        {"op": "truncate", "key": "N-1", "at": "expert_bytes // 16"}]), k3)
    assert steps[0]["keys"] == [(0, 0), (0, 1), (0, 2)]
    assert steps[0]["get_first"] == [(0, 2)]
    assert steps[1]["key"] == (0, 23) and steps[1]["at"] == 102


def test_inject_of_an_unknown_fault_cannot_run(k3):
    """A fault kind the injector lacks stops the run, naming the valid ones."""
    with pytest.raises(CannotRun) as e:
        compile_steps(_scenario([{"op": "inject", "fault": "slow"}]), k3)
    assert str(e.value) == ("scenario probe: inject fault 'slow' is not one of "
                            "eof, eio, eintr, partial, delay, stall, eagain, "
                            "eintr_burst, eagain_burst, nowait_partial, "
                            "nowait_eagain, nowait_eof, nowait_eio")


def test_a_key_outside_the_layout_served_is_a_wrong_read(k3, tmp_path):
    """Bytes served for a key the layout lacks count as wrong, whatever they are."""
    make = BackendFactory.of(EngineBackend, lambda folder: None)
    run = ScenarioRun(_scenario([]), {}, [], k3, tmp_path, make, Report())
    run.served((0, 24), b"")
    run.served((0, 0), k3.expected_bytes(0, 0))
    assert (run.reads, run.wrong) == (2, 1)


def test_overlap_corruption_is_refused_naming_the_second_tensor(k3, tmp_path):
    """Both readers refuse the overlap as offsets; the engine at the claimed byte."""
    from xcache import engine
    from xcache.engine.errors import FormatError
    from xcache.oracle.errors import OracleFormatError
    from xcache.oracle.safetensors import Container

    folder = tmp_path / "c"
    shutil.copytree(k3.pristine, folder)
    shard = folder / k3.corrupt_shard.name
    claimed = make_overlap(k3.corrupt_shard, shard)
    assert claimed.kind == "offsets" and claimed.offset == 147
    with pytest.raises(FormatError) as e:
        engine.Container(str(folder))
    assert (e.value.kind, e.value.offset) == ("offsets", 147)
    assert "overlap tensor" in str(e.value)
    with pytest.raises(OracleFormatError) as o:
        Container(folder)
    assert o.value.kind == "offsets"


def test_contract_scenarios_pass_on_a_k3_mini_folder(tmp_path):
    """The contract scenarios pass on a k3-mini folder; key-bounds skips (one layer)."""
    from xcache import engine, fixtures
    from xcache.gate.scenarios import run_scenarios

    folder = tmp_path / "k3"
    fixtures.generate("k3-mini", folder)
    report = Report()
    names = run_scenarios(engine, tmp_path / "work", report,
                          ["batch-residents", "key-bounds", "partial-reads",
                           "chunk-faults", "reader-overlap", "in-flight",
                           "stream-claim"], container=str(folder))
    assert not report.failed, [c["detail"] for c in report.failed]
    assert len(names) == 9  # "stream-claim" also picks stream-claim-kinds
    assert "stream-claim-kinds" in names
    assert [s["scenario"] for s in report.skipped] == ["key-bounds"]
    assert "requires L >= 2; here L = 1" in report.skipped[0]["reason"]


def test_planted_mid_chunk_bug_is_caught(tmp_path):
    """A chunk loop that goes on after a failed chunk fails chunk-faults."""
    cand = tmp_path / "candidate"
    shutil.copytree(ROOT / "engine", cand / "engine",
                    ignore=shutil.ignore_patterns("*.so", "_xc.c",
                                                  "__pycache__", "*.o"))
    src = cand / "engine" / "csrc" / "xc_load.c"
    old = "for (at = begin; at < end && rc == XC_OK;) {"
    text = src.read_text()
    assert text.count(old) == 1, "the planted bug's anchor moved"
    src.write_text(text.replace(old, "for (at = begin; at < end;) {"))

    def replay(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(ROOT / "replay.py"), *args],
                              capture_output=True, text=True, timeout=600)

    assert replay("--engine-src", str(cand), "--repin").returncode == 0
    p = replay("--engine-src", str(cand), str(tmp_path / "out"),
               "--scenario", "chunk-faults")
    assert p.returncode == 1, p.stdout + p.stderr
    failing = [ln for ln in p.stdout.splitlines() if ln.startswith("  FAIL")]
    assert any("an empty second chunk fails the load [engine]" in ln
               for ln in failing)
    assert not any("[oracle]" in ln for ln in failing)


class _LeakyBackend(OracleBackend):
    """An oracle whose close is refused, like an engine that leaks a shard's handle."""

    def close(self) -> None:
        """Refuse as the fault injector does when a descriptor stays open."""
        super().close()
        from xcache.engine._lib import misuse  # noqa: PLC0415

        raise misuse("the fault injector still has 1 open handle(s): close "
                     "the containers using it first")


def test_a_close_that_fails_is_a_failed_check_not_cannot_run(k3, tmp_path):
    """A backend whose close fails (a leaked descriptor) fails the scenario's
    check "the backend closed cleanly" with the error; the run goes on."""
    make = BackendFactory.of(_LeakyBackend,
                             lambda folder: _LeakyBackend(
                                 folder, k3, {"n_slots": 8, "chunk_bytes": 0}))
    report = Report()
    sc = _scenario([{"op": "get", "keys": [0]}])
    run = ScenarioRun(sc, {}, compile_steps(sc, k3), k3, tmp_path, make, report)
    run.run()
    assert [(c["check"], c["passed"], c["actual"]) for c in report.checks] == [
        ("the backend closed cleanly", False,
         "MisuseError: the fault injector still has 1 open handle(s): close "
         "the containers using it first")]
