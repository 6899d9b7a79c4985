"""The local dask clusters of the lab's ``--scheduler`` tests, and the sweep they run.

``test_dask_cluster.py`` (sweeps on a working cluster) and
``test_cluster_lost.py`` (a cluster that fails a sweep) both start a real
``dask scheduler`` and single-thread ``dask worker``s on 127.0.0.1, each in
its own process group, and sweep the olmoe trace with the same options.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import ROOT, TRACES_DIR

OLMOE = str(TRACES_DIR / "olmoe_299.jsonl")
#: A sweep of 4 policies (with Belady) x 6 sizes of the olmoe trace: 24 cells.
LAB_OPTIONS = ["--policies", "lru,arc,s3fifo", "--slots", "16,24,32,48,64,96",
               "--quiet"]


def free_port() -> int:
    """A TCP port of 127.0.0.1 nothing listens on (just now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    """A dask scheduler and its workers, each its own process group."""

    address: str
    scheduler: subprocess.Popen
    workers: list[subprocess.Popen] = field(default_factory=list)

    def kill(self, proc: subprocess.Popen) -> None:
        """SIGKILL ``proc``'s process group and reap it."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def start_cluster(tmp: Path, n_workers: int = 2) -> Cluster:
    """Start ``dask scheduler`` and ``n_workers`` single-thread ``dask worker``s."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DASK_DISTRIBUTED__LOGGING__"
           "DISTRIBUTED": "error"}
    dask = [sys.executable, "-m", "dask"]
    log = open(tmp / "cluster.log", "ab")  # noqa: SIM115 - closed with the test
    popen = {"cwd": ROOT, "env": env, "stdout": log, "stderr": log,
             "start_new_session": True}
    c = Cluster(address, subprocess.Popen(
        [*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
         "--no-dashboard"], **popen))
    for i in range(n_workers):
        c.workers.append(subprocess.Popen(
            [*dask, "worker", address, "--nthreads", "1", "--no-nanny",
             "--no-dashboard", "--name", f"w{i}", "--local-directory",
             str(tmp / f"w{i}")], **popen))
    log.close()
    from distributed import Client

    try:
        with Client(address, timeout="60s", set_as_default=False) as client:
            if n_workers:
                client.wait_for_workers(n_workers, timeout=60)
    except BaseException:
        for proc in [*c.workers, c.scheduler]:
            c.kill(proc)
        raise
    return c


def running_cluster_of(tmp: Path, n_workers: int) -> Iterator[Cluster]:
    """A scheduler and ``n_workers`` workers, all ended when the generator closes."""
    pytest.importorskip("distributed")
    c: Cluster | None = None
    try:
        c = start_cluster(tmp, n_workers)
        yield c
    finally:
        if c is not None:
            for proc in [*c.workers, c.scheduler]:
                c.kill(proc)


def same_files_on_other_executors(argv: list[str], names: tuple[str, ...],
                                  want: Path, out: Path) -> None:
    """``replay.py lab`` with ``argv`` (TRACE first, OUTDIR left out) on a
    process pool and, with the lab extra, a local dask cluster, 2 workers
    each: the files ``names`` of each run equal those in ``want``."""
    from xcache.replay import main  # noqa: PLC0415

    executors = ["process"]
    with contextlib.suppress(ImportError):
        import distributed  # noqa: F401, PLC0415
        executors.append("dask")
    for executor in executors:
        there = out / executor
        assert main(["lab", argv[0], str(there), *argv[1:], "--executor",
                     executor, "--workers", "2"]) == 0
        for name in names:
            assert (there / name).read_bytes() == (want / name).read_bytes(), \
                (executor, name)
