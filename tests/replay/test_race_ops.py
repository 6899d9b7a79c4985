"""The gate's ops on reads under way (gate/race_ops.py).

A call racing a read that never returns must fail its scenario within the
step's bound, naming the key, and leave the run able to go on; the
scenarios built on these ops pass on both backends on a k3-mini folder.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from xcache.gate import contained, race_ops
from xcache.gate.report import Report


@pytest.fixture(autouse=True)
def _in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's runs stay in this process: these tests judge how the
    gate abandons a stalled run there (race_ops._ABANDONED); a forked run
    is killed instead (tests/replay/test_contained.py)."""
    monkeypatch.setenv(contained.IN_PROCESS_ENV, "1")


def _run_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             steps: list[dict[str, Any]], **cache: Any) -> tuple[list[str], Report]:
    """Run one k3-mini scenario of ``steps`` through the gate's runner."""
    from xcache import engine
    from xcache.gate import scenarios as gate_scenarios

    sc = {"name": "race", "container": "k3-mini", "timeout_s": 30,
          "cache": {"n_slots": 8, "faults": True, "batch_threads": 1, **cache},
          "steps": steps}
    folder = tmp_path / "scenarios"
    folder.mkdir()
    (folder / "race-k3-mini.json").write_text(json.dumps(sc))
    monkeypatch.setattr(gate_scenarios, "SCENARIO_DIR", folder)
    report = Report()
    names = gate_scenarios.run_scenarios(engine, tmp_path / "work", report, [])
    return names, report


def test_a_waiter_nobody_wakes_fails_its_scenario_naming_the_key(
        tmp_path, monkeypatch):
    """A waiting_get that never returns is a failed check on the engine, not a hang."""
    from xcache.gate.backend_factory import EngineBackend

    release = threading.Event()
    real_get = EngineBackend.get
    calls: list[tuple[int, int]] = []

    def stuck_get(self: EngineBackend, layer: int, expert: int) -> bytes:
        calls.append((layer, expert))
        if len(calls) == 2:  # the waiting get: a waiter nobody wakes
            release.wait()
        return real_get(self, layer, expert)

    monkeypatch.setattr(EngineBackend, "get", stuck_get)
    abandoned = len(race_ops._ABANDONED)
    try:
        names, report = _run_one(tmp_path, monkeypatch, [
            {"op": "get", "keys": [5]},
            {"op": "waiting_get", "keys": [5], "bound_s": 0.2},
            {"op": "check", "name": "woken",
             "expect": {"reads": 2, "wait_hits": 1, "hits": 1}}])
    finally:
        release.set()
    assert names == ["race"]
    assert [(c["backend"], c["check"], c["detail"]) for c in report.failed] == [
        ("engine", "scenario ran to completion",
         "Stuck: a get of layer 0 expert 5 waiting for its read under way "
         "did not return within 0.2 s (a waiter nobody woke)")]
    assert [(c["backend"], c["check"]) for c in report.checks
            if c["passed"]] == [("oracle", "woken")]
    assert len(race_ops._ABANDONED) == abandoned + 1
    race_ops._ABANDONED.pop().close()  # its call has returned now


def test_await_read_with_no_armed_read_met_fails_within_its_bound(
        tmp_path, monkeypatch):
    """await_read names how many armed preads the injector met when none came."""
    _, report = _run_one(tmp_path, monkeypatch, [
        {"op": "inject", "fault": "delay", "nth": 1, "arg": 1000},
        {"op": "await_read", "bound_s": 0.1},
        {"op": "check", "name": "after", "expect": {"requests": 0}}])
    assert [(c["backend"], c["detail"]) for c in report.failed] == [
        ("engine", "Stuck: await_read: the injector met 0 of 1 armed preads "
                   "within 0.1 s")]


def test_wait_hits_is_null_on_an_untraced_engine(tmp_path, monkeypatch):
    """Without "trace": true the engine has no wait_hits to give; the oracle has."""
    _, report = _run_one(tmp_path, monkeypatch, [
        {"op": "get", "keys": [1]},
        {"op": "check", "name": "counts", "expect": {"wait_hits": 0}}])
    got = {c["backend"]: c["actual"]["wait_hits"] for c in report.checks}
    assert got == {"engine": None, "oracle": 0}


def test_background_get_and_join_serve_exact_bytes(tmp_path, monkeypatch):
    """A held background get, a waiting get of its key, the join: one miss, one wait."""
    names, report = _run_one(tmp_path, monkeypatch, [
        {"op": "inject", "fault": "delay", "nth": 1, "arg": 100000},
        {"op": "background_get", "range": [3, 4]},
        {"op": "await_read"},
        {"op": "waiting_get", "keys": [3]},
        {"op": "join"},
        {"op": "check", "name": "both served",
         "expect": {"reads": 2, "wrong_reads": 0, "errors": [None, None],
                    "requests": 2, "hits": 1, "misses": 1, "wait_hits": 1,
                    "held": 0, "inflight_slots": 0, "resident": [[0, 3]]}}],
        io_threads=1, trace=True)
    assert names == ["race"] and not report.failed, report.failed
    assert len(report.checks) == 2


def test_reads_under_way_scenarios_pass_on_a_k3_mini_folder(tmp_path):
    """The reads-under-way scenarios pass, derived, on a k3-mini folder."""
    from xcache import engine, fixtures
    from xcache.gate.scenarios import run_scenarios

    folder = tmp_path / "k3"
    fixtures.generate("k3-mini", folder)
    report = Report()
    names = run_scenarios(engine, tmp_path / "work", report,
                          ["reads-under-way", "completion-order",
                           "stream-claim-kinds"], container=str(folder))
    assert not report.failed, [c["detail"] for c in report.failed]
    assert names == ["completion-order", "completion-order (fifo)",
                     "reads-under-way", "stream-claim-kinds"]
    assert not report.skipped


def test_the_stall_scenarios_pass_on_a_k3_mini_folder(tmp_path):
    """The scenarios built on stalls pass, derived, on a k3-mini folder."""
    from xcache import engine, fixtures
    from xcache.gate.scenarios import run_scenarios

    folder = tmp_path / "k3"
    fixtures.generate("k3-mini", folder)
    report = Report()
    names = run_scenarios(engine, tmp_path / "work", report,
                          ["stalled-reads", "stalled-read-ahead",
                           "files-changed-in-place"], container=str(folder))
    assert not report.failed, [c["detail"] for c in report.failed]
    assert names == ["files-changed-in-place", "stalled-read-ahead",
                     "stalled-reads"]
    assert not report.skipped


def test_a_stall_never_released_fails_its_join_on_both_backends(
        tmp_path, monkeypatch):
    """A join of a get whose read a stall holds, with no unstall, is stuck on both."""
    abandoned = len(race_ops._ABANDONED)
    names, report = _run_one(tmp_path, monkeypatch, [
        {"op": "inject", "fault": "stall", "nth": 1},
        {"op": "background_get", "keys": [5]},
        {"op": "await_read"},
        {"op": "join", "bound_s": 0.1},
        {"op": "check", "name": "never", "expect": {"reads": 1}}])
    assert names == ["race"]
    assert sorted((c["backend"], c["check"], c["detail"]) for c in report.failed
                  ) == [(b, "scenario ran to completion",
                         "Stuck: a background get of layer 0 expert 5 did not "
                         "return within 0.1 s (a waiter nobody woke)")
                        for b in ("engine", "oracle")]
    assert len(race_ops._ABANDONED) == abandoned + 2
    for _ in range(2):  # closing lets the stalled read go, then waits for it
        race_ops._ABANDONED.pop().close()


def test_a_call_that_would_wait_for_a_stalled_read_cannot_run(
        tmp_path, monkeypatch):
    """A plain get of the key a stall holds is refused by the oracle as CANNOT RUN."""
    from xcache.gate import CannotRun

    with pytest.raises(CannotRun, match="waits for its read held under way"):
        _run_one(tmp_path, monkeypatch, [  # (the engine's get: 0.2 s at most)
            {"op": "inject", "fault": "stall", "nth": 1, "arg": 200_000},
            {"op": "background_get", "keys": [5]},
            {"op": "await_read"},
            {"op": "get", "keys": [5]},
            {"op": "unstall"},
            {"op": "join"}])


def test_await_waiting_fails_when_the_call_did_not_wait(tmp_path, monkeypatch):
    """A background get of a resident key does not wait: stuck on both backends."""
    abandoned = len(race_ops._ABANDONED)
    _, report = _run_one(tmp_path, monkeypatch, [
        {"op": "get", "keys": [5]},
        {"op": "inject", "fault": "stall", "nth": 1},
        {"op": "background_get", "keys": [6]},
        {"op": "await_read"},
        {"op": "background_get", "keys": [5]},
        {"op": "await_waiting", "bound_s": 0.2},
        {"op": "unstall"}, {"op": "join"},
        {"op": "check", "name": "never", "expect": {"reads": 2}}])
    assert sorted((c["backend"], c["detail"]) for c in report.failed) == [
        ("engine", "Stuck: await_waiting: 0 of 1 background calls wait for a "
                   "read under way within 0.2 s (one ended, or never got "
                   "there)"),
        ("oracle", "Stuck: await_waiting: 0 of 1 background calls wait for a "
                   "read under way")]
    assert len(race_ops._ABANDONED) == abandoned  # nothing stuck in a call


def test_await_waiting_sees_a_get_blocked_on_the_read_held(tmp_path, monkeypatch):
    """A get of the key a stall holds is seen waiting, then hits after the release."""
    names, report = _run_one(tmp_path, monkeypatch, [
        {"op": "inject", "fault": "stall", "nth": 1},
        {"op": "background_get", "keys": [6]},
        {"op": "await_read"},
        {"op": "background_get", "keys": [6, 6]},
        {"op": "await_waiting", "count": 2},
        {"op": "unstall"}, {"op": "join"},
        {"op": "check", "name": "both waited",
         "expect": {"reads": 3, "wrong_reads": 0, "requests": 3, "hits": 2,
                    "misses": 1, "wait_hits": 2, "held": 0,
                    "inflight_slots": 0, "resident": [[0, 6]]}}],
        trace=True)
    assert names == ["race"] and not report.failed, report.failed
    assert len(report.checks) == 2


def test_ctrl_c_ends_a_run_whose_read_a_stall_holds(tmp_path):
    """SIGINT ends a run whose read a 50 s stall holds, long before that bound."""
    import signal
    import subprocess
    import sys

    folder = tmp_path / "scenarios"
    folder.mkdir()
    (folder / "hang-k3-mini.json").write_text(json.dumps({
        "name": "hang", "container": "k3-mini", "timeout_s": 60,
        "cache": {"n_slots": 8, "faults": True, "batch_threads": 1,
                  "io_threads": 1},
        "steps": [{"op": "inject", "fault": "stall", "nth": 1,
                   "arg": 50_000_000},
                  {"op": "prefetch", "keys": [3]}, {"op": "await_read"},
                  {"op": "background_get", "keys": [3]},
                  {"op": "await_waiting"},
                  {"op": "join", "bound_s": 40}]}))
    code = ("import sys\nfrom xcache import engine\nfrom pathlib import Path\n"
            "from xcache.gate import scenarios as gs, race_ops\n"
            "from xcache.gate.ops import OPS\n"
            "from xcache.gate.report import Report\n"
            f"gs.SCENARIO_DIR = Path({str(folder)!r})\n"
            "real = race_ops.join\n"
            "def join(run, step):\n"
            "    if run.backend.name == 'engine':  # its read is held now\n"
            "        print('held', flush=True)\n"
            "    real(run, step)\n"
            "import dataclasses\n"
            "OPS['join'] = dataclasses.replace(OPS['join'], run=join)\n"
            f"gs.run_scenarios(engine, Path({str(tmp_path / 'work')!r}), "
            "Report(), [])\n")
    err = tmp_path / "stderr.txt"
    with open(err, "w") as e:
        p = subprocess.Popen([sys.executable, "-c", code],
                             stdout=subprocess.PIPE, stderr=e, text=True,
                             cwd=Path(__file__).resolve().parents[2])
    try:
        assert p.stdout is not None
        # the judge runs first: its line (a waiter nobody wakes, in the
        # model at once) comes before the engine's read is held
        lines = [p.stdout.readline() for _ in range(1)]
        while lines[-1] not in ("held\n", "") and len(lines) < 20:
            lines.append(p.stdout.readline())
        assert lines[-1] == "held\n", (lines, err.read_text())
        p.send_signal(signal.SIGINT)
        try:  # interrupted, not run to the stall's bound
            assert p.wait(30) != 0, err.read_text()
        except subprocess.TimeoutExpired:
            raise AssertionError(f"no exit 30 s after SIGINT: {err.read_text()}"
                                 ) from None
    finally:
        p.kill()
        p.wait()
