"""The model's calibrated call and own-read terms, hand-computed (no timing).

The machine of ``test_events``: experts of 1,000 bytes, the device at depth 1
2 ms a read and at depth 2 3 ms each; 10 ms of non-expert work a step and
5 ms an expert; every other term 0 unless a test sets it.
"""

from __future__ import annotations

import json

import pytest

from tests.timing.model_helpers import MS, ONE, TWO, machine, timed
from xcache.lab.timing.events import Schedule
from xcache.lab.timing.model import Machine, ModelError, Tier, load_model, write_model
from xcache.lab.timing.outcomes import Outcomes


def test_an_own_read_takes_the_tiers_factor():
    """Sync, own reads 1.5x: 10 + (3 + 5) + (3 + 5) = 26 ms, 6 of it waiting."""
    m = machine()
    m = m.with_(device=Tier(m.device.qd, m.device.latency_s,
                                          m.device.bandwidth_Bps, 1.5))
    r = timed(Schedule(), m=m)
    assert (r["s_per_token"], r["wait_s"]) == (26.0, 6.0)


def test_a_readers_read_ignores_the_own_read_factor():
    """Two readers, own reads 1.5x: both reads are the readers' (23 ms, as without)."""
    m = machine()
    m = m.with_(device=Tier(m.device.qd, m.device.latency_s,
                                          m.device.bandwidth_Bps, 1.5))
    assert timed(Schedule(threads=2), m=m)["s_per_token"] == 23.0


def test_a_stream_costs_its_call_and_its_keys():
    """Two readers, stream 1 ms + 0.5 ms a key: reads 11-14, then 5.5 + 5.5: 25 ms."""
    m = machine().with_(stream_s=1 * MS, stream_key_s=0.5 * MS)
    r = timed(Schedule(threads=2), m=m)
    assert (r["s_per_token"], r["wait_s"], r["compute_s"]) == (25.0, 3.0, 22.0)


def test_the_plain_path_pays_the_stream_too():
    """Threshold 3 (plain), stream 1 ms + 0.5 ms a key: 10 + 1 + 2 x (2 + 0.5 + 5)."""
    m = machine().with_(stream_s=1 * MS, stream_key_s=0.5 * MS)
    assert timed(Schedule(threads=2, split=3), m=m)["s_per_token"] == 26.0
    assert timed(Schedule(), m=m)["s_per_token"] == 24.0  # sync: no stream


def test_waking_after_a_readers_read_costs_wake_s():
    """Two readers, wake 0.25 ms: the consumer runs again at 13.25, not 13: 23.25 ms."""
    m = machine().with_(wake_s=0.25 * MS)
    r = timed(Schedule(threads=2), m=m)
    assert (r["s_per_token"], r["wait_s"]) == (23.25, 3.25)
    assert timed(Schedule(), m=m)["s_per_token"] == 24.0  # own reads: no wake-up


def test_queueing_a_read_that_wakes_a_reader_costs_queue_s():
    """One reader, queue 1 ms: only the first read wakes it (10-11); reads 11-13, 13-15.

    The consumer waits 11-13 and computes 13-18 and 18-23 (read 1 ended at 15).
    """
    m = machine().with_(queue_s=1 * MS)
    r = timed(Schedule(threads=1), m=m)
    assert (r["s_per_token"], r["wait_s"], r["compute_s"]) == (23.0, 2.0, 21.0)


def test_two_idle_readers_are_both_woken():
    """Two readers, queue 1 ms: 10-11 and 11-12 queue; read 0 alone 11-12, both after.

    Read 0 is half done at 12 and ends at 13.5 (depth 2, 3 ms a read); read 1
    has half left at 13.5 and ends alone at 14.5; compute 13.5-18.5, 18.5-23.5.
    """
    m = machine().with_(queue_s=1 * MS)
    r = timed(Schedule(threads=2), m=m)
    assert (r["s_per_token"], r["wait_s"], r["compute_s"]) == (23.5, 1.5, 22.0)


def waiting_machine() -> Machine:
    """The module's machine whose device runs faster while the consumer is blocked.

    Waiting: 1 ms + 1,000 B / 2 MB/s = 1.5 ms at depth 1, 2 ms each at depth 2.
    """
    m = machine()
    d = m.device
    return m.with_(device=Tier(d.qd, d.latency_s, d.bandwidth_Bps, 1.0,
                               Tier((1, 2), (1 * MS, 1 * MS), (2e6, 2e6))))


def test_blocked_on_two_reads_they_take_the_waiting_curve():
    """Two readers, the consumer blocked 10-12: both reads (depth 2) end at 12."""
    r = timed(Schedule(threads=2), m=waiting_machine())
    assert (r["s_per_token"], r["wait_s"]) == (22.0, 2.0)


def test_a_read_under_compute_takes_the_main_curve():
    """One reader: read 0 10-11.5 (blocked), read 1 11.5-13.5 under compute: 21.5 ms."""
    r = timed(Schedule(threads=1), m=waiting_machine())
    assert (r["s_per_token"], r["wait_s"], r["hidden_s"]) == (21.5, 1.5, 2.0)


def test_an_own_read_takes_the_main_curve():
    """Sync: the consumer reads itself (its core busy): 24 ms, as without it."""
    assert timed(Schedule(), m=waiting_machine())["s_per_token"] == 24.0


def test_a_prefetch_call_costs_prefetch_s():
    """Lookahead, prefetch 1 ms a call: made while read 0 runs, so still 32 ms.

    Step 0: read 0 runs 10-12, the prefetch call 10-11, the consumer waits
    11-12; the speculative read 12-14 under expert 0 (12-17); step 1 17-32.
    """
    m = machine().with_(prefetch_s=1 * MS)
    out = Outcomes([(True,), (False,)], [(), (5,)], {})
    r = timed(Schedule(threads=1, predictor="oracle", budget=1), TWO, out, m)
    assert (r["s_per_token"], r["wait_s"], r["compute_s"]) == (32.0, 1.0, 31.0)


def test_no_prefetch_call_costs_nothing():
    """A step with nothing to read ahead makes no prefetch call: no prefetch_s."""
    m = machine().with_(prefetch_s=1 * MS)
    out = Outcomes([(True, True)], [()], {})
    r = timed(Schedule(threads=2, predictor="previous", budget=2), ONE, out, m)
    assert r["s_per_token"] == 23.0


def test_the_terms_round_trip_through_a_model_file(tmp_path):
    """write_model then load_model keeps own_read_factor and the calls' costs."""
    m = machine().with_(stream_s=1e-5, stream_key_s=2e-6, prefetch_s=3e-6,
                        queue_s=4e-6, wake_s=5e-6)
    m = m.with_(page_cache=Tier(
        m.page_cache.qd, m.page_cache.latency_s, m.page_cache.bandwidth_Bps, 1.25))
    write_model(m, tmp_path / "m.json")
    got = load_model(tmp_path / "m.json")
    assert got.compute == m.compute and got.page_cache.own_read_factor == 1.25
    assert got.device.own_read_factor == 1.0 and got.device.waiting is None
    w = waiting_machine()
    write_model(w, tmp_path / "w.json")
    assert load_model(tmp_path / "w.json").device == w.device


def test_a_model_file_without_the_terms_has_them_at_their_defaults(tmp_path):
    """A file written before the terms existed: factor 1 and free calls."""
    data = {"device": {"qd": [1], "latency_s": [1e-4], "bandwidth_Bps": [1e9]},
            "page_cache": {"qd": [1], "latency_s": [0.0], "bandwidth_Bps": [4e9]},
            "compute": {"expert_s": 1e-4, "layer_s": 0.0, "access_s": 2e-6}}
    (tmp_path / "old.json").write_text(json.dumps(data))
    m = load_model(tmp_path / "old.json")
    assert (m.device.own_read_factor, m.page_cache.own_read_factor) == (1.0, 1.0)
    c = m.compute
    assert (c.stream_s, c.stream_key_s, c.prefetch_s, c.queue_s, c.wake_s) == (
        0.0, 0.0, 0.0, 0.0, 0.0)


def test_a_bad_own_read_factor_is_refused_naming_it(tmp_path):
    """own_read_factor 0: ModelError naming the file, the tier and the field."""
    data = {"device": {"qd": [1], "latency_s": [1e-4], "bandwidth_Bps": [1e9],
                       "own_read_factor": 0},
            "page_cache": {"qd": [1], "latency_s": [0.0], "bandwidth_Bps": [4e9]}}
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ModelError, match=r"bad.json: device: own_read_factor 0"):
        load_model(tmp_path / "bad.json")


def test_a_negative_call_cost_is_refused_naming_it(tmp_path):
    """compute.wake_s -1: ModelError naming it."""
    data = {"device": {"qd": [1], "latency_s": [1e-4], "bandwidth_Bps": [1e9]},
            "page_cache": {"qd": [1], "latency_s": [0.0], "bandwidth_Bps": [4e9]},
            "compute": {"wake_s": -1}}
    (tmp_path / "neg.json").write_text(json.dumps(data))
    with pytest.raises(ModelError, match=r"compute.wake_s -1"):
        load_model(tmp_path / "neg.json")


def test_a_bad_waiting_curve_is_refused_naming_it(tmp_path):
    """A waiting curve without bandwidth_Bps: ModelError naming the tier's waiting."""
    data = {"device": {"qd": [1], "latency_s": [1e-4], "bandwidth_Bps": [1e9],
                       "waiting": {"qd": [1], "latency_s": [1e-4]}},
            "page_cache": {"qd": [1], "latency_s": [0.0], "bandwidth_Bps": [4e9]}}
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ModelError,
                       match=r"bad.json: device: waiting: no bandwidth_Bps"):
        load_model(tmp_path / "bad.json")
