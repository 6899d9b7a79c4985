"""The two example caches of opposite designs (examples/fetchcache,
examples/directcache), judged through their adapters alone: their faithful
builds FAIL nothing, and each planted defect the gate catches FAILs exactly
its own contracts.

fetchcache has no I/O of its own (the gate's fetch), a sampled LRU, holds
given back as a whole set, sticky failures and a silent prefetch with
reader threads; directcache reads aligned O_DIRECT windows of the shards it
parses itself (no index), knows one naming and one dtype, pins by flag,
batches one layer at a time and refuses a batch it cannot place whole.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest

from xcache.gate.outside import conformance

ROOT = Path(__file__).resolve().parents[2]

#: each example's faithful verdicts over the scenarios: (PASS, FAIL, N/A)
#: rows (the command adds the programs row: PASS on both)
FAITHFUL = {"fetchcache": (12, 0, 13), "directcache": (16, 0, 9)}

#: how many of the pinned programs each faithful example is judged on
PROGRAMS_PASSED = {"fetchcache": 45, "directcache": 30}

#: planted defects the gate catches, and exactly the contracts each FAILs
CAUGHT = {
    ("directcache", "BATCH_SELF_EVICT"): ["batch-residents"],
    ("directcache", "OPEN_NO_EINTR"): ["eintr"],
    ("directcache", "TRAILING_OK"): ["reader-refusals"],
    ("directcache", "PIN_VICTIM"): ["pins"],
    # its reads are per-tensor aligned windows: the faults placed at a byte
    # (faults-placed) are what reach them
    ("directcache", "SHORT_AS_EOF"): ["eintr"],
    ("directcache", "FAILED_PUBLISH"): ["io-errors"],
    ("fetchcache", "EVICT_HELD"): ["holds"],
    # judged exactly while nothing was evicted (prefetch-first-use), though
    # its policy is sampled
    ("fetchcache", "PREFETCH_HIT_PLAIN"): ["adjusted-hit-rate"],
    # a short fetch published: the gate's fetch poisons what it could not
    # read, so the expert served is not the file's
    ("fetchcache", "SHORT_AS_READY"): ["short-read"],
    # a hold never given back: every scenario after it meets a slot held
    # (the cache's own check names it), each under its own contract
    ("fetchcache", "RELEASE_KEEPS_LAST"): [
        "serial-reads", "counter-windows", "adjusted-hit-rate", "short-read",
        "eintr", "io-errors", "holds", "policies", "replaced-file",
        "reads-under-way"],
    # a failed fetch freed at once, not reported to the next get: judged
    # where nothing was evicted, the judge playing sticky failures
    # (failed-read-after; state-counters' end of file, under its contract)
    ("fetchcache", "STICKY_NEVER"): ["counter-windows", "io-errors"],
}


def _rows(tmp: Path, example: str, defect: str = "") -> list[dict[str, Any]]:
    """The rows of one conformance run of ``example`` (a defect's flag on)."""
    flag = f"-D{example.upper()}_DEFECT_{defect}" if defect else ""
    (tmp / "out").mkdir()
    with contextlib.redirect_stdout(io.StringIO()):
        rows, _ = conformance.run(ROOT / "examples" / example, tmp / "out",
                                  tmp / "work", [], 120.0,
                                  extra_cflags=(flag,) if flag else ())
    return rows


@pytest.mark.parametrize("example", sorted(FAITHFUL))
def test_a_faithful_example_fails_nothing(tmp_path: Path, example: str):
    """Each example, as written, PASSes or is N/A on every contract."""
    rows = _rows(tmp_path, example)
    count = tuple(sum(r["verdict"] == v for r in rows)
                  for v in ("PASS", "FAIL", "N/A"))
    assert count == FAITHFUL[example], [
        (r["contract"], r["first_failure"]) for r in rows
        if r["verdict"] == "FAIL"]


@pytest.mark.nosan
@pytest.mark.parametrize("example, defect", sorted(CAUGHT))
def test_a_planted_defect_fails_exactly_its_contracts(tmp_path: Path,
                                                      example: str,
                                                      defect: str):
    """A planted defect turns exactly its own contracts to FAIL."""
    rows = _rows(tmp_path, example, defect)
    assert [r["contract"] for r in rows if r["verdict"] == "FAIL"] == \
        CAUGHT[(example, defect)]


def test_the_examples_declare_opposite_designs():
    """fetchcache declares the designs of a callback cache, directcache those
    of a reader of its own; neither declares the other's (both count a get
    refused for want of a slot)."""
    from xcache.gate.outside.build import load_manifest  # noqa: PLC0415

    fetch = load_manifest(ROOT / "examples" / "fetchcache").design.declared()
    direct = load_manifest(ROOT / "examples" / "directcache").design.declared()
    assert fetch == {"holds": "whole-set", "failures": "sticky",
                     "prefetch": "silent", "policy": "sampled",
                     "io": "callback", "refused_gets": "counted",
                     "first_uses": "kept"}
    assert direct == {"batch_layers": "one", "reads": "aligned",
                      "batch_room": "whole", "refused_gets": "counted"}


@pytest.mark.nosan
def test_a_window_cut_short_serves_wrong_bytes_under_serial_reads(
        tmp_path: Path):
    """directcache WINDOW_END (a tensor crossing one block more than its
    length rounds to loses its tail): serial-reads FAILs on wrong bytes, as
    does every scenario reading such a tensor under its own first check."""
    rows = {r["contract"]: r for r in _rows(tmp_path, "directcache",
                                             "WINDOW_END")}
    assert rows["serial-reads"]["verdict"] == "FAIL"
    assert "reads wrong" in rows["serial-reads"]["first_failure"]
    assert "expected wrong_reads 0" in rows["serial-reads"]["first_failure"]



@pytest.mark.nosan
@pytest.mark.parametrize("example", sorted(FAITHFUL))
def test_a_faithful_example_passes_the_pinned_programs(tmp_path: Path,
                                                      example: str):
    """The programs every replay runs (gate/scenarios/programs.json), cut to
    what each example declares: none fails -- fetchcache's sticky failures
    played only while it cannot have dropped a failed slot."""
    from xcache.gate import programs  # noqa: PLC0415

    plan = programs.load_programs(programs.PROGRAMS_FILE)
    (tmp_path / "out").mkdir()
    with contextlib.redirect_stdout(io.StringIO()):
        rows, _ = conformance.run(ROOT / "examples" / example, tmp_path / "out",
                                  tmp_path / "work", [], 120.0, plan=plan,
                                  scenarios=False)
    assert [(r["contract"], r["verdict"], r["failed"]) for r in rows] == [
        ("programs", "PASS", 0)], rows[0]["first_failure"]
    assert rows[0]["passed"] == PROGRAMS_PASSED[example]
