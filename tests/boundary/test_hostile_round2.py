"""Hostile use, round 2: a router mask is not a list of expert ids, a cache option's
message names the option at fault, an interrupted predict leaves OUT as it was."""

from __future__ import annotations

import re

import numpy as np
import pytest

import xcache.lab.predict.cli as predict_cli
from tests.helpers import K3_LAYOUT, synthetic
from xcache import engine
from xcache.oracle.traces import write_csv

#: The largest ring whose byte size fits size_t (SIZE_MAX / 24): C lets it
#: through, and malloc cannot give it.
MAX_RECORDS = (2**64 - 1) // 24


@pytest.fixture
def cont(k3_shard):
    """k3-mini opened, closed after the test."""
    c = engine.Container(str(k3_shard))
    yield c
    c.close()


@pytest.fixture
def cache(cont):
    """A k3-mini cache of 8 slots, closed after the test."""
    c = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4)
    yield c
    c.close()


@pytest.mark.parametrize("mask", [np.array([True, False]),
                                  np.zeros((2, 5), bool)])
def test_a_boolean_router_mask_is_not_expert_ids(cache, mask):
    """hold_layer(0, mask) is MisuseError naming the mask; nothing is held."""
    shape = re.escape(str(mask.shape))
    with pytest.raises(engine.MisuseError,
                       match=f"got a boolean array of shape {shape}"
                             r".*numpy\.flatnonzero\(mask\)"):
        cache.hold_layer(0, mask)
    assert sum(s["holds"] for s in cache.slots()) == 0


def test_bool_items_are_not_expert_ids(cache):
    """A tuple of bools (numpy's or Python's) is refused item by item."""
    with pytest.raises(engine.MisuseError, match=r"experts\[1\] must be an expert "
                                                 "id, got the bool np.False_"):
        cache.hold_layer(0, (3, np.False_))
    with pytest.raises(engine.MisuseError, match=r"experts\[0\] .* the bool True"):
        cache.hold_layer(0, iter([True]))
    assert sum(s["holds"] for s in cache.slots()) == 0


def test_n_experts_past_the_container_names_the_numbers(cont):
    """n_experts=10**8 names the key count and the container's, not "0 keys"."""
    with pytest.raises(engine.MisuseError) as ei:
        engine.ExpertCache(cont, **{**K3_LAYOUT, "n_experts": 10**8}, n_slots=8,
                           top_k=4)
    assert str(ei.value) == ("n_experts=100000000 x 1 layers is 100,000,000 "
                             "experts, each with tensors of its own, but the "
                             f"container holds {len(cont)} tensors in all")


def test_batch_threads_is_named_alone(cont):
    """batch_threads=100000 names batch_threads and its range, not top_k."""
    with pytest.raises(engine.MisuseError) as ei:
        engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                           batch_threads=100000)
    assert str(ei.value) == "batch_threads must be from 1 to 256, got 100000"


@pytest.mark.nosan  # AddressSanitizer aborts on an allocation this size
def test_a_trace_ring_that_cannot_be_allocated_is_named(cont, tmp_path):
    """A ring malloc cannot give is OutOfMemoryError naming the ring and its bytes."""
    with pytest.raises(engine.OutOfMemoryError) as ei:
        engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                           trace_path=tmp_path / "t.xctrace",
                           trace_ring_records=MAX_RECORDS)
    assert str(ei.value) == (
        f"cache open: no memory for the trace ring of {MAX_RECORDS} records of "
        f"24 bytes ({MAX_RECORDS * 24} bytes; trace_ring_records)")
    assert not (tmp_path / "t.xctrace").exists()


def _interrupt(*_args: object, **_kw: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("depth", [1, 3])
def test_an_interrupted_predict_leaves_no_new_out(depth, tmp_path, monkeypatch,
                                                  capsys):
    """Ctrl-C mid-run: exit 130, "left as it was", and the OUT it made is gone."""
    src = tmp_path / "s.csv"
    write_csv(synthetic(n_tokens=20), src)
    out = tmp_path.joinpath(*[f"d{i}" for i in range(depth)])
    monkeypatch.setattr(predict_cli, "evaluate", _interrupt)
    assert predict_cli.run([str(src), str(out), "--quiet"]) == 130
    assert capsys.readouterr().err == (f"replay.py predict: interrupted; {out} "
                                       "left as it was\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.csv"]


def test_an_interrupted_predict_keeps_an_out_that_was_there(tmp_path, monkeypatch):
    """An OUT that existed before (with the user's file) is left exactly as it was."""
    src = tmp_path / "s.csv"
    write_csv(synthetic(n_tokens=20), src)
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("kept")
    monkeypatch.setattr(predict_cli, "evaluate", _interrupt)
    assert predict_cli.run([str(src), str(out), "--quiet"]) == 130
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]
    assert (out / "mine.txt").read_text() == "kept"
