"""``replay.py lab TRACE OUT --curve-sweep``: every other policy of the run at
every size by one replay per size, beside the one-pass LRU and Belady curves;
its columns, arrays and lines, the same files on every executor, and a swept
curve that disagrees with the run's own replays refused."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import TRACES_DIR, real_trace
from tests.lab.cluster_helpers import same_files_on_other_executors
from xcache.engine import sim
from xcache.lab import curve as exact
from xcache.replay import main

MIXTRAL = str(TRACES_DIR / "mixtral8x7b_humaneval.jsonl")
OPTIONS = ["--slots", "4,64", "--policies", "fifo,lru,s3fifo:promote=1",
           "--quiet", "--curve-sweep"]
ORDER = ("lru", "fifo", "s3fifo:promote=1", "belady")


def rows_of(path: Path) -> list[dict[str, str]]:
    """curve.csv's rows as read back."""
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def swept_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The mixtral trace's lab with --curve-sweep on a thread pool (step mode)."""
    out = tmp_path_factory.mktemp("sweep") / "out"
    assert main(["lab", MIXTRAL, str(out), *OPTIONS, "--executor", "thread"]) == 0
    return out


def test_columns_put_belady_last_and_the_gaps_after():
    """curve.csv's columns: slots, each policy's misses and ratio, then gaps."""
    assert exact.columns(("lru", "fifo", "belady")) == (
        "slots", "lru_misses", "lru_miss_ratio", "fifo_misses",
        "fifo_miss_ratio", "belady_misses", "belady_miss_ratio", "lru_gap",
        "fifo_gap")
    assert exact.CURVE_COLUMNS == ("slots", "lru_misses", "lru_miss_ratio",
                                   "belady_misses", "belady_miss_ratio",
                                   "lru_gap")


def test_every_swept_point_is_the_replay_at_that_size(swept_run):
    """Each swept column equals simulate() at every size 2..256 (step mode
    refuses 1 slot), its gap is its misses less Belady's, and the recorded
    goldens at 64 slots hold."""
    rows = rows_of(swept_run / "curve.csv")
    assert tuple(rows[0]) == exact.columns(ORDER)
    assert [int(r["slots"]) for r in rows] == list(range(2, 257))
    trace = real_trace("mixtral8x7b_humaneval.jsonl")
    for policy in ("fifo", "s3fifo:promote=1"):
        got = [int(r[f"{policy}_misses"]) for r in rows]
        want = [sim.simulate(trace, policy, c, "step")["misses"]
                for c in range(2, 257)]
        assert got == want, policy
        assert [int(r[f"{policy}_gap"]) for r in rows] == [
            g - int(r["belady_misses"]) for g, r in zip(got, rows, strict=True)]
        assert [float(r[f"{policy}_miss_ratio"]) for r in rows] == [
            g / 21558 for g in got]
    by = {int(r["slots"]): r for r in rows}
    assert (int(by[64]["fifo_misses"]), int(by[64]["lru_misses"]),
            int(by[64]["belady_misses"])) == (15580, 14149, 8307)
    assert int(by[256]["fifo_misses"]) == 256  # all fit: the first reads only


def test_curve_json_names_the_swept_and_how(swept_run, capsys):
    """curve.json: every policy's array, the swept ones named, each's method."""
    doc = json.loads((swept_run / "curve.json").read_text())
    assert list(doc["misses"]) == list(ORDER)
    assert doc["swept"] == ["fifo", "s3fifo:promote=1"]
    assert doc["method"]["fifo"] == exact.SWEPT
    assert doc["method"]["lru"] == exact.METHOD["lru"]
    assert doc["misses"]["fifo"][62] == 15580 and len(doc["misses"]["fifo"]) == 255


def test_the_run_prints_the_swept_curves(tmp_path, capsys):
    """Printed under the one-pass line: which policies were swept and how many
    replays that took (255 sizes x 2 policies)."""
    out = tmp_path / "out"
    assert main(["lab", MIXTRAL, str(out), *OPTIONS, "--executor", "thread"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == ("swept curves (one replay per size): fifo, "
                         "s3fifo:promote=1 at every size 2..256 (510 replays)")


def test_plain_per_layer_sweep(tmp_path):
    """--per-layer in plain mode: sizes 1..8 per layer, each point the replay's."""
    out = tmp_path / "out"
    assert main(["lab", MIXTRAL, str(out), "--slots", "2", "--policies",
                 "arc", "--mode", "plain", "--per-layer", "--quiet",
                 "--curve-sweep", "--executor", "thread"]) == 0
    rows = rows_of(out / "curve.csv")
    trace = real_trace("mixtral8x7b_humaneval.jsonl")
    assert [int(r["slots"]) for r in rows] == list(range(1, 9))
    assert [int(r["arc_misses"]) for r in rows] == [
        sim.simulate(trace, "arc", c, "plain", per_layer=True)["misses"]
        for c in range(1, 9)]
    assert int(rows[0]["arc_misses"]) == 19656  # the recorded golden


@pytest.mark.nosan
def test_every_executor_writes_the_same_swept_files(swept_run, tmp_path):
    """A process pool and a local dask cluster give the thread pool's files."""
    same_files_on_other_executors([MIXTRAL, *OPTIONS], ("curve.csv", "curve.json"),
                                  swept_run, tmp_path)


def test_a_swept_curve_that_disagrees_is_refused(tmp_path, capsys, monkeypatch):
    """Were a swept cell off by one: exit 2 naming policy and size, no files."""
    real = exact._sweep_cell

    def off_by_one(*args, **kwargs):
        return real(*args, **kwargs) + 1

    monkeypatch.setattr(exact, "_sweep_cell", off_by_one)
    out = tmp_path / "out"
    assert main(["lab", MIXTRAL, str(out), *OPTIONS, "--executor", "thread"]) == 2
    assert capsys.readouterr().err == (
        "replay.py lab: curve: fifo at 4 slots is 21559 misses in the swept "
        "curve but 21558 in the replay\n")
    assert not out.exists()


def test_the_plot_draws_each_swept_curve():
    """curve.png keeps the floor and LRU's gap and adds one line per swept
    policy in its lab colour, spanning every size."""
    pytest.importorskip("matplotlib")
    from xcache.lab.plot import style_for

    trace = real_trace("mixtral8x7b_humaneval.jsonl")
    curves = {"lru": sim.curve(trace, "lru", "step"),
              "fifo": np.array([-1] + [sim.simulate(trace, "fifo", c)["misses"]
                                       for c in range(2, 257)]),
              "belady": sim.curve(trace, "belady", "step")}
    rows = exact.curve_rows(curves, len(trace))
    ax = exact.curve_figure(rows, [64], "t").axes[0]
    assert [c.get_label() for c in ax.collections] == [
        "below belady: out of reach", "lru's gap to belady"]
    line = {ln.get_label(): ln for ln in ax.get_lines()}["fifo (every size, swept)"]
    xs, ys = line.get_data()
    assert list(xs) == list(range(2, 257))
    assert np.allclose(ys, curves["fifo"][1:] / len(trace))
    assert line.get_color() == style_for("fifo")[0]


def test_ctrl_c_as_the_pool_closes_ends_its_workers(tmp_path, capsys, monkeypatch):
    """Ctrl-C as the process pool closes after the run ends its workers (exit 130)."""
    import concurrent.futures as cf  # noqa: PLC0415

    from xcache.lab import cli  # noqa: PLC0415

    pools = []

    class Interrupted(cf.ProcessPoolExecutor):
        def shutdown(self, wait=True, **kw):
            if wait and not getattr(self, "workers", None):
                self.workers = list((self._processes or {}).values())
                raise KeyboardInterrupt
            super().shutdown(wait=wait, **kw)

    def make(kind, workers, stack, scheduler=None):
        pools.append(stack.enter_context(Interrupted(max_workers=workers)))
        return pools[-1]

    monkeypatch.setattr(cli, "make_executor", make)
    out = tmp_path / "out"
    assert main(["lab", MIXTRAL, str(out), *OPTIONS]) == 130

    def ended(pid):
        try:
            with open(f"/proc/{pid}/status", encoding="utf-8") as f:
                return "State:\tZ" in f.read()
        except FileNotFoundError:
            return True

    deadline = time.monotonic() + 10
    pids = [proc.pid for proc in pools[0].workers]
    while not all(map(ended, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids and all(map(ended, pids))
    assert "holds this run's files" in capsys.readouterr().err
    assert (out / "curve.csv").is_file()


def test_curves_equal_at_every_size_say_so_in_the_legend():
    """A swept curve equal to another at every size is labelled with it (both
    ways), as mrc.png does, so a line drawn over another is not lost."""
    pytest.importorskip("matplotlib")
    m = np.array([-1, 9, 7, 5])
    curves = {"lru": m, "fifo": m.copy(), "arc": m + 1,
              "belady": np.array([-1, 8, 6, 5])}
    rows = exact.curve_rows(curves, 10)
    ax = exact.curve_figure(rows, [2], "t").axes[0]
    labels = [ln.get_label() for ln in ax.get_lines()
              if ln.get_label().endswith(")")]
    assert labels == ["belady (every size)", "lru (every size) (= fifo)",
                      "fifo (every size, swept) (= lru)",
                      "arc (every size, swept)"]


def test_one_size_draws_a_slot_either_side():
    """A curve of one size (one key) gets an x-axis a slot either side of it,
    not a collapsed one (matplotlib warned of identical limits)."""
    pytest.importorskip("matplotlib")
    import warnings

    rows = exact.curve_rows({"lru": np.array([1]), "belady": np.array([1])}, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ax = exact.curve_figure(rows, [1], "t").axes[0]
    assert ax.get_xlim() == (0.0, 2.0)


def test_no_gap_anywhere_is_said_plainly():
    """LRU as good as Belady at every size: the line says so, naming no size."""
    rows = exact.curve_rows({"lru": np.array([4, 3]),
                             "belady": np.array([4, 3])}, 9)
    assert exact.summary_line(rows) == (
        "exact curves (one pass each): lru and belady at every size 1..2; lru "
        "misses as few as belady at every size")
