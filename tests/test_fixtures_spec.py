"""Container specs: loading from TOML/JSON/dicts and naming bad fields."""

from __future__ import annotations

import json

import pytest

from fixtures import SpecError, load_spec, preset
from fixtures.presets import preset_dict

TOML = """
name = "tiny"
seed = 5
layers = [1, 3]
experts = 4
top_k = 2
expert_template = "model.layers.{layer}.mlp.experts.{expert}.{tensor}"
layout = "dtype-sorted"
shards = 2

[[expert_tensors]]
name = "up.weight"
dtype = "BF16"
shape = [4, 8]

[[expert_tensors]]
name = "up.scale"
dtype = "F32"
shape = [2]

[[trunk]]
name = "model.embed_tokens.weight"
dtype = "F16"
shape = [10, 8]
"""


def test_toml_json_and_dict_give_the_same_spec(tmp_path):
    """A spec reads the same from TOML, from JSON and from a dict."""
    (tmp_path / "tiny.toml").write_text(TOML)
    a = load_spec(tmp_path / "tiny.toml")
    (tmp_path / "tiny.json").write_text(json.dumps(a.to_dict()))
    b = load_spec(tmp_path / "tiny.json")
    c = load_spec(a.to_dict())
    assert a == b == c
    assert a.layers == [1, 3] and a.n_experts == 4 and a.top_k == 2
    assert a.expert_tensors == [("up.weight", "BF16", (4, 8)),
                                ("up.scale", "F32", (2,))]
    assert a.expert_nbytes == 4 * 8 * 2 + 2 * 4
    assert a.expert_names(3, 2) == ["model.layers.3.mlp.experts.2.up.weight",
                                    "model.layers.3.mlp.experts.2.up.scale"]
    assert len(a.all_tensors) == 1 + 2 * 4 * 2


def test_the_readme_example_loads():
    """The example spec shipped in fixtures/specs loads and is what the README says."""
    from pathlib import Path
    spec = load_spec(Path(__file__).parents[1] / "fixtures/specs/example.toml")
    assert spec.n_experts == 4 and spec.layout == "dtype-sorted"


def test_layer_count_means_range():
    """`layers = N` means layers 0..N-1."""
    assert load_spec({**preset_dict("mixtral-mini"), "layers": 2}).layers == [0, 1]


_BASE = preset_dict("mixtral-mini")


@pytest.mark.parametrize("change, field", [
    ({"bogus": 1}, "bogus"),
    ({"layout": "zigzag"}, "layout"),
    ({"experts": 0}, "experts"),
    ({"top_k": 9}, "top_k"),
    ({"layers": [1, 1]}, "layers"),
    ({"layers": "two"}, "layers"),
    ({"seed": -1}, "seed"),
    ({"expert_template": "layers.{layer}.{tensor}"}, "expert_template"),
    ({"expert_tensors": []}, "expert_tensors"),
    ({"expert_tensors": [{"name": "a", "dtype": "Q4", "shape": [2]}]},
     "expert_tensors[0].dtype"),
    ({"expert_tensors": [{"name": "a", "dtype": "U8", "shape": [0]}]},
     "expert_tensors[0].shape"),
    ({"expert_tensors": [{"name": "a", "dtype": "F4", "shape": [3]}]},
     "expert_tensors[0].shape"),
    ({"trunk": [{"name": "x", "dtype": "U8", "shape": [1]}] * 2}, "trunk"),
    ({"shards": 2, "max_shard_bytes": 10}, "max_shard_bytes"),
    ({"shards": 10_000}, "shards"),
    ({"index": False}, "index"),
    ({"data_alignment": 12}, "data_alignment"),
    ({"sparse_edge_bytes": 12}, "sparse_edge_bytes"),
    ({"shard_sizes": [1, 2]}, "shard_sizes"),
    ({"tensors": []}, "tensors"),
    ({"layout": "listed"}, "trunk"),
])
def test_invalid_specs_name_the_field(change, field):
    """Each invalid spec raises SpecError whose .field names the culprit."""
    with pytest.raises(SpecError) as ei:
        load_spec({**_BASE, **change})
    assert ei.value.field == field
    assert field in str(ei.value)
    assert isinstance(ei.value, ValueError)


def test_unparsable_file_is_a_spec_error(tmp_path):
    """A spec file that is not TOML is a SpecError naming the file."""
    p = tmp_path / "bad.toml"
    p.write_text("layers = [")
    with pytest.raises(SpecError, match="bad.toml"):
        load_spec(p)


def test_single_shard_without_index_needs_the_spec_in_the_header():
    """With no index the spec must be stored in the header to be recoverable."""
    with pytest.raises(SpecError) as ei:
        load_spec({**preset_dict("k3-mini"), "index": False})
    assert ei.value.field == "spec_in_header"
    spec = load_spec({**preset_dict("k3-mini"), "index": False,
                      "spec_in_header": True})
    assert not spec.index


def test_listed_spec_must_contain_every_expert_tensor():
    """A listed spec missing one expert tensor names it."""
    spec = preset("mixtral-mini")
    data = spec.to_dict()
    listed = [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape)}
              for t in spec.all_tensors]
    data.pop("trunk")
    data.pop("shards")
    data.update(layout="listed", tensors=listed[:-1])
    with pytest.raises(SpecError, match="experts.7.w3.weight") as ei:
        load_spec(data)
    assert ei.value.field == "tensors"
    data["tensors"] = listed
    assert [t.name for t in load_spec(data).all_tensors] == [t["name"] for t in listed]


def test_tensor_ids_do_not_depend_on_the_layout():
    """The same tensor has the same id, hence bytes, in any layout."""
    a = preset("deepseek-mini")
    b = load_spec({**preset_dict("deepseek-mini"), "layout": "contiguous",
                   "shards": 1})
    assert {t.name: t.tid for t in a.all_tensors} == \
        {t.name: t.tid for t in b.all_tensors}
