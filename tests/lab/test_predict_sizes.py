"""Sizes taken from a trace are checked before anything is allocated: an expert id
of 199,999 or a shape of 10^7 keys is exit 2 with one line naming the trace and
the number, never a MemoryError from a table of 1.28 TB or 8 TB."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers import synthetic
from xcache.lab.predict import predictors as pred_mod
from xcache.lab.predict.evaluate import check_shape
from xcache.lab.predict.predictors import MAX_TABLE_BYTES, TableTooLarge, make_predictor
from xcache.oracle.traces import Trace, write_csv
from xcache.replay import main


def _trace_with(tmp: Path, layer: int, expert: int, name: str = "wide.csv") -> Path:
    """The 4-layer synthetic trace, plus one token routed to (layer, expert)."""
    base = synthetic(n_tokens=20)
    n = base.n_tokens
    steps = [(int(t), int(la), [int(e)]) for t, la, e in
             zip(base.token, base.layer, base.expert, strict=True)]
    merged: dict[tuple[int, int], list[int]] = {}
    for t, la, es in steps:
        merged.setdefault((t, la), []).extend(es)
    rows = [(t, la, es) for (t, la), es in merged.items()]
    rows.append((n, layer, [expert, 0]))
    trace = Trace.from_steps(rows, layer + 1 if layer >= 4 else 4, expert + 1)
    path = tmp / name
    write_csv(trace, path)
    return path


def test_one_huge_expert_id_is_one_line_naming_the_file_and_the_id(tmp_path, capsys):
    """Expert id 199,999: pair's 4 x 200,000 x 200,000 table is refused by name."""
    path = _trace_with(tmp_path, 3, 199_999)
    assert main(["predict", str(path), str(tmp_path / "o"), "--quiet"]) == 2
    out = capsys.readouterr()
    assert out.err == (
        f"replay.py predict: TRACE {path}: 4 layers x 200000 experts (largest "
        "layer id 3, expert id 199999): the pair predictor's counts would take "
        "1,280,000,000,000 bytes (4 x 200,000 x 200,000 x 8), over the limit of "
        "1,073,741,824 bytes\n")
    assert out.out == ""


def test_a_shape_of_ten_million_keys_is_refused(tmp_path, capsys):
    """Layer 99 and expert 99,999 (10^7 keys): pair's 8 TB is refused, not tried."""
    path = _trace_with(tmp_path, 99, 99_999)
    assert main(["predict", str(path), str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert ("100 layers x 100000 experts (largest layer id 99, expert id 99999): "
            "the pair predictor's counts would take 8,000,000,000,000 bytes") in err


def test_without_pair_the_same_trace_runs(tmp_path, capsys):
    """The limit is per table: popularity and ewma fit 200,000 experts and run."""
    path = _trace_with(tmp_path, 3, 199_999)
    assert main(["predict", str(path), str(tmp_path / "o"), "--quiet",
                 "--predictors", "popularity,ewma,previous"]) == 0, \
        capsys.readouterr().err
    assert (tmp_path / "o" / "predict.csv").exists()


def test_the_simulators_key_tables_are_checked_too(tmp_path, capsys):
    """4,000 layers x 500,000 experts: the C simulator's 26 GB of key tables refused."""
    path = _trace_with(tmp_path, 3_999, 499_999)
    assert main(["predict", str(path), str(tmp_path / "o"), "--quiet",
                 "--predictors", "previous"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert ("the simulator's per-key tables would take 26,000,000,000 bytes "
            "(2,000,000,000 x 13)") in err
    with pytest.raises(TableTooLarge):
        check_shape(4_000, 500_000)
    check_shape(61, 256)


@pytest.mark.parametrize("name,shape", [("popularity", (1 + (1 << 12), 1 << 15)),
                                        ("ewma", (1 + (1 << 12), 1 << 15)),
                                        ("pair", (9, 4096))])
def test_every_predictor_table_goes_through_the_limit(name, shape, monkeypatch):
    """Each predictor refuses a table just past the limit, before numpy allocates."""
    made, real = [], np.zeros
    monkeypatch.setattr(pred_mod.np, "zeros",
                        lambda *a, **k: made.append(a) or real(1))
    with pytest.raises(TableTooLarge, match=f"the {name} predictor's"):
        make_predictor(name, *shape, 2)
    assert made == []
    assert pred_mod.check_table("t", (MAX_TABLE_BYTES // 8,), 8) == MAX_TABLE_BYTES
    with pytest.raises(TableTooLarge, match="1,073,741,832 bytes"):
        pred_mod.check_table("t", (MAX_TABLE_BYTES // 8 + 1,), 8)
