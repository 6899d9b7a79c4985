"""A backend lacking capabilities: its checks are N/A naming what it lacks.

The test backend is the oracle with less declared: no streams, no
prefetch counters, no read-ahead readers and untyped failures.  Every
check it can be judged on passes as the oracle's does; the others are
N/A, never FAIL and never left out, and the summary line counts them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import xcache.gate.scenarios as gate_scenarios
from xcache.gate import cli
from xcache.gate.backend_api import BackendFactory, Errors
from xcache.gate.backend_factory import OracleBackend, factory
from xcache.gate.report import Report

#: What the test backend does not declare.
LACKS = ("op:stream", "counter:prefetch_loads", "counter:prefetch_first_uses",
         "option:io_threads", "errors:typed")


class LimitedBackend(OracleBackend):
    """The oracle, declaring less and reporting no counter it lacks."""

    name = "limited"
    reference = False
    capabilities = OracleBackend.capabilities.without(*LACKS)

    @staticmethod
    def kind_of(exc: BaseException) -> str:
        """Untyped: every failure is only a failure."""
        return "failed"

    def values(self) -> dict[str, Any]:
        """The oracle's values less the counters it does not declare."""
        return {k: v for k, v in super().values().items()
                if k not in ("prefetch_loads", "prefetch_first_uses")}


SCENARIO = {
    "name": "limits", "title": "what a lesser backend can be judged on",
    "container": "k3-mini", "cache": {"n_slots": 8},
    "variants": [{"suffix": "", "cache": {}},
                 {"suffix": " (readers)", "cache": {"io_threads": 1}}],
    "steps": [
        {"op": "get", "keys": [0, 1, 0]},
        {"op": "check", "name": "gets",
         "expect": {"reads": 3, "wrong_reads": 0, "hits": 1, "misses": 2,
                    "invariants": "clean"}},
        {"op": "getmany", "keys": [2, 3]},
        {"op": "check", "name": "batch",
         "expect": {"published": 2, "prefetch_loads": 2}},
        {"op": "pin", "keys": [5]},
        {"op": "check", "name": "pin of an absent key",
         "expect": {"errors": ["not_found"], "last_error": "not_found",
                    "pinned": []}},
        {"op": "stream", "keys": [4, 6]},
        {"op": "check", "name": "stream", "expect": {"reads": 2}},
        {"op": "get", "keys": [0]},
        {"op": "check", "name": "after the stream", "expect": {"hits": 2}},
    ],
}


def _factory(kind: str, engine: Any, target: Any, opts: dict[str, Any]
             ) -> BackendFactory:
    """The limited backend in the engine's place, the real oracle beside it."""
    if kind == "limited":
        return BackendFactory.of(
            LimitedBackend, lambda folder: LimitedBackend(folder, target, opts))
    return factory(kind, engine, target, opts)


@pytest.fixture
def limited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The gate with SCENARIO alone, run on the limited backend and the oracle."""
    folder = tmp_path / "scenarios"
    folder.mkdir()
    (folder / "limits-k3-mini.json").write_text(json.dumps(SCENARIO))
    monkeypatch.setattr(gate_scenarios, "SCENARIO_DIR", folder)
    monkeypatch.setattr(gate_scenarios, "BACKENDS", ("limited", "oracle"))
    monkeypatch.setattr(gate_scenarios, "factory", _factory)
    return tmp_path


def test_the_test_backend_declares_what_it_lacks():
    """The wrapper lacks exactly LACKS of the oracle's capabilities."""
    caps = LimitedBackend.capabilities
    assert caps.missing(LACKS) == list(LACKS)
    assert OracleBackend.capabilities.missing(LACKS) == []
    assert caps.errors is Errors.FAILED


def _verdicts(report: Report) -> list[tuple[str, str, str]]:
    """(check, backend, PASS / FAIL / N/A and what is missing), sorted."""
    out = [(c["check"], c["backend"], "PASS" if c["passed"] else "FAIL")
           for c in report.checks]
    out += [(n["check"], n["backend"], "N/A " + ", ".join(n["missing"]))
            for n in report.not_applicable]
    return sorted(out)


def test_lacking_checks_are_na_naming_the_capability(limited):
    """Exact verdicts: PASS where judged, N/A with the capability, no FAIL."""
    from xcache import engine

    report = Report()
    names = gate_scenarios.run_scenarios(engine, limited / "work", report, [])
    assert names == ["limits", "limits (readers)"]
    checks = ["gets", "batch", "pin of an absent key", "stream",
              "after the stream"]
    assert _verdicts(report) == sorted([
        ("gets", "limited", "PASS"),
        ("batch", "limited", "N/A counter:prefetch_loads"),
        ("pin of an absent key", "limited", "PASS"),
        ("stream", "limited", "N/A op:stream"),
        ("after the stream", "limited", "N/A op:stream"),
        *[(c + " (readers)", "limited", "N/A option:io_threads")
          for c in checks],
        *[(c, "oracle", "PASS") for c in checks],
        *[(c + " (readers)", "oracle", "PASS") for c in checks],
    ])
    assert report.failed == []


def test_na_lines_and_the_summary_count(limited, capsys):
    """With -v the gate prints one N/A line each; the scenario's line and the
    summary line count them; --json lists them apart from the judged checks."""
    report = limited / "r.json"
    assert cli.run([str(limited / "out"), "--json", str(report), "-v"]) == 0
    out = capsys.readouterr().out
    na = [line.split("[")[0].strip() for line in out.splitlines()
          if line.startswith("  N/A")]
    assert na == ["N/A   batch", "N/A   stream", "N/A   after the stream",
                  "N/A   gets (readers)", "N/A   batch (readers)",
                  "N/A   pin of an absent key (readers)",
                  "N/A   stream (readers)", "N/A   after the stream (readers)"]
    assert ("  N/A   stream [limited]" + " " * 44 + " needs op:stream"
            in out.splitlines())
    assert next(ln for ln in out.splitlines()
                if ln.startswith(f"{'limits':<22} on")) == (
        f"{'limits':<22} on k3-mini         PASS  12  FAIL 0  N/A 8")
    summary = out.splitlines()[-1]
    assert summary.startswith("PASS: 1 scenario (2 variants), 11 differential "
                              "runs, 23 checks, 8 N/A "
                              "on its home container k3-mini, engine build ")
    written = json.loads(report.read_text())
    # the scenario's 12 and the 11 differential checks
    assert len(written["checks"]) == 23 and written["passed"] is True
    assert written["not_applicable"][:2] == [
        {"scenario": "limits", "backend": "limited", "check": "batch",
         "missing": ["counter:prefetch_loads"]},
        {"scenario": "limits", "backend": "limited", "check": "stream",
         "missing": ["op:stream"]}]
    assert len(written["not_applicable"]) == 8


class LimitedJudge(OracleBackend):
    """The oracle as the judge, with no streams and no prefetch_loads counter."""

    name = "judge"
    capabilities = OracleBackend.capabilities.without(
        "op:stream", "counter:prefetch_loads")

    def values(self) -> dict[str, Any]:
        """The oracle's values less prefetch_loads."""
        return {k: v for k, v in super().values().items()
                if k != "prefetch_loads"}


def test_what_the_judge_lacks_is_na_for_the_judged_too(tmp_path, monkeypatch):
    """On another container the engine's checks the judge cannot give are N/A."""
    from xcache import engine

    folder = tmp_path / "scenarios"
    folder.mkdir()
    (folder / "limits-k3-mini.json").write_text(json.dumps(SCENARIO))
    monkeypatch.setattr(gate_scenarios, "SCENARIO_DIR", folder)

    def backends(engine: Any, target: Any, opts: dict[str, Any]
                 ) -> list[BackendFactory]:
        return [factory("engine", engine, target, opts),
                BackendFactory.of(LimitedJudge, lambda f: LimitedJudge(
                    f, target, opts))]

    report = Report()
    names = gate_scenarios.run_scenarios(engine, tmp_path / "work", report, [],
                                         container="mixtral-mini",
                                         backends=backends)
    assert names == ["limits", "limits (readers)"]
    judged = "(of judge, the judge)"
    want = []
    for suffix in ("", " (readers)"):
        want += [
            ("gets" + suffix, "engine", "PASS"),
            ("batch" + suffix, "engine", f"N/A counter:prefetch_loads {judged}"),
            ("pin of an absent key" + suffix, "engine", "PASS"),
            ("stream" + suffix, "engine", f"N/A op:stream {judged}"),
            ("after the stream" + suffix, "engine", f"N/A op:stream {judged}"),
            ("gets" + suffix, "judge", "PASS"),
            ("batch" + suffix, "judge", "N/A counter:prefetch_loads"),
            ("pin of an absent key" + suffix, "judge", "PASS"),
            ("stream" + suffix, "judge", "N/A op:stream"),
            ("after the stream" + suffix, "judge", "N/A op:stream")]
    assert _verdicts(report) == sorted(want)


def test_an_in_process_run_gives_the_callers_engine_back(limited):
    """After an in-process gate run (which binds the engine to the build it
    made and then removes), the caller's own build is in use again."""
    from xcache.engine import _lib

    before = _lib.module()
    assert cli.run([str(limited / "out2")]) == 0
    assert _lib.module() is before
    assert Path(before.__file__ or "").is_file()
