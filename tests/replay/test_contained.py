"""A run of a contained backend (the engine's) in a process of its own: an
abort, a signal or a hang in it is a named failed check, and the gate goes
on (gate/contained.py)."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from xcache.gate import contained
from xcache.gate.backend_factory import factory
from xcache.gate.oracle_backend import OracleBackend
from xcache.gate.report import Report
from xcache.gate.scenarios import run_scenarios


class Doomed(OracleBackend):
    """The oracle, but its first get ever (``marker`` not yet there) does
    ``what`` to its process."""

    name = "doomed"
    reference = False
    what = "abort"
    marker = Path("/nonexistent")

    def get(self, layer: int, expert: int) -> bytes:
        """The oracle's get, unless it is the first one ever."""
        if not self.marker.exists():
            self.marker.touch()
            if self.what == "abort":
                os.abort()
            if self.what == "segv":
                # the default action, so that the process dies of the signal
                # whatever handler is installed (under AddressSanitizer, its
                # own, which would report and abort instead)
                signal.signal(signal.SIGSEGV, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGSEGV)
            if self.what == "exit":
                os._exit(7)
            time.sleep(3600)  # hang
        return super().get(layer, expert)


@pytest.fixture(autouse=True)
def _forking(monkeypatch: pytest.MonkeyPatch) -> None:
    """Contained runs fork here, whatever the environment (the coverage
    stage keeps the gate's own runs in process)."""
    monkeypatch.delenv(contained.IN_PROCESS_ENV, raising=False)


def _run(tmp: Path, what: str, timeout: float = 60.0) -> Report:
    """held-victim and reset-window on k3-mini, against the oracle and a
    contained Doomed backend doing ``what``."""
    def backends(engine: Any, target: Any, opts: dict[str, Any]) -> list[Any]:
        judge = factory("oracle", None, target, opts)
        doomed = type(f"Doomed_{what}", (Doomed,),
                      {"what": what, "marker": tmp / "died"})
        return [judge, dataclasses.replace(
            judge, name="doomed", reference=False, contained=True,
            open=lambda folder: doomed(folder, target, opts))]
    report = Report()
    run_scenarios(None, tmp, report, ["held-victim", "reset-window"],
                  timeout, backends=backends)
    return report


@pytest.mark.parametrize("what, words", [
    ("abort", "EngineCrashed: the engine's process was killed by SIGABRT "
              "(Aborted)"),
    ("segv", "EngineCrashed: the engine's process was killed by SIGSEGV "
             "(Segmentation fault)"),
    ("exit", "EngineCrashed: the engine's process exited with status 7 "
             "before the run ended"),
])
def test_a_crash_is_a_named_failed_check_and_the_gate_goes_on(
        tmp_path: Path, what: str, words: str):
    """The run that crashed fails on 'scenario ran to completion', naming
    how; the lines it reported before stand; the next scenario runs."""
    report = _run(tmp_path, what)
    failed = [(c["scenario"], c["check"], c["detail"]) for c in report.checks
              if not c["passed"]]
    assert failed == [("held-victim", "scenario ran to completion", words)]
    doomed = [c["scenario"] for c in report.checks
              if c["backend"] == "doomed" and c["passed"]]
    assert doomed == ["reset-window"] * 3


def test_a_hang_is_killed_at_its_bound_and_the_gate_goes_on(tmp_path: Path):
    """A contained run that hangs fails at its bound, within seconds."""
    t0 = time.monotonic()
    report = _run(tmp_path, "hang", timeout=2.0)
    assert time.monotonic() - t0 < 30
    failed = [(c["scenario"], c["check"], c["detail"]) for c in report.checks
              if not c["passed"]]
    assert failed == [("held-victim", "held-victim ran to completion",
                       "timed out after 2 s")]


def test_in_process_when_asked(monkeypatch: pytest.MonkeyPatch):
    """A contained factory's runs fork, unless XC_GATE_IN_PROCESS=1."""
    from xcache.gate.backend_api import BackendFactory, Capabilities  # noqa: PLC0415

    make = BackendFactory("x", Capabilities(), lambda folder: None,
                          contained=True)
    monkeypatch.delenv(contained.IN_PROCESS_ENV, raising=False)
    assert contained.wanted(make)
    assert not contained.wanted(dataclasses.replace(make, contained=False))
    monkeypatch.setenv(contained.IN_PROCESS_ENV, "1")
    assert not contained.wanted(make)
