"""``replay.py time --calibrate``: the fit and the model file it writes (no timing)."""

from __future__ import annotations

import json

import pytest

from xcache import replay
from xcache.lab.timing import calibrate
from xcache.lab.timing.model import load_model


def test_fit_recovers_latency_and_bandwidth():
    """tau = lat + q s / bw at 4 KiB and 128 KiB: the fit gives lat and bw back."""
    lat, bw, q, big = 50e-6, 2e9, 3, 131072
    small_tau = lat + q * calibrate.SMALL / bw
    big_tau = lat + q * big / bw
    got = calibrate.fit(small_tau, big_tau, q, big)
    assert got == pytest.approx((lat, bw))


def test_fit_of_a_noisy_pair_stays_a_model():
    """A big request timed faster than a small one: a finite bandwidth, latency >= 0."""
    lat, bw = calibrate.fit(1e-3, 0.5e-3, 1, 131072)
    assert lat >= 0 and 0 < bw < float("inf")


def test_calibrate_writes_a_model_the_lab_reads(tmp_path, monkeypatch, capsys):
    """A short calibration (two depths, one round) writes a file load_model reads."""
    monkeypatch.setattr(calibrate, "DEPTHS", (1, 2))
    monkeypatch.setattr(calibrate, "ROUNDS", 1)
    monkeypatch.setattr(calibrate, "READ_BYTES", 1 << 20)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    out = tmp_path / "m.json"
    rc = replay.main(["time", "--calibrate", str(out), "--expert-bytes", "8192",
                      "--expert-s", "1e-6", "--layer-s", "2e-5", "--quiet"])
    assert rc == 0, capsys.readouterr().err
    m = load_model(out)
    assert m.device.qd == (1, 2) and m.page_cache.qd == (1, 2)
    assert m.expert_bytes == 8192 and m.compute.layer_s == 2e-5
    assert m.compute.expert_s >= 1e-6 and m.compute.access_s > 0
    src = json.loads(out.read_text())["source"]
    assert {"calibrated", "load_before", "load_after", "notes"} <= set(src)
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]  # nothing left behind


def test_an_unaligned_expert_size_is_refused(tmp_path, capsys):
    """--expert-bytes not a multiple of 4096: exit 2, one line naming it."""
    rc = replay.main(["time", "--calibrate", str(tmp_path / "m.json"),
                      "--expert-bytes", "5000"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--expert-bytes: 5000" in err and len(err.splitlines()) == 1


def test_envelope_keeps_throughput_from_falling_with_depth():
    """A depth whose throughput fell (a disturbed round) is raised to the one before."""
    got = calibrate.envelope({1: 1.0, 2: 4.0, 3: 1.5, 4: 2.0})
    # rates 1, 0.5 -> 1, 2, 2: depth 2 raised to rate 1, depth 4 to rate 2
    assert got == pytest.approx({1: 1.0, 2: 2.0, 3: 1.5, 4: 2.0})


# -- the steady state: warm slots, reused ------------------------------------

N = 8  # experts per half in the tests below (8 KiB each)


@pytest.fixture()
def warm_container(tmp_path):
    """A one-layer container of 2 N experts of 8 KiB, read once (page cache)."""
    from xcache.engine import Container

    path = tmp_path / "c.safetensors"
    calibrate.write_container(path, 2 * N, 8192)
    path.read_bytes()
    cont = Container(str(path))
    yield cont
    cont.close()


@pytest.fixture()
def opened(monkeypatch):
    """Every cache the calibration opens: its arguments, and at close its counters."""
    seen: list[dict] = []
    real = calibrate.open_cache

    def spy(cont, n, threads, slots=None):
        c = real(cont, n, threads, slots)
        entry = {"n_experts": n, "threads": threads, "slots": c.n_slots}
        seen.append(entry)
        close = c.close

        def recorded_close():
            entry["stats"] = dict(c.stats())
            entry["resident"] = sorted(c.resident())
            close()

        c.close = recorded_close
        return c

    monkeypatch.setattr(calibrate, "open_cache", spy)
    return seen


def test_a_warm_cache_alternates_halves(warm_container):
    """Warm-up reads the first half; each round the other, evicting the one before."""
    w = calibrate.Warm(warm_container, N, 1)
    first, second = calibrate.halves(N)
    assert sorted(w.cache.resident()) == first
    _, s = w.round(None)
    assert sorted(w.cache.resident()) == second
    assert (s["evictions"], s["prefetch_loads"], s["misses"]) == (N, N, 0)
    _, s = w.round(None)
    assert sorted(w.cache.resident()) == first and s["evictions"] == N
    w.close()


def test_calibration_reuses_one_cache_per_depth(warm_container, opened, monkeypatch):
    """Depths 1 and 2, 3 rounds: two caches (not twelve), each N slots over 2 N experts.

    Each round's counters (reset per round) show N evictions and N loads:
    every timed read went into a slot read into before.
    """
    monkeypatch.setattr(calibrate, "DEPTHS", (1, 2))
    monkeypatch.setattr(calibrate, "ROUNDS", 3)
    got = calibrate.per_depth(warm_container, N, None)
    assert [(e["threads"], e["slots"], e["n_experts"]) for e in opened] == [
        (1, N, 2 * N), (2, N, 2 * N)]
    for e in opened:
        s = e["stats"]  # the last round's window
        assert (s["evictions"], s["prefetch_loads"], s["misses"]) == (N, N, 0)
        # warm-up: the first half; then six rounds (computing and waiting,
        # three times), the second half first: the last is the first half
        assert e["resident"] == calibrate.halves(N)[0]
    assert sorted(got) == [(1, False), (1, True), (2, False), (2, True)]
    assert all(s["evictions"] == N for _, s in got.values())


def test_a_busy_round_reads_what_a_waiting_one_does(warm_container):
    """The consumer computing or blocked: the same N loads and evictions."""
    w = calibrate.Warm(warm_container, N, 2)
    for busy in (True, False):
        tau, s = w.round(None, busy)
        assert tau > 0 and (s["prefetch_loads"], s["evictions"]) == (N, N)
    w.close()


def test_the_synchronous_miss_is_timed_on_reused_slots(warm_container, opened,
                                                       monkeypatch):
    """Depth 0 of the rotation: no readers; N warm-up misses, then N a round."""
    monkeypatch.setattr(calibrate, "DEPTHS", (1,))
    monkeypatch.setattr(calibrate, "ROUNDS", 3)
    got = calibrate.per_depth(warm_container, N, None, own=True)
    assert sorted(got) == [(0, True), (1, False), (1, True)]
    sync = opened[0]
    assert (sync["threads"], sync["slots"], sync["n_experts"]) == (0, N, 2 * N)
    s = sync["stats"]  # the last round's window
    assert (s["misses"], s["hits"], s["evictions"], s["prefetch_loads"]) == (
        N, 0, N, 0)
    tau, s0 = got[(0, True)]
    assert tau > 0 and (s0["misses"], s0["evictions"]) == (N, N)


def test_call_costs_make_the_calls_they_name(warm_container, opened, monkeypatch):
    """2 rounds: per round N hits of 1-key streams, N of 8-key streams, and
    N missing keys, each evicting a key of the half read before: every other
    one prefetched (speculative) and then hit by a get, the rest read by a
    split stream of that one key (a miss) after a step's compute."""
    monkeypatch.setattr(calibrate, "ROUNDS", 2)
    got = calibrate.call_costs(warm_container, N, 1e-6, 1e-5)
    assert set(got) == {"stream_s", "stream_key_s", "prefetch_s", "queue_s", "wake_s",
                        "reserve_s"}
    assert all(v >= 0 for v in got.values())
    assert got["reserve_s"] == 0.0  # N < 17: no room for its streams
    [e] = opened
    assert (e["threads"], e["slots"]) == (2, N)
    s = e["stats"]
    fetched, streamed = (N + 1) // 2, N // 2
    assert (s["hits"], s["misses"]) == (2 * (2 * N + fetched), 2 * streamed)
    assert (s["spec_issued"], s["spec_used"], s["evictions"]) == (
        2 * fetched, 2 * fetched, 2 * N)


def test_the_model_file_keeps_the_calibrated_terms(tmp_path, monkeypatch, capsys):
    """A short calibration writes own_read_factor per tier and the calls' costs."""
    monkeypatch.setattr(calibrate, "DEPTHS", (1, 2))
    monkeypatch.setattr(calibrate, "ROUNDS", 1)
    monkeypatch.setattr(calibrate, "READ_BYTES", 1 << 20)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    out = tmp_path / "m.json"
    rc = replay.main(["time", "--calibrate", str(out), "--expert-bytes", "8192",
                      "--quiet"])
    assert rc == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    for tier in ("device", "page_cache"):
        assert data[tier]["own_read_factor"] > 0
    assert {"stream_s", "stream_key_s", "prefetch_s", "queue_s", "wake_s"} <= set(
        data["compute"])
    assert set(data["source"]["synchronous_miss_s"]) == {"device", "page_cache"}
    printed = capsys.readouterr().out
    assert "own reads (a synchronous miss over a reader's): device x" in printed
    for tier in ("device", "page_cache"):
        assert data[tier]["compute_factor"] >= 1.0
    assert "compute while readers read (the kernel's cost over alone): device x" in (
        printed)


def test_compute_factor_times_the_kernel_during_a_rounds_reads(warm_container,
                                                               opened):
    """Depths 1 and 2, 2 rounds each: one Warm cache a depth, N reads a round; >= 1."""
    f = calibrate.compute_factor(warm_container, N, 1e-5, depths=(1, 2), rounds=2)
    assert f >= 1.0
    assert [(e["threads"], e["slots"]) for e in opened] == [(1, N), (2, N)]
    for e in opened:
        s = e["stats"]  # the last round's window
        assert (s["prefetch_loads"], s["evictions"]) == (N, N)
