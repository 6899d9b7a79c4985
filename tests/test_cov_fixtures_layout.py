"""Layout planning: byte splits, file names, and the Layout container protocol."""

from __future__ import annotations

import pytest

from fixtures import SpecError, load_spec
from fixtures.layout import plan
from fixtures.presets import preset_dict

BASE = {k: v for k, v in preset_dict("k3-mini").items() if k != "shards"}


def test_max_shard_bytes_cuts_before_the_tensor_that_would_overflow():
    """With a 1,632-byte cap every k3-mini expert (1,632 bytes) gets its own shard."""
    lay = plan(load_spec({**BASE, "max_shard_bytes": 1632}))
    assert len(lay.files) == 24
    assert [f.name for f in lay.files[:2]] == [
        "model-00001-of-00024.safetensors", "model-00002-of-00024.safetensors"]
    assert {e.shard for e in lay.entries[:6]} == {0}
    assert lay.entries[6].shard == 1
    assert all(f.size - f.data_start == 1632 for f in lay.files)


def test_layout_is_a_sequence_of_entries_by_name():
    """len, iteration and lookup by name agree with entries; path needs a folder."""
    lay = plan(load_spec(BASE))
    assert len(lay) == 144 == len(list(lay))
    first = lay.entries[0]
    assert lay[first.name] is first and next(iter(lay)) is first
    with pytest.raises(KeyError):
        lay["no-such-tensor"]
    with pytest.raises(ValueError) as ei:
        lay.path(lay.files[0].name)
    assert str(ei.value) == "this layout was planned, not generated: no dir"


def test_single_file_without_index_is_model_safetensors():
    """index = false names the one shard model.safetensors and writes no index."""
    lay = plan(load_spec({**BASE, "index": False, "spec_in_header": True}))
    assert [f.name for f in lay.files] == ["model.safetensors"]
    assert lay.index is None


def test_shard_files_must_match_a_byte_split():
    """Named files are checked against the shard count only a byte split knows."""
    spec = load_spec({**BASE, "max_shard_bytes": 1632 * 12,
                      "shard_files": ["a.safetensors"]})
    with pytest.raises(SpecError) as ei:
        plan(spec)
    assert ei.value.field == "shard_files"
    assert str(ei.value) == "spec field 'shard_files': 1 names for 2 shards"
    lay = plan(load_spec({**BASE, "max_shard_bytes": 1632 * 12,
                          "shard_files": ["a.safetensors", "b.safetensors"]}))
    assert [f.name for f in lay.files] == ["a.safetensors", "b.safetensors"]
