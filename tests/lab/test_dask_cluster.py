"""Sweeps on a running dask cluster (``--scheduler``): a real scheduler and two
workers on 127.0.0.1 give the process executor's files byte for byte, also
when a worker dies mid-sweep; progress arrives from inside a running cell;
every bad use of the option is a clear error."""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import xcache.lab.cluster as cluster_mod
import xcache.lab.sweep as sweep_mod
from tests.helpers import group_members, sigint_mid_run, synthetic
from tests.lab.cluster_helpers import (
    LAB_OPTIONS,
    OLMOE,
    Cluster,
    free_port,
    running_cluster_of,
)
from xcache.lab.sweep import run_cells
from xcache.oracle.traces import write_csv
from xcache.replay import main

LAB_FILES = ("results.csv", "results.json")
PREDICT_FILES = ("predict.csv", "predict.json")


def running_cluster(tmp: Path) -> Iterator[Cluster]:
    """A scheduler and two workers, all ended even when the test fails."""
    yield from running_cluster_of(tmp, 2)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for the tests that leave it as they found it."""
    yield from running_cluster(tmp_path_factory.mktemp("cluster"))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A cluster of this test alone (it kills a worker)."""
    yield from running_cluster(tmp_path)


@pytest.fixture(scope="module")
def process_lab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lab's files of the sweep on a process pool of 2."""
    out = tmp_path_factory.mktemp("process")
    assert main(["lab", OLMOE, str(out), *LAB_OPTIONS, "--executor",
                 "process", "--workers", "2"]) == 0
    return out


def same_files(a: Path, b: Path, names: tuple[str, ...]) -> None:
    """The named files of folders ``a`` and ``b`` are equal byte for byte."""
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.mark.nosan
def test_lab_on_cluster_equals_process_pool(shared, process_lab, tmp_path):
    """The lab's results.csv and results.json via the cluster are the process pool's."""
    remote = tmp_path / "cluster"
    assert main(["lab", OLMOE, str(remote), *LAB_OPTIONS, "--scheduler",
                 shared.address]) == 0
    same_files(process_lab, remote, LAB_FILES)


@pytest.mark.nosan
def test_lab_curve_on_cluster_equals_process_pool(shared, tmp_path):
    """--curve-sweep via the cluster (the two one-pass cells and FIFO's swept
    chunks there too): the curve's files and the results are the process
    pool's, byte for byte."""
    here, remote = tmp_path / "here", tmp_path / "cluster"
    options = ["--policies", "lru,fifo", "--slots", "16,64", "--quiet",
               "--curve-sweep"]
    assert main(["lab", OLMOE, str(here), *options, "--executor", "process"]) == 0
    assert main(["lab", OLMOE, str(remote), *options, "--scheduler",
                 shared.address]) == 0
    same_files(here, remote, (*LAB_FILES, "curve.csv", "curve.json"))


@pytest.mark.nosan
def test_worker_killed_mid_sweep_gives_the_full_result(cluster, process_lab,
                                                       tmp_path, monkeypatch):
    """SIGKILL of a worker once a cell is partly done: the process pool's files still.

    Cells report every 2,000 of the trace's 38,272 accesses; the first
    partial report marks the sweep as running, and at the bar's next update
    (the main thread) worker 1 is killed, with the cells not yet finished
    noted then: work was still pending when it died.
    """
    remote = tmp_path / "cluster"
    monkeypatch.setattr(sweep_mod, "PROGRESS_EVERY", 2000)
    report, goto = cluster_mod.Progress.report, sweep_mod._Bar.goto
    partial: list[cluster_mod.Progress] = []
    killed: list[int] = []
    unfinished: list[list[int]] = []

    def noting(progress: cluster_mod.Progress, cell: int, done: int) -> None:
        if 0 < done < progress.sizes[cell] and not partial:
            partial.append(progress)
        report(progress, cell, done)

    def kill_once_partial(bar: sweep_mod._Bar, done: int) -> None:
        if partial and not killed:
            p = partial[0]
            with p._lock:
                unfinished.append([c for c, d in enumerate(p._done)
                                   if d < p.sizes[c]])
            victim = cluster.workers[1]
            cluster.kill(victim)
            killed.append(victim.returncode)
        goto(bar, done)

    monkeypatch.setattr(cluster_mod.Progress, "report", noting)
    monkeypatch.setattr(sweep_mod._Bar, "goto", kill_once_partial)
    assert main(["lab", OLMOE, str(remote), *LAB_OPTIONS, "--scheduler",
                 cluster.address]) == 0
    assert killed == [-signal.SIGKILL]
    assert len(unfinished) == 1 and unfinished[0], unfinished
    assert cluster.workers[0].poll() is None
    same_files(process_lab, remote, LAB_FILES)


@pytest.mark.nosan
def test_predict_on_cluster_equals_running_here(shared, tmp_path):
    """predict.csv and predict.json via the cluster are those of the cells run here."""
    src = tmp_path / "synthetic.csv"
    write_csv(synthetic(n_tokens=60), src)
    here, remote = tmp_path / "here", tmp_path / "cluster"
    assert main(["predict", str(src), str(here), "--quiet"]) == 0
    assert main(["predict", str(src), str(remote), "--quiet", "--scheduler",
                 shared.address]) == 0
    same_files(here, remote, PREDICT_FILES)


def waiting_cell(event_name: str, reporter: cluster_mod.Reporter,
                 index: int) -> bool:
    """Report 3 of 10 steps done, then wait until the client says it saw them."""
    from distributed import Event

    reporter(index, 3)
    return Event(event_name).wait(timeout=60)


@pytest.mark.nosan
def test_progress_arrives_while_the_cell_runs(shared, monkeypatch):
    """A cell's report reaches the client's bar before the cell ends."""
    from distributed import Client, Event

    seen: list[int] = []
    goto = sweep_mod._Bar.goto
    with Client(shared.address, set_as_default=False) as client:
        event = Event("xcache-test-progress", client=client)

        def noting(bar: sweep_mod._Bar, done: int) -> None:
            seen.append(done)
            if done == 3:
                event.set()
            goto(bar, done)

        monkeypatch.setattr(sweep_mod._Bar, "goto", noting)
        out = run_cells(client.get_executor(), waiting_cell,
                        ["xcache-test-progress"], [()], [10])
    assert out == [True]
    assert [d for d in dict.fromkeys(seen) if d] == [3, 10]


@pytest.mark.parametrize("command", ["lab", "predict"])
@pytest.mark.parametrize("options, message", [
    (["--scheduler", "localhost:8786"],
     "--scheduler: 'localhost:8786' is not a scheduler address (tcp://HOST:PORT)"),
    (["--scheduler", "tcp://127.0.0.1"],
     "--scheduler: 'tcp://127.0.0.1' is not a scheduler address (tcp://HOST:PORT)"),
    (["--scheduler", "tcp://127.0.0.1:99999"],
     "--scheduler: 'tcp://127.0.0.1:99999' is not a scheduler address "
     "(tcp://HOST:PORT)"),
    (["--scheduler", "tcp://127.0.0.1:8786", "--executor", "thread"],
     "--scheduler: needs --executor dask, not thread (a scheduler runs dask "
     "cells)"),
    (["--scheduler", "tcp://127.0.0.1:8786", "--executor", "process"],
     "--scheduler: needs --executor dask, not process (a scheduler runs dask "
     "cells)"),
])
def test_bad_scheduler_option(command, options, message, tmp_path, capsys):
    """A malformed address or a non-dask executor is exit 2 naming --scheduler."""
    src = tmp_path / "s.csv"
    write_csv(synthetic(n_tokens=20), src)
    assert main([command, str(src), str(tmp_path / "o"), *options]) == 2
    assert capsys.readouterr().err == f"replay.py {command}: {message}\n"


@pytest.mark.parametrize("command", ["lab", "predict"])
def test_unreachable_scheduler(command, tmp_path, capsys, monkeypatch):
    """No scheduler at the address: exit 2, the message names the address."""
    pytest.importorskip("distributed")
    monkeypatch.setattr(cluster_mod, "CONNECT_TIMEOUT", 1.0)
    src = tmp_path / "s.csv"
    write_csv(synthetic(n_tokens=20), src)
    address = f"tcp://127.0.0.1:{free_port()}"
    assert main([command, str(src), str(tmp_path / "o"), "--quiet",
                 "--scheduler", address]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"replay.py {command}: --scheduler {address}: no dask "
                          "scheduler answers there within 1 s ("), err
    assert err.count("\n") == 1


def test_predict_workers_need_an_executor(tmp_path, capsys):
    """predict --workers without --executor is exit 2 naming --workers."""
    src = tmp_path / "s.csv"
    write_csv(synthetic(n_tokens=20), src)
    assert main(["predict", str(src), str(tmp_path / "o"), "--workers", "2"]) == 2
    assert capsys.readouterr().err == ("replay.py predict: --workers: needs "
                                       "--executor (the predictors run here "
                                       "otherwise)\n")


@pytest.mark.nosan
def test_ctrl_c_ends_predict_on_dask(tmp_path):
    """SIGINT once a running cell's steps are counted: exit 130, no process, no file."""
    pytest.importorskip("distributed")
    out = tmp_path / "out"
    rc, err, pgid = sigint_mid_run(
        [sys.executable, "replay.py", "predict", OLMOE, str(out), "--executor",
         "dask", "--workers", "2", "--predictors", "pair,ewma,popularity"],
        re.compile(rb" [1-9][0-9]*/2400 \["))  # mid-run: a test step counted
    assert rc == 130, err
    assert "Traceback" not in err
    assert err.endswith(f"replay.py predict: interrupted; {out} left as it was\n")
    assert group_members(pgid) == []
    assert not out.exists()  # made by the run, removed: as it was


@pytest.mark.nosan
def test_scheduler_without_workers(tmp_path, capsys):
    """A scheduler with no worker: exit 2 naming the address, nothing submitted."""
    pytest.importorskip("distributed")
    gen = running_cluster_of(tmp_path, 0)
    c = next(gen)
    try:
        assert main(["lab", OLMOE, str(tmp_path / "o"), "--quiet",
                     "--scheduler", c.address]) == 2
    finally:
        gen.close()
    assert capsys.readouterr().err == (f"replay.py lab: --scheduler {c.address}: "
                                       "the scheduler has no workers\n")
