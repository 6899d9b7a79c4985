"""The time lab's discrete-event model, hand-computed on one- and two-step traces.

The machine: experts of 1,000 bytes; the device at queue depth 1 takes
1 ms + 1,000 B / 1 MB/s = 2 ms per read, at depth 2 each read takes
1 ms + 2 x 1 ms = 3 ms (the pair shares 1 MB/s); the page cache serves a
read in 0.5 ms at any depth.  Non-expert work is 10 ms a step, compute
5 ms an expert, cache calls free.
"""

from __future__ import annotations

import pytest

from tests.timing.model_helpers import MS, TWO, machine, timed
from xcache.lab.timing.events import IO, Schedule
from xcache.lab.timing.model import Tier
from xcache.lab.timing.outcomes import Outcomes


def test_tau_is_latency_plus_the_share_of_bandwidth():
    """tau(q, s) = latency(q) + q s / bandwidth(q); past the table it saturates."""
    t = machine().device
    assert t.tau(1, 1000) == pytest.approx(2 * MS)
    assert t.tau(2, 1000) == pytest.approx(3 * MS)
    assert t.tau(4, 1000) == pytest.approx(1 * MS + 4 * MS)
    mid = Tier((1, 3), (0.0, 0.0), (1e6, 3e6))
    assert mid.at(2) == pytest.approx((0.0, 2e6))


def test_synchronous_is_the_sum():
    """Sync: 10 + (2 read + 5) + (2 read + 5) = 24 ms, 4 of it waiting."""
    r = timed(Schedule())
    assert (r["s_per_token"], r["compute_s"], r["wait_s"], r["hidden_s"]) == (
        24.0, 20.0, 4.0, 0.0)
    assert r["max_qd"]["device"] == 1


def test_two_readers_share_the_disk():
    """Two readers: both reads at depth 2 end at 13 ms; then 5 + 5 of compute."""
    r = timed(Schedule(threads=2))
    assert (r["s_per_token"], r["wait_s"], r["hidden_s"]) == (23.0, 3.0, 0.0)
    assert r["max_qd"]["device"] == 2


def test_one_reader_hides_the_second_read():
    """One reader: read 1 ends at 12, read 2 at 14 under expert 0's compute."""
    r = timed(Schedule(threads=1))
    assert (r["s_per_token"], r["wait_s"], r["hidden_s"]) == (22.0, 2.0, 2.0)


def test_below_the_split_threshold_is_the_plain_path():
    """Two misses under threshold 3: gets in order, read in the caller: 24 ms."""
    assert timed(Schedule(threads=2, split=3))["s_per_token"] == 24.0
    assert timed(Schedule(threads=2, split=2))["s_per_token"] == 23.0


def test_a_full_queue_leaves_the_miss_to_the_consumer():
    """Depth 1: the second miss is kept and read by the consumer itself.

    Read 1 queued at 10 (depth 1 full), read 2 kept; nothing has ended, so
    the consumer reads read 2 at depth 2 alongside read 1: both end at 13;
    read 1 then computes 13-18 and read 2 18-23.
    """
    r = timed(Schedule(threads=1, depth=1))
    assert (r["s_per_token"], r["wait_s"]) == (23.0, 3.0)


def test_processor_sharing_of_reads_started_apart():
    """A at 0, B at 1 ms: A half done alone, then both at depth 2; A ends 2.5, B 3.5."""
    io = IO(machine(), threads=2, depth=64)
    a = io.submit(0.0, (0, 0), False)
    b = io.submit(1 * MS, (0, 1), False)
    assert io.wait(a) == pytest.approx(2.5 * MS)
    assert io.wait(b) == pytest.approx(3.5 * MS)
    assert io.busy == [[0.0, pytest.approx(3.5 * MS)]]


def test_page_cache_share_is_exact_by_ordinal():
    """Share 0.5: reads 0, 2, 4 ... go to the device, 1, 3, 5 ... to the page cache."""
    io = IO(machine(0.5), threads=1, depth=64)
    tiers = [io.submit(0.0, (0, e), False).tier for e in range(6)]
    assert tiers == ["device", "page_cache"] * 3
    io = IO(machine(0.25), threads=1, depth=64)
    tiers = [io.submit(0.0, (0, e), False).tier for e in range(8)]
    assert tiers.count("page_cache") == 2


def test_page_cache_reads_are_faster():
    """All from the page cache, sync: 10 + (0.5 + 5) x 2 = 21 ms."""
    assert timed(Schedule(), m=machine(1.0))["s_per_token"] == pytest.approx(21.0)


def test_lookahead_hides_the_next_layers_read():
    """Step 0 misses expert 0; expert (1, 5) is read ahead and hit at step 1.

    One reader: read 0 ends at 12, the speculative read runs 12-14 under
    expert 0's compute (12-17); step 1 runs 17-27 (layer) and 27-32.
    """
    out = Outcomes([(True,), (False,)], [(), (5,)], {})
    r = timed(Schedule(threads=1, predictor="oracle", budget=1), TWO, out)
    assert (r["s_per_token"], r["wait_s"], r["hidden_s"], r["wasted_s"]) == (
        32.0, 2.0, 2.0, 0.0)
    assert r["reads"] == 2
    assert [x["wait_s"] / MS for x in r["per_layer"]] == [pytest.approx(2.0), 0.0]


def test_a_speculative_read_never_used_is_wasted():
    """Expert (1, 6) is read ahead but step 1 misses (1, 5): 2 ms wasted."""
    out = Outcomes([(True,), (True,)], [(), (6,)], {})
    r = timed(Schedule(threads=1, predictor="previous", budget=1), TWO, out)
    assert r["wasted_s"] == 2.0
    assert r["per_layer"][1]["wasted_s"] == pytest.approx(2 * MS)
    # step 1: layer 17-27, then its miss read 27-29, compute 29-34
    assert r["s_per_token"] == 34.0


def test_a_hit_on_a_read_still_in_flight_waits_for_it():
    """No compute: step 1's hit on the speculative read waits for it to end."""
    m = machine().with_(expert_s=0.0, layer_s=0.0)
    out = Outcomes([(True,), (False,)], [(), (5,)], {})
    r = timed(Schedule(threads=1, predictor="oracle", budget=1), TWO, out, m)
    # read 0: 0-2; the speculative read 2-4; step 1 waits for it
    assert (r["s_per_token"], r["wait_s"]) == (4.0, 4.0)


def test_schedule_refusals_name_the_field():
    """A lookahead without readers, a depth or threshold of 0: ValueError naming it."""
    with pytest.raises(ValueError, match="needs read-ahead threads"):
        Schedule(threads=0, predictor="oracle")
    with pytest.raises(ValueError, match="depth 0"):
        Schedule(threads=1, depth=0)
    with pytest.raises(ValueError, match="split 0"):
        Schedule(threads=1, split=0)
