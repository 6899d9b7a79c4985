"""``replay.py time --calibrate``: the fit and the model file it writes (no timing)."""

from __future__ import annotations

import json

import pytest

import replay
from lab.timing import calibrate
from lab.timing.model import load_model


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
