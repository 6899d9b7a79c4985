"""Trace importers (both recorded formats) and the trace analyses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import TRACES_DIR, real_trace
from xcache.oracle.sim import simulate
from xcache.oracle.trace_stats import (
    adjacent_overlap,
    median_reuse_distance,
    miss_ratio_curve,
    reload_counts,
    reuse_distances,
    reuse_histogram,
)
from xcache.oracle.traces import Trace, TraceFormatError, load_trace

TRACES = TRACES_DIR


def write_lines(path: Path, objs: list) -> Path:
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n"
                            for o in objs))
    return path


def rec(problem: int, token: int, layer: int, experts: list[int]) -> dict:
    return {"dataset": "humaneval", "problem_id": problem, "layer": layer,
            "experts": experts, "gating_probs": [0.5] * len(experts),
            "token_idx": token}


def test_mixtral_format_orders_tokens_and_tolerates_missing_layers(tmp_path):
    """Per-layer records in file order (problem, layer, token) come out token-major."""
    path = write_lines(tmp_path / "m.jsonl", [
        rec(0, 0, 0, [7, 0]), rec(0, 1, 0, [5, 3]), rec(0, 0, 1, [1, 2]),
        rec(1, 0, 0, [4, 6]), rec(1, 0, 1, [0, 1]),  # problem 0 token 1 lacks layer 1
    ])
    t = load_trace(path)
    assert t.token.tolist() == [0, 0, 0, 0, 1, 1, 2, 2, 2, 2]
    assert t.layer.tolist() == [0, 0, 1, 1, 0, 0, 0, 0, 1, 1]
    assert t.expert.tolist() == [7, 0, 1, 2, 5, 3, 4, 6, 0, 1]
    assert t.sequence.tolist() == [0] * 6 + [1] * 4
    assert (t.n_layers, t.n_experts, t.top_k, t.n_tokens) == (2, 8, 2, 3)
    assert t.keys().tolist()[:4] == [7, 0, 9, 10]
    assert t.step_starts().tolist() == [True, False] * 5


def test_olmoe_format(tmp_path):
    """Per-token records give every layer of a token in layer order."""
    path = write_lines(tmp_path / "o.jsonl", [
        {"tok": 2, "layers": [[3, 1], [0, 2]]}, {"tok": 1, "layers": [[1, 2], [3, 0]]},
    ])
    t = load_trace(path, n_experts=4)
    assert t.token.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert t.layer.tolist() == [0, 0, 1, 1, 0, 0, 1, 1]
    assert t.expert.tolist() == [1, 2, 3, 0, 3, 1, 0, 2]
    assert (t.n_layers, t.n_experts, t.top_k) == (2, 4, 2)


@pytest.mark.parametrize("bad, line", [
    ('{"tok": 0, "layers": [[1, 2]]}\n{"tok": 1, "layers": [[1, 1]]}', 2),
    ('{"tok": 0, "layers": [[1, 2]]}\n\n{"tok": 0, "layers": [[1, 2]]}', 3),
    ('{"tok": 0, "layers": [[1, 2]]}\n{"tok": 1, "layers": [[1, 2]]\n', 2),
    ('{"tok": 0, "layers": [[1, 2]]}\n' + json.dumps(rec(0, 0, 0, [1])), 2),
    (json.dumps(rec(0, 0, 0, [1])) + "\n" + json.dumps(rec(0, 0, 0, [2])), 2),
    (json.dumps(rec(0, -1, 0, [1])), 1),
    (json.dumps(rec(0, 0, 0, [])), 1),
    ("[1, 2]", 1),
    ('{"tok": "0", "layers": [[1]]}', 1),
])
def test_bad_lines_name_their_line(tmp_path, bad, line):
    """Malformed, repeated, mixed or ill-typed records fail naming their line."""
    path = tmp_path / "bad.jsonl"
    path.write_text(bad)
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    assert info.value.line == line and f":{line}:" in str(info.value)


def test_ids_beyond_the_given_shape_are_refused(tmp_path):
    """An expert id at or above n_experts is an error, not a silent alias."""
    path = write_lines(tmp_path / "o.jsonl", [{"tok": 0, "layers": [[5]]}])
    with pytest.raises(TraceFormatError):
        load_trace(path, n_experts=4)


def tiny() -> Trace:
    """Layer 0 only: tokens use experts {0,1} {1,2} {0,1} {3,1}."""
    return Trace.from_steps([(0, 0, [0, 1]), (1, 0, [1, 2]), (2, 0, [0, 1]),
                             (3, 0, [3, 1])], 1, 4)


def test_reuse_distances_by_hand():
    """Expert 1 recurs at distances 1, 1, 1 and expert 0 at 2 (tokens)."""
    t = tiny()
    assert sorted(reuse_distances(t).tolist()) == [1, 1, 1, 2]
    values, counts = reuse_histogram(t)
    assert (values.tolist(), counts.tolist()) == ([1, 2], [3, 1])
    assert median_reuse_distance(t) == 1.0


def test_adjacent_overlap_by_hand():
    """Overlap is the mean shared fraction with token t-1, never across sequences."""
    assert adjacent_overlap(tiny()) == 0.5  # 1/2, 1/2, 1/2
    t = Trace.from_steps([(0, 0, [0, 1]), (1, 0, [1, 2]), (2, 0, [1, 2]),
                          (3, 0, [3, 0])], 1, 4)
    assert adjacent_overlap(t) == 0.5  # 1/2, 2/2, 0/2
    t.sequence = np.array([0, 0, 0, 0, 1, 1, 1, 1])  # tokens 2-3: a new problem
    assert adjacent_overlap(t) == 0.25  # 1/2 and 0/2 only


def test_reload_counts_and_miss_ratio_curve():
    """Reloads per key sum to the run's reloads; LRU and Belady curves never rise."""
    t = tiny()
    r = simulate(t, "lru", 2, "step")
    assert reload_counts(t, "lru", 2).sum() == r.reloads == r.misses - 4
    curves = miss_ratio_curve(t, ["lru", "belady"], [2, 3, 4], mode="plain")
    assert curves["belady"][-1] == 4 / 8  # only compulsory misses at 4 slots
    for curve in curves.values():
        assert np.all(np.diff(curve) <= 0)
    assert np.all(curves["belady"] <= curves["lru"])


def test_mixtral_trace_shape():
    """Mixtral: 338 tokens, 2 problems, 32 layers, top-2 of 8, 10,779 steps."""
    t = real_trace("mixtral8x7b_humaneval.jsonl")
    assert (len(t), t.n_tokens, t.n_layers, t.n_experts, t.top_k) == (
        21558, 338, 32, 8, 2)
    assert int(t.step_starts().sum()) == 10779
    assert np.unique(t.sequence).tolist() == [0, 1]
    assert len(np.unique(t.keys())) == 256


def test_olmoe_trace_shape():
    """OLMoE: 299 tokens, 16 layers, top-8 of 64, every layer of every token."""
    t = real_trace("olmoe_299.jsonl")
    assert (len(t), t.n_tokens, t.n_layers, t.n_experts, t.top_k) == (
        38272, 299, 16, 64, 8)
    assert int(t.step_starts().sum()) == 299 * 16
    assert len(np.unique(t.keys())) == 974


@pytest.mark.parametrize("name, n_reuses, ones, overlap", [
    ("mixtral8x7b_humaneval.jsonl", 21302, 8563, 0.39916),
    ("olmoe_299.jsonl", 37298, 16600, 0.435193),
])
def test_real_trace_analyses(name, n_reuses, ones, overlap):
    """Reuse counts, distance-1 reuses, median (2 tokens) and overlap, as measured."""
    t = real_trace(name)
    values, counts = reuse_histogram(t)
    assert (int(counts.sum()), values[0], counts[0]) == (n_reuses, 1, ones)
    assert median_reuse_distance(t) == 2.0
    assert round(adjacent_overlap(t), 6) == overlap
