"""The time lab's counters are the lab's and the predict lab's, for every policy.

The time lab takes each access's outcome from the live cache
(lab/timing/outcomes.py); these tests hold it to the C simulator that
``replay.py lab`` runs (every cache policy, three sizes, two real traces)
and to ``replay.py predict``'s what-if (lookahead counters), and check that
no schedule or machine changes a counter.
"""

from __future__ import annotations

import pytest

from tests.helpers import real_trace
from xcache.engine.sim import POLICIES
from xcache.lab.cluster import Reporter
from xcache.lab.predict.evaluate import predictions, replay_model, steps_of
from xcache.lab.predict.predictors import make_predictor
from xcache.lab.sweep import run_sweep
from xcache.lab.timing.model import load_model
from xcache.lab.timing.sweep import Grid, steps_window, time_cell
from xcache.oracle.traces import Trace

CACHE_POLICIES = [p for p in POLICIES if p != "belady"] + [
    "lfru:sample=3,seed=7", "hotness:period=16", "s3fifo:small=40"]


def window(name: str, tokens: int) -> tuple[list, Trace]:
    """The first ``tokens`` tokens of a shipped trace: steps, and as a Trace."""
    full = real_trace(name)
    steps, _ = steps_of(full)
    _, test, _ = steps_window(steps, tokens, 0.0)
    trace = Trace.from_steps([(st.token, st.layer, st.experts) for st in test],
                             full.n_layers, full.n_experts)
    return test, trace


def shared_for(test: list, trace: Trace, grid: Grid) -> dict:
    """What a time cell reads."""
    return {"train": [], "test": test, "n_tokens": 1, "n_layers": trace.n_layers,
            "n_experts": trace.n_experts, "top_k": trace.top_k, "grid": grid,
            "machines": [load_model()]}


def quiet() -> Reporter:
    """A reporter that drops every report."""
    return Reporter(local=lambda cell, done: None)


@pytest.mark.parametrize("name,tokens,sizes", [
    ("olmoe_299.jsonl", 40, (9, 40, 160)),
    ("mixtral8x7b_humaneval.jsonl", 60, (3, 24, 96))])
def test_every_policy_and_size_counts_as_the_lab(name, tokens, sizes):
    """Requests, hits, misses: the time lab's row equals the lab sweep's."""
    test, trace = window(name, tokens)
    lab = {(r["policy"], r["slots"]): r
           for r in run_sweep(trace, CACHE_POLICIES, list(sizes))}
    grid = Grid(policies=tuple(CACHE_POLICIES), slots=sizes, threads=(0,),
                predictors=("",))
    shared = shared_for(test, trace, grid)
    for i, (pol, n, pred) in enumerate(grid.cells()):
        (row,) = time_cell(shared, pol, n, pred, quiet(), i)
        want = lab[(pol, n)]
        assert (row["requests"], row["hits"], row["misses"]) == (
            want["requests"], want["hits"], want["misses"]), (pol, n)


@pytest.mark.parametrize("predictor", ["previous", "pair", "oracle", "ewma"])
@pytest.mark.parametrize("policy", ["lru", "s3fifo"])
def test_lookahead_counts_as_the_predict_labs_what_if(predictor, policy):
    """Misses, speculative reads issued and used: equal to predict's replay."""
    full = real_trace("olmoe_299.jsonl")
    steps, _ = steps_of(full)
    train, test, _ = steps_window(steps, 60, 0.5)
    trace = Trace.from_steps([(st.token, st.layer, st.experts) for st in test],
                             full.n_layers, full.n_experts)
    grid = Grid(policies=(policy,), slots=(40,), threads=(2,), splits=(1,),
                predictors=(predictor,), budget=4)
    shared = shared_for(test, trace, grid) | {"train": train}
    (row,) = time_cell(shared, policy, 40, predictor, quiet(), 0)
    plan = predictions(make_predictor(predictor, 16, 64, 8), train, test)
    want = replay_model(test, 16, 64, 8, 40, policy, plan, 4)["stats"]
    assert (row["misses"], row["spec_issued"], row["spec_used"]) == (
        want["misses"], want["spec_issued"], want["spec_used"])
    assert row["spec_issued"] > 0


def test_no_schedule_or_machine_changes_a_counter():
    """Sync, readers 1-2, thresholds 1-4, depths, page-cache shares: one count."""
    test, trace = window("olmoe_299.jsonl", 30)
    grid = Grid(slots=(64,), threads=(0, 1, 2), depths=(2, 64),
                splits=(1, 2, 3, 4), predictors=("",),
                page_cache_share=(0.0, 0.7))
    shared = shared_for(test, trace, grid)
    shared["machines"] = grid.machines(load_model())
    rows = time_cell(shared, "lru", 64, "", quiet(), 0)
    assert len(rows) == (1 + 2 * 2 * 4) * 2
    counts = {(r["requests"], r["hits"], r["misses"]) for r in rows}
    assert len(counts) == 1
    by = {(r["config"], r["page_cache_share"]): r["s_per_token"] for r in rows}
    for config, share in by:
        if share == 0.0:
            assert by[(config, 0.7)] < by[(config, 0.0)], config
