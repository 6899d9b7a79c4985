"""The tinycache adapter's conformance report and its planted defects."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from gate import CannotRun
from gate.outside import conformance
from gate.outside.build import load_manifest, verify_sources

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = ROOT / "examples" / "tinycache"

#: the scenarios the defects need (the full set runs once, for the report)
SMALL = ("batch-residents-pins", "counter-window", "key-bounds", "state-holds",
         "held-victim", "reset-window")
#: the I/O fault scenario (EINTR), apart: its checks pin counters that a
#: prefetch counted as a hit (defect 1) breaks too
IO = ("faults-io",)

#: the clean tinycache's verdict of every contract over every scenario
REPORT = {
    "serial-reads": "PASS", "batch-reads": "PASS", "batch-residents": "PASS",
    "prefetch-not-hit": "PASS", "counter-windows": "PASS",
    "adjusted-hit-rate": "N/A",
    "short-read": "FAIL", "eintr": "PASS", "io-errors": "FAIL",
    "key-bounds": "PASS", "pins": "N/A", "holds": "PASS", "policies": "PASS",
    "reader-refusals": "FAIL", "replaced-file": "PASS", "allocation": "N/A",
    "direct-io": "N/A", "streams": "N/A", "victim-order": "FAIL",
    "reads-under-way": "N/A", "trace": "N/A", "invariant-check": "N/A",
    # the programs' shrunk findings (found-*, hold-layer-refused) judge no
    # contract of their own; what tinycache can run of them passes
    "other": "PASS",
}

#: each planted defect (TC_DEFECT): the one contract it must break, and the
#: scenarios it is judged on (the clean build is judged on the same ones).
#: The reference scenario is left out: its "mixed counters" check, after a
#: reset and a batch, is broken by both 1 and 7.
DEFECTS = {1: ("prefetch-not-hit", SMALL), 2: ("batch-residents", SMALL),
           3: ("key-bounds", SMALL), 4: ("eintr", IO), 5: ("short-read", SMALL),
           6: ("holds", SMALL), 7: ("counter-windows", SMALL)}


def _run(tmp: Path, only: list[str], defect: int = 0) -> dict[str, Any]:
    """Rows by contract of one conformance run (the build's output hidden)."""
    flags = (f"-DTC_DEFECT={defect}",) if defect else ()
    with contextlib.redirect_stdout(io.StringIO()):
        rows, _ = conformance.run(ADAPTER, tmp, tmp / "work", only, 120.0,
                                  extra_cflags=flags)
    return {r["contract"]: r for r in rows}


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory
         ) -> dict[tuple[int, tuple[str, ...]], dict[str, Any]]:
    """Rows of the clean build and of every defect on its scenarios, once each."""
    plan = {(0, SMALL), (0, IO), *((d, sel) for d, (_, sel) in DEFECTS.items())}
    return {(d, sel): _run(tmp_path_factory.mktemp(f"tc{d}"), list(sel), d)
            for d, sel in sorted(plan)}


def test_full_report_exactly(tmp_path: Path) -> None:
    """Every contract's verdict over every scenario is the one pinned here."""
    rows = _run(tmp_path, [])
    assert {c: r["verdict"] for c, r in rows.items()} == REPORT
    assert (tmp_path / "conformance.md").read_text().count("\n| ") == len(REPORT) + 1
    assert '"contracts"' in (tmp_path / "conformance.json").read_text()
    assert rows["reader-refusals"]["first_failure"].startswith(
        "faults-corrupt: F15 a 5-byte file is too short: last_error null")
    # tc_prefetch stops at the first failed read: the rest of the batch is lost
    assert rows["io-errors"]["first_failure"].startswith(
        "faults-io: F6 a batch publishes exactly the reads that succeeded: "
        "published 1, prefetch_loads 1")


def test_na_rows_name_the_missing_capability(tmp_path: Path) -> None:
    """The N/A rows name what tinycache lacks, and no N/A row lacks nothing."""
    rows = _run(tmp_path, ["faults-alloc", "trace-records", "check-probe",
                           "batch-residents-pins", "chunk-faults"])
    assert rows["short-read"]["missing"] == ["option:chunk_bytes"]
    assert rows["allocation"]["missing"] == ["fault:alloc"]
    assert rows["trace"]["missing"] == ["op:trace"]
    assert rows["invariant-check"]["missing"] == ["op:break_check"]
    assert rows["pins"]["missing"] == ["pins:count", "policy:fifo"]
    assert rows["adjusted-hit-rate"]["verdict"] == "N/A"
    assert rows["adjusted-hit-rate"]["missing"][0] == "counter:prefetch_first_uses"


def test_clean_build_passes_the_defect_rows(runs: dict[Any, Any]) -> None:
    """Each contract a defect targets is PASS on the clean build."""
    for contract, sel in DEFECTS.values():
        assert runs[(0, sel)][contract]["verdict"] == "PASS", contract


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_defect_fails_its_contract_only(runs: dict[Any, Any], defect: int) -> None:
    """A planted defect turns exactly its own contract's PASS into FAIL."""
    contract, sel = DEFECTS[defect]
    clean = {c: r["verdict"] for c, r in runs[(0, sel)].items()}
    bad = {c: r["verdict"] for c, r in runs[(defect, sel)].items()}
    assert set(bad) == set(clean)
    assert {c for c in clean if clean[c] != bad[c]} == {contract}
    assert bad[contract] == "FAIL"
    assert runs[(defect, sel)][contract]["first_failure"]


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
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    def cli(out: Path, scenario: str) -> int:
        return subprocess.run(
            [sys.executable, str(ROOT / "replay.py"), "--cache", str(ADAPTER),
             str(out), "--scenario", scenario],
            capture_output=True, text=True, cwd=ROOT).returncode

    assert cli(tmp_path / "ok", "key-bounds") == 0
    assert (tmp_path / "ok" / "conformance.md").is_file()
    assert cli(tmp_path / "bad", "reader-overlap") == 1
    assert json.loads((tmp_path / "bad" / "conformance.json").read_text())[
        "contracts"][0]["contract"] == "serial-reads"
