"""The gate's differential checks (readers, simulator counts) and its watchdog."""

from __future__ import annotations

import json
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from xcache import engine
from xcache.gate import differential, open_probe, reader_diff, sim_check, tensor_reads
from xcache.gate.report import Report
from xcache.gate.scenarios import WATCHDOG, run_bounded


class _Lying:
    """An engine face whose errors are the real engine's, with one field changed."""

    def __init__(self, change: str) -> None:
        self.change = change
        self.EngineError = engine.EngineError

    def Container(self, path: str) -> Any:  # noqa: N802 - the engine's name
        """Open with the real engine; re-raise its error with ``change`` applied."""
        try:
            return engine.Container(path)
        except engine.EngineError as e:
            msg, off = str(e), e.offset
            if self.change == "offset" and off is not None:
                off += 1
            elif self.change == "kind":
                other = "schema" if e.kind != "schema" else "dtype"
                raise engine.EngineError(msg, kind=other,
                                         offset=-1 if off is None else off) from None
            elif self.change == "numbers":
                head, tail = msg.split(": ", 1)
                msg = head + ": " + "".join("7" if c.isdigit() else c for c in tail)
            raise engine.EngineError(msg, kind=e.kind, offset=-1 if off is None
                                     else off) from None


def test_the_engine_agrees_with_the_oracle_on_every_corruption(tmp_path: Path
                                                                ) -> None:
    """The default draw: no disagreement, and most corruptions are refused."""
    h = reader_diff.header_cases(engine, tmp_path, 210, reader_diff.DEFAULT_SEED)
    x = reader_diff.index_cases(engine, tmp_path, 70, reader_diff.DEFAULT_SEED)
    assert (h.failures, x.failures) == ([], [])
    assert h.cases == 210 and 150 < h.refused < 210
    assert x.cases == 70 and 40 < x.refused < 70


@pytest.mark.parametrize("change", ["offset", "kind", "numbers"])
def test_a_wrong_field_of_an_error_fails(tmp_path: Path, change: str) -> None:
    """An engine whose errors are off by one byte, of another kind, or carry other
    numbers fails the reader differential."""
    h = reader_diff.header_cases(_Lying(change), tmp_path, 80, 3)
    assert h.failures, change
    first = h.failures[0]
    assert {"offset": "offset", "kind": "kind", "numbers": "message"}[change] in first


def test_an_accepting_engine_fails_the_indexes(tmp_path: Path) -> None:
    """An engine that accepts a container the oracle refuses is named."""
    class Accepts(_Lying):
        def Container(self, path: str) -> Any:  # noqa: N802
            try:
                return engine.Container(path)
            except engine.EngineError:
                ok = sorted(Path(path).glob("*.safetensors"))[0]
                return engine.Container(str(ok))
    x = reader_diff.index_cases(Accepts("none"), tmp_path, 30, 1)
    assert any("engine accepts" in f for f in x.failures)


def test_the_rendered_positions_are_the_bytes_of_the_text() -> None:
    """Every key position of a rendered document points at that key's opening quote."""
    doc = reader_diff.render(reader_diff.Obj([
        ("é", reader_diff.Obj([("a", [1, 2]), ("b", "x")])), ("c", None)]), base=8)
    for path, at in doc.keys.items():
        assert doc.text[at - 8:at - 7] == b'"', path
    assert doc.text[doc.values[(0, 0, 1)] - 8:][:1] == b"2"


def test_the_pinned_simulator_counts_are_the_oracles() -> None:
    """Every row of gate/sim_counts.json is what the oracle's simulator computes."""
    pinned = sim_check.load_counts()
    fresh = sim_check.oracle_counts()
    assert {k: v for k, v in pinned.items() if k != "cases"} == {
        k: v for k, v in fresh.items() if k != "cases"}
    assert pinned["cases"] and all(c in fresh["cases"] for c in pinned["cases"])


def test_an_unpinned_policy_is_judged_by_the_oracle(tmp_path: Path) -> None:
    """Without arc's pinned rows sim-counts runs them by the oracle, and passes."""
    pinned = sim_check.load_counts()
    pinned["cases"] = [c for c in pinned["cases"] if c["policy"] != "arc"]
    path = tmp_path / "counts.json"
    path.write_text(json.dumps(pinned))
    report = Report()
    sim_check.run_checks(engine, report, path)
    check, curves = report.checks
    assert curves["scenario"] == "sim-curves" and curves["passed"]
    assert check["passed"]
    left = [p for p in sim_check.policies()
            if all(c["policy"] != p for c in pinned["cases"])]
    assert "arc" in left
    assert check["detail"].endswith(
        f"runs of 7680 accesses (olmoe_299.jsonl), every count equal to the "
        f"oracle's ({len(sim_check.SIZES) * len(left)} unpinned, run by the "
        f"oracle now: {', '.join(left)})")
    assert check["detail"].startswith(f"{len(sim_check.cases())} runs")


def test_a_wrong_simulator_count_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """One eviction too many in one policy's run fails sim-counts, naming the run."""
    import xcache.engine.sim as real

    def simulate(*args: Any, **kw: Any) -> dict[str, Any]:
        r = real_simulate(*args, **kw)
        if args[1] == "arc" and args[3] == "step":
            r["evictions"] += 1
        return r

    real_simulate = real.simulate
    monkeypatch.setattr(real, "simulate", simulate)
    report = Report()
    sim_check.run_checks(engine, report)
    check, curves = report.checks
    assert curves["scenario"] == "sim-curves" and curves["passed"]
    assert not check["passed"]
    assert check["detail"].startswith(
        f"3 of {len(sim_check.cases())} runs differ; first: arc step 256 slots: "
        "evictions 3497 (oracle 3496)")


class _Run:
    """The least of a ScenarioRun that run_bounded needs."""

    def __init__(self, name: str, body: Any, report: Report) -> None:
        self.sc, self.variant, self.backend_name = {"name": name}, "", "engine"
        self.report, self.run = report, body


def test_the_watchdog_ends_the_run_after_the_first_timeout() -> None:
    """With stop_when_stuck, a stuck run fails once and later runs fail at once."""
    release = threading.Event()
    report = Report()
    WATCHDOG.reset(stop_when_stuck=True, cap=0.2)
    try:
        assert not run_bounded(_Run("stuck", release.wait, report), 60)
        ran = []
        assert not run_bounded(_Run("next", lambda: ran.append(1), report), 60)
        assert ran == []
        assert [c["detail"] for c in report.checks] == [
            "timed out after 0.2 s",
            "not run: the backend is stuck since stuck timed out"]
    finally:
        release.set()
        WATCHDOG.reset()


def test_without_the_watchdog_policy_every_run_still_runs() -> None:
    """By default (tests, outside caches) a timeout does not stop later runs."""
    release = threading.Event()
    report = Report()
    try:
        assert not run_bounded(_Run("stuck", release.wait, report), 0.2)
        ran = []
        assert run_bounded(_Run("next", lambda: ran.append(1), report), 5)
        assert ran == [1]
    finally:
        release.set()


def test_a_stuck_differential_check_fails_at_the_cap(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    """A reader that never returns fails reader-diff after the watchdog's time."""
    release = threading.Event()
    monkeypatch.setattr(reader_diff, "run_checks",
                        lambda *a, **k: release.wait() and [])
    monkeypatch.setattr(sim_check, "run_checks", lambda e, r: [])
    monkeypatch.setattr(open_probe, "run_checks", lambda e, w, r: [])
    monkeypatch.setattr(tensor_reads, "run_checks", lambda e, w, r: [])
    WATCHDOG.reset(cap=0.2)
    report = Report()
    try:
        names = differential.run_all(types.SimpleNamespace(), tmp_path, report)
    finally:
        release.set()
        WATCHDOG.reset()
    assert names == ["reader-diff"]
    assert [(c["check"], c["passed"]) for c in report.checks] == [
        ("reader-diff ran to completion", False)]


def test_error_fields_hold_what_both_backends_can_state() -> None:
    """An I/O failure keeps its key, a not-found its (absent) offset; a not-found
    from the engine with a byte offset differs from the oracle's."""
    from xcache.gate.error_fields import project
    from xcache.oracle import errors as oerr

    eng = engine.errors.EngineIOError("x", kind="io", offset=4096, layer=2,
                                      expert=5)
    assert project(eng, "io") == ["io", 2, 5, None]
    assert project(oerr.IOFailure("x", 2, 5), "io") == ["io", 2, 5, None]
    right = engine.errors.NotFoundError("x", kind="not_found", layer=1, expert=3)
    wrong = engine.errors.NotFoundError("x", kind="not_found", offset=1, layer=1,
                                        expert=3)
    oracle_says = project(oerr.NotFound("x"), "not_found")
    assert project(right, "not_found") == oracle_says == ["not_found", None, None,
                                                          None]
    assert project(wrong, "not_found") != oracle_says


def test_a_stream_whose_open_failed_keeps_its_label() -> None:
    """A failed stream_open still takes its label: the next and rest steps on it
    do nothing instead of stopping the run as CANNOT RUN."""
    from xcache.gate import state_ops

    run = types.SimpleNamespace(backend=types.SimpleNamespace(stream_open=None),
                                attempt=lambda call, *args: (False, None),
                                open_streams={})
    state_ops.stream_open(run, {"keys": [(0, 1)], "get_first": [], "label": "s"})
    state_ops.stream_next(run, {"label": "s", "count": 2})
    state_ops.stream_rest(run, {"label": "s"})
    assert run.open_streams == {}


def test_a_curve_off_at_one_size_fails() -> None:
    """A Belady step curve one miss off at one size fails sim-curves, naming
    the curve, the size and both counts; the other seven pass."""
    import numpy as np

    import xcache.engine.sim as real

    class Off:
        """The engine's sim with one curve's twentieth entry one miss off."""

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def curve(self, trace: Any, policy: str, mode: str = "step",
                  per_layer: bool = False) -> np.ndarray:
            got = real.curve(trace, policy, mode=mode, per_layer=per_layer)
            if (policy, mode, per_layer) == ("belady", "step", False):
                got = got.copy()
                got[19] += 1
            return got

    report = Report()
    trace = sim_check._trace()
    assert sim_check.curve_check(Off(), trace, report) == "sim-curves"
    (check,) = report.checks
    assert not check["passed"]
    from xcache.oracle.curves import trace_curve

    want = trace_curve(trace, "belady", "step")[19]
    assert check["detail"] == (
        "1 of 8 curves differ; first: belady step: 860 sizes (oracle 860), "
        f"first differing at 20 slots: {want + 1} misses (oracle {want})")

