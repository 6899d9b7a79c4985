"""The gate's own files under hostile use: a bad scenario or programs file is one line.

Every scenario file and the programs file are read as bounded regular
JSON files and checked whole against one schema each (gate/schema.py)
before anything of them runs; the first field that does not fit is exit
2 with one line naming the file and the field.  The cases are the tool
fuzzer's findings (hunt/fuzz/targets/gate_files.py), run through
``hunt.fuzz.gate_files``, which does what ``replay.py`` does with the
files once its engine is built.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from xcache.gate import SCENARIO_DIR, CannotRun
from xcache.gate.ops import OPS
from xcache.gate.programs import load_programs
from xcache.gate.scenarios import load_scenario, load_scenarios
from xcache.hunt.fuzz import gate_files

SHIPPED = json.loads((SCENARIO_DIR / "reset-window-k3-mini.json").read_text())
PROGRAMS = {"length": 24, "programs": [
    {"container": "k3-mini", "option_sets": ["plain"], "seeds": [0]}]}


def _changed(doc: dict[str, Any], path: tuple, value: Any) -> dict[str, Any]:
    """``doc`` with the field at ``path`` set to ``value`` (deleted for ...)."""
    out = copy.deepcopy(doc)
    cur = out
    for p in path[:-1]:
        cur = cur[p]
    if value is ...:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return out


def _refusal(tmp_path: Path, kind: str, data: bytes, capsys: Any) -> str:
    """Run ``kind`` on a file of ``data``: exit 2 and its one stderr line."""
    if kind == "scenarios":
        (tmp_path / "sc").mkdir()
        (tmp_path / "sc" / "s.json").write_bytes(data)
        arg = tmp_path / "sc"
    else:
        arg = tmp_path / "programs.json"
        arg.write_bytes(data)
    assert gate_files.main([kind, str(arg)]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    lines = out.err.splitlines()
    assert len(lines) == 1, out.err
    return lines[0].replace(str(tmp_path), "TMP")


def _cannot_run(load: Any, p: Path) -> str:
    """The CannotRun message of ``load(p)`` (it must raise one)."""
    with pytest.raises(CannotRun) as e:
        load(p)
    return str(e.value)


SCENARIO_CASES = [
    (("steps", 0, "op"), "bogus", "steps[0].op: unknown op 'bogus' (ops: "
     + ", ".join(OPS) + ")"),
    (("steps", 0, "repeat"), 1e9, "steps[0].repeat: expected an integer in "
     "0..100000 or an expression, got 1000000000.0"),
    (("steps", 0, "repeat"), 10**9, "steps[0].repeat: expected an integer in "
     "0..100000 or an expression, got 1000000000"),
    (("steps",), ..., "the field 'steps' is missing"),
    (("steps",), {"op": "get"}, "steps: expected a list of 0..10000 items, each "
     "a JSON object, got a JSON object"),
    (("bogus",), 1, "unknown field 'bogus' (known: name, title, contracts, "
     "container, requires, let, cache, variants, every_policy, timeout_s, "
     "steps)"),
    (("cache", "n_slot"), 3, "cache: unknown field 'n_slot' (known: n_slots, "
     "chunk_bytes, io_threads, batch_threads, io_depth, policy, verify, faults, "
     "trace, direct)"),
    (("cache", "n_slots"), 2**62, "cache.n_slots: expected an integer in "
     "1..65536 or an expression, got 4611686018427387904"),
    (("cache", "n_slots"), "N*10000000", "scenario reset-window: cache option "
     "n_slots is 240000000; expected 1..65,536"),
    (("steps", 0, "repeat"), "N*N*N*N", "scenario reset-window: steps[0] (get): "
     "repeat is 331776; expected 0..100,000"),
    (("timeout_s",), float("nan"), "timeout_s: expected a finite number in "
     "0..3600, got nan"),
    (("timeout_s",), float("inf"), "timeout_s: expected a finite number in "
     "0..3600, got inf"),
    (("name",), "x" * 2000, "name: expected a string of at most 200 "
     "characters, not 2,000"),
    (("steps", 1), {"op": "truncate"}, "steps[1]: a truncate step needs the "
     "field 'key'"),
    (("steps", 1, "expect"), [], "steps[1].expect: expected a JSON object, got "
     "a JSON list"),
    (("let",), {"k" * 300: 1}, "let: a field name of 300 characters, past the "
     "limit of 200"),
    (("steps", 0, "range"), [0, 1, 2], "steps[0].range: 3 items; expected 2..2"),
    (("requires",), ["N >= 1"] * 101, "requires: 101 items; expected 0..100"),
    (("variants",), [{"suffix": 1}], "variants[0].suffix: expected a string of "
     "at most 200 characters, got 1"),
]


@pytest.mark.parametrize("data,message", [
    (b"[" * 100_000, "not valid JSON: a value nested too deeply"),
    (b"\xff\xfe{}", "not UTF-8 text (invalid start byte at byte 0)"),
    (b"[]", "expected a JSON object, got a JSON list"),
    (b'{"name": 1e999, "container": "k3-mini", "cache": {}, "steps": []}',
     "name: expected a string of at most 200 characters, got inf"),
], ids=["nested", "binary", "list", "overflowing-number"])
def test_a_scenario_file_that_is_no_object_is_one_line(
        tmp_path: Path, capsys: Any, data: bytes, message: str) -> None:
    """Nesting, binary bytes, a list, a number past float: exit 2, the file named."""
    assert _refusal(tmp_path, "scenarios", data, capsys) == \
        f"CANNOT RUN: TMP/sc/s.json: {message}"


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_a_scenario_path_that_is_no_regular_file_is_refused(
        tmp_path: Path, capsys: Any, kind: str) -> None:
    """A FIFO (which would block the read) or a folder named *.json: one line."""
    (tmp_path / "sc").mkdir()
    p = tmp_path / "sc" / "s.json"
    if kind == "fifo":
        os.mkfifo(p)
    else:
        p.mkdir()
    assert gate_files.main(["scenarios", str(tmp_path / "sc")]) == 2
    err = capsys.readouterr().err.replace(str(tmp_path), "TMP")
    what = "a FIFO" if kind == "fifo" else "a directory"
    assert err == (f"CANNOT RUN: TMP/sc/s.json: cannot read the scenario file "
                   f"(is {what}, not a regular file; only regular files are "
                   "read)\n")


def test_a_scenario_past_the_size_limit_is_refused(tmp_path: Path) -> None:
    """A scenario file past MAX_SCENARIO_BYTES is refused before it is parsed."""
    p = tmp_path / "s.json"
    p.write_bytes(b" " * ((4 << 20) + 1))
    assert _cannot_run(load_scenario, p) == (
        f"{p}: larger than the limit of 4,194,304 bytes for a JSON file")


def test_a_scenario_container_that_is_nothing_names_the_scenario_file(
        tmp_path: Path, capsys: Any) -> None:
    """A home container that names nothing: the line names the scenario file."""
    doc = _changed(SHIPPED, ("container",), "no-such-preset")
    line = _refusal(tmp_path, "scenarios", json.dumps(doc).encode(), capsys)
    assert line.startswith("CANNOT RUN: TMP/sc/s.json: container "
                           "'no-such-preset': no such file or folder, and not a "
                           "preset (presets: ")


def test_slots_past_the_byte_limit_are_refused() -> None:
    """n_slots within its count but past 8 GiB of slots (44 MB experts) is refused."""
    from xcache.gate.schema import check_sized

    assert check_sized({"n_slots": 196}, 44 << 20) == (
        "cache option n_slots is 196: 196 slots of 46,137,344 bytes are "
        "9,042,919,424 bytes, past the limit of 8,589,934,592")
    assert check_sized({"n_slots": 48, "io_threads": 4}, 44 << 20) is None


def test_every_shipped_scenario_fits_the_schema() -> None:
    """The schema takes every scenario gate/scenarios/ ships (39 files now)."""
    files = [p for p in SCENARIO_DIR.glob("*.json") if p.name != "programs.json"]
    assert len(files) >= 39
    assert len(load_scenarios([])) == len(files)


PROGRAM_CASES = [
    (("length",), 10**9, "length: expected an integer in 1..1000, got "
     "1000000000"),
    (("length",), 24.5, "length: expected an integer in 1..1000, got 24.5"),
    (("programs", 0, "option_sets", 0), "plainn", "programs[0].option_sets[0]: "
     "expected one of 'plain', 'pool', 'chunked', 'direct', 'direct-chunked', "
     "'readers', 'depth', 'verify', 'traced', got 'plainn'"),
    (("programs", 0, "seeds"), ..., "programs[0]: the field 'seeds' is missing"),
    (("programs", 0, "seeds"), [], "programs[0].seeds: 0 items; expected "
     "1..10,000"),
    (("programs", 0, "seeds", 0), "0", "programs[0].seeds[0]: expected a "
     "non-negative integer, got '0'"),
    (("programs", 0, "seeds", 0), -1, "programs[0].seeds[0]: expected a "
     "non-negative integer, got -1"),
    (("programs", 0, "seeds"), list(range(10_001)), "programs[0].seeds: 10,001 "
     "items; expected 1..10,000"),
    (("programs", 0, "container"), None, "programs[0].container: expected a "
     "string of at most 4096 characters, got null"),
    (("programs", 0, "extra"), 1, "programs[0]: unknown field 'extra' (known: "
     "container, length, option_sets, seeds)"),
    (("programs",), ..., "the field 'programs' is missing"),
    (("programs", 0, "container"), "no-such", "programs[0].container: "
     "container 'no-such': no such file or folder, and not a preset (presets: "
     "k3-mini, mixtral-mini, deepseek-mini, granite-mini, gptoss-mini, "
     "huge-sparse)"),
]


FIELD_CASES = ([("scenarios", *c) for c in SCENARIO_CASES]
               + [("programs", *c) for c in PROGRAM_CASES])


@pytest.mark.parametrize("kind,path,value,message", FIELD_CASES,
                         ids=[f"{c[0]}:" + ".".join(map(str, c[1]))
                              + f"={c[2]!r}"[:30] for c in FIELD_CASES])
def test_a_field_is_one_line_naming_file_and_field(
        tmp_path: Path, capsys: Any, kind: str, path: tuple, value: Any,
        message: str) -> None:
    """A scenario's or programs file's field of a wrong type, range, length or
    name: exit 2, one line naming the file and the field."""
    doc = _changed(SHIPPED if kind == "scenarios" else PROGRAMS, path, value)
    line = _refusal(tmp_path, kind, json.dumps(doc).encode(), capsys)
    where = "sc/s.json" if kind == "scenarios" else "programs.json"
    assert line == f"CANNOT RUN: TMP/{where}: {message}"


def test_programs_past_the_limit_in_all_are_refused(tmp_path: Path) -> None:
    """Rows whose option sets x seeds add up past 10,000 programs: refused."""
    doc = {"programs": [{"container": "k3-mini", "option_sets": ["plain", "pool"],
                         "seeds": list(range(6000))}]}
    p = tmp_path / "programs.json"
    p.write_text(json.dumps(doc))
    assert _cannot_run(load_programs, p) == (
        f"{p}: programs: 12,000 programs (option sets x seeds of every row), "
        "past the limit of 10,000")


def test_a_programs_file_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    """--programs-file naming a FIFO: refused at once, never a blocked read."""
    p = tmp_path / "programs.json"
    os.mkfifo(p)
    assert _cannot_run(load_programs, p) == (
        f"{p}: cannot read the programs file (is a FIFO, not a regular file; "
        "only regular files are read)")


def test_the_shipped_programs_file_fits_the_schema() -> None:
    """The pinned programs file loads whole (32 rows of 3 seeds, 96 programs now)."""
    rows = json.loads((SCENARIO_DIR / "programs.json").read_text())["programs"]
    plan = load_programs()
    assert len(plan) == sum(len(r["option_sets"]) * len(r["seeds"]) for r in rows)
    assert len(plan) >= 96
    assert plan[0] == {"container": "k3-mini", "option_set": "plain", "seed": 0,
                       "length": 24}


@pytest.mark.parametrize("kind", ["missing", "fifo"])
def test_replay_refuses_a_bad_programs_file_before_its_build(
        tmp_path: Path, capsys: Any, kind: str) -> None:
    """replay.py --programs-file naming nothing or a FIFO: exit 2 at once
    (it ran no program and said nothing, after the engine build, before)."""
    from xcache.gate.cli import run

    p = tmp_path / "programs.json"
    if kind == "fifo":
        os.mkfifo(p)
    assert run([str(tmp_path / "out"), "--programs-file", str(p)]) == 2
    why = ("No such file or directory" if kind == "missing" else
           "is a FIFO, not a regular file; only regular files are read")
    out = capsys.readouterr()
    assert out.err == f"CANNOT RUN: {p}: cannot read the programs file ({why})\n"
    assert out.out == ""
    assert not (tmp_path / "out").exists()


def test_every_step_field_a_handler_reads_is_in_the_schema() -> None:
    """A field any gate module reads from a step (``step["x"]``,
    ``step.get("x")``) is one the scenario schema admits, so a new op's field
    cannot be refused in the shipped scenarios that use it."""
    import re

    from xcache.gate.schema import STEP_FIELDS

    gate_dir = Path(__file__).resolve().parents[2] / "gate"
    read = set()
    for path in gate_dir.glob("*.py"):
        read |= set(re.findall(r"\bstep(?:\.get\(|\[)\"([a-z_]+)\"",
                               path.read_text(encoding="utf-8")))
    assert read, "no step field found: the pattern no longer matches the code"
    assert sorted(read - set(STEP_FIELDS)) == []
