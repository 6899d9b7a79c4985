"""The engine mutation catalogue and its runner (hunt/mutants)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from xcache.hunt.mutants import run as mrun
from xcache.hunt.mutants.catalogue import (
    CATALOGUE,
    CONTRACTS,
    KNOWN_SURVIVORS,
    Mutant,
    NotApplicable,
    apply_mutant,
)

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "engine"


@pytest.mark.parametrize("m", CATALOGUE, ids=lambda m: m.id)
def test_snippet_occurs_exactly_once(m: Mutant) -> None:
    """Every mutant's snippet occurs exactly once in its file on this checkout."""
    text = m.path(ENGINE).read_text(encoding="utf-8")
    assert text.count(m.original) == 1
    assert m.original != m.replacement


def test_catalogue_size_and_ids() -> None:
    """At least 40 mutants, ids M01.. unique and in order."""
    ids = [m.id for m in CATALOGUE]
    assert len(ids) >= 40
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert all(re.fullmatch(r"M\d\d", i) for i in ids)


def test_every_contract_is_covered() -> None:
    """Every contract tag has a mutant and every mutant's tag is a known one."""
    used = {m.contract for m in CATALOGUE}
    assert used == set(CONTRACTS)
    assert all(m.description and len(m.description) < 80 for m in CATALOGUE)


def test_known_survivors_are_catalogue_ids_with_reasons() -> None:
    """Each known survivor is a catalogue id with a stated reason."""
    ids = {m.id for m in CATALOGUE}
    for k, reason in KNOWN_SURVIVORS.items():
        assert k in ids
        assert reason.strip()


def _engine_copy(tmp_path: Path) -> Path:
    """A copy of this checkout's engine sources (no build)."""
    dest = tmp_path / "engine"
    shutil.copytree(ENGINE, dest, ignore=shutil.ignore_patterns(
        "__pycache__", "*.so"))
    return dest


def test_apply_edits_only_the_snippet(tmp_path: Path) -> None:
    """Planting a mutant changes its file by exactly the replacement."""
    eng = _engine_copy(tmp_path)
    m = CATALOGUE[0]
    before = m.path(eng).read_text()
    apply_mutant(m, eng)
    assert m.path(eng).read_text() == before.replace(m.original, m.replacement)


def test_apply_refuses_absent_and_repeated_snippets(tmp_path: Path) -> None:
    """A snippet found 0 or 2 times is NotApplicable, naming id, file and count."""
    eng = _engine_copy(tmp_path)
    absent = Mutant("X1", "xc_io.c", "no such text", "x", "d", "io-retry")
    twice = Mutant("X2", "xc_cache.c", "    s->holds--;\n", "", "d",
                   "holds-pins")
    outside = Mutant("X3", "../../setup.py", "setup", "x", "d", "check")
    with pytest.raises(NotApplicable, match=r"^X1: its snippet occurs 0 times "
                       r"in xc_io\.c \(it must occur once\)$"):
        apply_mutant(absent, eng)
    with pytest.raises(NotApplicable, match=r"^X2: its snippet occurs 2 times "
                       r"in xc_cache\.c \(it must occur once\)$"):
        apply_mutant(twice, eng)
    with pytest.raises(NotApplicable, match=r"^X3: \.\./\.\./setup\.py is "
                       r"outside the engine folder$"):
        apply_mutant(outside, eng)


def test_failed_checks_from_a_replay_report() -> None:
    """Failed checks are named scenario: check, once each, in report order."""
    report = {"checks": [
        {"scenario": "a", "check": "x", "passed": True},
        {"scenario": "a", "check": "y", "passed": False},
        {"scenario": "b", "check": "z", "passed": False},
        {"scenario": "a", "check": "y", "passed": False},
    ]}
    assert mrun.failed_checks(report) == ["a: y", "b: z"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--jobs", "0"], "hunt.mutants: --jobs 0: it must be at least 1"),
    (["--timeout", "0"], "hunt.mutants: --timeout 0: it must be above 0"),
    (["--replay-timeout", "-1"],
     "hunt.mutants: --replay-timeout -1: it must be above 0"),
    (["--only", "M01,M99"],
     f"hunt.mutants: --only 'M01,M99': no such mutant M99; ids are "
     f"M01..{CATALOGUE[-1].id}"),
    (["--pytest", " "], "hunt.mutants: --pytest: an empty selection"),
    (["--root", "/nonexistent"], "hunt.mutants: --root /nonexistent: no "
     "checkout there (expected replay.py and engine/)"),
])
def test_bad_options_exit_2_with_a_message(argv: list[str], message: str,
                                           capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    """A bad option is exit 2 with one line naming the option and the value."""
    assert mrun.main(argv) == 2
    assert capsys.readouterr().err.strip() == message


def test_bad_catalogue_file(tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    """A catalogue file that is not a list of mutants is exit 2, named."""
    bad = tmp_path / "c.json"
    bad.write_text('[{"id": "X1"}]')
    assert mrun.main(["--catalogue", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"hunt.mutants: --catalogue {bad}: entry 0 must have exactly the "
        "string fields id, file, original, replacement, description, contract")
    bad.write_text("{")
    assert mrun.main(["--catalogue", str(bad)]) == 2
    assert capsys.readouterr().err.startswith(
        f"hunt.mutants: --catalogue {bad}: cannot read it: ")


@pytest.mark.nosan  # builds and replays three engines (about a minute)
def test_runner_verdicts_on_a_tiny_catalogue(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Caught, missed, did-not-compile and not-applicable come out as such."""
    tiny = [
        {"id": "T1", "file": "xc_slot.c",
         "original": "if (rc == XC_OK) {\n        s->state = XC_SLOT_READY;",
         "replacement": "if (rc == XC_OK || rc == XC_E_SHORT_READ) {\n"
                        "        s->state = XC_SLOT_READY;",
         "description": "publish short reads", "contract": "short-read"},
        {"id": "T2", "file": "xc_slot.c",
         "original": "/* only a fresh reservation is stamped, once */",
         "replacement": "/* a fresh reservation is stamped once */",
         "description": "a comment", "contract": "publish"},
        {"id": "T3", "file": "xc_slot.c",
         "original": "        s->generation++;\n",
         "replacement": "        s->generation++\n",
         "description": "a missing semicolon", "contract": "publish"},
        {"id": "T4", "file": "xc_io.c", "original": "no such snippet",
         "replacement": "x", "description": "absent", "contract": "io-retry"},
    ]
    cat = tmp_path / "tiny.json"
    cat.write_text(json.dumps(tiny))
    out = tmp_path / "report.json"
    rc = mrun.main(["--catalogue", str(cat), "--jobs", "2", "--json", str(out)])
    assert rc == 1  # T2 survives
    doc = json.loads(out.read_text())
    verdicts = {m["id"]: m["replay"]["verdict"] for m in doc["mutants"]}
    assert verdicts == {"T1": "caught", "T2": "missed",
                        "T3": "did-not-compile", "T4": "not-applicable"}
    t1 = doc["mutants"][0]["replay"]
    assert "counter-window: truncated_shard publishes nothing" in t1["caught_by"]
    assert doc["survivors"] == ["T2"]
    assert doc["summary"] == {"caught": 1, "missed": 1, "did-not-compile": 1,
                              "not-applicable": 1}
    assert "survivors: T2" in capsys.readouterr().out


def test_the_behaviour_selection_names_existing_test_files() -> None:
    """Every path of BEHAVIOUR_TESTS is a test file or folder of this checkout."""
    from xcache.hunt.mutants.run import ROOT
    from xcache.hunt.mutants.selections import BEHAVIOUR_TESTS

    assert len(BEHAVIOUR_TESTS) == len(set(BEHAVIOUR_TESTS)) == 15
    for rel in BEHAVIOUR_TESTS:
        path = ROOT / rel
        assert path.is_dir() or (path.is_file() and path.name.startswith("test_")), rel
