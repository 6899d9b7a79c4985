"""Spec validation: every remaining field check, each with its exact sentence."""

from __future__ import annotations

import pytest

from fixtures import SpecError, load_spec
from fixtures.presets import preset_dict

BASE = preset_dict("mixtral-mini")
X = {"name": "x", "dtype": "U8", "shape": [1]}


def _listed() -> dict:
    """mixtral-mini as a 'listed' spec of exactly its tensors."""
    spec = load_spec(BASE)
    return {**{k: v for k, v in BASE.items() if k != "trunk"}, "layout": "listed",
            "tensors": [{"name": t.name, "dtype": t.dtype, "shape": list(t.shape)}
                        for t in spec.all_tensors]}


@pytest.mark.parametrize("change,field,message", [
    ({"experts": None}, "experts", "is required"),
    ({"index": "yes"}, "index", "must be true or false, got 'yes'"),
    ({"trunk": {"name": "x"}}, "trunk",
     "must be a list of {name, dtype, shape} tables"),
    ({"trunk": [{"name": "x", "dtype": "U8"}]}, "trunk[0]",
     "must have exactly name, dtype and shape"),
    ({"trunk": [["", "U8", [1]]]}, "trunk[0].name",
     "must be a non-empty string: ''"),
    ({"trunk": [{**X, "name": 7}]}, "trunk[0].name", "must be a non-empty string: 7"),
    ({"name": 5}, "name", "must be a string"),
    ({"seed": 1 << 64}, "seed", "must fit in 64 bits"),
    ({"expert_tensors": [X, X]}, "expert_tensors", "names must be distinct"),
    ({"expert_template": "{layer}{expert}{tensor}{0}"}, "expert_template",
     "bad placeholder: Replacement index 0 out of range for positional args "
     "tuple"),
    ({"expert_template": "{layer}{expert}{tensor}{nope}"}, "expert_template",
     "bad placeholder: 'nope'"),
    ({"layers": [1 << 22]}, "layers",
     f"{((1 << 22) + 1) * 8 * 3} expert tensor ids exceed 2**23"),
    ({"tensors": [X]}, "tensors", "only a 'listed' layout takes a tensor list"),
    ({"shards": None, "shard_sizes": []}, "shard_sizes",
     "must be a list of tensor counts >= 1"),
    ({"shards": None, "shard_sizes": [True]}, "shard_sizes",
     "must be a list of tensor counts >= 1"),
    ({"shard_files": ["a.safetensors", "a.safetensors"]}, "shard_files",
     "must be distinct *.safetensors file names"),
    ({"shard_files": ["d/a.safetensors"]}, "shard_files",
     "must be distinct *.safetensors file names"),
    ({"shards": 3, "shard_files": ["a.safetensors"]}, "shard_files",
     "1 names for 3 shards"),
    ({"layers": [], "trunk": []}, "trunk", "the container would hold no tensors"),
])
def test_field_errors(change, field, message):
    """Each invalid field raises SpecError with that field and sentence."""
    d = {**BASE, **change}
    d = {k: v for k, v in d.items() if v is not None}
    with pytest.raises(SpecError) as ei:
        load_spec(d)
    assert ei.value.field == field
    assert str(ei.value) == f"spec field {field!r}: {message}"


def test_shard_sizes_must_sum_to_the_tensor_count():
    """shard_sizes adding up to anything but the tensor count is refused."""
    n = len(load_spec(BASE).all_tensors)
    with pytest.raises(SpecError) as ei:
        load_spec({**{k: v for k, v in BASE.items() if k != "shards"},
                   "shard_sizes": [1, n]})
    assert str(ei.value) == (f"spec field 'shard_sizes': counts sum to {n + 1}, "
                             f"not the {n} tensors")


def test_listed_layout_rules():
    """A listed spec: it needs a non-empty list, and experts keep their layout."""
    listed = _listed()
    assert len(load_spec(listed).all_tensors) == len(load_spec(BASE).all_tensors)
    no_list = {k: v for k, v in listed.items() if k != "tensors"}
    for d, message in (
            (no_list, "is required when layout is 'listed'"),
            ({**listed, "tensors": []}, "must not be empty")):
        with pytest.raises(SpecError) as ei:
            load_spec(d)
        assert str(ei.value) == f"spec field 'tensors': {message}"
    bad = [dict(t) for t in listed["tensors"]]
    i = next(i for i, t in enumerate(bad) if ".experts.0." in t["name"])
    name, dtype, shape = bad[i]["name"], bad[i]["dtype"], bad[i]["shape"]
    bad[i]["shape"] = [s * 2 for s in shape]
    with pytest.raises(SpecError) as ei:
        load_spec({**listed, "tensors": bad})
    assert ei.value.field == "tensors"
    assert str(ei.value).startswith(
        f"spec field 'tensors': {name} is {dtype}{[s * 2 for s in shape]} but "
        "the expert")


def test_load_spec_refuses_other_types():
    """load_spec of a number is a TypeError naming it."""
    with pytest.raises(TypeError) as ei:
        load_spec(42)  # type: ignore[arg-type]
    assert str(ei.value) == "load_spec needs a path, a mapping or a Spec, not 42"
