"""``python replay.py predict``: every bad input's message, and runs end to end."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import TRACES_DIR
from xcache import data, replay
from xcache.engine.sim import simulate
from xcache.lab.predict.cli import COLUMNS, run
from xcache.lab.predict.evaluate import split_steps, steps_of
from xcache.oracle.traces import Trace, read_trace

ROOT = Path(__file__).resolve().parents[2]
ROUTES = [[[0, 1], [2, 3]], [[0, 2], [2, 3]], [[1, 0], [3, 1]],
          [[0, 3], [2, 0]], [[3, 1], [1, 2]], [[0, 1], [2, 3]]]


def tiny_file(folder: Path, name: str = "tiny.jsonl", routes=None) -> str:
    """The six-token, 2-layer x 4-expert trace as a per-token JSONL file."""
    path = folder / name
    path.write_text("".join(json.dumps({"tok": t + 1, "layers": layers}) + "\n"
                            for t, layers in enumerate(routes or ROUTES)))
    return str(path)


def errors(capsys, argv: list[str]) -> tuple[int, str]:
    """Run the command; its exit status and the stderr it printed."""
    rc = run(argv)
    return rc, capsys.readouterr().err.strip()


@pytest.mark.parametrize("options, message", [
    (["--slots", "x"], "--slots: 'x' is not a whole number"),
    (["--slots", "2"], "--slots: 2 is out of range (3..2147483648; the cache "
                       "needs top-k + 1 = 3 slots)"),
    # issue 25: a count past every limit, and a cache model past the table limit
    (["--slots", str(10**20)], "--slots: 100000000000000000000 is out of range "
     "(3..2147483648; the cache needs top-k + 1 = 3 slots)"),
    (["--slots", "100000000"], "--slots: a cache model of 100,000,000 slots would "
     "take 8,000,000,000 bytes (100,000,000 x 10 x 8), over the limit of "
     "1,073,741,824 bytes"),
    (["--policy", "belady"], "--policy: belady is not a cache policy (it is the "
                             "bound every run is compared with)"),
    (["--policy", "nope"], "--policy: unknown policy 'nope'; valid: arc, fifo, "
                           "hotness:period=N, lfru:sample=N,seed=N, lfu, lru, "
                           "s3fifo:small=N,ghost=N,promote=N, sieve"),
    (["--predictors", ","], "--predictors: no predictor named in ','"),
    (["--predictors", "previous,nope"],
     "--predictors: unknown predictor 'nope' (known: previous, popularity, "
     "ewma, pair, oracle)"),
    (["--predictors", "ewma:alpha=2"],
     "--predictors: predictor 'ewma:alpha=2': alpha must be a number in (0, 1]"),
    (["--split", "x"], "--split: 'x' is not a number"),
    (["--split", "0"], "--split: 0 is not a fraction strictly between 0 and 1"),
    (["--split", "1.5"], "--split: 1.5 is not a fraction strictly between 0 and 1"),
    (["--split", "0.1"], "--split: 0.1 of 6 tokens leaves no token to train on"),
    (["--budget", "0"], "--budget: 0 is out of range (at least 1)"),
    (["--budget", "two"], "--budget: 'two' is not a whole number"),
    (["--k", "0"], "--k: 0 is out of range (1..4 experts per layer)"),
    (["--k", "5"], "--k: 5 is out of range (1..4 experts per layer)"),
    (["--k", "1.5"], "--k: '1.5' is not a whole number"),
    (["--expert-bytes", "0"], "--expert-bytes: 0 is out of range (at least 1)"),
])
def test_bad_option_names_option_and_value(tmp_path, capsys, options, message):
    """Each bad option value is exit 2 with one line naming the option and value."""
    rc, err = errors(capsys, [tiny_file(tmp_path), str(tmp_path / "out"), *options])
    assert (rc, err) == (2, f"replay.py predict: {message}")
    assert not (tmp_path / "out").exists()


def test_missing_trace(tmp_path, capsys):
    """A TRACE that does not exist is named."""
    rc, err = errors(capsys, [str(tmp_path / "no.jsonl"), str(tmp_path / "out")])
    assert (rc, err) == (2, f"replay.py predict: TRACE {tmp_path / 'no.jsonl'}: "
                            f"no such file; {data.hint('trace')}")


def test_malformed_trace_names_file_and_line(tmp_path, capsys):
    """A malformed trace line is named by file and line."""
    path = tmp_path / "bad.jsonl"
    path.write_text('{"tok": 1, "layers": [[0, 1]]}\n{"tok": 2, "layers": 7}\n')
    rc, err = errors(capsys, [str(path), str(tmp_path / "out")])
    assert rc == 2
    assert err.startswith(f"replay.py predict: {path}:2: ")


def test_empty_trace(tmp_path, capsys):
    """A TRACE with no record is named."""
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    rc, err = errors(capsys, [str(path), str(tmp_path / "out")])
    assert (rc, err) == (2, f"replay.py predict: {path}:0: no records")


def test_malformed_train_trace_names_file_and_line(tmp_path, capsys):
    """A malformed --train trace line is named by file and line."""
    other = tmp_path / "other.jsonl"
    other.write_text('{"tok": 1, "layers": [[0, 1], [2, 3]]}\n{"tok": 2}\n')
    rc, err = errors(capsys, [tiny_file(tmp_path), str(tmp_path / "out"),
                              "--train", str(other)])
    assert rc == 2
    assert err.startswith(f"replay.py predict: {other}:2: ")


def test_missing_train_trace(tmp_path, capsys):
    """A --train file that does not exist is named with the option."""
    other = tmp_path / "other.jsonl"
    rc, err = errors(capsys, [tiny_file(tmp_path), str(tmp_path / "out"),
                              "--train", str(other)])
    assert (rc, err) == (2, f"replay.py predict: --train {other}: no such file; "
                            f"{data.hint('trace')}")


def test_train_trace_of_another_shape(tmp_path, capsys):
    """A --train trace with other layers or experts is refused, naming both shapes."""
    other = tiny_file(tmp_path, "other.jsonl", [[[0, 1]], [[0, 2]]])
    rc, err = errors(capsys, [tiny_file(tmp_path), str(tmp_path / "out"),
                              "--train", other])
    assert (rc, err) == (2, f"replay.py predict: --train {other}: 1 layers x 3 "
                            "experts, but TRACE has 2 layers x 4 experts")


def test_split_and_train_together(tmp_path, capsys):
    """--split and --train exclude each other (argparse names both)."""
    rc, err = errors(capsys, [tiny_file(tmp_path), str(tmp_path / "out"),
                              "--split", "0.5", "--train", tiny_file(tmp_path)])
    assert rc == 2
    assert err.endswith("argument --train: not allowed with argument --split")


def test_outdir_not_writable(tmp_path, capsys):
    """An OUTDIR that is a file is refused, named."""
    (tmp_path / "file").write_text("x")
    rc, err = errors(capsys, [tiny_file(tmp_path), str(tmp_path / "file")])
    assert rc == 2
    assert err == (f"replay.py predict: OUTDIR {tmp_path / 'file'}: exists "
                   "and is not a folder (the output is a folder; name a new "
                   "one)")


def test_cross_trace_training(tmp_path, capsys):
    """--train OTHER tests on all of TRACE: 12 steps, popularity learnt from OTHER."""
    other = tiny_file(tmp_path, "other.jsonl", [[[3, 2], [0, 1]]] * 2)
    out = tmp_path / "out"
    assert run([tiny_file(tmp_path), str(out), "--train", other, "--predictors",
                "popularity", "--slots", "3"]) == 0
    report = json.loads((out / "predict.json").read_text())
    assert (report["train"], report["split"], report["train_steps"],
            report["test_steps"]) == (other, None, 4, 12)
    # popularity predicts [2, 3] at layer 0 and [0, 1] at layer 1 (ties to
    # the lower id), every step; layer 0's routes hold one of 2, 3 at tokens
    # 1, 3, 4 and layer 1's one of 0, 1 at tokens 2, 3, 4: 6 correct
    row = report["rows"][0]
    assert (row["predicted"], row["routed"], row["correct"]) == (24, 24, 6)
    capsys.readouterr()


def test_end_to_end_on_a_shipped_trace(tmp_path, capsys):
    """The Mixtral trace, split 0.9: three files, counts equal to the C simulator's."""
    trace_path = str(TRACES_DIR / "mixtral8x7b_humaneval.jsonl")
    out = tmp_path / "out"
    rc = replay.main(["predict", trace_path, str(out), "--split", "0.9",
                      "--slots", "40", "--predictors", "previous,pair,oracle",
                      "--budget", "1", "--expert-bytes", "352321536"])
    assert rc == 0
    assert sorted(p.name for p in out.iterdir()) == ["predict.csv", "predict.json",
                                                     "predict.png"]
    report = json.loads((out / "predict.json").read_text())
    trace = read_trace(trace_path)
    steps, _ = steps_of(trace)
    _, test = split_steps(steps, trace.n_tokens, 0.9)
    sub = Trace.from_steps([(s.token, s.layer, s.experts) for s in test], 32, 8)
    assert report["base_misses"] == simulate(sub, "lru", 40, "step")["misses"]
    assert report["belady_misses"] == simulate(sub, "belady", 40, "step")["misses"]
    assert report["test_steps"] == len(test)
    assert report["facts"]["misses"] == report["base_misses"]
    rows = {r["predictor"]: r for r in report["rows"]}
    assert list(rows) == ["previous", "pair", "oracle"]
    oracle = rows["oracle"]
    assert (oracle["route_recall"], oracle["precision"],
            oracle["demand_miss_recall"]) == (1.0, 1.0, 1.0)
    for r in rows.values():
        assert r["bytes_wasted"] == r["spec_wasted"] * 352321536
        assert r["misses_saved"] == report["base_misses"] - r["misses"]
        assert r["spec_issued"] <= r["predicted"]
    with open(out / "predict.csv", newline="", encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    assert tuple(table[0]) == COLUMNS
    assert [t["predictor"] for t in table] == ["previous", "pair", "oracle"]
    assert [int(t["misses"]) for t in table] == [r["misses"] for r in rows.values()]
    assert len(report["curves"]["pair"]) == 2  # k = 1, 2
    printed = capsys.readouterr().out
    assert printed.startswith(f"mixtral8x7b_humaneval.jsonl: {len(test)} test steps")


def test_front_door_lists_and_helps_predict():
    """replay.py --help lists predict; replay.py predict --help exits 0."""
    listing = subprocess.run([sys.executable, "replay.py", "--help"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    assert "predict" in listing
    done = subprocess.run([sys.executable, "replay.py", "predict", "--help"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stdout.startswith("usage: replay.py predict")


def test_a_one_token_trace_is_named_not_split(tmp_path, capsys):
    """A trace of one token cannot be split: the line names the trace, not --split."""
    trace = tiny_file(tmp_path, routes=ROUTES[:1])
    rc, err = errors(capsys, [trace, str(tmp_path / "out")])
    assert (rc, err) == (2, f"replay.py predict: TRACE {trace}: 1 token(s); predict "
                            "trains on the first tokens and tests on the rest, so "
                            "it needs at least 2 (or --train OTHER)")
