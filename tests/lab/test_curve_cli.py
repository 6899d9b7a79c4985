"""``replay.py lab TRACE OUT --curve``: the exact curves' files (curve.csv,
curve.json, curve.png) with exact rows on a shipped trace, the same files on
every executor, the curve checked against the sweep's replays, the plot's
parts, and the result set replaced whole."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import TRACES_DIR, real_trace
from tests.lab.cluster_helpers import same_files_on_other_executors
from xcache.engine import sim
from xcache.lab import curve as exact
from xcache.lab import summary
from xcache.replay import main

MIXTRAL = str(TRACES_DIR / "mixtral8x7b_humaneval.jsonl")
OPTIONS = ["--slots", "4,16,64", "--policies", "lru,belady", "--quiet", "--curve"]
CURVE_FILES = ("curve.csv", "curve.json")


def rows_of(path: Path) -> list[dict[str, str]]:
    """curve.csv's rows as read back."""
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def thread_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The mixtral trace's lab with --curve on a thread pool (step mode, global)."""
    out = tmp_path_factory.mktemp("curve") / "out"
    assert main(["lab", MIXTRAL, str(out), *OPTIONS, "--executor", "thread"]) == 0
    return out


def test_curve_csv_has_every_size_with_exact_rows(thread_run):
    """One row per size 2..256 (step mode refuses 1 slot: top-2 steps); the rows
    at 2, 3, 4, 16, 64 and 256 slots are the recorded ones."""
    rows = rows_of(thread_run / "curve.csv")
    assert tuple(rows[0]) == exact.CURVE_COLUMNS
    assert [int(r["slots"]) for r in rows] == list(range(2, 257))
    by = {int(r["slots"]): r for r in rows}
    want = {2: (21558, 21558), 3: (21558, 21216), 4: (21558, 20877),
            16: (21558, 16967), 64: (14149, 8307), 256: (256, 256)}
    for slots, (lru, opt) in want.items():
        r = by[slots]
        assert (int(r["lru_misses"]), int(r["belady_misses"]),
                int(r["lru_gap"])) == (lru, opt, lru - opt), slots
        assert float(r["lru_miss_ratio"]) == lru / 21558
        assert float(r["belady_miss_ratio"]) == opt / 21558
    trace = real_trace("mixtral8x7b_humaneval.jsonl")
    for policy in exact.CURVE_POLICIES:
        m = sim.curve(trace, policy, "step")
        assert [int(r[f"{policy}_misses"]) for r in rows] == m[1:].tolist()


def test_curve_json_and_png(thread_run, capsys):
    """curve.json holds the arrays, counts, method and named sizes; the PNG is one."""
    doc = json.loads((thread_run / "curve.json").read_text())
    assert {k: doc[k] for k in ("trace", "mode", "per_layer", "requests",
                                "compulsory", "working_set", "first_slots",
                                "refused_below", "marked_sizes")} == {
        "trace": "mixtral8x7b_humaneval.jsonl", "mode": "step",
        "per_layer": False, "requests": 21558, "compulsory": 256,
        "working_set": 256, "first_slots": 2, "refused_below": 2,
        "marked_sizes": [4, 16, 64]}
    assert doc["slots"] == list(range(2, 257))
    assert doc["misses"]["lru"][62] == 14149 and doc["misses"]["belady"][62] == 8307
    assert set(doc["method"]) == {"lru", "belady", "exact"}
    assert (thread_run / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = json.loads((thread_run / "results.json").read_text())
    assert [r["slots"] for r in results["results"]] == [4, 16, 64, 4, 16, 64]


def test_the_run_says_what_the_curves_show(tmp_path, capsys):
    """Printed: the sizes covered and where LRU's gap to Belady is largest."""
    out = tmp_path / "out"
    assert main(["lab", MIXTRAL, str(out), *OPTIONS, "--executor", "thread"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == ("exact curves (one pass each): lru and belady at every "
                         "size 2..256; lru's gap to belady is largest at 62 "
                         "slots: 21,459 against 8,522 misses")
    assert lines[-1] == (f"wrote {out / 'results.csv'}, results.json, mrc.png, "
                         "curve.csv, curve.json and curve.png")


def test_per_layer_curve_rows(tmp_path):
    """--per-layer: sizes are per layer, 2..8 of mixtral's 8 experts, exact rows."""
    out = tmp_path / "out"
    assert main(["lab", MIXTRAL, str(out), "--slots", "2,4", "--policies", "lru",
                 "--per-layer", "--quiet", "--curve", "--executor", "thread"]) == 0
    got = [(int(r["slots"]), int(r["lru_misses"]), int(r["belady_misses"]))
           for r in rows_of(out / "curve.csv")]
    assert got == [(2, 14162, 12993), (3, 11163, 8154), (4, 8551, 5360),
                   (5, 6335, 3458), (6, 4127, 2033), (7, 2044, 969),
                   (8, 256, 256)]


def test_plain_mode_starts_at_one_slot(tmp_path):
    """Plain mode refuses no size: the rows run 1..256, 1 slot misses everything."""
    out = tmp_path / "out"
    assert main(["lab", MIXTRAL, str(out), "--slots", "8", "--policies", "lru",
                 "--mode", "plain", "--quiet", "--curve", "--executor",
                 "thread"]) == 0
    rows = rows_of(out / "curve.csv")
    assert [int(r["slots"]) for r in rows] == list(range(1, 257))
    assert (int(rows[0]["lru_misses"]), int(rows[0]["belady_misses"])) == (21558, 21558)
    assert int(rows[1]["belady_misses"]) == 21222  # the recorded golden
    assert json.loads((out / "curve.json").read_text())["refused_below"] is None


@pytest.mark.nosan
def test_every_executor_writes_the_same_curve_files(thread_run, tmp_path):
    """A process pool and a local dask cluster give the thread pool's files."""
    same_files_on_other_executors([MIXTRAL, *OPTIONS], CURVE_FILES, thread_run,
                                  tmp_path)


def test_a_curve_that_disagrees_with_the_replay_is_refused(tmp_path, capsys,
                                                           monkeypatch):
    """Were the curve off by one at a replayed size: exit 2 naming it, no files."""
    real = sim.curve

    def off_by_one(*args, **kwargs):
        m = real(*args, **kwargs)
        return m + (m >= 0)

    monkeypatch.setattr(sim, "curve", off_by_one)
    out = tmp_path / "out"
    assert main(["lab", MIXTRAL, str(out), *OPTIONS, "--executor", "thread"]) == 2
    assert capsys.readouterr().err == (
        "replay.py lab: curve: lru at 4 slots is 21559 misses in the one-pass "
        "curve but 21558 in the replay\n")
    assert not out.exists()


def test_a_run_without_curve_removes_an_earlier_runs_curve_files(thread_run,
                                                                 tmp_path):
    """The curve's files are of the lab's set: a later run without --curve
    replaces the set whole, so no stale curve is left beside new results."""
    out = tmp_path / "out"
    out.mkdir()
    for name in summary.RESULT_FILES:
        (out / name).write_bytes((thread_run / name).read_bytes())
    assert main(["lab", MIXTRAL, str(out), "--slots", "8", "--policies", "lru",
                 "--quiet", "--executor", "thread"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "mrc.png", "results.csv", "results.json"]


def test_the_plot_has_the_floor_the_gap_and_the_named_sizes():
    """curve.png: Belady's floor and LRU's gap are filled regions, both curves
    span every size, each named size is a dotted line with both points on it."""
    pytest.importorskip("matplotlib")
    trace = real_trace("mixtral8x7b_humaneval.jsonl")
    curves = {p: sim.curve(trace, p, "step") for p in exact.CURVE_POLICIES}
    rows = exact.curve_rows(curves, len(trace))
    fig = exact.curve_figure(rows, [4, 16, 64], "t")
    ax = fig.axes[0]
    fills = [c.get_label() for c in ax.collections]
    assert fills == ["below belady: out of reach", "lru's gap to belady"]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    for policy in exact.CURVE_POLICIES:
        xs, ys = lines[f"{policy} (every size)"].get_data()
        assert list(xs) == list(range(2, 257))
        assert np.allclose(ys, curves[policy][1:] / len(trace))
    marks = [ln for ln in ax.get_lines() if ln.get_linestyle() == ":"]
    assert sorted(ln.get_xdata()[0] for ln in marks) == [4, 16, 64]
    texts = [t.get_text() for t in ax.texts]
    assert "64: lru 0.656, belady 0.385" in texts
    assert ax.get_ylim()[0] == 0
