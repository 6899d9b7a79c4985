"""The model's contention terms, hand-computed (no timing): compute slowed by
overlapped reads (a tier's ``compute_factor``) and ``reserve_s``, the cost
of queueing a read with every reader busy.

The machine of ``test_events``: experts of 1,000 bytes, the device at depth 1
2 ms a read and at depth 2 3 ms each; 10 ms of non-expert work a step and
5 ms an expert; every other term 0 unless a test sets it.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.timing.model_helpers import MS, machine, timed
from xcache.lab.timing.events import IO, Schedule
from xcache.lab.timing.model import Machine, ModelError, load_model, write_model


def slowed(device: float = 1.0, page_cache: float = 1.0) -> Machine:
    """The module's machine with these compute factors per tier."""
    m = machine()
    return replace(m, device=replace(m.device, compute_factor=device),
                   page_cache=replace(m.page_cache, compute_factor=page_cache))


def test_compute_under_a_read_takes_the_factor():
    """One reader, factor 2: read 1 runs 12-14 under expert 0, which ends at 18, not 17.

    Read 0 10-12 (the consumer blocked), read 1 12-14: expert 0's 5 ms do
    1 ms by 14 and the other 4 by 18; expert 1 18-23: 23 ms, 1 of it the stretch.
    """
    r = timed(Schedule(threads=1), m=slowed(device=2.0))
    assert (r["s_per_token"], r["wait_s"], r["compute_s"]) == (23.0, 2.0, 21.0)
    assert timed(Schedule(threads=1))["s_per_token"] == 22.0  # factor 1: as before


def test_the_stretch_is_reported_as_contention():
    """The 1 ms stretch of the test above is run_schedule's contention_s."""
    from tests.timing.model_helpers import BOTH_MISS, ONE
    from xcache.lab.timing.events import run_schedule

    r = run_schedule(ONE, BOTH_MISS, Schedule(threads=1), slowed(device=2.0), 2)
    assert r["contention_s"] == pytest.approx(1 * MS, abs=1e-12)
    r = run_schedule(ONE, BOTH_MISS, Schedule(threads=1), machine(), 2)
    assert r["contention_s"] == 0.0


def test_compute_with_no_read_in_flight_is_not_slowed():
    """Two readers, factor 2: both reads end at 13 while the consumer waits: 23 ms."""
    assert timed(Schedule(threads=2), m=slowed(device=2.0))["s_per_token"] == 23.0


def test_only_the_tier_being_read_slows_compute():
    """Every read from the device; the page cache's factor 3 changes nothing: 22 ms."""
    assert timed(Schedule(threads=1), m=slowed(page_cache=3.0))["s_per_token"] == 22.0


def test_the_stretch_stops_when_the_read_ends():
    """IO.stretch: 5 ms of compute from 0 under a 2 ms read at factor 2 end at 6 ms."""
    io = IO(slowed(device=2.0), threads=1, depth=4)
    io.submit(0.0, (0, 0), False)
    assert io.stretch(0.0, 5 * MS) == pytest.approx(6 * MS, abs=1e-12)
    assert io.reads[0].done == pytest.approx(2 * MS, abs=1e-12)


def test_queueing_with_every_reader_busy_costs_reserve_s():
    """One reader, queue 1 ms, reserve 0.5 ms: read 0 wakes it (10-11), read 1 11-11.5.

    Reads 11-13 and 13-15; the consumer waits 11.5-13, computes 13-18, 18-23.
    """
    m = machine().with_(queue_s=1 * MS, reserve_s=0.5 * MS)
    r = timed(Schedule(threads=1), m=m)
    assert (r["s_per_token"], r["wait_s"], r["compute_s"]) == (23.0, 1.5, 21.5)


def test_reads_that_wake_readers_pay_no_reserve_s():
    """Two readers, both woken (queue 1 ms each): reserve 0.5 ms unpaid, 23.5 ms."""
    m = machine().with_(queue_s=1 * MS, reserve_s=0.5 * MS)
    assert timed(Schedule(threads=2), m=m)["s_per_token"] == 23.5


def test_the_terms_round_trip_and_old_files_are_neutral(tmp_path):
    """compute_factor and reserve_s survive a model file; without them: 1 and 0."""
    m = slowed(device=1.5).with_(reserve_s=2e-6)
    write_model(m, tmp_path / "m.json")
    got = load_model(tmp_path / "m.json")
    assert (got.device.compute_factor, got.page_cache.compute_factor) == (1.5, 1.0)
    assert got.compute.reserve_s == 2e-6
    data = {"device": {"qd": [1], "latency_s": [1e-4], "bandwidth_Bps": [1e9]},
            "page_cache": {"qd": [1], "latency_s": [0.0], "bandwidth_Bps": [4e9]},
            "compute": {"expert_s": 1e-4, "layer_s": 0.0, "access_s": 2e-6}}
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = load_model(tmp_path / "old.json")
    assert (old.device.compute_factor, old.page_cache.compute_factor) == (1.0, 1.0)
    assert old.compute.reserve_s == 0.0


def test_a_bad_compute_factor_is_refused_naming_it(tmp_path):
    """compute_factor 0: ModelError naming the file, the tier and the field."""
    data = {"device": {"qd": [1], "latency_s": [1e-4], "bandwidth_Bps": [1e9],
                       "compute_factor": 0},
            "page_cache": {"qd": [1], "latency_s": [0.0], "bandwidth_Bps": [4e9]}}
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ModelError, match=r"bad\.json: device: compute_factor 0"):
        load_model(tmp_path / "bad.json")
