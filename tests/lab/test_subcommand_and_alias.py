"""`replay.py lab TRACE OUTDIR` and its older spelling `replay.py --trace TRACE
OUTDIR` are one command: same table, same result files."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from xcache.oracle.traces import Trace, write_csv
from xcache.replay import main


def small_trace() -> Trace:
    """A seeded routing trace: 3 layers, top-2 of 6 experts, 60 tokens."""
    rng = np.random.default_rng(3)
    steps = [(t, layer, rng.choice(6, 2, replace=False).tolist())
             for t in range(60) for layer in range(3)]
    return Trace.from_steps(steps, 3, 6, name="small")


@pytest.fixture
def trace_csv(tmp_path: Path) -> Path:
    """The small trace written as CSV."""
    path = tmp_path / "small.csv"
    write_csv(small_trace(), path)
    return path


OPTIONS = ["--policies", "lru,s3fifo,arc,belady", "--slots", "4,8",
           "--executor", "thread", "--quiet"]


def test_lab_and_trace_alias_write_identical_results(tmp_path, trace_csv, capsys):
    """Both spellings print the same table and write byte-identical files."""
    assert main(["lab", str(trace_csv), str(tmp_path / "new"), *OPTIONS]) == 0
    printed_new = capsys.readouterr().out
    assert main(["--trace", str(trace_csv), *OPTIONS, str(tmp_path / "old")]) == 0
    printed_old = capsys.readouterr().out
    # the same but for the folder each names in its "wrote" line
    assert printed_new.replace(str(tmp_path / "new"), "OUT") == \
        printed_old.replace(str(tmp_path / "old"), "OUT")
    assert "belady gap" in printed_new
    for name in ("results.csv", "results.json"):
        new = (tmp_path / "new" / name).read_bytes()
        assert new == (tmp_path / "old" / name).read_bytes(), name
    assert (tmp_path / "new" / "results.csv").read_text().count("\n") == 1 + 4 * 2
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "new" / "mrc.png").read_bytes()[:4] == b"\x89PNG"


def test_lab_options_may_come_first(tmp_path, trace_csv):
    """Options before the trace and the folder parse the same way."""
    assert main(["lab", *OPTIONS, str(trace_csv), str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "results.json").is_file()


def test_lab_bad_input_is_exit_2_named_by_the_command(tmp_path, trace_csv, capsys):
    """An unknown policy or a missing argument is exit 2, the reason on stderr."""
    assert main(["lab", str(trace_csv), str(tmp_path / "o"), "--policies",
                 "nope", "--slots", "4", "--executor", "thread", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("replay.py lab: ") and "unknown policy" in err
    assert main(["lab", str(trace_csv)]) == 2
    assert "OUTDIR" in capsys.readouterr().err
    assert main(["lab", "--help"]) == 0
