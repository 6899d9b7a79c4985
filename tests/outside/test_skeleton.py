"""The way in: the skeleton adapter runs as it is, and the CI recipe of
docs/OUTSIDE_CACHES.md runs as written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "OUTSIDE_CACHES.md"


def test_skeleton_compiles_runs_and_is_all_na(tmp_path: Path) -> None:
    """examples/skeleton: exit 0, every contract N/A, each naming what it lacks."""
    got = subprocess.run([sys.executable, str(ROOT / "replay.py"), "--cache",
                          str(ROOT / "examples" / "skeleton"),
                          str(tmp_path / "out")], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr
    assert "warning" not in got.stderr
    assert got.stdout.splitlines()[-1].startswith(
        "PASS: 26 contracts, 0 PASS, 0 FAIL, 26 N/A; report in ")
    rows = json.loads((tmp_path / "out" / "conformance.json").read_text())[
        "contracts"]
    assert {r["verdict"] for r in rows} == {"N/A"}
    assert rows[0]["contract"] == "serial-reads"
    assert rows[0]["missing"][:1] == ["op:get"]


def recipe() -> list[str]:
    """The command lines of the doc's CI recipe block."""
    text = DOC.read_text()
    block = text.split("<!-- ci-recipe", 1)[1].split("```sh\n", 1)[1]
    return [ln for ln in block.split("```", 1)[0].splitlines()
            if ln.strip() and not ln.startswith("#")]


def test_ci_recipe_runs_as_written(tmp_path: Path) -> None:
    """Each line of the recipe, in a fresh folder with the installed
    commands on PATH, exits 0; the JUnit XML has one testcase per contract
    and no failure, the JSON the same rows as the report."""
    lines = recipe()
    assert lines[0].startswith("xcache-replay --cache tinycache conformance")
    env = {**os.environ,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                   f"{os.environ.get('PATH', '')}"}
    for line in lines:
        got = subprocess.run(line, shell=True, cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
        assert got.returncode == 0, (line, got.stdout[-2000:], got.stderr)
    suite = ET.parse(tmp_path / "conformance-junit.xml").getroot()
    cases = suite.findall("testcase")
    assert len(cases) == 26 and suite.get("tests") == "26"
    assert suite.findall("testcase/failure") == []
    assert len(suite.findall("testcase/skipped")) == 9
    names = [c.get("name") for c in cases]
    data = json.loads((tmp_path / "conformance.json").read_text())
    assert names == [r["contract"] for r in data["contracts"]]
    assert data == json.loads(
        (tmp_path / "conformance" / "conformance.json").read_text())
