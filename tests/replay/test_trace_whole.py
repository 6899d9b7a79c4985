"""The gate judges the engine's trace file whole (gate/trace_check.py): the
oracle's header equals the engine's field by field, every record field is
compared, a cache opened over a longer trace replaces it, and a trace file
edited by one byte anywhere fails the pinned scenario on the engine alone.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from xcache import engine
from xcache.gate import trace_check
from xcache.gate.backend_factory import EngineBackend, OracleBackend
from xcache.gate.containers import Target, make_target
from xcache.gate.report import Report
from xcache.gate.scenarios import run_scenarios

GAPPED = "gate/scenarios/trace-gapped-layers.toml"

#: The header the engine writes, and the oracle computes, over each
#: container with 6 slots (the fingerprint of docs/TRACE_FORMAT.md).
HEADERS = {
    "k3-mini": ("d6e8b69733720ffe", 1, 24, 4),
    "deepseek-mini": ("5af3f7bdc2b515af", 4, 16, 4),
    "gptoss-mini": ("d93f85f70390917b", 3, 8, 4),
    GAPPED: ("d509793c1c7e73c7", 5, 8, 2),
}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the containers are generated, once for the module."""
    return tmp_path_factory.mktemp("trace-whole")


def _backends(target: Target, tmp_path: Path, **opts: Any
              ) -> tuple[EngineBackend, OracleBackend]:
    o = {"n_slots": 6, "trace": True, **opts}
    folders = []
    for side in ("e", "o"):
        folder = tmp_path / side
        shutil.copytree(target.pristine, folder)
        folders.append(folder)
    return (EngineBackend(engine, folders[0], target, o),
            OracleBackend(folders[1], target, o))


class _Run:
    """What trace_check.take reads of a scenario run."""

    def __init__(self, backend: Any) -> None:
        self.backend, self.trace_of, self.trace_seen = backend, None, 0


@pytest.mark.parametrize("ref", sorted(HEADERS))
def test_the_oracle_header_is_the_engine_header_field_by_field(
        ref: str, work: Path, tmp_path: Path) -> None:
    """Every header field the format defines, engine and oracle, exactly."""
    target = make_target(ref, work)
    eng, orc = _backends(target, tmp_path)
    try:
        got = {b.name: trace_check.take(_Run(b)) for b in (eng, orc)}
    finally:
        eng.close()
        orc.close()
    fingerprint, layer_limit, n_experts, top_k = HEADERS[ref]
    want = {"magic": "XCTRACE1", "version": 1, "record_bytes": 24,
            "fingerprint": fingerprint, "layer_limit": layer_limit,
            "n_experts": n_experts, "top_k": top_k, "n_slots": 6,
            "reserved": 0}
    for side in ("engine", "oracle"):
        assert got[side]["trace_header"] == want, side
        assert got[side]["trace_file"]["bytes"] == 48
    assert got["engine"] == got["oracle"]


def test_every_record_field_engine_and_oracle(work: Path, tmp_path: Path) -> None:
    """Steps, layers (1, 3, 4: indices, not places), kinds, outcomes, the file."""
    target = make_target(GAPPED, work)
    eng, orc = _backends(target, tmp_path)
    try:
        for b in (eng, orc):
            b.set_step(2**40 + 7)
            b.get(4, 6)
            b.getmany([(3, 1), (4, 6)])
            b.set_step(2**64 - 1)
            b.get(1, 0)
        got = [trace_check.take(_Run(b)) for b in (eng, orc)]
        assert eng.trace_file() == orc.trace_file()
    finally:
        eng.close()
        orc.close()
    assert got[0] == got[1]
    assert got[0]["trace"] == [[4, 6, "get", "miss"],
                               [3, 1, "prefetch", "issued"],
                               [4, 6, "prefetch", "resident"],
                               [1, 0, "get", "miss"]]
    assert got[0]["trace_steps"] == [2**40 + 7] * 3 + [2**64 - 1]
    assert got[0]["trace_file"] == {"bytes": 48 + 4 * 24, "records": 4,
                                    "trailing": "", "reserved": [],
                                    "sha256": got[0]["trace_file"]["sha256"]}


def _scenario(work: Path, name: str) -> Report:
    report = Report()
    run_scenarios(engine, work, report, [name])
    return report


@pytest.mark.parametrize("name", ["trace-file", "trace-gapped-layers",
                                  "trace-reopen"])
def test_the_pinned_trace_scenarios_pass(name: str, tmp_path: Path) -> None:
    """Each pinned trace scenario passes on the engine and the oracle."""
    report = _scenario(tmp_path, name)
    assert not report.failed, [c["detail"] for c in report.failed]
    assert {c["backend"] for c in report.checks} == {"engine", "oracle"}


#: One byte of the engine's file changed (offset, the value that must
#: then differ): the header's fields, the first record's fields, a byte more.
EDITS = [
    (0, "trace_header"),    # magic
    (8, "trace_header"),    # version
    (12, "trace_header"),   # record_bytes
    (16, "trace_header"),   # fingerprint, lowest byte
    (23, "trace_header"),   # fingerprint, highest byte
    (24, "trace_header"),   # layer_limit
    (28, "trace_header"),   # n_experts
    (32, "trace_header"),   # top_k
    (36, "trace_header"),   # n_slots
    (47, "trace_header"),   # reserved
    (48, "trace_steps"),    # the first record's step
    (55, "trace_steps"),    # its step's highest byte
    (56, "trace"),          # its layer
    (60, "trace"),          # its expert
    (64, "trace"),          # its kind
    (65, "trace"),          # its outcome
    (66, "trace_file"),     # its reserved bytes
    (71, "trace_file"),
    (None, "trace_file"),   # one byte after the last record
]


@pytest.mark.parametrize("at,value", EDITS)
def test_a_trace_edited_by_one_byte_fails_on_the_engine(
        at: int | None, value: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's file with one byte changed fails trace-file's last check,
    naming the value that differs; the oracle passes."""
    real = trace_check.engine_file

    def edited(backend: Any) -> bytes:
        raw = real(backend)
        if len(raw) <= 48:
            return raw  # the first check: the header alone, untouched
        if at is None:
            return raw + b"\0"
        return raw[:at] + bytes([raw[at] ^ 0x01]) + raw[at + 1:]

    monkeypatch.setattr(trace_check, "engine_file", edited)
    report = _scenario(tmp_path, "trace-file")
    failed = report.failed
    assert failed and {c["backend"] for c in failed} == {"engine"}
    assert [c["check"].split(";")[0] for c in failed] == [
        "every record carries its layer's index (never its place in the "
        "cache's list) and the step set before it"]
    bad = {k for k, v in failed[0]["expected"].items()
           if failed[0]["actual"].get(k) != v}
    assert value in bad
    assert "trace_file" in bad  # the digest sees every byte


def test_a_reopen_that_leaves_the_earlier_records_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine whose second open kept the earlier trace's tail (no cut to
    the header) fails trace-reopen's checks after the open, on the engine."""
    real = trace_check.engine_file
    first: dict[str, tuple[Any, bytes]] = {}

    def kept(backend: Any) -> bytes:
        raw = real(backend)
        path = str(backend.trace_path)
        if path in first and first[path][0] is not backend:
            return raw + first[path][1][len(raw):]  # not written over
        first[path] = (backend, raw)
        return raw

    monkeypatch.setattr(trace_check, "engine_file", kept)
    report = _scenario(tmp_path, "trace-reopen")
    assert [c["check"] for c in report.failed] == [
        "a cache opened over it: the file is its header alone, nothing of "
        "the earlier trace left",
        "its records follow its header, of step 0, and the file ends after "
        "them"]
    assert {c["backend"] for c in report.failed} == {"engine"}
    first = report.failed[0]
    assert first["actual"]["trace_records"] == 16
    assert first["actual"]["trace_file"]["bytes"] == 48 + 16 * 24
