"""``replay.py time``: the files it writes, what they hold, and its refusals."""

from __future__ import annotations

import csv
import json

import pytest

from tests.helpers import ROOT, TRACES_DIR
from xcache import replay
from xcache.lab.timing.plot import COLOURS, bars, time_figure
from xcache.lab.timing.sweep import COLUMNS

OLMOE = str(TRACES_DIR / "olmoe_299.jsonl")


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """A run on olmoe's first 12 tokens: sync, 1-2 readers, T 1 and 3, 2 lookaheads."""
    out = tmp_path_factory.mktemp("time")
    rc = replay.main(["time", OLMOE, str(out), "--tokens", "12", "--quiet",
                      "--slots", "40,200", "--executor", "thread",
                      "--predictors", "none,previous,oracle"])
    assert rc == 0
    return out


def test_it_writes_the_four_files(small_run):
    """time.csv has every column, time_layers.csv each row's layers; time.json both."""
    with open(small_run / "time.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == COLUMNS
    # per size: sync + (1, 2 readers) x (T 1, 3) x (none, previous, oracle)
    assert len(rows) == 2 * (1 + 2 * 2 * 3)
    assert (small_run / "time.png").stat().st_size > 0
    with open(small_run / "time_layers.csv", newline="") as f:
        layers = list(csv.DictReader(f))
    assert len(layers) == 16 * len(rows)
    first = [x for x in layers if x["config"] == rows[0]["config"]
             and x["page_cache_share"] == rows[0]["page_cache_share"]]
    assert sum(float(x["wait_s"]) for x in first) == pytest.approx(
        float(rows[0]["wait_s"]))
    data = json.loads((small_run / "time.json").read_text())
    assert data["trace"]["tokens"] == 12 and data["trace"]["steps"] == 12 * 16
    assert data["model"]["device"]["qd"] == [1, 2, 4, 8]
    for r in data["results"]:
        assert len(r["per_layer"]) == 16
        for part in ("compute_s", "wait_s", "hidden_s", "wasted_s"):
            assert sum(x[part] for x in r["per_layer"]) == pytest.approx(r[part])
        assert r["compute_s"] + r["wait_s"] == pytest.approx(r["s_per_token"])


def test_oracle_lookahead_leaves_almost_no_demand_miss(small_run):
    """The oracle's reads arrive before the step: few misses, and none wasted."""
    rows = json.loads((small_run / "time.json").read_text())["results"]
    for r in rows:
        if r["predictor"] == "oracle":
            base = next(x for x in rows if x["slots"] == r["slots"]
                        and x["predictor"] == "none" and x["threads"] == r["threads"]
                        and x["split"] == r["split"])
            assert r["misses"] < base["misses"] / 5
            assert r["spec_unused"] == 0 and r["wasted_s"] == 0.0


def test_the_plot_draws_the_rows(small_run):
    """The bars are the rows' parts in ms, fastest first; the figure draws those."""
    rows = json.loads((small_run / "time.json").read_text())["results"]
    data = bars(rows)
    times = sorted(r["s_per_token"] * 1e3 for r in rows)
    assert [a + b for a, b in zip(data["compute_s"], data["wait_s"],
                                  strict=True)] == pytest.approx(times)
    fig = time_figure(rows, "t")
    ax, axm = fig.axes
    drawn = {}
    for patch in ax.patches:
        drawn.setdefault(patch.get_facecolor()[:3], []).append(patch.get_width())
    from matplotlib.colors import to_rgb

    for part, colour in COLOURS.items():
        assert drawn[to_rgb(colour)] == pytest.approx(data[part])
    assert [p.get_width() for p in axm.patches] == pytest.approx(data["miss_ratio"])


@pytest.mark.parametrize("args,says", [
    (["--threads", "0", "--predictors", "oracle"], "needs read-ahead threads"),
    (["--predictors", "nostradamus"], "unknown predictor 'nostradamus'"),
    (["--split", "0"], "--split: 0 is not a threshold >= 1"),
    (["--page-cache-share", "1.5"], "--page-cache-share: 1.5 is not a share"),
    (["--policies", "lru:bogus=1"], "--policies"),
    (["--model", "/nonexistent/m.json"], "model /nonexistent/m.json: cannot read it"),
])
def test_bad_options_are_one_line_and_exit_2(tmp_path, capsys, args, says):
    """Each refusal is exit 2 with one line naming the option, before any sweep."""
    rc = replay.main(["time", OLMOE, str(tmp_path / "o"), "--tokens", "4", *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and says in err, err


def test_a_trace_of_too_many_keys_is_refused(tmp_path, capsys):
    """An expert id of 300,000 in a 2-layer trace: one line naming the shape, exit 2."""
    trace = tmp_path / "big.jsonl"
    trace.write_text('{"tok": 1, "layers": [[0, 1], [2, 300000]]}\n')
    rc = replay.main(["time", str(trace), str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "2 layers x 300,001 experts, is 600,002 keys" in err, err


def test_a_bad_model_file_names_the_field(tmp_path, capsys):
    """A model whose device lacks bandwidth_Bps: the line names the file and field."""
    bad = tmp_path / "m.json"
    bad.write_text(json.dumps({"device": {"qd": [1], "latency_s": [0.0]},
                               "page_cache": {"qd": [1], "latency_s": [0.0],
                                              "bandwidth_Bps": [1e9]}}))
    rc = replay.main(["time", OLMOE, str(tmp_path / "o"), "--model", str(bad)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == f"replay.py time: model {bad}: device: no bandwidth_Bps"


def test_a_toml_model_reads_as_the_json_one(tmp_path):
    """The same model in TOML loads to the same machine."""
    from xcache.lab.timing.model import load_model

    text = "\n".join([
        "expert_bytes = 4096", "page_cache_share = 0.5",
        "[device]", "qd = [1, 2]", "latency_s = [1e-4, 1e-4]",
        "bandwidth_Bps = [1e9, 2e9]",
        "[page_cache]", "qd = [1]", "latency_s = [1e-6]", "bandwidth_Bps = [1e10]",
        "[compute]", "expert_s = 1e-4"])
    (tmp_path / "m.toml").write_text(text)
    m = load_model(tmp_path / "m.toml")
    assert (m.expert_bytes, m.page_cache_share, m.compute.expert_s) == (4096, 0.5, 1e-4)
    assert m.device.tau(2, 4096) == pytest.approx(1e-4 + 2 * 4096 / 2e9)


def test_the_front_door_lists_the_command(capsys):
    """``replay.py --help`` names ``time`` among the commands."""
    assert replay.main(["--help"]) == 0
    assert "time" in capsys.readouterr().out
    assert "time" in replay.COMMANDS


def test_process_pool_workers_leave_no_temporary_folder(tmp_path):
    """Every worker's outcome container is removed, though workers skip atexit."""
    import os
    import subprocess
    import sys

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp))
    run = subprocess.run(
        [sys.executable, str(ROOT / "replay.py"), "time",
         str(TRACES_DIR / "mixtral8x7b_humaneval.jsonl"), str(tmp_path / "o"),
         "--tokens", "3", "--quiet", "--executor", "process", "--workers", "2",
         "--predictors", "none,oracle"],
        env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert list(tmp.iterdir()) == []
