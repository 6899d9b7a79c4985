"""Every path option of every tool, found in its parser, aimed at hostile targets.

The one writer (``fixtures.ownership``): an option naming a path a tool
writes is declared ``type=Output(...)`` and checked by ``check_outputs``
before any work.  The one reader (``oracle.bounded``): an option naming a
file a tool reads is declared ``type=Input(...)``.  These tests walk each
tool's argparse parser (xcache-replay's gate, lab, predict and time,
xcache-fixtures' sub-commands, xcache-inspect, xcache-data): a new option
carrying a mark is tested by itself, and an option that looks like a path
but carries neither mark fails :func:`test_every_path_option_is_declared`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.boundary.cli_walk import (
    UNMARKED,
    _argv,
    _commands,
    _inputs,
    _outputs,
)
from xcache.fixtures.ownership import marked_options

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "fixtures" / "traces" / "mixtral8x7b_humaneval.jsonl"


#: What a path option is called, by metavar or dest: such an option must be
#: declared an Output or an Input.
PATHY = {"FILE", "PATH", "DIR", "OUTDIR", "OUT", "MODEL", "TRACE", "OTHER",
         "ADAPTER", "PATH|PRESET", "SRC", "SPEC", "DESCRIPTION", "CONTAINER"}


def _is_path(action: argparse.Action) -> bool:
    """Whether ``action`` takes a path, by its type, metavar or dest."""
    if action.nargs == 0:
        return False
    names = {str(action.metavar or "").upper(), action.dest.upper()}
    return action.type is Path or bool(names & PATHY)


def test_every_path_option_is_declared():
    """Each path option of every tool carries the Output or the Input mark."""
    undeclared = []
    for label, (parser, *_r) in _commands().items():
        for a in parser._actions:
            marked = (getattr(a.type, "xcache_output", False)
                      or getattr(a.type, "xcache_input", False))
            if _is_path(a) and not marked and (label, a.dest) not in UNMARKED:
                undeclared.append(f"{label} {a.option_strings or a.dest}")
    assert undeclared == []


def test_the_tool_fuzzer_makes_every_input_hostile():
    """Each input option is a target of the tool fuzzer (hunt/fuzz/tools.py
    INPUTS) or says why not (NOT_FUZZED); no target is listed that is none."""
    from xcache.hunt.fuzz import tools

    given = {f"{label} {dest}" for label, dest in _inputs()}
    assert given == set(tools.INPUTS) | set(tools.NOT_FUZZED)
    assert not set(tools.INPUTS) & set(tools.NOT_FUZZED)
    listed = {t for ts in tools.INPUTS.values() for t in ts}
    assert listed <= set(tools.TARGETS)


#: Commands whose refusal of an unusable input is not exit 2, and why.
OTHER_STATUS = {"inspect": "xcache-inspect reports what it finds in a file "
                           "(FAIL lines, exit 1): its reader is the engine's"}


def test_the_walk_finds_every_option_declared_today():
    """The walk finds 13 output options and 17 inputs (a new one adds itself)."""
    assert len(_outputs()) == 13
    assert len(_inputs()) == 17


def _snapshot(root: Path) -> dict[str, Any]:
    """Every entry under ``root``: its type, a file's bytes, a link's target."""
    out = {}
    for here, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(here) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_fifo():
                out[rel] = ("fifo",)
            elif p.is_file():
                out[rel] = ("file", p.read_bytes())
            else:
                out[rel] = ("dir",)
    return out


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise TimeoutError in the block after ``seconds`` (a FIFO never waits)."""
    def ring(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _hostile(tmp: Path) -> dict[str, str]:
    """The targets: a user's file, an input, a FIFO, folders and a link outside."""
    (tmp / "in").mkdir()
    shutil.copyfile(TRACE, tmp / "in" / "trace.jsonl")
    (tmp / "users-file.txt").write_text("mine\n")
    os.mkfifo(tmp / "fifo")
    (tmp / "elsewhere").mkdir()
    (tmp / "elsewhere" / "keep.txt").write_text("kept\n")
    (tmp / "link").symlink_to(tmp / "elsewhere")
    return {"@INPUT": str(tmp / "in" / "trace.jsonl"), "@OUT": str(tmp / "OUT"),
            "user": str(tmp / "users-file.txt"), "fifo": str(tmp / "fifo")}


@pytest.mark.parametrize("target", ["user", "input", "fifo", "outside",
                                    "user-via-new"])
@pytest.mark.parametrize("label,dest", _outputs())
def test_an_output_at_a_hostile_target_is_refused_untouched(
        tmp_path, capsys, label, dest, target):
    """An output at a user's file (also reached as NEW/../file through a
    folder not made yet), an input, a FIFO or outside: one line, exit 2,
    before any work."""
    paths = _hostile(tmp_path)
    parser = _commands()[label][0]
    out = next(a.type for a in marked_options(parser, "xcache_output")
               if a.dest == dest)
    kind = out.kind
    # a folder replaced whole may not hold an input; one only added to, not be one
    aim = {"user": paths["user"], "fifo": paths["fifo"],
           "input": str(tmp_path / "in") if kind == "folder" and out.whole
           else paths["@INPUT"],
           "outside": str(tmp_path / ("elsewhere" if kind == "file" else "link")),
           "user-via-new": str(tmp_path / "NEW" / ".." / "users-file.txt"),
           }[target]
    argv = _argv(label, {dest: aim}, paths)
    before = _snapshot(tmp_path)
    with _deadline(20):
        rc = _commands()[label][2](argv)
    err = capsys.readouterr().err
    assert (rc, err.count("\n")) == (2, 1), (argv, err)
    assert os.path.basename(aim) in err
    assert _snapshot(tmp_path) == before


def _bad_inputs(tmp: Path) -> dict[str, str]:
    """Deep nesting, an endless device, a FIFO, a number past every limit."""
    (tmp / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (tmp / "huge.json").write_text('{"config": {"num_hidden_layers": 1e308}, '
                                   '"shards": ' + "9" * 5000 + "}")
    os.mkfifo(tmp / "fifo.json")
    return {"deep": str(tmp / "deep.json"), "zero": "/dev/zero",
            "fifo": str(tmp / "fifo.json"), "huge": str(tmp / "huge.json")}


@pytest.mark.parametrize("bad", ["deep", "zero", "fifo", "huge"])
@pytest.mark.parametrize("label,dest", [i for i in _inputs()
                                        if i[0] not in OTHER_STATUS])
def test_a_hostile_input_is_one_line_and_exit_2_quickly(tmp_path, capsys, label,
                                                       dest, bad):
    """Each input option handed deep nesting, /dev/zero, a FIFO or a huge number."""
    paths = _hostile(tmp_path)
    aim = _bad_inputs(tmp_path)[bad]
    argv = _argv(label, {dest: aim}, paths)
    with _deadline(20):
        rc = _commands()[label][2](argv)
    err = capsys.readouterr().err
    assert (rc, err.count("\n")) == (2, 1), (argv, err)
    assert not (tmp_path / "OUT").exists()


#: What makes each command reach its write of a file output within seconds.
QUICK = {
    ("gate", "json_path"): ["--scenario", "reference"],
    ("gate", "junit"): ["--cache", str(ROOT / "examples" / "tinycache"),
                        "--scenario", "reference"],
    ("lab", "*"): ["--policies", "lru", "--slots", "16", "--quiet",
                   "--executor", "thread"],
    ("predict", "*"): ["--predictors", "previous", "--quiet", "--executor",
                       "thread"],
    ("time", "*"): ["--tokens", "20", "--slots", "16", "--threads", "0",
                    "--predictors", "none", "--quiet", "--executor", "thread"],
    ("time", "calibrate"): ["--expert-bytes", "65536"],
}


def _quick(label: str, dest: str) -> list[str]:
    return QUICK.get((label, dest), QUICK.get((label, "*"), []))


def _late(monkeypatch: pytest.MonkeyPatch, plant: Callable[[], None]) -> None:
    """``plant`` runs right after every tool's start-of-run check of its outputs."""
    import sys

    from xcache.fixtures import ownership

    real = ownership.check_outputs

    def checked_then_planted(parser: Any, ns: Any) -> None:
        real(parser, ns)
        plant()

    for mod in [ownership, *list(sys.modules.values())]:
        if getattr(mod, "check_outputs", None) is real:
            monkeypatch.setattr(mod, "check_outputs", checked_then_planted)


def _plant(where: Path, what: str) -> None:
    """A user's file, a FIFO or a folder of the user's at ``where``."""
    if what == "user":
        where.write_text("mine\n")
    elif what == "fifo":
        os.mkfifo(where)
    else:
        where.mkdir()
        (where / "keep.txt").write_text("kept\n")


def _state(where: Path) -> Any:
    return (_snapshot(where) if where.is_dir() else
            "fifo" if where.is_fifo() else where.read_bytes())


@pytest.mark.parametrize("target", ["user", "fifo", "folder"])
@pytest.mark.parametrize("label,dest", [o for o in _outputs() if next(
    a.type.kind for a in marked_options(_commands()[o[0]][0], "xcache_output")
    if a.dest == o[1]) == "file"])
def test_a_file_output_that_appears_during_the_run_is_refused_untouched(
        tmp_path, capsys, monkeypatch, label, dest, target):
    """A file output checked at the start and then taken by a user's file, a
    FIFO or a folder while the tool runs: refused as it is written (the one
    writer checks again), one line, exit 2, what appeared as it was."""
    paths = _hostile(tmp_path)
    aim = tmp_path / "late-output"
    # the gate's base --programs-file is a trace (an input to refuse): none here
    override = {dest: str(aim), "programs_file": None}
    if (label, dest) == ("time", "calibrate"):  # it times no trace: none given
        override.update(trace=None, outdir=None)
    argv = _argv(label, override, paths) + _quick(label, dest)
    _late(monkeypatch, lambda: _plant(aim, target))
    with _deadline(60):
        rc = _commands()[label][2](argv)
    err = capsys.readouterr().err
    assert (rc, err.count("\n")) == (2, 1), (argv, err)
    assert str(aim) in err
    fresh = tmp_path / "fresh"
    _plant(fresh, target)
    assert _state(aim) == _state(fresh)
    assert [e for e in os.listdir(tmp_path) if e.startswith(".")] == []


def _sets() -> list[tuple[str, str, str]]:
    """(command, dest, file name) of every file of every folder output's set."""
    return [(label, a.dest, name) for label, (p, *_r) in _commands().items()
            for a in marked_options(p, "xcache_output") for name in a.type.files]


def test_the_walk_finds_every_result_set():
    """Three folder outputs declare the files they write (13 names in all: the
    lab's six with --curve's, predict's three, the time lab's four)."""
    assert sorted({(c, d) for c, d, _n in _sets()}) == [
        ("lab", "outdir"), ("predict", "outdir"), ("time", "outdir")]
    assert len(_sets()) == 13


@pytest.mark.parametrize("when,target", [("before", "user"), ("before", "fifo"),
                                         ("during", "user")])
@pytest.mark.parametrize("label,dest,name", _sets())
def test_a_users_file_where_a_result_set_goes_is_refused_untouched(
        tmp_path, capsys, monkeypatch, label, dest, name, target, when):
    """OUTDIR holding a user's file or a FIFO at a name of the tool's set, there
    before the run or put there during it: one line naming it, exit 2, the
    folder as it was (it was replaced, exit 0)."""
    paths = _hostile(tmp_path)
    outdir = tmp_path / "OUTDIR"
    outdir.mkdir()
    argv = _argv(label, {dest: str(outdir)}, paths) + _quick(label, dest)
    if when == "before":
        _plant(outdir / name, target)
    else:
        _late(monkeypatch, lambda: _plant(outdir / name, target))
    with _deadline(60):
        rc = _commands()[label][2](argv)
    err = capsys.readouterr().err
    assert (rc, err.count("\n")) == (2, 1), (argv, err)
    assert name in err
    assert sorted(os.listdir(outdir)) == [name]
    fresh = tmp_path / "fresh"
    _plant(fresh, target)
    assert _state(outdir / name) == _state(fresh)
