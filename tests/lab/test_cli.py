"""The lab command end to end, and sweeps on every kind of executor giving the
same rows as a sequential sweep."""

from __future__ import annotations

import csv
import json
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest

from tests.helpers import real_trace, synthetic
from xcache.lab.sweep import COLUMNS, run_sweep
from xcache.oracle.traces import Trace, write_csv
from xcache.replay import main

NO_DASK = "dask[distributed] not installed (pip install -e '.[lab]')"


def small_slice(n: int = 3000) -> Trace:
    """The first n accesses of the olmoe trace."""
    full = real_trace("olmoe_299.jsonl")
    return Trace(full.token[:n], full.layer[:n], full.expert[:n], full.n_layers,
                 full.n_experts, full.top_k, name="olmoe-slice")


def test_lab_command_writes_three_files(tmp_path, capsys):
    """The lab on a CSV slice prints the table and writes csv, json and png."""
    pytest.importorskip("matplotlib")
    src = tmp_path / "slice.csv"
    write_csv(small_slice(), src)
    out = tmp_path / "out"
    rc = main(["--trace", str(src), "--mode", "step", "--policies",
               "lru,s3fifo,arc,belady", "--slots", "16,64", "--executor",
               "thread", "--quiet", "--export-oracle-general",
               str(tmp_path / "t.oracleGeneral"), str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "belady gap" in printed and "s3fifo" in printed
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == COLUMNS
    assert [(r["policy"], int(r["slots"])) for r in rows] == [
        (p, n) for p in ("lru", "s3fifo", "arc", "belady") for n in (16, 64)]
    for r in rows:
        assert int(r["hits"]) + int(r["misses"]) == int(r["requests"]) == 3000
        assert int(r["reloads"]) == int(r["misses"]) - int(r["compulsory"])
        assert int(r["belady_gap"]) >= 0
    assert all(int(r["belady_gap"]) == 0 for r in rows if r["policy"] == "belady")
    report = json.loads((out / "results.json").read_text())
    assert report["trace"]["accesses"] == 3000
    assert report["trace"]["median_reuse_tokens"] > 0
    assert 0 <= report["trace"]["adjacent_overlap"] <= 1
    assert len(report["results"]) == 8
    assert (out / "mrc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "t.oracleGeneral").stat().st_size == 24 * 3000


def test_lab_command_bad_input(tmp_path, capsys):
    """An unreadable trace or a bad policy is exit 2 with the reason on stderr."""
    bad = tmp_path / "bad.txt"
    bad.write_text("0 0 1 2\nnonsense\n")
    assert main(["--trace", str(bad), "--quiet", str(tmp_path / "o")]) == 2
    assert "bad.txt:2" in capsys.readouterr().err
    src = tmp_path / "s.csv"
    write_csv(synthetic(), src)
    assert main(["--trace", str(src), "--policies", "nope", "--slots", "4",
                 "--executor", "thread", "--quiet", str(tmp_path / "o")]) == 2
    assert "unknown policy" in capsys.readouterr().err


def test_fractions_and_per_layer(tmp_path):
    """--fractions sizes the cache from the working set; --per-layer runs."""
    src = tmp_path / "s.csv"
    write_csv(synthetic(), src)
    out = tmp_path / "o"
    assert main(["--trace", str(src), "--fractions", "0.25,0.5",
                 "--per-layer", "--policies", "lru", "--executor", "thread",
                 "--quiet", str(out)]) == 0
    report = json.loads((out / "results.json").read_text())
    assert report["sizes"] == [2, 4] and report["per_layer"] is True


def expected_rows(trace: Trace) -> list[dict]:
    """The sweep run here, without an executor."""
    return run_sweep(trace, ["lru", "arc", "belady"], [8, 24], "step")


def test_process_and_thread_executors_agree():
    """Process and thread pools give exactly the sequential rows."""
    trace = synthetic(seed=7)
    want = expected_rows(trace)
    with ProcessPoolExecutor(max_workers=2) as ex:
        assert run_sweep(trace, ["lru", "arc", "belady"], [8, 24], "step", False,
                         ex) == want
    with ThreadPoolExecutor(max_workers=2) as ex:
        assert run_sweep(trace, ["lru", "arc", "belady"], [8, 24], "step", False,
                         ex) == want


def test_dask_executor_agrees():
    """A dask.distributed client's executor (local threads) gives the same rows."""
    distributed = pytest.importorskip("distributed", reason=NO_DASK)
    trace = synthetic(seed=7)
    with distributed.LocalCluster(n_workers=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        rows = run_sweep(trace, ["lru", "arc", "belady"], [8, 24], "step", False,
                         client.get_executor())
    assert rows == expected_rows(trace)


def test_lab_command_on_dask(tmp_path):
    """--executor dask runs the sweep on a local dask cluster."""
    pytest.importorskip("distributed", reason=NO_DASK)
    src = tmp_path / "s.csv"
    write_csv(synthetic(), src)
    assert main(["--trace", str(src), "--slots", "4,8", "--policies", "lru",
                 "--executor", "dask", "--quiet", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "results.csv").read_text().count("\n") == 3
