"""The tinycache adapter's conformance report and its planted defects."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest

from gate import CannotRun
from gate.outside import conformance
from gate.outside.build import load_manifest, verify_sources

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = ROOT / "examples" / "tinycache"

#: the scenarios the defects need (the full set runs once, for the report)
SMALL = ["batch-residents-pins", "counter-window", "key-bounds", "state-holds",
         "held-victim", "reset-window"]

#: the clean tinycache's verdict of every contract over every scenario
REPORT = {
    "serial-reads": "PASS", "batch-reads": "PASS", "batch-residents": "PASS",
    "prefetch-not-hit": "PASS", "counter-windows": "PASS",
    "adjusted-hit-rate": "PASS", "truncated-shard": "PASS",
    "short-read": "N/A", "eintr": "N/A", "io-errors": "N/A",
    "key-bounds": "PASS", "pins": "N/A", "holds": "PASS", "policies": "PASS",
    "reader-refusals": "FAIL", "replaced-file": "PASS", "allocation": "N/A",
    "direct-io": "N/A", "streams": "N/A", "victim-order": "FAIL",
    "reads-under-way": "N/A", "trace": "N/A", "invariant-check": "N/A",
}

#: each planted defect (TC_DEFECT) and the one contract it must break (4,
#: no EINTR retry, needs fault:io).  The reference scenario is left out of
#: SMALL: its "mixed counters" check, after a reset and a batch, is broken
#: by both 1 and 7.
DEFECTS = {1: "prefetch-not-hit", 2: "batch-residents", 3: "key-bounds",
           5: "truncated-shard", 6: "holds", 7: "counter-windows"}


def _run(tmp: Path, only: list[str], defect: int = 0) -> dict[str, Any]:
    """Rows by contract of one conformance run (the build's output hidden)."""
    flags = (f"-DTC_DEFECT={defect}",) if defect else ()
    with contextlib.redirect_stdout(io.StringIO()):
        rows, _ = conformance.run(ADAPTER, tmp, tmp / "work", only, 120.0,
                                  extra_cflags=flags)
    return {r["contract"]: r for r in rows}


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    """The small selection's rows of the clean build and of every defect, once."""
    return {d: _run(tmp_path_factory.mktemp(f"tc{d}"), SMALL, d)
            for d in [0, *DEFECTS]}


def test_full_report_exactly(tmp_path: Path) -> None:
    """Every contract's verdict over every scenario is the one pinned here."""
    rows = _run(tmp_path, [])
    assert {c: r["verdict"] for c, r in rows.items()} == REPORT
    assert (tmp_path / "conformance.md").read_text().count("\n| ") == len(REPORT) + 1
    assert '"contracts"' in (tmp_path / "conformance.json").read_text()
    assert rows["reader-refusals"]["first_failure"].startswith(
        "faults-corrupt: F15 a 5-byte file is too short: last_error null")


def test_na_rows_name_the_missing_capability(tmp_path: Path) -> None:
    """The N/A rows name what tinycache lacks, and no N/A row lacks nothing."""
    rows = _run(tmp_path, ["faults-io", "faults-alloc", "trace-records",
                           "check-probe", "batch-residents-pins"])
    assert rows["io-errors"]["missing"] == ["fault:io"]
    assert rows["allocation"]["missing"] == ["fault:alloc"]
    assert rows["trace"]["missing"] == ["op:trace"]
    assert rows["invariant-check"]["missing"] == ["op:break_check"]
    assert rows["pins"]["missing"] == ["pins:count", "policy:fifo"]


def test_clean_small_selection_passes_the_defect_rows(runs: dict[int, Any]) -> None:
    """Each contract a defect targets is PASS on the clean build."""
    for contract in DEFECTS.values():
        assert runs[0][contract]["verdict"] == "PASS", contract


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_defect_fails_its_contract_only(runs: dict[int, Any], defect: int) -> None:
    """A planted defect turns exactly its own contract's PASS into FAIL."""
    clean = {c: r["verdict"] for c, r in runs[0].items()}
    bad = {c: r["verdict"] for c, r in runs[defect].items()}
    changed = {c for c in clean if clean[c] != bad[c]}
    assert changed == {DEFECTS[defect]}
    assert bad[DEFECTS[defect]] == "FAIL"
    assert runs[defect][DEFECTS[defect]]["first_failure"]


def test_digest_mismatch_names_the_file(tmp_path: Path) -> None:
    """A source whose bytes differ from its pinned digest stops the build."""
    for name in ("xcs.toml", "tinycache.h", "shim.c"):
        (tmp_path / name).write_bytes((ADAPTER / name).read_bytes())
    (tmp_path / "tinycache.c").write_bytes(
        (ADAPTER / "tinycache.c").read_bytes() + b"\n")
    with pytest.raises(CannotRun, match=r"tinycache\.c: SHA-256 .* does not "
                                        "match the pinned"):
        verify_sources(load_manifest(tmp_path))
