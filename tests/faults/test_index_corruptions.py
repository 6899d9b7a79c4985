"""The gate's index corruptions: each refused by both readers as kind ``index``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from xcache import engine
from xcache.engine.errors import FormatError
from xcache.gate.containers import Target, make_target
from xcache.gate.corruptions import (
    INDEX_KINDS,
    INDEX_NAME,
    make_index_stray_entry,
    make_index_total_size,
)
from xcache.oracle.errors import OracleFormatError
from xcache.oracle.safetensors import Container

pytestmark = pytest.mark.nosan  # Python fixture code and both readers


@pytest.fixture(scope="module")
def k3(tmp_path_factory: pytest.TempPathFactory) -> Target:
    """The k3-mini preset as the gate generates it (one shard and its index)."""
    return make_target("k3-mini", tmp_path_factory.mktemp("k3"))


def _copy(k3: Target, tmp_path: Path) -> Path:
    folder = tmp_path / "c"
    shutil.copytree(k3.pristine, folder)
    return folder


def _verdicts(folder: Path) -> tuple[tuple[str, int | None], str]:
    """(engine kind and offset, oracle kind) of opening ``folder``."""
    with pytest.raises(FormatError) as e:
        engine.Container(str(folder))
    with pytest.raises(OracleFormatError) as o:
        Container(folder)
    return (e.value.kind, e.value.offset), o.value.kind


def test_index_kinds_name_both_makers():
    """The corrupt step sends exactly these two kinds to the index."""
    assert INDEX_KINDS == ("index_stray_entry", "index_total_size")


def test_stray_entry_is_refused_at_its_name(k3, tmp_path):
    """A weight_map entry no shard holds: kind index at the entry's opening quote."""
    folder = _copy(k3, tmp_path)
    index = folder / INDEX_NAME
    claimed = make_index_stray_entry(k3.pristine / INDEX_NAME, index)
    doc = json.loads(index.read_text())
    wm = doc["weight_map"]
    stray = list(wm)[-1]
    assert stray == list(wm)[-2] + ".stray"
    assert wm[stray] == k3.corrupt_shard.name
    assert index.read_bytes()[claimed.offset:].startswith(
        json.dumps(stray).encode() + b":")
    assert _verdicts(folder) == (("index", claimed.offset), "index")


def test_total_size_one_above_is_refused_at_its_value(k3, tmp_path):
    """metadata.total_size raised by one: kind index at the value's first byte."""
    folder = _copy(k3, tmp_path)
    index = folder / INDEX_NAME
    before = json.loads((k3.pristine / INDEX_NAME).read_text())
    claimed = make_index_total_size(k3.pristine / INDEX_NAME, index)
    after = json.loads(index.read_text())
    assert after["metadata"]["total_size"] == before["metadata"]["total_size"] + 1
    assert after["weight_map"] == before["weight_map"]
    assert index.read_bytes()[claimed.offset:].startswith(
        str(after["metadata"]["total_size"]).encode())
    assert _verdicts(folder) == (("index", claimed.offset), "index")


def test_the_untouched_copy_opens(k3, tmp_path):
    """Without a corruption both readers open the copy: the corruption fails it."""
    folder = _copy(k3, tmp_path)
    engine.Container(str(folder)).close()
    assert len(Container(folder).tensors()) > 0


@pytest.mark.parametrize("maker", [make_index_stray_entry, make_index_total_size])
def test_a_shard_is_not_an_index(k3, tmp_path, maker):
    """Given a shard instead of the index, a maker names the file and what it needs."""
    with pytest.raises(ValueError) as e:
        maker(k3.corrupt_shard, tmp_path / "x.json")
    assert str(e.value) == (f"{k3.corrupt_shard}: an index corruption needs the "
                            f"container's {INDEX_NAME}")


def test_total_size_needs_one(tmp_path):
    """An index without metadata.total_size cannot have it raised: named error."""
    src = tmp_path / "a" / INDEX_NAME
    src.parent.mkdir()
    src.write_text(json.dumps({"metadata": {}, "weight_map": {"x": "s.safetensors"}}))
    with pytest.raises(ValueError) as e:
        make_index_total_size(src, tmp_path / INDEX_NAME)
    assert str(e.value) == f"{src}: the index has no metadata.total_size"


def test_an_empty_weight_map_is_named(tmp_path):
    """An index with no entries has nothing to copy a stray from: named error."""
    src = tmp_path / "a" / INDEX_NAME
    src.parent.mkdir()
    src.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": {}}))
    with pytest.raises(ValueError) as e:
        make_index_stray_entry(src, tmp_path / INDEX_NAME)
    assert str(e.value) == f"{src}: the index has no weight_map entries"
