"""The tinycache adapter's conformance report, its planted defects and its programs.

``tinycache-conformance.json`` beside this file is the whole report of the
clean build over every scenario; after a change that moves it on purpose,
write it again with ``python -m tests.outside.test_tinycache`` and read the
diff.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from xcache.gate import CannotRun
from xcache.gate.containers import make_target
from xcache.gate.outside import conformance
from xcache.gate.outside.backend import capabilities_of, outside_factory
from xcache.gate.outside.build import compile_module, load_manifest, verify_sources
from xcache.gate.outside.host import Host

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = ROOT / "examples" / "tinycache"
GOLDEN = Path(__file__).with_name("tinycache-conformance.json")

#: the clean tinycache's verdict of every contract over every scenario
REPORT = {
    "serial-reads": "PASS", "batch-reads": "PASS", "batch-residents": "PASS",
    "prefetch-not-hit": "PASS", "counter-windows": "PASS",
    "adjusted-hit-rate": "N/A", "short-read": "PASS", "eintr": "PASS",
    "open-failures": "PASS", "io-errors": "PASS", "key-bounds": "PASS",
    "pins": "PASS", "holds": "PASS", "policies": "PASS",
    "reader-refusals": "N/A", "replaced-file": "PASS", "changed-file": "N/A",
    "allocation": "N/A", "direct-io": "N/A", "streams": "N/A",
    "victim-order": "PASS", "reads-under-way": "N/A", "trace": "N/A",
    "invariant-check": "N/A", "relations": "PASS",
}

#: what each N/A row names as lacking, in the order the scenarios meet it
NA_MISSING = {
    "adjusted-hit-rate": ["counter:prefetch_first_uses", "option:io_threads"],
    "reader-refusals": ["op:reader"],
    "changed-file": ["option:verify"],
    "allocation": ["fault:alloc"],
    "direct-io": ["option:direct", "option:chunk_bytes"],
    "streams": ["op:lifetime", "op:trace", "option:chunk_bytes",
                "option:direct", "op:stream"],
    "reads-under-way": ["option:io_threads", "op:trace"],
    "trace": ["op:trace"],
    "invariant-check": ["op:break_check", "op:stream"],
}

#: each planted defect (TC_DEFECT) and the contracts it must break, over
#: every scenario, its own first: a miscount also breaks the relations
#: among the counters (a prefetch counted as a hit and a lookup, misses
#: kept across a reset: requests are no longer hits plus misses)
DEFECTS = {1: ("prefetch-not-hit",), 2: ("batch-residents",),
           3: ("key-bounds",), 4: ("eintr",), 5: ("short-read",),
           6: ("holds",), 7: ("counter-windows", "relations")}

#: programs the clean build passes (k3-mini, plain options): the defects
#: of PROGRAM_DEFECTS fail them with no hand-written scenario run
PROGRAMS = [{"container": "k3-mini", "option_set": "plain", "seed": s,
             "length": 24} for s in (0, 3, 4, 5)]
PROGRAM_DEFECTS = (1, 6, 7)


def _run(tmp: Path, only: list[str], defect: int = 0,
         plan: list[dict[str, Any]] | None = None, scenarios: bool = True
         ) -> dict[str, Any]:
    """Rows by contract of one conformance run (the build's output hidden)."""
    flags = (f"-DTC_DEFECT={defect}",) if defect else ()
    with contextlib.redirect_stdout(io.StringIO()):
        rows, _ = conformance.run(ADAPTER, tmp, tmp / "work", only, 120.0,
                                  extra_cflags=flags, plan=plan,
                                  scenarios=scenarios)
    return {r["contract"]: r for r in rows}


@pytest.fixture(scope="session")
def full(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The clean build over every scenario: its output folder and rows."""
    out = tmp_path_factory.mktemp("tc-full")
    return out, _run(out, [])


@pytest.fixture(scope="session")
def defects(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    """Every planted defect's rows over every scenario, once each."""
    return {d: _run(tmp_path_factory.mktemp(f"tc{d}"), [], d) for d in DEFECTS}


def _text(rows: dict[str, Any]) -> dict[str, str]:
    return {c: r["verdict"] for c, r in rows.items()}


def test_full_report_exactly(full: tuple[Path, dict[str, Any]]) -> None:
    """The whole conformance.json of the clean build is the pinned one."""
    out, rows = full
    assert _text(rows) == REPORT
    got = json.loads((out / "conformance.json").read_text())
    assert got == json.loads(GOLDEN.read_text())
    md = (out / "conformance.md").read_text()
    assert md.count("\n| ") == len(REPORT) + 1
    assert "| open-failures | a file that will not open is reported, no " \
           "descriptor is kept, and a later open serves | PASS | 5/0/0 |  |" in md


def test_na_rows_name_the_missing_capability(full: tuple[Path, dict[str, Any]]
                                             ) -> None:
    """Each N/A row names exactly what tinycache lacks, and it does lack it."""
    _, rows = full
    caps = capabilities_of(load_manifest(ADAPTER))
    na = {c: r["missing"] for c, r in rows.items() if r["verdict"] == "N/A"}
    assert na == NA_MISSING
    for c, missing in na.items():
        assert rows[c]["passed"] == rows[c]["failed"] == 0, c
        assert missing and all(not caps.has(m) for m in missing), c
    # a PASS row's N/A checks name only capabilities it lacks, too
    for c, r in rows.items():
        assert all(not caps.has(m) for m in r["missing"]), c


def test_clean_build_passes_the_defect_rows(full: tuple[Path, dict[str, Any]]
                                            ) -> None:
    """Each contract a defect targets is PASS on the clean build."""
    _, rows = full
    for contracts in DEFECTS.values():
        for contract in contracts:
            assert rows[contract]["verdict"] == "PASS", contract


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_defect_fails_its_contract_only(full: tuple[Path, dict[str, Any]],
                                        defects: dict[int, dict[str, Any]],
                                        defect: int) -> None:
    """A planted defect turns exactly its own contracts' PASS into FAIL."""
    clean, bad = _text(full[1]), _text(defects[defect])
    assert set(bad) == set(clean)
    moved = {c for c in clean if clean[c] != bad[c]}
    assert moved == set(DEFECTS[defect]), {
        c: defects[defect][c]["first_failure"] for c in moved}
    for contract in DEFECTS[defect]:
        assert bad[contract] == "FAIL"
        assert defects[defect][contract]["first_failure"]


def test_open_eintr_is_named_by_the_eintr_contract(
        defects: dict[int, dict[str, Any]]) -> None:
    """Without an EINTR retry (defect 4) the interrupted open fails under eintr."""
    row = defects[4]["eintr"]
    # F3 of faults-io, F6 after it (the key F3 lost is not resident: counted
    # against F3's contract), P1 of faults-placed and the three checks after
    # it whose residents P1's lost key changed (P3's first names no
    # residents), and open-eintr, whose get finds no cache open
    assert row["failed"] == 7
    assert row["first_failure"].startswith("faults-io: F3 F5 interrupted")
    assert defects[4]["io-errors"]["verdict"] == "PASS"


def test_programs_alone_catch_planted_defects(tmp_path: Path) -> None:
    """The seeded programs, with no scenario run, PASS on the clean build and
    FAIL on defects 1, 6 and 7, shrunk to a scenario that fails the same way."""
    clean = _run(tmp_path / "clean", [], plan=PROGRAMS, scenarios=False)
    assert list(clean) == ["programs"]
    row = clean["programs"]
    assert (row["verdict"], row["passed"], row["failed"], row["na"]) == \
        ("PASS", 4, 0, 0)
    assert row["not_compared"][:2] == ["hit_rate (counter:hit_rate)",
                                       "payload_bytes (counter:payload_bytes)"]
    assert set(row["left_out"]) <= {"op:stream", "op:hold_layer", "pins:count",
                                    "op:prefetch_speculative", "fault:alloc",
                                    "fault:evict_first", "op:reader",
                                    "op:drain", "op:lifetime", "op:concurrent"}
    for d in PROGRAM_DEFECTS:
        out = tmp_path / f"d{d}"
        bad = _run(out, [], d, plan=PROGRAMS, scenarios=False)["programs"]
        assert bad["verdict"] == "FAIL", d
        assert re.search(r"; shrunk to \d+ steps, first failing there step \d+",
                         bad["first_failure"]), bad["first_failure"]
        shrunk = json.loads((out / "programs-shrunk.json").read_text())
        assert shrunk == bad["scenario"]
        n_ops = [s for s in shrunk["steps"] if s["op"] != "check"]
        assert 1 <= len(n_ops) < 24, d


def test_programs_a_cache_cannot_take_are_na_naming_why(tmp_path: Path) -> None:
    """A program whose options tinycache lacks is N/A naming the option."""
    plan = [{"container": "k3-mini", "option_set": o, "seed": 0, "length": 24}
            for o in ("chunked", "readers", "traced")]
    row = _run(tmp_path, [], plan=plan, scenarios=False)["programs"]
    assert (row["verdict"], row["passed"], row["failed"], row["na"]) == \
        ("N/A", 0, 0, 3)
    assert row["missing"] == ["option:chunk_bytes", "option:io_threads",
                              "op:trace"]
    md = (tmp_path / "conformance.md").read_text()
    assert "| programs |" in md and "lacks option:chunk_bytes" in md


def test_open_files_counts_the_descriptors_the_cache_keeps(tmp_path: Path
                                                          ) -> None:
    """The open injector's descriptor count: 3 shards kept open while the
    cache is, none after close, none after an open that failed halfway."""
    m = load_manifest(ADAPTER)
    caps = capabilities_of(m)
    with contextlib.redirect_stdout(io.StringIO()):
        so, modname = compile_module(m, tmp_path / "build")
    host = Host(so, modname, tmp_path / "cache.log")
    target = make_target("mixtral-mini", tmp_path)
    folder = tmp_path / "copy"
    target.populate(folder)
    make = outside_factory(host, caps, m.name, target,
                           {"n_slots": 4, "policy": "lru"})
    parts = len(target.pieces(*target.keys[0]))
    try:
        backend = make(folder)
        assert make.open_files() == 3 * parts  # each tinycache opens each shard
        backend.close()
        assert make.open_files() == 0
        make.inject_open({"fault": "emfile", "nth": 2})
        with pytest.raises(Exception, match="shim code -3"):
            make(folder)
        make.clear_open()
        assert make.open_files() == 0
    finally:
        host.close()


def test_digest_mismatch_names_the_file(tmp_path: Path) -> None:
    """A source whose bytes differ from its pinned digest stops the build."""
    for name in ("xcs.toml", "tinycache.h", "shim.c"):
        (tmp_path / name).write_bytes((ADAPTER / name).read_bytes())
    (tmp_path / "tinycache.c").write_bytes(
        (ADAPTER / "tinycache.c").read_bytes() + b"\n")
    with pytest.raises(CannotRun, match=r"tinycache\.c: SHA-256 .* does not "
                                        "match the pinned"):
        verify_sources(load_manifest(tmp_path))


def test_cli_exits_as_the_report_says(tmp_path: Path) -> None:
    """``replay.py --cache`` exits 0 on a report without FAIL, 1 with one."""
    bad = tmp_path / "adapter"
    bad.mkdir()
    for name in ("tinycache.c", "tinycache.h", "shim.c"):
        (bad / name).write_bytes((ADAPTER / name).read_bytes())
    toml = (ADAPTER / "xcs.toml").read_text().replace(
        '"-pthread"]', '"-pthread", "-DTC_DEFECT=3"]')
    (bad / "xcs.toml").write_text(toml)

    def cli(adapter: Path, out: Path, scenario: str) -> int:
        return subprocess.run(
            [sys.executable, str(ROOT / "replay.py"), "--cache", str(adapter),
             str(out), "--scenario", scenario],
            capture_output=True, text=True, cwd=ROOT).returncode

    assert cli(ADAPTER, tmp_path / "ok", "key-bounds") == 0
    assert (tmp_path / "ok" / "conformance.md").is_file()
    assert cli(bad, tmp_path / "bad", "key-bounds") == 1
    rows = json.loads((tmp_path / "bad" / "conformance.json").read_text())[
        "contracts"]
    assert [r["contract"] for r in rows if r["verdict"] == "FAIL"] == [
        "key-bounds"]


if __name__ == "__main__":  # write the golden report again
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        _run(Path(tmp), [])
        GOLDEN.write_text((Path(tmp) / "conformance.json").read_text())
    print(f"wrote {GOLDEN}")


def test_the_judge_fails_no_check_of_a_design_it_plays(tmp_path: Path) -> None:
    """On a faithful tinycache (refused gets counted, no Python face) the
    judge fails no check: it runs the face scenarios (the cache's side N/A),
    and a scenario meeting a refusal takes its counts, not the engine's
    pinned ones (layout-computed ones too)."""
    with contextlib.redirect_stdout(io.StringIO()):
        rows, report = conformance.run(
            ADAPTER, tmp_path, tmp_path / "work",
            ["found-refused-before-read", "face-release-twice"], 120.0)
    assert report.failed == []
    lines = [(c["backend"], c["passed"]) for c in report.checks
             if c["scenario"].startswith("found-refused-before-read")
             and c["check"].startswith("every slot held: the get is refused")]
    assert lines == [("oracle", True)]  # the cache's side: N/A (no faults)
    face = [c for c in report.checks if c["scenario"] == "face-release-twice"]
    assert face and all(c["backend"] == "oracle" and c["passed"] for c in face)
    assert "FAIL" not in {r["verdict"] for r in rows}
