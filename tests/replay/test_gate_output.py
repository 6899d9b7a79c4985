"""What the gate prints: one line per scenario, every check with -v, a failure in full.

The lines are the ones docs/CI.md ("Report") shows; the subprocess tests of
tests/replay/test_gate.py and test_containers.py hold a whole run to them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xcache.gate import cli
from xcache.gate.pins import build_id, current_digests, describe_build
from xcache.gate.report import Report

ROOT = Path(__file__).resolve().parents[2]

#: a twin's layout as the scenarios' last line gives it
ABOUT = "3 MoE layers x 8 experts, top-2"
LONG = list(range(10))  # a list a check line abridges to "[10 items]"


def _scenario(report: Report) -> None:
    """One scenario on the twin: two passes, a failure, an N/A."""
    report.begin("reference", "TWIN", "the reference cache test: k3-mini",
                 home="k3-mini", about=ABOUT)
    report.add("reference", "engine", "reads", True, "reads 72",
               {"reads": 72}, {"reads": 72})
    report.add("reference", "oracle", "reads", True, "reads 72",
               {"reads": 72}, {"reads": 72})
    report.add("reference", "engine", "passes", False,
               "misses 71, resident [10 items]; expected misses 72, "
               "resident [11 items]",
               {"misses": 72, "hits": 0, "resident": [*LONG, 10]},
               {"misses": 71, "hits": 0, "resident": LONG})
    report.na("reference", "engine", "stream", ["op:stream"])
    report.end()


FAILURE = [
    "  FAIL  passes [engine]" + " " * 45 + " misses 71, resident [10 items]; "
    "expected misses 72, resident [11 items]",
    "        misses: expected 72, actual 71",
    "        resident: expected [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "
    "actual [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"]
LINE = "reference              on TWIN            PASS   2  FAIL 1  N/A 1"


def test_default_prints_failures_in_full_and_one_line_per_scenario(capsys):
    """Without -v: no passing or N/A check line; the failure whole; the
    scenario's line with its counts."""
    report = Report()
    _scenario(report)
    assert capsys.readouterr().out.splitlines() == [*FAILURE, LINE]
    assert len(report.checks) == 3 and len(report.not_applicable) == 1
    assert report.containers == {"TWIN": ABOUT}


def test_verbose_prints_the_header_and_every_check(capsys):
    """With -v: the header names the container under test, its layout and the
    home, the title without what it says of the home, then every check in
    order (the failure as in full as without -v), then the same line."""
    _scenario(Report(verbose=True))
    assert capsys.readouterr().out.splitlines() == [
        f"reference on TWIN ({ABOUT}; written for k3-mini): the reference "
        "cache test",
        "  PASS  reads [engine]" + " " * 46 + " reads 72",
        "  PASS  reads [oracle]" + " " * 46 + " reads 72",
        *FAILURE,
        "  N/A   stream [engine]" + " " * 45 + " needs op:stream",
        LINE]


def test_verbose_at_home_prints_the_title_whole(capsys):
    """On its home container the header is the scenario, the container and the title."""
    report = Report(verbose=True)
    report.begin("reference", "k3-mini", "the reference cache test: k3-mini, "
                 "8 slots", about="2 MoE layers x 12 experts, top-4")
    assert capsys.readouterr().out == (
        "reference on k3-mini: the reference cache test: k3-mini, 8 slots\n")


@pytest.mark.parametrize(("title", "left"), [
    ("the reference cache test: k3-mini, 8 slots for 24 experts, top-4, LRU",
     "the reference cache test"),
    ("check() names each test (docs/CACHE.md \"Invariants\"): k3-mini",
     "check() names each test (docs/CACHE.md \"Invariants\")"),
    ("I/O faults: k3-mini 8 slots", "I/O faults"),
    ("a shard replaced by another file (faults/README.md F24, F26)",
     "a shard replaced by another file (faults/README.md F24, F26)"),
    ("runs on k3-minis: k3-miniature", "runs on k3-minis: k3-miniature"),
])
def test_title_off_home_drops_only_the_closing_part_on_the_home(title, left):
    """The closing ``: HOME, ...`` goes; a title without one is kept whole."""
    from xcache.gate.report import title_off_home

    assert title_off_home(title, "k3-mini") == left


def test_every_scenario_title_on_a_twin_says_nothing_of_its_home():
    """No pinned scenario's title, its home part left out, names its home."""
    from xcache.gate.report import title_off_home
    from xcache.gate.scenarios import SCENARIO_DIR

    for path in sorted(SCENARIO_DIR.glob("*.json")):
        sc = json.loads(path.read_text())
        if not isinstance(sc, dict) or "title" not in sc:
            continue
        assert sc["container"] not in title_off_home(sc["title"],
                                                     sc["container"]), path.name


def test_a_skipped_scenario_is_its_line_with_the_reason(capsys):
    """A scenario that cannot apply prints one SKIP line naming why."""
    report = Report()
    report.begin("state-direct", "TWIN", about=ABOUT)
    report.skip("state-direct", "needs direct_ok")
    report.end()
    report.end()  # nothing open: nothing printed
    assert capsys.readouterr().out.splitlines() == [
        "state-direct           on TWIN            SKIP  needs direct_ok"]
    assert report.skipped == [{"scenario": "state-direct",
                               "reason": "needs direct_ok"}]


def test_a_timeout_failure_is_not_said_twice(capsys):
    """A failure whose line already holds its actual value adds no lines."""
    report = Report()
    report.add("stuck", "engine", "stuck ran to completion", False,
               "timed out after 2 s", "completion", "timed out after 2 s")
    assert capsys.readouterr().out.splitlines() == [
        "  FAIL  stuck ran to completion [engine]" + " " * 28
        + " timed out after 2 s"]


def test_last_line_names_the_container_the_build_and_the_verdict(capsys):
    """--container: the folder and its layout; home runs: every container."""
    report = Report()
    _scenario(report)
    assert cli.last_line(report, 3, 0, "TWIN", "0123456789ab") == (
        "FAIL: 1 scenario (3 variants), 3 checks, 1 N/A, 1 failed on TWIN "
        f"({ABOUT}), engine build 0123456789ab")
    home = Report()
    home.begin("reference", "k3-mini")
    home.add("reference", "engine", "reads", True, "", {}, {})
    home.end()
    home.begin("programs", "2 containers", on=["k3-mini", "gptoss-mini"])
    home.end()
    assert cli.last_line(home, 1, 12, None, "0123456789ab") == (
        "PASS: 1 scenario (1 variants), 12 programs, 1 checks on their home "
        "containers (k3-mini, gptoss-mini), engine build 0123456789ab")


def test_build_id_is_the_digest_of_the_pinned_digests():
    """The build's name is the SHA-256 of `name digest` lines, sorted, cut to 12."""
    digests = {"b.c": "22", "a.c": "11"}
    assert build_id(digests) == hashlib.sha256(b"a.c 11\nb.c 22\n").hexdigest()[:12]
    assert build_id({**digests, "b.c": "23"}) != build_id(digests)
    pins = json.loads((ROOT / "engine" / "pins.json").read_text())["sha256"]
    assert build_id(pins) == build_id(current_digests(ROOT / "engine"))


def test_describe_build_says_when_the_tree_left_its_pins(tmp_path):
    """--version's second line counts the sources that differ from the pins."""
    engine = tmp_path / "engine"
    shutil.copytree(ROOT / "engine", engine,
                    ignore=shutil.ignore_patterns("*.so", "_xc.c", "__pycache__"))
    pins = json.loads((engine / "pins.json").read_text())["sha256"]
    head = (f"engine build {build_id(pins)}: {len(pins)} pinned sources in "
            f"{engine / 'pins.json'}; ")
    assert describe_build(engine) == head + "the sources match them"
    with open(engine / "csrc" / "xc_cache.c", "a") as f:
        f.write("/* changed */\n")
    assert describe_build(engine) == head + "1 source differ: replay.py --repin"
    (engine / "pins.json").write_text("{}")
    assert describe_build(engine).startswith("engine build: unknown (")


@pytest.mark.parametrize("argv", [["--version"], ["gate", "--version"]])
def test_version_in_process(argv, capsys):
    """Both doors print the version line, then the build line; exit 0."""
    from xcache import replay

    assert replay.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    prog = "replay.py" + (" gate" if argv[0] == "gate" else "")
    assert lines == [f"{prog} (xcache) {replay.version()}",
                     describe_build(ROOT / "engine")]


@pytest.mark.nosan  # runs replay.py as a program
def test_an_output_closed_by_its_reader_is_one_line_not_cannot_run(tmp_path):
    """`xcache-replay OUT | head` whose reader is gone: exit 2, one stderr
    line saying so, no CANNOT RUN, no traceback, nothing built."""
    read, write = os.pipe()
    os.close(read)  # the reader went away before the first line
    try:
        p = subprocess.run([sys.executable, str(ROOT / "replay.py"),
                            str(tmp_path / "out")], stdout=write,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert p.returncode == 2
    assert p.stderr == ("replay.py: the output was closed; stopped before "
                        "the end\n")
    assert not (tmp_path / "out").exists()  # stopped at the first line
