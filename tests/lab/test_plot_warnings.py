"""The lab's warnings: a size below one step's accesses or where every policy
misses everything, and a hotness period of about one token; exact text on
tiny traces, printed by the lab and recorded in results.json; none on a
normal trace."""

from __future__ import annotations

import json

import pytest

from tests.helpers import real_trace
from xcache.lab.caveats import (
    accesses_per_token,
    lab_warnings,
    policy_warnings,
    size_warnings,
    spec_params,
)
from xcache.lab.sweep import run_sweep, sizes_for
from xcache.oracle.traces import Trace, write_csv
from xcache.replay import main

MIXTRAL = "mixtral8x7b_humaneval.jsonl"


def tiny() -> Trace:
    """3 tokens x 2 layers, each step routing experts 0 and 1 (top-2 of 4).

    Keys cycle 0, 1, 4, 5: 4 accesses per token, 12 in all.
    """
    return Trace.from_steps([(t, layer, [0, 1]) for t in range(3)
                             for layer in range(2)], 2, 4, name="tiny")


def hot_period(period: int) -> str:
    """The hotness warning for ``period`` on the tiny trace (all layers)."""
    return (f"hotness:period={period}: counts halve every {period} requests, "
            f"{period / 4:.2f} tokens of this trace (4 accesses per token); "
            "hotness remembers little beyond the last token (a period of "
            "several tokens' accesses, e.g. period=32, keeps a longer history)")


def test_step_mode_size_of_one_step_misses_everything():
    """Step mode at top-k slots: the held step fills the cache, nothing ever hits."""
    rows = run_sweep(tiny(), ["lru"], [2, 4], "step")
    assert [(r["slots"], r["hits"], r["belady_gap"]) for r in rows] == [
        (2, 0, 0), (4, 8, 0)]
    assert size_warnings(tiny(), rows, [2, 4]) == [
        "size 2 slots is only one step's 2 accesses (top-2): every policy "
        "misses every access (Belady, the optimum, hits none of 12)"]


def test_plain_size_below_one_step():
    """Plain, 1 slot under top-2: below one step; nothing repeats, so all miss."""
    rows = run_sweep(tiny(), ["lru"], [1, 3], "plain")
    # at 3 slots LRU misses all of the 4-key cycle but Belady hits 6: no warning
    assert [(r["slots"], r["hits"], r["belady_gap"]) for r in rows] == [
        (1, 0, 0), (3, 0, 6)]
    assert size_warnings(tiny(), rows, [1, 3]) == [
        "size 1 slot is below one step's 2 accesses (top-2): every policy "
        "misses every access (Belady, the optimum, hits none of 12)"]


def test_plain_size_below_one_step_with_hits():
    """Below one step but a key repeats back to back: the size warning alone."""
    trace = Trace.from_steps([(0, 0, [0, 1]), (1, 0, [1, 2])], 1, 4)
    rows = run_sweep(trace, ["lru"], [1], "plain")
    assert rows[0]["hits"] == 1
    assert size_warnings(trace, rows, [1]) == [
        "size 1 slot is below one step's 2 accesses (top-2)"]


def test_per_layer_size_of_one_step_that_hits_is_no_warning():
    """Per layer, top-k slots hold a layer's experts: 8 hits, no size warning."""
    rows = run_sweep(tiny(), ["lru"], [2], "plain", per_layer=True)
    assert rows[0]["hits"] == 8
    assert size_warnings(tiny(), rows, [2]) == []


def test_hotness_period_of_about_one_token():
    """period=4 and 3 are 1.00 and 0.75 tokens of 4 accesses: warned; 7 and 256 not."""
    policies = ["lru", "hotness:period=4", "hotness:period=3",
                "hotness:period=7", "hotness"]
    assert policy_warnings(tiny(), policies, False) == [hot_period(4),
                                                        hot_period(3)]


def test_hotness_period_per_layer_counts_one_layer():
    """Per layer a cache sees 2 accesses per token: period=3 is 1.50 tokens, 4 is 2."""
    assert accesses_per_token(tiny(), True) == 2.0
    assert policy_warnings(tiny(), ["hotness:period=3", "hotness:period=4"],
                           True) == [
        "hotness:period=3: counts halve every 3 requests, 1.50 tokens of this "
        "trace (2 accesses per token per layer); hotness remembers little "
        "beyond the last token (a period of several tokens' accesses, e.g. "
        "period=16, keeps a longer history)"]


def test_default_hotness_period_on_a_wide_model():
    """The default 256 on 60 layers x top-8 (480 per token) is 0.53 tokens: warned."""
    trace = Trace.from_steps([(t, layer, list(range(8))) for t in range(2)
                              for layer in range(60)], 60, 64, name="wide")
    assert policy_warnings(trace, ["hotness"], False) == [
        "hotness: counts halve every 256 requests, 0.53 tokens of this trace "
        "(480 accesses per token); hotness remembers little beyond the last "
        "token (a period of several tokens' accesses, e.g. period=3840, keeps "
        "a longer history)"]


def test_spec_params():
    """A spec splits into its name and text parameters."""
    assert spec_params("hotness") == ("hotness", {})
    assert spec_params("lfru:sample=3,seed=7") == ("lfru", {"sample": "3",
                                                           "seed": "7"})


def test_no_warning_on_a_normal_trace():
    """The Mixtral trace at the default fractions and policies warns of nothing."""
    from xcache.engine.sim import POLICIES  # noqa: PLC0415

    trace = real_trace(MIXTRAL)
    sizes = sizes_for(trace, None, None, "step", False)
    assert sizes == [26, 64, 128]
    rows = run_sweep(trace, list(POLICIES), sizes, "step")
    assert lab_warnings(trace, rows, sizes, list(POLICIES), False) == []


def test_lab_prints_and_records_the_warnings(tmp_path, capsys):
    """The lab prints each warning after its table and lists them in results.json."""
    pytest.importorskip("matplotlib")
    src = tmp_path / "tiny.csv"
    write_csv(tiny(), src)
    out = tmp_path / "out"
    assert main(["lab", str(src), str(out), "--slots", "2,4", "--policies",
                 "lru,hotness:period=4", "--executor", "thread", "--quiet"]) == 0
    printed = capsys.readouterr().out.splitlines()
    expected = ["size 2 slots is only one step's 2 accesses (top-2): every "
                "policy misses every access (Belady, the optimum, hits none "
                "of 12)", hot_period(4)]
    assert printed[-3:-1] == [f"warning: {w}" for w in expected]
    assert printed[-1].startswith("wrote ")
    report = json.loads((out / "results.json").read_text())
    assert report["warnings"] == expected


def test_lab_records_no_warnings(tmp_path, capsys):
    """Nothing to warn of: no warning line printed, an empty list recorded."""
    src = tmp_path / "tiny.csv"
    write_csv(tiny(), src)
    out = tmp_path / "out"
    assert main(["lab", str(src), str(out), "--slots", "4", "--policies",
                 "lru", "--executor", "thread", "--quiet"]) == 0
    assert "warning:" not in capsys.readouterr().out
    assert json.loads((out / "results.json").read_text())["warnings"] == []
