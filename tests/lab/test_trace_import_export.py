"""Trace import and export: the text dump, raw int32 and CSV readers (bad input
named by line), CSV round trips, and oracleGeneral files that libcachesim reads
back to the same miss counts."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import real_trace, synthetic
from xcache.engine.sim import simulate
from xcache.oracle.traces import (
    ORACLE_GENERAL_DTYPE,
    Trace,
    TraceFormatError,
    load_csv,
    load_int32,
    load_text_dump,
    read_oracle_general,
    read_trace,
    write_csv,
    write_oracle_general,
)

FIELDS = ("token", "layer", "expert", "sequence")


def equal(a: Trace, b: Trace) -> bool:
    """Same accesses and shape."""
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in FIELDS) and (
        a.n_layers, a.n_experts, a.top_k) == (b.n_layers, b.n_experts, b.top_k)


def test_text_dump(tmp_path):
    """pos layer ids [weights]: comments skipped, pos going down starts a sequence."""
    p = tmp_path / "dump.txt"
    p.write_text("# pos layer ids weights\n0 0 3 1 0.75 0.25\n0 1 2 0\n\n"
                 "1 0 3 2 0.5 0.5\n0 0 1 0  # a second prompt\n")
    t = load_text_dump(p)
    assert t.token.tolist() == [0, 0, 0, 0, 1, 1, 2, 2]
    assert t.layer.tolist() == [0, 0, 1, 1, 0, 0, 0, 0]
    assert t.expert.tolist() == [3, 1, 2, 0, 3, 2, 1, 0]
    assert t.sequence.tolist() == [0, 0, 0, 0, 0, 0, 1, 1]
    assert (t.n_layers, t.n_experts, t.top_k) == (2, 4, 2)
    q = tmp_path / "intweights.txt"
    q.write_text("0 0 3 1 1 0\n")
    assert load_text_dump(q, top_k=2).expert.tolist() == [3, 1]


@pytest.mark.parametrize("text, line, what", [
    ("0 0 1 2\n0 x 1\n", 2, "unsigned integer"),
    ("0 0 1 2\n1 0 1 1\n", 2, "distinct"),
    ("0 0 1 2 0.5\n", 1, "1 weights for 2"),
    ("0 0 1 2 0.5 abc\n", 1, "numbers"),
    ("0 1 1 2\n0 0 3 4\n", 2, "layer 0 after layer 1"),
    ("0 0\n", 1, "pos layer id0"),
])
def test_text_dump_bad_lines(tmp_path, text, line, what):
    """A bad line is TraceFormatError with its 1-based line number."""
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(TraceFormatError, match=what) as info:
        load_text_dump(p)
    assert info.value.line == line


def test_int32(tmp_path):
    """Fixed-k int32 ids per call cycle through the layers; bad sizes and ids fail."""
    p = tmp_path / "ids.bin"
    np.array([1, 0, 2, 3, 1, 2, 0, 3, 5, 4], "<i4").tofile(p)
    t = load_int32(p, top_k=2, n_layers=2)
    assert t.token.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    assert t.layer.tolist() == [0, 0, 1, 1, 0, 0, 1, 1, 0, 0]
    assert t.expert.tolist() == [1, 0, 2, 3, 1, 2, 0, 3, 5, 4]
    assert read_trace(p, top_k=2, n_layers=2).expert.tolist() == t.expert.tolist()
    np.array([1, 0, 2], "<i4").tofile(p)
    with pytest.raises(TraceFormatError, match="whole number of calls"):
        load_int32(p, top_k=2, n_layers=2)
    np.array([1, 0, 2, -1], "<i4").tofile(p)
    with pytest.raises(TraceFormatError, match="negative") as info:
        load_int32(p, top_k=2, n_layers=2)
    assert info.value.line == 2


def test_csv_round_trip(tmp_path):
    """write_csv then load_csv gives the trace back; so does text -> CSV -> read."""
    for trace in (synthetic(seed=5), real_trace("mixtral8x7b_humaneval.jsonl")):
        p = tmp_path / "t.csv"
        write_csv(trace, p)
        assert equal(load_csv(p, trace.n_layers, trace.n_experts), trace)
    (tmp_path / "bad.csv").write_text(
        "sequence,token,layer,expert,key\n0,0,0,1,1\n0,x\n")
    with pytest.raises(TraceFormatError) as info:
        load_csv(tmp_path / "bad.csv")
    assert info.value.line == 3


def test_oracle_general_layout(tmp_path):
    """24-byte packed records <IQIq: clock, key, size 1, next position or INT64_MAX."""
    assert ORACLE_GENERAL_DTYPE.itemsize == 24
    t = Trace.from_steps([(0, 0, [1, 2]), (1, 0, [1])], 1, 4)
    p = tmp_path / "t.oracleGeneral"
    assert write_oracle_general(t, p) == 3
    raw = p.read_bytes()
    assert len(raw) == 72
    assert raw[:24] == (b"\0\0\0\0" + (1).to_bytes(8, "little") + b"\1\0\0\0"
                        + (2).to_bytes(8, "little"))
    r = read_oracle_general(p)
    assert r["next_access_vtime"].tolist() == [2, 2**63 - 1, 2**63 - 1]


@pytest.mark.parametrize("name", ["mixtral8x7b_humaneval.jsonl", "olmoe_299.jsonl"])
def test_libcachesim_reads_oracle_general(tmp_path, name):
    """libcachesim's own reader over our oracleGeneral file: same request count,
    and LRU, FIFO and Belady misses equal the simulator's."""
    lcs = pytest.importorskip("libcachesim")
    trace = real_trace(name)
    p = tmp_path / "t.oracleGeneral"
    n = write_oracle_general(trace, p)
    for policy, cls in (("lru", lcs.LRU), ("fifo", lcs.FIFO), ("belady", lcs.Belady)):
        for slots in (32, 200):
            reader = lcs.TraceReader(str(p), lcs.TraceType.ORACLE_GENERAL_TRACE)
            assert reader.get_num_of_req() == n
            miss_ratio, _ = cls(cache_size=slots).process_trace(reader)
            ours = simulate(trace, policy, slots, "plain")["misses"]
            assert round(miss_ratio * n) == ours, (policy, slots)


def test_libcachesim_reads_csv(tmp_path):
    """The CSV's key column is an obj_id libcachesim's CSV reader can use."""
    lcs = pytest.importorskip("libcachesim")
    trace = synthetic(seed=6)
    p = tmp_path / "t.csv"
    write_csv(trace, p)
    params = lcs.ReaderInitParam()
    params.has_header = True
    params.delimiter = ","
    params.obj_id_field = 5
    reader = lcs.TraceReader(str(p), lcs.TraceType.CSV_TRACE, params)
    miss_ratio, _ = lcs.LRU(cache_size=7).process_trace(reader)
    ours = simulate(trace, "lru", 7, "plain")["misses"]
    assert round(miss_ratio * len(trace)) == ours
