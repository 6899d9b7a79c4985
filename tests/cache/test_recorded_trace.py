"""Engine-recorded traces: the format, and replay through the oracle simulator.

A decode loop streams (or gets and holds) four experts per token on a
k3-mini cache that records its accesses; the oracle reads the file with its
own reader and replays it through ``oracle.sim`` in step mode with the same
policy and slots, which must give the engine's counters exactly.
"""

from __future__ import annotations

import random
import struct

import pytest

from tests.helpers import K3_LAYOUT, open_container
from xcache import engine
from xcache.oracle.sim import simulate, simulate_with_model
from xcache.oracle.traces import TraceFormatError, load_engine_trace, read_engine_trace

POLICIES = ["lru", "fifo", "lfu", "hotness:period=16", "lfru:sample=3,seed=7"]


def steps(seed: int, n_tokens: int) -> list[list[int]]:
    """Top-4 expert sets with some reuse between neighbouring tokens."""
    rnd = random.Random(seed)
    out, prev = [], rnd.sample(range(24), 4)
    for _ in range(n_tokens):
        keep = [e for e in prev if rnd.random() < 0.5]
        fresh = [e for e in rnd.sample(range(24), 8) if e not in keep]
        prev = (keep + fresh)[:4]
        out.append(prev)
    return out


def decode(c: engine.ExpertCache, plan: list[list[int]], use_stream: bool) -> None:
    """One step per token: all four held together, then released."""
    for t, experts in enumerate(plan):
        c.set_step(t)
        keys = [(0, e) for e in experts]
        held = list(c.stream(keys)) if use_stream else [c.get(*k) for k in keys]
        for x in held:
            x.release()


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("io_threads,use_stream", [(0, False), (0, True),
                                                   (2, True)])
def test_replay_gives_the_engine_counters(k3_shard, tmp_path, policy, io_threads,
                                          use_stream):
    """Oracle replay of the recorded trace equals the live counters exactly."""
    path = k3_shard
    tr = tmp_path / "run.xctrace"
    c = engine.ExpertCache(open_container(path), **K3_LAYOUT, n_slots=8, top_k=4,
                           policy=policy, io_threads=io_threads,
                           trace_path=tr, trace_ring_records=7)
    decode(c, steps(1, 150), use_stream)
    live = c.stats()
    c.check()
    c.close()
    trace = load_engine_trace(tr)
    assert (len(trace), trace.n_tokens, trace.top_k, trace.n_experts) == (
        600, 150, 4, 24)
    for sim in (simulate(trace, policy, 8, mode="step"),
                simulate_with_model(trace, policy, 8, mode="step")):
        assert (sim.requests, sim.hits, sim.misses, sim.evictions) == (
            live["requests"], live["hits"], live["misses"], live["evictions"])


def test_header_and_records(k3_shard, tmp_path):
    """Header fields, one record per access and per prefetch key, outcomes named."""
    path = k3_shard
    tr = tmp_path / "t.xctrace"
    c = engine.ExpertCache(open_container(path), **K3_LAYOUT, n_slots=8, top_k=4,
                           trace_path=tr)
    c.set_step(5)
    c.get(0, 3).release()          # miss
    c.get(0, 3).release()          # hit
    c.prefetch([(0, 3), (0, 4), (0, 4)], speculative=True)  # resident, issued, dup
    c.trace_flush()
    c.close()
    header, rec = read_engine_trace(tr)
    assert (header.version, header.record_bytes, header.layer_limit,
            header.n_experts, header.top_k, header.n_slots) == (1, 24, 1, 24, 4, 8)
    assert [(int(r["step"]), int(r["layer"]), int(r["expert"]), int(r["kind"]),
             int(r["outcome"])) for r in rec] == [
        (5, 0, 3, 0, 1), (5, 0, 3, 0, 0), (5, 0, 3, 2, 3), (5, 0, 4, 2, 5),
        (5, 0, 4, 2, 7)]
    assert tr.stat().st_size == 48 + 5 * 24
    # same container, same fingerprint
    tr2 = tmp_path / "u.xctrace"
    engine.ExpertCache(open_container(path), **K3_LAYOUT, n_slots=8, top_k=4,
                       trace_path=tr2).close()
    assert read_engine_trace(tr2)[0].fingerprint == header.fingerprint


def _fingerprint(path, layout: dict) -> int:
    """docs/TRACE_FORMAT.md's container fingerprint, from the oracle's reader."""
    from xcache.oracle.layout import expert_pieces
    from xcache.oracle.safetensors import open_container as oracle_open

    reader = oracle_open(path)
    words = []
    for layer in layout["layers"]:
        for e in range(layout["n_experts"]):
            first = expert_pieces(reader, layout["expert_template"],
                                  layout["tensors"], layout["n_experts"], layer, e)[0]
            words += [layer, first.offset]
    expert_bytes = sum(p.nbytes for p in expert_pieces(
        reader, layout["expert_template"], layout["tensors"],
        layout["n_experts"], layout["layers"][0], 0))
    h = 0xCBF29CE484222325
    for w in [expert_bytes, layout["n_experts"], *words]:
        for b in struct.pack("<Q", w):
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def test_header_fingerprint_is_the_documented_hash(k3_shard, tmp_path):
    """The header's fingerprint is FNV-1a 64 over the words TRACE_FORMAT.md names."""
    tr = tmp_path / "f.xctrace"
    engine.ExpertCache(open_container(k3_shard), **K3_LAYOUT, n_slots=8, top_k=4,
                       trace_path=tr).close()
    assert read_engine_trace(tr)[0].fingerprint == _fingerprint(k3_shard, K3_LAYOUT)


def test_reader_refuses_bad_files(tmp_path):
    """Bad magic, version or a torn record is TraceFormatError."""
    good = b"XCTRACE1" + struct.pack("<IIQIIIIQ", 1, 24, 7, 1, 24, 4, 8, 0)
    for blob in (b"XCTRACE2" + good[8:], good[:8] + struct.pack("<I", 2) + good[12:],
                 good + b"\0" * 23, good[:40]):
        p = tmp_path / "bad.xctrace"
        p.write_bytes(blob)
        with pytest.raises(TraceFormatError):
            read_engine_trace(p)
    p.write_bytes(good)
    assert len(load_engine_trace(p)) == 0


def test_unwritable_trace_path_is_an_io_error(k3_shard, tmp_path):
    """A trace file that cannot be created fails the open, nothing leaked."""
    path = k3_shard
    with pytest.raises(engine.EngineIOError):
        engine.ExpertCache(open_container(path), **K3_LAYOUT, n_slots=8, top_k=4,
                           trace_path=tmp_path / "no" / "such" / "dir" / "t")


def test_policy_lab_reads_an_engine_trace(k3_shard, tmp_path):
    """The lab reads an engine trace; its simulator gives the live counters."""
    import csv

    from xcache import replay
    from xcache.oracle.traces import read_trace

    path = k3_shard
    tr = tmp_path / "run.bin"  # the magic, not the extension, decides
    c = engine.ExpertCache(open_container(path), **K3_LAYOUT, n_slots=8, top_k=4,
                           trace_path=tr)
    decode(c, steps(2, 60), use_stream=False)
    live = c.stats()
    c.close()
    auto, direct = read_trace(tr), load_engine_trace(tr)
    assert (auto.token.tolist(), auto.layer.tolist(), auto.expert.tolist()) == (
        direct.token.tolist(), direct.layer.tolist(), direct.expert.tolist())
    out = tmp_path / "lab"
    assert replay.main(["--trace", str(tr), "--policies", "lru",
                        "--slots", "8", "--executor", "thread",
                        "--quiet", str(out)]) == 0
    with open(out / "results.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert (row["policy"], int(row["slots"]), int(row["requests"]),
            int(row["hits"]), int(row["misses"])) == (
        "lru", 8, live["requests"], live["hits"], live["misses"])
