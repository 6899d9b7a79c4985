"""Pair dumps as engines write them: headerless little-endian int32 (layer,
expert) pairs, one per request, whose layer runs hold a chunk of several
tokens; --format auto and its one-line refusals; exports in request order."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from tests.helpers import real_trace, synthetic
from xcache.engine.sim import simulate
from xcache.lab.cli import run as lab_run
from xcache.lab.predict.cli import run as predict_run
from xcache.oracle.traces import (
    Trace,
    TraceFormatError,
    detect_trace,
    infer_top_k,
    load_int32,
    load_oracle_general,
    load_pairs,
    load_trace,
    read_oracle_general,
    read_trace,
    step_refusal,
    write_csv,
    write_jsonl,
    write_oracle_general,
    write_oracle_general_keys,
)

#: The layout of the done-when dump: an engine's 92 MoE layers of 896 experts,
#: top-16, prefill chunks of 5 to 12 tokens.
LAYERS, EXPERTS, TOP_K, CHUNKS = 92, 896, 16, 20


def chunked_dump(n_chunks: int = CHUNKS, seed: int = 3, lo: int = 5, hi: int = 12,
                 layers: int = LAYERS, experts: int = EXPERTS, k: int = TOP_K
                 ) -> tuple[np.ndarray, list[int]]:
    """(layer, expert) pairs as a chunked-prefill engine requests them, and the
    chunk sizes: per chunk, per layer, every token's top-k (skewed, distinct)."""
    rng = np.random.default_rng(seed)
    logw = np.log(rng.dirichlet(np.full(experts, 0.3), size=layers) + 1e-12)
    pairs, sizes = [], []
    for _ in range(n_chunks):
        n = int(rng.integers(lo, hi + 1))
        sizes.append(n)
        for layer in range(layers):
            score = logw[layer] + rng.gumbel(size=(n, experts))
            top = np.argpartition(-score, k, axis=1)[:, :k]  # n tokens x k
            run = np.empty((n * k, 2), np.int64)
            run[:, 0] = layer
            run[:, 1] = top.ravel()
            pairs.append(run)
    out = np.concatenate(pairs)
    out[-1, 1] = experts - 1 if experts - 1 not in out[-k:, 1] else out[-1, 1]
    return out, sizes


def write_pairs(path, pairs: np.ndarray) -> None:
    """The pairs as the engine writes them: int32 little-endian, no header."""
    np.asarray(pairs, "<i4").tofile(path)


def keys_of(pairs: np.ndarray, experts: int = EXPERTS) -> np.ndarray:
    """The cache key of every request, in request order."""
    return pairs[:, 0].astype(np.int64) * experts + pairs[:, 1]


def test_done_when_chunked_dump_replays_in_request_order(tmp_path, capsys):
    """The done-when dump (92 layers, 896 experts, top-16, chunks of 5-12
    tokens): auto detects its shape, the lab replays it in plain mode in the
    exact request order, LRU and Belady equal libCacheSim on the same keys,
    and every export keeps that order."""
    lcs = pytest.importorskip("libcachesim")
    pairs, sizes = chunked_dump()
    assert min(sizes) >= 5 and max(sizes) <= 12 and len(set(sizes)) > 1
    src = tmp_path / "dump.bin"
    write_pairs(src, pairs)
    keys = keys_of(pairs)

    fmt, trace = detect_trace(src)
    assert fmt == "pairs"
    assert (trace.n_layers, trace.n_experts, trace.top_k) == (LAYERS, EXPERTS, TOP_K)
    assert np.array_equal(trace.keys(), keys)
    assert trace.n_tokens == CHUNKS  # token counts passes: one per chunk
    assert "5-12 tokens of top-16" in trace.steps_unknown

    slots = (512, 16384)
    out = tmp_path / "out"
    exports = {"jsonl": tmp_path / "x.jsonl", "og": tmp_path / "x.oracleGeneral"}
    rc = lab_run([str(src), str(out), "--format", "auto", "--mode", "plain",
                  "--policies", "lru", "--slots", ",".join(map(str, slots)),
                  "--executor", "thread", "--workers", "1", "--quiet",
                  "--export-jsonl", str(exports["jsonl"]),
                  "--export-oracle-general", str(exports["og"])])
    printed = capsys.readouterr().out.splitlines()
    assert rc == 0
    assert printed[0].startswith("dump.bin: detected pairs ")
    assert f"{LAYERS} layers (inferred), {EXPERTS} experts (inferred), top-16 " \
           "(inferred)" in printed[0]

    rows = list(csv.DictReader(open(out / "results.csv", encoding="utf-8")))
    assert [int(r["slots"]) for r in rows] == list(slots)
    reference = tmp_path / "keys.oracleGeneral"
    n = write_oracle_general_keys(keys, reference)
    assert n == len(pairs)
    for r in rows:
        size = int(r["slots"])
        assert int(r["requests"]) == n
        got = {"lru": int(r["misses"]),
               "belady": int(r["misses"]) - int(r["belady_gap"])}
        for policy, cls in (("lru", lcs.LRU), ("belady", lcs.Belady)):
            reader = lcs.TraceReader(str(reference),
                                     lcs.TraceType.ORACLE_GENERAL_TRACE)
            miss_ratio, _ = cls(cache_size=size).process_trace(reader)
            assert got[policy] == round(miss_ratio * n), (policy, size)
    assert got["belady"] < got["lru"] < n  # the sizes are not degenerate

    # every export holds the requests in the dump's order
    assert exports["og"].read_bytes() == reference.read_bytes()
    assert np.array_equal(read_oracle_general(exports["og"])["obj_id"], keys)
    back = read_trace(exports["jsonl"], "auto")
    assert np.array_equal(back.keys(), keys)
    assert back.top_k == TOP_K and back.steps_unknown
    first = json.loads(exports["jsonl"].read_text().splitlines()[0])
    assert first["tokens"] == sizes[0] and len(first["experts"]) == sizes[0] * 16


def test_csv_export_keeps_a_chunked_dump_in_order(tmp_path, capsys):
    """The lab's --export-csv of a chunked dump: rows in request order, column
    2 named pass, read back with the same top-k and no steps."""
    pairs, _ = chunked_dump(n_chunks=3, layers=6, experts=64, k=4)
    src, out = tmp_path / "dump.bin", tmp_path / "x.csv"
    write_pairs(src, pairs)
    assert lab_run([str(src), str(tmp_path / "o"), "--format", "pairs",
                    "--mode", "plain", "--policies", "lru", "--slots", "8",
                    "--executor", "thread", "--workers", "1", "--quiet",
                    "--export-csv", str(out)]) == 0
    capsys.readouterr()
    with open(out, encoding="utf-8") as f:
        assert f.readline().strip() == "sequence,pass,layer,expert,key"
    back = read_trace(out)
    assert np.array_equal(back.keys(), keys_of(pairs, 64))
    assert back.top_k == 4 and back.steps_unknown


def test_int32_misreads_a_pair_dump_and_pairs_reads_it(tmp_path):
    """The dump that --format int32 refuses with "repeated expert id" (it takes
    bare ids cycling through the layers) is what --format pairs reads."""
    pairs, _ = chunked_dump(n_chunks=2, layers=3, experts=40, k=4)
    src = tmp_path / "dump.bin"
    write_pairs(src, pairs)
    with pytest.raises(TraceFormatError, match="repeated expert id .*--format pairs"):
        load_int32(src, top_k=4, n_layers=3)
    t = read_trace(src, "pairs")
    assert np.array_equal(t.keys(), keys_of(pairs, 40))
    assert (t.n_layers, t.n_experts, t.top_k) == (3, 40, 4)


def test_pairs_by_hand(tmp_path):
    """A chunk of two tokens (top-2, three layers, an expert repeated in a run)
    then one decode token: passes, layers, experts and top-k exactly."""
    pairs = [(0, 5), (0, 1), (0, 5), (0, 2),   # chunk: layer 0, tokens a and b
             (1, 0), (1, 3), (1, 3), (1, 4),
             (2, 7), (2, 6), (2, 6), (2, 1),
             (0, 5), (0, 4), (1, 3), (1, 2), (2, 0), (2, 7)]  # decode token
    src = tmp_path / "hand.bin"
    write_pairs(src, np.array(pairs))
    t = load_pairs(src)
    assert t.token.tolist() == [0] * 12 + [1] * 6
    assert t.layer.tolist() == [p[0] for p in pairs]
    assert t.expert.tolist() == [p[1] for p in pairs]
    assert (t.n_layers, t.n_experts, t.top_k) == (3, 8, 2)
    assert t.steps_unknown == ("3 of its 6 layer runs hold several tokens of a "
                               "chunk (1-2 tokens of top-2 each) and nothing "
                               "marks where one token ends")
    assert step_refusal(t).startswith("hand.bin: step mode needs each token's")
    assert load_pairs(src, top_k=1).top_k == 1  # given, it is taken as given
    with pytest.raises(TraceFormatError, match="holds 4 requests, not a whole "
                                               "number of tokens of top-3") as info:
        load_pairs(src, top_k=3)
    assert info.value.line == 1


def test_decode_dump_keeps_its_steps(tmp_path):
    """A dump of one token per pass (decode) knows its steps: step mode replays
    it as the same trace read from JSONL does, count for count."""
    ref = synthetic(seed=4, n_tokens=60)
    src = tmp_path / "decode.bin"
    write_pairs(src, np.stack([ref.layer, ref.expert], axis=1))
    t = load_pairs(src)
    assert not t.steps_unknown and step_refusal(t) is None
    assert (t.token.tolist(), t.top_k) == (ref.token.tolist(), ref.top_k)
    for size in (2, 5, 12):
        assert (simulate(t, "lru", size, "step")
                == simulate(ref, "lru", size, "step")), size


def test_top_k_inferred_when_every_chunk_has_the_same_size(tmp_path):
    """Chunks all of 8 tokens make every run 128 long; the distinct-experts
    rule still finds top-16 rather than 128 or 64."""
    pairs, _ = chunked_dump(n_chunks=3, lo=8, hi=8, layers=4)
    lengths = np.full(12, 128)
    assert infer_top_k(pairs[:, 1], lengths) == 16
    assert infer_top_k(np.array([3, 1, 4, 1]), np.array([4])) == 2
    assert infer_top_k(np.array([3, 3, 4, 1]), np.array([4])) == 1


@pytest.mark.parametrize("raw, line, what", [
    (np.array([0, 1, 0], "<i4"), 2, "12 bytes is not a whole number of 8-byte"),
    (np.array([0, 1, 0, -4], "<i4"), 2, "negative expert id -4"),
    (np.array([0, 1, -1, 2], "<i4"), 2, "negative layer id -1"),
    (np.array([0, 1, 0, 1 << 20], "<i4"), 2, "beyond the limit"),
])
def test_bad_pair_dumps_name_the_pair(tmp_path, raw, line, what):
    """A malformed dump is TraceFormatError naming the 1-based pair."""
    src = tmp_path / "bad.bin"
    raw.tofile(src)
    with pytest.raises(TraceFormatError, match=what) as info:
        load_pairs(src)
    assert info.value.line == line


def test_step_mode_refuses_a_chunked_dump_in_one_line(tmp_path, capsys):
    """The lab in its default step mode, and predict, say in one line that the
    dump records no token boundaries (exit 2) instead of guessing them."""
    pairs, _ = chunked_dump(n_chunks=2, layers=3, experts=40, k=4)
    src = tmp_path / "dump.bin"
    write_pairs(src, pairs)
    assert lab_run([str(src), str(tmp_path / "o"), "--format", "pairs",
                    "--quiet"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert err[0].startswith("replay.py lab: dump.bin: step mode needs each "
                             "token's (token, layer) steps")
    assert err[0].endswith("; use --mode plain")
    assert predict_run([str(src), str(tmp_path / "p"), "--format", "pairs",
                        "--quiet"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "so it needs them" in err[0]


def test_auto_detects_every_format(tmp_path):
    """Each format the lab reads is told apart by its content alone."""
    mixtral = real_trace("mixtral8x7b_humaneval.jsonl")
    files = {"jsonl": mixtral}
    write_csv(mixtral, tmp_path / "t.data")
    assert detect_trace(tmp_path / "t.data")[0] == "csv"
    (tmp_path / "t.dump").write_text("0 0 3 1 0.75 0.25\n0 1 2 0\n")
    assert detect_trace(tmp_path / "t.dump")[0] == "text"
    write_jsonl(mixtral, tmp_path / "t.lines")
    fmt, back = detect_trace(tmp_path / "t.lines")
    assert fmt == "jsonl" and np.array_equal(back.keys(), files["jsonl"].keys())
    write_oracle_general(mixtral, tmp_path / "t.og")
    fmt, back = detect_trace(tmp_path / "t.og", n_experts=8)
    assert fmt == "oracle-general" and np.array_equal(back.keys(), mixtral.keys())
    np.array([1, 0, 2, 3, 1, 2, 0, 3], "<i4").tofile(tmp_path / "t.i32")
    fmt, back = detect_trace(tmp_path / "t.i32", top_k=2, n_layers=2)
    assert fmt == "int32" and back.expert.tolist() == [1, 0, 2, 3, 1, 2, 0, 3]
    header = np.zeros(1, [("magic", "S8"), ("version", "<u4"), ("rb", "<u4"),
                          ("rest", "V32")])
    header["magic"], header["version"], header["rb"] = b"XCTRACE1", 1, 24
    header.tofile(tmp_path / "t.xc")
    assert detect_trace(tmp_path / "t.xc")[0] == "engine"


@pytest.mark.parametrize("content, closest, why", [
    (np.array([1, 0, 2, 3, 1, 2, 0, 3], "<i4"), "int32",
     "--format int32 --top-k K --layers N"),
    (np.array([(x, 5) for x in (0, 1, 2, 0, 1, 2, 0, 2, 0, 1, 2, 0, 1, 2)],
              "<i4"), "pairs",
     "pair 8 goes from layer 0 to layer 2, where a pass visits layers 0..2"),
    (np.array([0, 1, -3, 3], "<i4"), "pairs", "pair 2: layer -3 is outside"),
    (b"\x00\x01\x02", "int32", "3 bytes is not a whole number of int32 ids"),
    (b'{"tok": 1, "layers": [[1, 1]]}\n', "jsonl", "needs an unsigned int tok"),
])
def test_a_file_that_fits_no_format_gets_one_line(tmp_path, capsys, content,
                                                   closest, why):
    """--format auto on a file that fits nothing: exit 2 and one line naming
    the closest format and why it does not fit."""
    src = tmp_path / "mystery"
    if isinstance(content, bytes):
        src.write_bytes(content)
    else:
        content.tofile(src)
    assert lab_run([str(src), str(tmp_path / "o"), "--format", "auto",
                    "--quiet"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert f"fits no trace format; the closest, {closest} (" in err[0]
    assert why in err[0]


@pytest.mark.parametrize("name", ["mixtral8x7b_humaneval.jsonl", "olmoe_299.jsonl"])
def test_jsonl_export_round_trip(tmp_path, name):
    """write_jsonl then load_trace gives the shipped traces back access for access."""
    trace = real_trace(name)
    path = tmp_path / "t.jsonl"
    write_jsonl(trace, path)
    back = load_trace(path)
    for f in ("token", "layer", "expert", "sequence"):
        assert np.array_equal(getattr(back, f), getattr(trace, f)), f
    assert (back.top_k, back.steps_unknown) == (trace.top_k, "")


def test_jsonl_refuses_an_order_it_cannot_keep(tmp_path):
    """A trace whose (token, layer) runs go back cannot be written as JSONL."""
    t = Trace(np.array([0, 0, 0]), np.array([1, 0, 1]), np.array([2, 3, 4]),
              2, 8, 1)
    with pytest.raises(ValueError, match="cannot keep the request order"):
        write_jsonl(t, tmp_path / "t.jsonl")


def test_oracle_general_reads_back_as_keys(tmp_path):
    """An oracleGeneral file reads back as its keys, split into layers by the
    experts given (one layer without), with no steps."""
    trace = synthetic(seed=2, n_tokens=20)
    path = tmp_path / "t.oracleGeneral"
    write_oracle_general(trace, path)
    split = load_oracle_general(path, n_experts=8)
    assert split.layer.tolist() == trace.layer.tolist()
    assert split.expert.tolist() == trace.expert.tolist()
    flat = read_trace(path)  # from the extension
    assert flat.n_layers == 1 and np.array_equal(flat.expert, trace.keys())
    assert "keys, not tokens" in step_refusal(flat)


def test_megatron_router_trace(tmp_path):
    """A Megatron-Core router trace: calls in file order, one step per token
    row, a repeated layer starting the next pass, MTP layers after the
    decoder's; .jsonl and --format auto both read it."""
    def rec(step, layer, rows, **extra):
        return json.dumps({"step": step, "stage": "pre_dispatch", "block": "decoder",
                           "layer": layer, "rank": 0, "num_tokens": len(rows),
                           "topk": 2, "top_indices": rows, **extra})
    lines = [rec(0, 1, [[4, 0], [4, 2]]), rec(0, 3, [[1, 5], [0, 1]]),
             rec(0, 0, [[3, 2], [2, 1]], block="mtp", mtp_idx=0),
             rec(1, 1, [[0, 4]]), rec(1, 3, [[5, 1]])]
    path = tmp_path / "router_trace_rank0.jsonl"
    path.write_text("\n".join(lines) + "\n")
    t = read_trace(path)
    assert t.token.tolist() == [0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 2, 2]
    assert t.layer.tolist() == [1, 1, 1, 1, 3, 3, 3, 3, 4, 4, 4, 4, 1, 1, 3, 3]
    assert t.expert.tolist() == [4, 0, 4, 2, 1, 5, 0, 1, 3, 2, 2, 1, 0, 4, 5, 1]
    assert (t.n_layers, t.n_experts, t.top_k, t.steps_unknown) == (5, 6, 2, "")
    assert np.flatnonzero(t.step_starts()).tolist() == [0, 2, 4, 6, 8, 10, 12, 14]
    fmt, again = detect_trace(path)
    assert fmt == "megatron" and np.array_equal(again.keys(), t.keys())
    bad = tmp_path / "bad.jsonl"
    bad.write_text(lines[0] + "\n" + rec(0, 3, [[1, 1]]) + "\n")
    with pytest.raises(TraceFormatError, match="distinct") as info:
        read_trace(bad)
    assert info.value.line == 2


def test_predict_reads_a_decode_dump_as_its_jsonl(tmp_path, capsys):
    """predict on the first 60 tokens of the shipped OLMoE trace written as a
    decode pair dump (one token per pass) measures exactly what it measures
    on the same tokens as JSONL."""
    full = real_trace("olmoe_299.jsonl")
    keep = full.token < 60
    trace = Trace(full.token[keep], full.layer[keep], full.expert[keep],
                  full.n_layers, full.n_experts, full.top_k)
    src, dump = tmp_path / "olmoe.jsonl", tmp_path / "olmoe.bin"
    write_jsonl(trace, src)
    write_pairs(dump, np.stack([trace.layer, trace.expert], axis=1))
    common = ["--predictors", "previous,popularity", "--slots", "40", "--quiet"]
    assert predict_run([str(src), str(tmp_path / "a"), *common]) == 0
    assert predict_run([str(dump), str(tmp_path / "b"), "--format", "auto",
                        *common]) == 0
    assert "detected pairs" in capsys.readouterr().out
    assert ((tmp_path / "a" / "predict.csv").read_text()
            == (tmp_path / "b" / "predict.csv").read_text())
