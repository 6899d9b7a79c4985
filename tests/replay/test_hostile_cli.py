"""The gate under hostile use: a user's replay-work is never deleted, a stuck
scenario is a timed-out FAIL (exit 1, no hang), Ctrl-C is exit 130 leaving nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import group_members
from xcache.gate.backend_api import BackendFactory
from xcache.gate.backend_factory import EngineBackend, OracleBackend
from xcache.gate.containers import Target
from xcache.gate.report import Report
from xcache.gate.scenario_run import ScenarioRun
from xcache.gate.scenarios import run_bounded
from xcache.replay import main

ROOT = Path(__file__).resolve().parents[2]

#: Run replay.py as a program after making every engine get block forever.
HANG = """import sys, threading
import xcache.gate.backend_factory as backends
backends.EngineBackend.get = lambda self, layer, expert: threading.Event().wait()
sys.argv = ['replay.py', *sys.argv[1:]]
from xcache import replay
sys.exit(replay.main())
"""


def test_run_bounded_reports_a_stuck_run(tmp_path, capsys):
    """A run that never returns: one FAIL 'timed out after N s', nothing later."""
    release = threading.Event()
    opened = threading.Event()

    def blocking_backend(folder: Path) -> None:
        opened.set()
        release.wait(60)
        raise RuntimeError("woke late")

    (tmp_path / "pristine").mkdir()
    report = Report()
    run = ScenarioRun({"name": "stuck", "steps": []}, {"suffix": " (v)"}, [],
                      Target("stuck", tmp_path / "pristine", {}),
                      tmp_path / "scratch",
                      BackendFactory.of(EngineBackend, blocking_backend), report)
    try:
        assert run_bounded(run, 0.2) is False
        assert opened.is_set()
    finally:
        release.set()
    assert [(c["check"], c["backend"], c["passed"], c["detail"])
            for c in report.checks] == [
        ("stuck (v) ran to completion", "engine", False, "timed out after 0.2 s")]
    assert "FAIL  stuck (v) ran to completion [engine]" in capsys.readouterr().out
    # the woken run's own failure goes nowhere
    deadline = time.monotonic() + 60
    while any(t.name.startswith("scenario stuck") for t in threading.enumerate()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert len(report.checks) == 1


def test_run_bounded_passes_a_prompt_run_through(tmp_path):
    """A run that finishes in time is True and reports its own checks only."""
    (tmp_path / "pristine").mkdir()
    report = Report()
    run = ScenarioRun({"name": "quick", "steps": []}, {}, [],
                      Target("quick", tmp_path / "pristine", {}),
                      tmp_path / "scratch",
                      BackendFactory.of(OracleBackend, lambda folder: None),
                      report)
    assert run_bounded(run, 60) is True
    assert report.checks == []


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_timeout_must_be_above_zero(value, tmp_path, capsys):
    """--timeout 0, -1 or nan is exit 2 naming the option, before any work."""
    assert main(["gate", str(tmp_path / "out"), "--timeout", value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("CANNOT RUN: --timeout: ") and "above 0" in err
    assert not (tmp_path / "out").exists()


def _user_work(out: Path) -> dict[str, str]:
    """A replay-work folder of the user's own, and what it holds."""
    mine = out / "replay-work"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine\n")
    (mine / "build").mkdir()
    (mine / "build" / "keep.c").write_text("int x;\n")
    return {str(p.relative_to(out)): p.read_text()
            for p in sorted(mine.rglob("*")) if p.is_file()}


def _files(out: Path) -> dict[str, str]:
    """Every file under out, with its text."""
    return {str(p.relative_to(out)): p.read_text()
            for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.nosan
def test_stuck_scenario_fails_and_the_users_work_folder_stays(tmp_path):
    """Every engine get hangs: FAIL lines 'timed out after 2 s', exit 1, no hang.

    The run meets a replay-work of the user's: it works beside it and leaves
    it exactly as it was, removing only what it made.
    """
    out = tmp_path / "out"
    before = _user_work(out)
    p = subprocess.run([sys.executable, "-c", HANG, str(out), "--scenario",
                        "reference", "--timeout", "2"], capture_output=True,
                       text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 1, p.stdout + p.stderr
    fails = [ln.split() for ln in p.stdout.splitlines() if ln.startswith("  FAIL")]
    assert fails == [
        ["FAIL", "reference", "ran", "to", "completion", "[engine]", "timed",
         "out", "after", "2", "s"],
        # the watchdog: once the engine is stuck, later runs are not started
        ["FAIL", "reference", "(4", "KiB", "chunks)", "ran", "to", "completion",
         "[engine]", "not", "run:", "the", "backend", "is", "stuck", "since",
         "reference", "timed", "out"],
        ["FAIL", "reference", "(read-ahead,", "2", "readers)", "ran", "to",
         "completion", "[engine]", "not", "run:", "the", "backend", "is",
         "stuck", "since", "reference", "timed", "out"]]
    assert f"{out / 'replay-work'} exists and is left alone; working in " \
           f"{out / 'replay-work-'}" in p.stdout
    # the first variant: the engine's first check (before any get) and its
    # timeout; the two not started: their failure alone; the oracle's seven
    # checks of each of the three
    assert p.stdout.splitlines()[-2] == (
        f"{'reference':<22} on k3-mini         PASS  22  FAIL 3  N/A 0")
    assert p.stdout.splitlines()[-1].startswith(
        "FAIL: 1 scenario (3 variants), 25 checks, 3 failed on its home "
        "container k3-mini, engine build ")
    assert "Traceback" not in p.stderr
    assert _files(out) == before
    assert sorted(x.name for x in out.iterdir()) == ["replay-work"]


def _interrupt_at(proc: subprocess.Popen[bytes], at: bytes) -> tuple[int, str]:
    """SIGINT ``proc``'s group once its stdout shows ``at``; its exit and stderr."""
    os.set_blocking(proc.stdout.fileno(), False)
    seen = b""
    deadline = time.monotonic() + 300
    while at not in seen and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
        seen += proc.stdout.read() or b""
    assert at in seen, seen.decode(errors="replace")
    os.killpg(proc.pid, signal.SIGINT)
    try:
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return rc, proc.stderr.read().decode()


@pytest.mark.nosan
@pytest.mark.parametrize("at", [b"Verified", b"Built the engine"])
def test_ctrl_c_ends_the_gate_leaving_nothing(at, tmp_path):
    """One SIGINT during the build or the scenarios: exit 130, no traceback, no child.

    Only what the run made is removed: the user's replay-work stays as it was.
    """
    out = tmp_path / "out"
    before = _user_work(out)
    proc = subprocess.Popen([sys.executable, "replay.py", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    rc, err = _interrupt_at(proc, at)
    assert rc == 130, err
    assert "Traceback" not in err
    assert err.endswith("replay.py: interrupted; nothing of this run is left\n")
    assert group_members(proc.pid) == []
    assert _files(out) == before
    assert sorted(x.name for x in out.iterdir()) == ["replay-work"]


@pytest.mark.nosan
def test_ctrl_c_removes_the_out_folder_and_parents_the_gate_made(tmp_path):
    """SIGINT mid-run into a new OUT (and a new parent): neither is left."""
    out = tmp_path / "new" / "out"
    proc = subprocess.Popen([sys.executable, "replay.py", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    rc, err = _interrupt_at(proc, b"Built the engine")
    assert rc == 130, err
    assert err.endswith("replay.py: interrupted; nothing of this run is left\n")
    assert os.listdir(tmp_path) == []


def test_a_refusal_removes_the_out_folder_and_parents_it_made(tmp_path, capsys):
    """A run refused after OUT was made (no scenario matches) leaves no OUT."""
    out = tmp_path / "a" / "b" / "out"
    assert main(["--scenario", "no-such-scenario", str(out)]) == 2
    assert capsys.readouterr().err.startswith("CANNOT RUN: ")
    assert os.listdir(tmp_path) == []


def test_a_refusal_leaves_the_users_own_out_folder(tmp_path, capsys):
    """An OUT the user had (empty, or holding a file) is left as it was."""
    empty, full = tmp_path / "empty", tmp_path / "full"
    empty.mkdir()
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    for out in (empty, full):
        assert main(["--scenario", "no-such-scenario", str(out)]) == 2
    assert capsys.readouterr().err.count("CANNOT RUN: ") == 2
    assert sorted(os.listdir(tmp_path)) == ["empty", "full"]
    assert os.listdir(empty) == [] and os.listdir(full) == ["notes.txt"]


def test_work_is_removed_when_ctrl_c_came_inside_a_scenario_threads_start(
        tmp_path, monkeypatch):
    """A scenario thread Ctrl-C left unstarted (in ``start()``) stops no cleanup."""
    from xcache.gate import cli

    work = tmp_path / "replay-work"
    (work / "run").mkdir(parents=True)
    (work / "run" / "a.bin").write_bytes(b"x")
    unstarted = threading.Thread(target=lambda: None, name="scenario s [engine]")
    monkeypatch.setattr(cli.threading, "enumerate", lambda: [unstarted])
    t0 = time.monotonic()
    cli._remove_after_scenarios(work, wait_s=0.2)
    assert not work.exists()
    assert time.monotonic() - t0 < 5
