"""A dask cluster that fails a sweep (``--scheduler``): its last worker killed
mid-sweep, its cells cancelled by someone else, or an exception of the
cluster's own is one line naming the scheduler, exit 2, OUT as it was, and
never a hang; a cell's own exception is still raised as it is."""

from __future__ import annotations

import concurrent.futures
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import xcache.lab.cluster as cluster_mod
import xcache.lab.sweep as sweep_mod
from tests.helpers import ROOT
from tests.lab.cluster_helpers import LAB_OPTIONS, OLMOE, Cluster, running_cluster_of
from xcache.lab.cluster import ClusterError, Watch
from xcache.lab.sweep import run_cells
from xcache.replay import main

#: Seconds a run may take, once its cluster failed, before it counts as hung.
BOUND = 60.0


@pytest.fixture
def lone(tmp_path: Path) -> Iterator[Cluster]:
    """A scheduler and one worker of this test alone (it kills the worker)."""
    folder = tmp_path / "cluster"
    folder.mkdir()
    yield from running_cluster_of(folder, 1)


def bounded(run: Callable[[], Any]) -> tuple[Any, float]:
    """``run()``'s value (or exception), given BOUND seconds, and when it ended.

    A run still going at the bound fails the test (its thread is left to
    the cluster's end).
    """
    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["value"] = run()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc
        box["ended"] = time.monotonic()

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(BOUND)
    assert not thread.is_alive(), f"still running {BOUND:g} s later"
    if "error" in box:
        raise box["error"]
    return box["value"], box["ended"]


def kill_when_partial(monkeypatch: pytest.MonkeyPatch, cluster: Cluster,
                      killed: list[float]) -> None:
    """Kill the cluster's one worker at the bar's first update after a cell
    reported part of its work (noted in ``killed``: when)."""
    report, goto = cluster_mod.Progress.report, sweep_mod._Bar.goto
    partial: list[bool] = []

    def noting(progress: cluster_mod.Progress, cell: int, done: int) -> None:
        if 0 < done < progress.sizes[cell]:
            partial.append(True)
        report(progress, cell, done)

    def kill_once_partial(bar: sweep_mod._Bar, done: int) -> None:
        if partial and not killed:
            cluster.kill(cluster.workers[0])
            killed.append(time.monotonic())
        goto(bar, done)

    monkeypatch.setattr(cluster_mod.Progress, "report", noting)
    monkeypatch.setattr(sweep_mod._Bar, "goto", kill_once_partial)


def lost_line(command: str, address: str, cells: int, out: Path) -> re.Pattern:
    """The one line of a run whose cluster lost its last worker."""
    return re.compile(
        rf"replay\.py {command}: --scheduler {re.escape(address)}: the cluster "
        rf"lost its last worker \((\d+) of {cells} cells done\); "
        rf"{re.escape(str(out))} left as it was\n")


@pytest.mark.nosan
def test_lab_whose_last_worker_dies(lone, tmp_path, monkeypatch, capsys):
    """SIGKILL of the only worker once a cell is partly done: exit 2 within a
    few seconds, one line naming the scheduler and the cells done, OUT (a
    folder of the user's) as it was."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    monkeypatch.setattr(sweep_mod, "PROGRESS_EVERY", 2000)
    killed: list[float] = []
    kill_when_partial(monkeypatch, lone, killed)
    rc, ended = bounded(lambda: main(["lab", OLMOE, str(out), *LAB_OPTIONS,
                                      "--scheduler", lone.address]))
    assert len(killed) == 1
    assert rc == 2
    err = capsys.readouterr().err
    found = lost_line("lab", lone.address, 24, out).fullmatch(err)
    assert found, err
    assert int(found[1]) < 24
    assert ended - killed[0] < cluster_mod.LOST_GRACE + 5.0
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "mine\n"


@pytest.mark.nosan
def test_predict_whose_last_worker_dies(lone, tmp_path, monkeypatch, capsys):
    """predict --scheduler, its only worker killed mid-run: exit 2, one line, no
    traceback, no OUT (it did not exist)."""
    out = tmp_path / "out"
    killed: list[float] = []
    kill_when_partial(monkeypatch, lone, killed)
    rc, ended = bounded(lambda: main([
        "predict", OLMOE, str(out), "--quiet", "--predictors",
        "pair,ewma,popularity", "--scheduler", lone.address]))
    assert len(killed) == 1
    assert rc == 2
    err = capsys.readouterr().err
    found = lost_line("predict", lone.address, 3, out).fullmatch(err)
    assert found, err
    assert int(found[1]) < 3
    assert ended - killed[0] < cluster_mod.LOST_GRACE + 5.0
    assert not out.exists()


def waiting(reporter: cluster_mod.Reporter, index: int) -> int:
    """Report one unit done, then sleep a minute (its worker dies meanwhile)."""
    reporter(index, 1)
    time.sleep(60)
    return index


@pytest.mark.nosan
def test_no_worker_left_ends_the_wait(lone, monkeypatch):
    """A cell with nothing scattered (so dask cancels nothing) whose only worker
    dies: the wait ends LOST_GRACE after the scheduler reports no worker, with
    one ClusterError (the executor's futures never settle: it hung before)."""
    from distributed import Client

    monkeypatch.setattr(cluster_mod, "LOST_GRACE", 1.0)
    killed: list[float] = []
    goto = sweep_mod._Bar.goto

    def kill_once_reported(bar: sweep_mod._Bar, done: int) -> None:
        if done and not killed:
            lone.kill(lone.workers[0])
            killed.append(time.monotonic())
        goto(bar, done)

    monkeypatch.setattr(sweep_mod._Bar, "goto", kill_once_reported)
    with Client(lone.address, set_as_default=False) as client:
        executor = client.get_executor()
        with pytest.raises(ClusterError) as caught:
            bounded(lambda: run_cells(executor, waiting, [], [()], [2]))
        ended = time.monotonic()
    assert str(caught.value) == (f"the dask scheduler {lone.address}: the "
                                 "cluster lost its last worker (0 of 1 cells "
                                 "done)")
    assert 1.0 <= ended - killed[0] < 1.0 + 5.0


@pytest.mark.nosan
def test_cells_cancelled_by_another_client(lone, tmp_path, monkeypatch, capsys):
    """Another client force-cancels the sweep's cells mid-sweep: exit 2 and one
    line naming the scheduler and the cancellation (it was the empty
    ``replay.py lab: `` of a cancelled concurrent future before)."""
    from distributed import Client, Future

    out = tmp_path / "out"
    monkeypatch.setattr(sweep_mod, "PROGRESS_EVERY", 2000)
    goto = sweep_mod._Bar.goto
    cancelled: list[int] = []
    with Client(lone.address, set_as_default=False) as other:
        def cancel_once(bar: sweep_mod._Bar, done: int) -> None:
            if done and not cancelled:
                keys = other.run_on_scheduler(lambda dask_scheduler: [
                    k for k in dask_scheduler.tasks if str(k).startswith("_cell")])
                other.cancel([Future(k, other) for k in keys], force=True)
                cancelled.append(len(keys))
            goto(bar, done)

        monkeypatch.setattr(sweep_mod._Bar, "goto", cancel_once)
        rc, _ = bounded(lambda: main(["lab", OLMOE, str(out), *LAB_OPTIONS,
                                      "--scheduler", lone.address]))
    assert cancelled and cancelled[0] > 0
    assert rc == 2
    err = capsys.readouterr().err
    assert re.fullmatch(
        rf"replay\.py lab: --scheduler {re.escape(lone.address)}: the cluster "
        r"failed the sweep \(\d+ of 24 cells done\): FutureCancelledError: "
        r"_cell-[0-9a-f-]+ cancelled for reason: [^\n]+; "
        rf"{re.escape(str(out))} left as it was\n", err), err
    assert not out.exists()
    assert lone.workers[0].poll() is None  # nobody died


@pytest.mark.nosan
def test_scheduler_killed_mid_sweep(lone, tmp_path):
    """SIGKILL of the scheduler once a cell runs (a real run of replay.py): exit
    2 within the bound, stderr one line naming --scheduler (no dask log, no
    traceback), no OUT."""
    from distributed import Client

    out = tmp_path / "out"
    slots = ",".join(str(n) for n in range(16, 200, 4))  # 46 sizes: 184 cells
    run = subprocess.Popen(
        [sys.executable, "replay.py", "lab", OLMOE, str(out), "--policies",
         "lru,arc,s3fifo", "--slots", slots, "--quiet", "--scheduler",
         lone.address], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with Client(lone.address, set_as_default=False) as client:
            deadline = time.monotonic() + BOUND
            while not any(client.processing().values()):
                assert run.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
        lone.kill(lone.scheduler)
        killed = time.monotonic()
        _, err = run.communicate(timeout=BOUND)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 2, err
    assert time.monotonic() - killed < cluster_mod.ASK_TIMEOUT + 5.0
    assert re.fullmatch(
        rf"replay\.py lab: --scheduler {re.escape(lone.address)}: the (cluster "
        r"failed the sweep|scheduler did not answer) \(\d+ of 184 cells done\): "
        rf"[A-Za-z]+Error: [^\n]+; {re.escape(str(out))} left as it was\n",
        err.decode()), err.decode()
    assert not out.exists()


def failing(reporter: cluster_mod.Reporter, index: int) -> int:
    """A cell that raises its own error."""
    raise ValueError(f"cell {index}: its own error")


@pytest.mark.nosan
def test_a_cells_own_error_is_not_the_clusters(lone):
    """A cell that raises on the cluster: its ValueError as it is, no ClusterError."""
    from distributed import Client

    with Client(lone.address, set_as_default=False) as client:
        with pytest.raises(ValueError, match=r"^cell 0: its own error$"):
            bounded(lambda: run_cells(client.get_executor(), failing, [], [()],
                                      [1]))


class Stub:
    """An executor on a stand-in client whose scheduler says ``workers``."""

    xcache_where = "--scheduler tcp://127.0.0.1:8786"

    def __init__(self, workers: int | BaseException) -> None:
        self.asked = 0

        def sync(*_args: Any, **_kwargs: Any) -> dict[str, int]:
            self.asked += 1
            if isinstance(workers, BaseException):
                raise workers
            return {"n_workers": workers}

        scheduler = SimpleNamespace(identity=lambda **_kwargs: None)
        self._client = SimpleNamespace(sync=sync, scheduler=scheduler)


def killed_worker() -> BaseException:
    """A KilledWorker as the scheduler makes it."""
    from distributed import KilledWorker

    return KilledWorker("_cell-1", SimpleNamespace(address="tcp://127.0.0.1:9"),
                        3)


def comm_closed() -> BaseException:
    """A CommClosedError as a comm raises it."""
    from distributed.comm import CommClosedError

    return CommClosedError("in <TCP (closed) ConnectionPool.gather "
                           "local=tcp://127.0.0.1:1 remote=tcp://127.0.0.1:2>: "
                           "Stream is closed")


WHERE = "--scheduler tcp://127.0.0.1:8786"


@pytest.mark.parametrize("make, said", [
    (concurrent.futures.CancelledError, "CancelledError (no reason given)"),
    (lambda: TimeoutError(), "TimeoutError (no reason given)"),
    (lambda: TimeoutError("  \n"), "TimeoutError (no reason given)"),
    (comm_closed, "CommClosedError: in <TCP (closed) ConnectionPool.gather "
     "local=tcp://127.0.0.1:1 remote=tcp://127.0.0.1:2>: Stream is closed"),
    (killed_worker, "KilledWorker: Attempted to run task '_cell-1' on 4 "
     "different workers, but all those workers died while running it. The "
     "last worker that attempt to run the task was tcp://127.0.0.1:9. "
     "Inspecting worker logs is often..."),
])
def test_the_clusters_exceptions_are_one_line(make, said):
    """Each exception of the cluster's, on a cluster that still has a worker, is
    one line naming the scheduler, the cells done and the exception (its
    type when it says nothing)."""
    pytest.importorskip("distributed")
    watch = Watch(Stub(1), 4)  # type: ignore[arg-type]
    error = watch.failure(make())
    assert isinstance(error, ClusterError)
    assert str(error) == (f"{WHERE}: the cluster failed the sweep (0 of 4 cells "
                          f"done): {said}")


def test_no_worker_names_the_lost_worker_whatever_was_raised():
    """A cancelled future with an empty message on a cluster with no worker left
    is the lost worker's line."""
    watch = Watch(Stub(0), 24)  # type: ignore[arg-type]
    assert str(watch.failure(concurrent.futures.CancelledError())) == (
        f"{WHERE}: the cluster lost its last worker (0 of 24 cells done)")


def test_silent_scheduler_is_one_line():
    """A scheduler that does not answer how many workers it has: ClusterError."""
    watch = Watch(Stub(TimeoutError()), 2)  # type: ignore[arg-type]
    with pytest.raises(ClusterError) as caught:
        watch.check()
    assert str(caught.value) == (f"{WHERE}: the scheduler did not answer (0 of 2 "
                                 "cells done): TimeoutError (no reason given)")


def test_guard_turns_what_the_cluster_raises_into_one_line():
    """Shipping or submitting that raises (here a cancelled future with an empty
    message) is a ClusterError naming the scheduler; a ClusterError passes."""
    watch = Watch(Stub(2), 3)  # type: ignore[arg-type]
    with pytest.raises(ClusterError) as caught, watch.guard():
        raise concurrent.futures.CancelledError()
    assert str(caught.value) == (f"{WHERE}: the cluster failed the sweep (0 of 3 "
                                 "cells done): CancelledError (no reason given)")
    first = ClusterError("as it was")
    with pytest.raises(ClusterError) as again, watch.guard():
        raise first
    assert again.value is first


def test_check_waits_lost_grace_with_no_worker(monkeypatch):
    """check() asks at most every CHECK_EVERY s and raises only once no worker
    has been seen for LOST_GRACE s."""
    now = [100.0]
    monkeypatch.setattr(cluster_mod, "time",
                        SimpleNamespace(monotonic=lambda: now[0]))
    stub = Stub(0)
    watch = Watch(stub, 5)  # type: ignore[arg-type]
    watch.check()  # first sight of no worker: the clock starts
    now[0] = 100.0 + cluster_mod.CHECK_EVERY / 2
    watch.check()  # too soon to ask again
    assert stub.asked == 1
    now[0] = 100.0 + cluster_mod.LOST_GRACE - 0.01
    watch.check()  # asked: no worker, not for long enough
    assert stub.asked == 2
    now[0] = 100.0 + cluster_mod.LOST_GRACE + cluster_mod.CHECK_EVERY
    with pytest.raises(ClusterError) as caught:
        watch.check()
    assert stub.asked == 3
    assert str(caught.value) == (f"{WHERE}: the cluster lost its last worker "
                                 "(0 of 5 cells done)")


def test_dask_comm_logs_are_errors_only_while_a_sweep_is_connected():
    """quiet_comms: while the stack is open, dask's comm loggers drop the
    INFO 'Batched Comm Closed' a lost scheduler logs (traceback and all)
    before the sweep's own one line; they are as they were after."""
    import logging
    from contextlib import ExitStack

    before = {n: logging.getLogger(n).level for n in cluster_mod.COMM_LOGGERS}
    with ExitStack() as stack:
        cluster_mod.quiet_comms(stack)
        for name in cluster_mod.COMM_LOGGERS:
            logger = logging.getLogger(name)
            assert not logger.isEnabledFor(logging.INFO)
            assert logger.isEnabledFor(logging.ERROR)
    assert {n: logging.getLogger(n).level
            for n in cluster_mod.COMM_LOGGERS} == before
