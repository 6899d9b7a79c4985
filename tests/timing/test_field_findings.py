"""The field's findings about time, as properties of the time lab's model.

On the shipped traces (their first tokens), with a machine whose numbers
are chosen for each finding:

- the split threshold changes time but not one counter;
- read-ahead turns the sum of I/O and compute into about their maximum;
- the second reader's gain is the disk model's queue-depth curve:
  a disk giving 83 % of its bandwidth at depth 1 makes it worth 20 %,
  a disk that scales with depth makes it worth 2x;
- a page-cache read costs a miss its own (smaller) time;
- an oracle lookahead bounds every real predictor's time from below.
"""

from __future__ import annotations

import pytest

from tests.helpers import real_trace
from xcache.lab.cluster import Reporter
from xcache.lab.predict.evaluate import steps_of
from xcache.lab.predict.predictors import PREDICTORS
from xcache.lab.timing.events import Schedule, run_schedule
from xcache.lab.timing.model import Compute, Machine, Tier
from xcache.lab.timing.outcomes import replay_outcomes
from xcache.lab.timing.sweep import Grid, steps_window, time_cell

KIB128 = 131072
OLMOE, MIXTRAL = "olmoe_299.jsonl", "mixtral8x7b_humaneval.jsonl"


def disk(bandwidths: tuple[float, ...], latency: float = 0.0) -> Tier:
    """A tier of the given aggregate bandwidth at depths 1, 2, ..."""
    qd = tuple(range(1, len(bandwidths) + 1))
    return Tier(qd, (latency,) * len(qd), bandwidths)


def machine(device: Tier, expert_s: float, layer_s: float = 0.0,
            share: float = 0.0) -> Machine:
    """A machine of 128 KiB experts over ``device`` (page cache: 10 GB/s)."""
    return Machine(device, disk((10e9,), 2e-6), Compute(expert_s, layer_s, 0.0),
                   share, KIB128)


#: 83 % of its 3 GB/s at depth 1, all of it from depth 2 (the field's disk).
FIELD_DISK = disk((0.83 * 3e9, 3e9, 3e9, 3e9), 0.0)
#: A disk that scales with depth: 1 GB/s per request in flight, up to 8.
LINEAR_DISK = disk(tuple(q * 1e9 for q in range(1, 9)), 0.0)


def window(name: str, tokens: int, train: float = 0.0):
    """(train steps, timed steps, timed tokens, trace) of a shipped trace."""
    full = real_trace(name)
    steps, _ = steps_of(full)
    return (*steps_window(steps, tokens, train), full)


def quiet() -> Reporter:
    """A reporter that drops every report."""
    return Reporter(local=lambda cell, done: None)


@pytest.mark.parametrize("name,slots", [(OLMOE, 128), (MIXTRAL, 64)])
def test_split_threshold_changes_time_not_a_counter(name, slots):
    """T = 1..top-k: the same counters at every T; time rises with T (split early)."""
    _, test, n_tok, tr = window(name, 60)
    top = tr.top_k
    grid = Grid(slots=(slots,), threads=(2,), splits=tuple(range(1, top + 1)),
                predictors=("",))
    m = machine(FIELD_DISK, 40e-6, 50e-6)
    shared = {"train": [], "test": test, "n_tokens": n_tok, "n_layers": tr.n_layers,
              "n_experts": tr.n_experts, "top_k": top, "grid": grid, "machines": [m]}
    rows = time_cell(shared, "lru", slots, "", quiet(), 0)
    assert [r["split"] for r in rows] == list(range(1, top + 1))
    counts = {(r["requests"], r["hits"], r["misses"], r["reads"]) for r in rows}
    assert len(counts) == 1
    times = [r["s_per_token"] for r in rows]
    assert times == sorted(times) and times[0] < times[-1]


def test_read_ahead_is_near_the_maximum_not_the_sum():
    """I/O and compute balanced: sync is their sum; read-ahead + lookahead their max."""
    _, test, n_tok, tr = window(OLMOE, 60)
    out = replay_outcomes(test, tr.n_layers, tr.n_experts, tr.top_k, 64, "lru")
    io_per_read = FIELD_DISK.tau(1, KIB128)
    reads = out.counters["misses"]
    accesses = out.counters["requests"]
    # compute per token equal to the synchronous I/O per token
    m = machine(FIELD_DISK, io_per_read * reads / accesses)
    sync = run_schedule(test, out, Schedule(), m, tr.n_layers, n_tok)
    io_s = reads * io_per_read / n_tok
    compute = accesses * m.compute.expert_s / n_tok
    assert sync["s_per_token"] == pytest.approx(io_s + compute)
    ahead = run_schedule(test, out, Schedule(1), m, tr.n_layers, n_tok)
    assert ahead["s_per_token"] < 0.8 * sync["s_per_token"]
    plan = [st.experts for st in test]  # the oracle's plan, through the lab's path
    out_o = replay_outcomes(test, tr.n_layers, tr.n_experts, tr.top_k, 64, "lru",
                            plan, tr.top_k)
    oracle = run_schedule(test, out_o, Schedule(1, predictor="oracle", budget=8),
                          m, tr.n_layers, n_tok)
    biggest = max(compute, out_o.counters["spec_issued"] * io_per_read / n_tok)
    assert biggest <= oracle["s_per_token"] <= 1.1 * biggest
    assert sync["s_per_token"] / oracle["s_per_token"] > 1.6


@pytest.mark.parametrize("device,gain", [(FIELD_DISK, 1 / 0.83), (LINEAR_DISK, 2.0)])
def test_second_reader_gain_follows_the_queue_depth_curve(device, gain):
    """I/O bound: time(1 reader) / time(2) = throughput(2) / throughput(1)."""
    _, test, n_tok, tr = window(OLMOE, 60)
    assert device.throughput(2, KIB128) / device.throughput(1, KIB128) == \
        pytest.approx(gain)
    plan = [st.experts for st in test]
    out = replay_outcomes(test, tr.n_layers, tr.n_experts, tr.top_k, 9, "lru",
                          plan, tr.top_k)
    m = machine(device, 0.0)
    one, two = (run_schedule(test, out, Schedule(n, predictor="oracle", budget=8),
                             m, tr.n_layers, n_tok)["s_per_token"] for n in (1, 2))
    assert one / two == pytest.approx(gain, rel=0.03)


def test_a_page_cache_miss_costs_its_own_read():
    """Sync, every read from the page cache: the wait is misses x its tau at depth 1."""
    _, test, n_tok, tr = window(MIXTRAL, 60)
    out = replay_outcomes(test, tr.n_layers, tr.n_experts, tr.top_k, 64, "lru")
    warm = machine(FIELD_DISK, 1e-5, share=1.0)
    cold = machine(FIELD_DISK, 1e-5, share=0.0)
    w, c = (run_schedule(test, out, Schedule(), m, tr.n_layers, n_tok)
            for m in (warm, cold))
    misses = out.counters["misses"]
    assert w["wait_s"] == pytest.approx(misses * warm.page_cache.tau(1, KIB128) / n_tok)
    assert c["wait_s"] == pytest.approx(misses * FIELD_DISK.tau(1, KIB128) / n_tok)
    fraction = warm.page_cache.tau(1, KIB128) / FIELD_DISK.tau(1, KIB128)
    assert w["wait_s"] / c["wait_s"] == pytest.approx(fraction) and fraction < 0.3


@pytest.mark.parametrize("name,slots", [(OLMOE, 96), (OLMOE, 256), (MIXTRAL, 40)])
def test_oracle_lookahead_bounds_every_predictor_from_below(name, slots):
    """Same cache, schedule and budget: no predictor's time is below the oracle's."""
    train, test, n_tok, tr = window(name, 60, 0.5)
    preds = tuple(PREDICTORS)
    grid = Grid(slots=(slots,), threads=(2,), splits=(1,), predictors=preds)
    m = machine(FIELD_DISK, 30e-6, 40e-6)
    shared = {"train": train, "test": test, "n_tokens": n_tok,
              "n_layers": tr.n_layers, "n_experts": tr.n_experts,
              "top_k": tr.top_k, "grid": grid, "machines": [m]}
    times = {p: time_cell(shared, "lru", slots, p, quiet(), 0)[0]["s_per_token"]
             for p in preds}
    for p, t in times.items():
        assert times["oracle"] <= t, (p, times)
