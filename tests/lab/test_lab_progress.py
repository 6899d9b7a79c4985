"""The lab's progress within a policy cell: here, in a thread pool and in a
process pool the sweep's Progress receives each cell's access counts while
the cell runs, and a cancelled or interrupted sweep stops its running cells at
their next report."""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import xcache.lab.sweep as sweep_mod
from xcache.lab.cluster import Cancelled, Progress, Reporter
from xcache.lab.sweep import run_sweep
from xcache.oracle.traces import Trace

#: Accesses between two reports in these tests.
EVERY = 1000


def big_trace(n_tokens: int = 300) -> Trace:
    """A trace of n_tokens x 4 layers x top-2 = 2,400 accesses (n_tokens 300)."""
    rng = np.random.default_rng(7)
    token = np.repeat(np.arange(n_tokens), 8)
    layer = np.tile(np.repeat(np.arange(4), 2), n_tokens)
    expert = np.concatenate([rng.choice(16, 2, replace=False)
                             for _ in range(4 * n_tokens)])
    return Trace(token=token, layer=layer, expert=expert, n_layers=4,
                 n_experts=16, top_k=2, name="progress")


class Noting(Progress):
    """A Progress that keeps every report it receives, in order."""

    def __init__(self, sizes: list[int]) -> None:
        super().__init__(sizes)
        self.seen: list[tuple[int, int]] = []

    def report(self, cell: int, done: int) -> None:
        """Keep (cell, done), then count it."""
        self.seen.append((cell, done))
        super().report(cell, done)


def test_cells_run_here_report_every_period(monkeypatch):
    """No executor: each cell reports 1000, 2000, 2400, then counts as ended."""
    monkeypatch.setattr(sweep_mod, "PROGRESS_EVERY", EVERY)
    trace = big_trace()
    p = Noting([2400, 2400])
    rows = run_sweep(trace, ["lru"], [6], "step", progress=p)
    assert p.seen == [(0, 1000), (0, 2000), (0, 2400), (0, 2400),
                      (1, 1000), (1, 2000), (1, 2400), (1, 2400)]
    assert p.done() == 4800
    assert rows == run_sweep(trace, ["lru"], [6], "step")


def test_cells_in_a_thread_pool_report_within_the_cell(monkeypatch):
    """A thread pool: every period's report of each cell reaches the Progress."""
    monkeypatch.setattr(sweep_mod, "PROGRESS_EVERY", EVERY)
    trace = big_trace()
    p = Noting([2400] * 3)  # lru, arc, belady
    with ThreadPoolExecutor(2) as pool:
        rows = run_sweep(trace, ["lru", "arc"], [6], "step", executor=pool,
                       progress=p)
    for cell in range(3):
        assert [d for c, d in p.seen if c == cell] == [1000, 2000, 2400, 2400]
    assert rows == run_sweep(trace, ["lru", "arc"], [6], "step")


class Gated(Reporter):
    """A board reporter that, after a cell's first partial report, waits for
    the parent's go-ahead (a file), so the parent sees the cell unfinished."""

    def __init__(self, board: str, gates: str, total: int) -> None:
        super().__init__(board=board)
        self.gates, self.total = gates, total

    def __call__(self, cell: int, done: int) -> None:
        """Report; at the first partial count wait for ``gates/<cell>``."""
        super().__call__(cell, done)
        if done < self.total:
            gate = Path(self.gates) / str(cell)
            deadline = time.monotonic() + 60  # a bound, not a measure
            while not gate.exists() and time.monotonic() < deadline:
                time.sleep(0.01)

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "gates": self.gates,
                "total": self.total}


class Opening(Noting):
    """Opens a cell's gate when its first partial count is read from the board."""

    def __init__(self, sizes: list[int], gates: Path) -> None:
        super().__init__(sizes)
        self.gates = gates

    def reporter(self, executor: Any) -> Reporter:
        """The board reporter, gated."""
        plain = super().reporter(executor)
        assert plain.board is not None
        return Gated(plain.board, str(self.gates), self.sizes[0])

    def report(self, cell: int, done: int) -> None:
        """Keep the report; a partial one opens the cell's gate."""
        super().report(cell, done)
        if done < self.sizes[cell]:
            (self.gates / str(cell)).touch()


def test_cells_in_a_process_pool_report_within_the_cell(monkeypatch, tmp_path):
    """A process pool: the parent reads 1000 of a cell's 2400 while it still runs."""
    monkeypatch.setattr(sweep_mod, "PROGRESS_EVERY", EVERY)
    trace = big_trace()
    p = Opening([2400, 2400], tmp_path)
    with ProcessPoolExecutor(2) as pool:
        rows = run_sweep(trace, ["lru"], [6], "step", executor=pool,
                       progress=p)
    for cell in range(2):
        mine = [d for c, d in p.seen if c == cell]
        assert mine[0] == 1000  # the cell waited there until this was read
        assert mine[-1] == 2400
    assert rows == run_sweep(trace, ["lru"], [6], "step")


def test_a_process_pool_board_is_removed_at_the_end(monkeypatch):
    """The board file of a process-pool sweep is gone when the sweep returns."""
    made: list[str] = []
    opened = Progress._open_board

    def noting(self: Progress) -> str:
        made.append(opened(self))
        return made[-1]

    monkeypatch.setattr(Progress, "_open_board", noting)
    with ProcessPoolExecutor(1) as pool:
        run_sweep(big_trace(20), ["lru"], [6], "step", executor=pool)
    assert len(made) == 1 and not Path(made[0]).exists()


class FakePool:
    """What Progress takes for a process pool (it has ``_processes``)."""

    _processes: dict[int, Any] = {}


def test_a_cancelled_board_stops_the_next_report():
    """After cancel(), a board report still counts, then raises Cancelled."""
    p = Progress([10, 10])
    r = p.reporter(FakePool())
    try:
        r(0, 3)
        r(0, 2)  # never going back
        assert p.done() == 3
        p.cancel()
        with pytest.raises(Cancelled, match="^cell 1: the sweep was cancelled$"):
            r(1, 4)
        assert p.done() == 7
    finally:
        p.close()


def test_a_cancelled_sweep_stops_a_cell_here():
    """A plain-call reporter raises Cancelled once its Progress is cancelled."""
    p = Progress([10])
    r = p.reporter(None)
    r(0, 5)
    p.cancel()
    with pytest.raises(Cancelled):
        r(0, 6)
    assert p.done() == 6


def test_ctrl_c_in_a_cell_run_here_stops_it_at_that_report(monkeypatch):
    """KeyboardInterrupt raised by a report stops the replay there (no more reports)."""
    monkeypatch.setattr(sweep_mod, "PROGRESS_EVERY", EVERY)

    class Interrupting(Noting):
        def report(self, cell: int, done: int) -> None:
            super().report(cell, done)
            if done == 1000:
                raise KeyboardInterrupt

    p = Interrupting([2400, 2400])
    with pytest.raises(KeyboardInterrupt):
        run_sweep(big_trace(), ["lru"], [6], "step", progress=p)
    assert p.seen == [(0, 1000)]
    assert p.cancelled


def test_a_failing_cell_cancels_the_others_in_a_thread_pool(monkeypatch):
    """One cell's error ends the sweep; the Progress is cancelled on the way out."""
    monkeypatch.setattr(sweep_mod, "PROGRESS_EVERY", EVERY)
    p = Progress([2400] * 2)
    with ThreadPoolExecutor(1) as pool, pytest.raises(Exception, match="slots"):
        run_sweep(big_trace(), ["lru"], [1], "step", executor=pool,
                       progress=p)
    assert p.cancelled
