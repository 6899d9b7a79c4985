"""The lab under mistaken and hostile use: every bad option or trace line is exit 2
with one line naming it, before any sweep; the result files are one atomic set; no
matplotlib is a note; Ctrl-C ends the lab and its workers with exit 130."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, TRACES_DIR, group_members, sigint_mid_run
from xcache.lab import cli as lab_cli
from xcache.lab import summary
from xcache.replay import main

MIXTRAL = str(TRACES_DIR / "mixtral8x7b_humaneval.jsonl")
OLMOE = str(TRACES_DIR / "olmoe_299.jsonl")
LINE = ('{"problem_id": 0, "layer": 0, "experts": [%s, 5], "token_idx": 9}\n')


def _trace_with(tmp: Path, expert: int, ext: str = "jsonl") -> Path:
    """A small trace whose fourth record names ``expert`` (line 4; CSV line 5)."""
    p = tmp / f"id{expert}.{ext}"
    if ext == "jsonl":
        head = Path(MIXTRAL).read_text().splitlines(keepends=True)[:3]
        p.write_text("".join(head) + LINE % expert)
    elif ext == "txt":
        p.write_text(f"0 0 1 2\n1 0 2 3\n2 0 3 4\n3 0 {expert} 5\n")
    else:
        p.write_text("sequence,token,layer,expert,key\n0,0,0,1,1\n0,1,0,2,2\n"
                     f"0,2,0,3,3\n0,3,0,{expert},{expert}\n")
    return p


def _matrix(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """The bad-input matrix: argv after ``lab`` and the error line it must print."""
    out = str(tmp / "out")
    opts = ["--quiet", "--executor", "thread"]
    rows: dict[str, tuple[list[str], str]] = {
        "--fractions inf": ([MIXTRAL, out, "--fractions", "inf"],
                            "--fractions: inf is not a fraction above 0"),
        "--fractions 0": ([MIXTRAL, out, "--fractions", "0"],
                          "--fractions: 0 is not a fraction above 0"),
        "--fractions -0.5": ([MIXTRAL, out, "--fractions=-0.5"],
                             "--fractions: -0.5 is not a fraction above 0"),
        "--fractions ,": ([MIXTRAL, out, "--fractions", ","],
                          "--fractions: no fraction in ','"),
        "--slots 0": ([MIXTRAL, out, "--slots", "0"],
                      "--slots: 0 is not a size (at least 1 slot)"),
        "--slots x": ([MIXTRAL, out, "--slots", "4,x"],
                      "--slots: 'x' is not a whole number of slots"),
        "--workers 0": ([MIXTRAL, out, "--workers", "0"],
                        "--workers: 0 workers; at least 1"),
        "--policies ,": ([MIXTRAL, out, "--policies", ","],
                         "--policies: no policy named in ','"),
        "--top-k 0": ([MIXTRAL, out, "--top-k", "0"],
                      "--top-k: 0 experts per call; at least 1"),
        "--top-k 9": ([MIXTRAL, out, "--top-k", "9"],
                      "--top-k: 9 experts per call, but the trace has 8 "
                      "experts per layer"),
        "--experts 0": ([MIXTRAL, out, "--experts", "0"],
                        "--experts: 0 is outside 1..524288"),
        "--layers 99999": ([MIXTRAL, out, "--layers", "99999"],
                           "--layers: 99999 is outside 1..4096"),
        # issue 25: a count past what the simulator's integers hold
        "--slots 10**20": ([MIXTRAL, out, "--slots", str(10**20)],
                           "--slots: 100000000000000000000 is past the limit of "
                           "2147483648 slots (more than every key a trace can "
                           "have)"),
    }
    for name, expert in (("2**70", 2**70), ("10**12", 10**12)):
        for ext in ("jsonl", "txt", "csv"):
            t = _trace_with(tmp, expert, ext)
            line = 5 if ext == "csv" else 4  # the CSV's header is line 1
            rows[f"expert id {name} in {ext}"] = (
                [str(t), out], f"{t}:{line}: expert id {expert} is beyond the limit "
                               "of 524288 experts per layer")
    unwritable = tmp / "a-file"
    unwritable.write_text("x")
    rows["unwritable OUTDIR"] = (
        [MIXTRAL, str(unwritable / "out")],
        f"OUTDIR {unwritable / 'out'}: {unwritable} is not a folder")
    return {k: (["lab", *argv, *opts], msg) for k, (argv, msg) in rows.items()}


CASES = ["--fractions inf", "--fractions 0", "--fractions -0.5", "--fractions ,",
         "--slots 0", "--slots x", "--workers 0", "--policies ,", "--top-k 0",
         "--top-k 9", "--experts 0", "--layers 99999", "--slots 10**20",
         *(f"expert id {n} in {e}" for n in ("2**70", "10**12")
           for e in ("jsonl", "txt", "csv")),
         "unwritable OUTDIR"]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_exit_2_before_the_sweep(case, tmp_path, monkeypatch, capsys):
    """Each bad option or trace line: exit 2, one line naming it, no sweep run."""
    argv, message = _matrix(tmp_path)[case]

    def no_sweep(*a: object, **k: object) -> None:
        raise AssertionError("the sweep ran")

    monkeypatch.setattr(lab_cli, "run_sweep", no_sweep)
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.err == f"replay.py lab: {message}\n"
    assert out.out == ""
    assert not (tmp_path / "out").exists()


def _run_lab(args: list[str], prelude: str = "") -> subprocess.CompletedProcess:
    """The lab as a program in a fresh interpreter, after ``prelude``."""
    code = (f"import sys\n{prelude}\nsys.argv = ['replay.py', *sys.argv[1:]]\n"
            "import replay\nsys.exit(replay.main())\n")
    return subprocess.run([sys.executable, "-c", code, "lab", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def _earlier_set(out: Path) -> dict[str, str]:
    """An earlier run's set in ``out``: its results.json a lab record (the set's
    mark, without which the set is not the lab's to replace); the texts."""
    texts = {name: f"earlier {name}\n" for name in summary.RESULT_FILES}
    texts["results.json"] = '{"trace": {}, "mode": "plain", "results": []}\n'
    for name, text in texts.items():
        (out / name).write_text(text)
    return texts


def test_without_matplotlib_csv_and_json_are_written(tmp_path):
    """No matplotlib: exit 0, CSV and JSON written, a note, no stale mrc.png left."""
    out = tmp_path / "out"
    out.mkdir()
    _earlier_set(out)
    p = _run_lab([MIXTRAL, str(out), "--slots", "4,8", "--policies", "lru",
                  "--quiet", "--executor", "thread"],
                 prelude="sys.modules['matplotlib'] = None")
    assert p.returncode == 0, p.stderr
    assert p.stderr == ("replay.py lab: wrote results.csv and results.json; "
                        "mrc.png needs matplotlib (pip install -e '.[lab]')\n")
    assert sorted(x.name for x in out.iterdir()) == ["results.csv", "results.json"]
    assert (out / "results.csv").read_text().startswith("policy,slots,")


def test_interrupted_write_keeps_the_earlier_set(tmp_path, monkeypatch, capsys):
    """Ctrl-C while the plot is drawn: exit 130, the earlier three files untouched."""
    out = tmp_path / "out"
    out.mkdir()
    earlier = _earlier_set(out)

    def interrupted(rows: object, path: str, title: str, *_: object) -> None:
        Path(path).write_bytes(b"\x89PNG half")
        raise KeyboardInterrupt

    monkeypatch.setattr(lab_cli, "plot_mrc", interrupted)
    monkeypatch.setattr(lab_cli, "_can_plot", lambda: True)
    assert main(["lab", MIXTRAL, str(out), "--slots", "4", "--policies", "lru",
                 "--quiet", "--executor", "thread"]) == 130
    assert capsys.readouterr().err == (
        f"replay.py lab: interrupted; {out} left as it was\n")
    assert sorted(x.name for x in out.iterdir()) == sorted(summary.RESULT_FILES)
    for name in summary.RESULT_FILES:
        assert (out / name).read_text() == earlier[name]


@pytest.mark.nosan
@pytest.mark.parametrize("executor", ["process", "thread", "dask"])
def test_ctrl_c_ends_the_sweep_and_its_workers(executor, tmp_path):
    """One SIGINT mid-sweep: exit 130, no traceback, no process left, no OUT."""
    if executor == "dask":
        pytest.importorskip("distributed")
    out = tmp_path / "out"
    sizes = ",".join(str(n) for n in range(20, 252, 2))  # 116 sizes
    rc, err, pgid = sigint_mid_run(
        [sys.executable, "replay.py", "lab", MIXTRAL, str(out), "--slots", sizes,
         "--executor", executor, "--workers", "2"],
        # the bar counts accesses: 116 sizes x every policy x 21,558; mid-sweep
        # is 2,000,000+ of them (90+ cells) done, whatever the policy count
        re.compile(rb"([2-9][0-9]{6}|[1-9][0-9]{7})/[0-9]{8} \["))
    assert rc == 130, err
    assert "Traceback" not in err
    assert err.endswith(f"replay.py lab: interrupted; {out} left as it was\n")
    assert group_members(pgid) == []
    assert not out.exists()  # the run made it: gone with the run


def test_interrupted_export_leaves_no_half_file(tmp_path, monkeypatch, capsys):
    """Ctrl-C while --export-csv writes: exit 130 and no half-written CSV."""

    from xcache.oracle import traces

    def half(trace: object, path: str) -> None:
        Path(path).write_text("sequence,token\n0,")
        raise KeyboardInterrupt

    monkeypatch.setattr(traces, "write_csv", half)
    export = tmp_path / "trace.csv"
    assert main(["lab", MIXTRAL, str(tmp_path / "out"), "--export-csv",
                 str(export), "--quiet", "--executor", "thread"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert sorted(x.name for x in tmp_path.iterdir()) == []


def test_a_huge_worker_count_is_a_usage_error(capsys):
    """--workers 10**20 is argparse's one line naming the option (was a traceback)."""
    assert main(["lab", MIXTRAL, "out", "--workers", str(10**20)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "replay.py lab: error: argument --workers: 100000000000000000000 is past "
        "the limit of 1024")


@pytest.mark.parametrize("option", ["--export-csv", "--export-jsonl",
                                    "--export-oracle-general"])
def test_an_export_never_replaces_the_input_or_a_users_file(option, tmp_path, capsys):
    """--export-* naming the input trace, or any file there, is refused; both kept."""
    trace = tmp_path / "recorded.jsonl"
    trace.write_bytes(Path(MIXTRAL).read_bytes())
    notes = tmp_path / "notes.csv"
    notes.write_text("my numbers\n")
    out = str(tmp_path / "out")
    opts = ["--quiet", "--executor", "thread", "--policies", "lru"]
    assert main(["lab", str(trace), out, option, str(trace), *opts]) == 2
    assert capsys.readouterr().err == (
        f"replay.py lab: {option} {trace}: refusing to write over an input "
        f"({trace} is it)\n")
    assert main(["lab", str(trace), out, option, str(notes), *opts]) == 2
    assert capsys.readouterr().err == (
        f"replay.py lab: {option} {notes}: exists; an export is written only as a "
        "new file (remove it, or name another)\n")
    assert trace.read_bytes() == Path(MIXTRAL).read_bytes()
    assert notes.read_text() == "my numbers\n"
    assert not (tmp_path / "out").exists()


def _ends(how: str) -> object:
    """A stand-in for the sweep that ends the run: Ctrl-C or an engine error."""
    def sweep(*_args: object, **_kw: object) -> None:
        if how == "ctrl-c":
            raise KeyboardInterrupt
        raise RuntimeError("policy lru: refused by the engine")
    return sweep


@pytest.mark.parametrize("how, rc", [("ctrl-c", 130), ("error", 2)])
@pytest.mark.parametrize("command", ["lab", "time"])
def test_a_run_that_ends_without_results_removes_the_out_it_made(
        command, how, rc, tmp_path, monkeypatch, capsys):
    """Ctrl-C or an error mid-sweep: the OUT the run made (three deep) is gone."""

    from xcache.lab.timing import sweep as time_sweep

    if command == "lab":
        monkeypatch.setattr(lab_cli, "run_sweep", _ends(how))
    else:
        monkeypatch.setattr(time_sweep, "run_time_sweep", _ends(how))
    out = tmp_path / "a" / "b" / "out"
    assert main([command, MIXTRAL, str(out), "--quiet", "--executor",
                 "thread"]) == rc
    err = capsys.readouterr().err
    assert err == (f"replay.py {command}: interrupted; {out} left as it was\n"
                   if how == "ctrl-c" else
                   f"replay.py {command}: policy lru: refused by the engine\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("how, rc", [("ctrl-c", 130), ("error", 2)])
@pytest.mark.parametrize("command", ["lab", "time"])
def test_a_run_that_ends_without_results_keeps_an_out_that_was_there(
        command, how, rc, tmp_path, monkeypatch):
    """An OUT that existed (empty, or with the user's file) stays as it was."""

    from xcache.lab.timing import sweep as time_sweep

    if command == "lab":
        monkeypatch.setattr(lab_cli, "run_sweep", _ends(how))
    else:
        monkeypatch.setattr(time_sweep, "run_time_sweep", _ends(how))
    empty, mine = tmp_path / "empty", tmp_path / "mine"
    empty.mkdir()
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's\n")
    for out in (empty, mine):
        assert main([command, MIXTRAL, str(out), "--quiet", "--executor",
                     "thread"]) == rc
    assert list(empty.iterdir()) == []
    assert [(p.name, p.read_text()) for p in mine.iterdir()] == [
        ("notes.txt", "the user's\n")]
