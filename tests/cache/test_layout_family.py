"""The layout family: one field of Layout and Spec, decided once, template-checked."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from xcache import engine, fixtures
from xcache.engine.layout import Layout, from_spec, load_file
from xcache.engine.layout_core import FAMILIES, FUSED, PER_EXPERT
from xcache.fixtures.spec import FAMILIES as SPEC_FAMILIES
from xcache.fixtures.spec import SpecError, load_spec

ROOT = Path(__file__).resolve().parents[2]
PER = "model.layers.{layer}.mlp.experts.{expert}.{tensor}"
STACKED = "model.layers.{layer}.mlp.experts.{tensor}"

#: every preset's family, exactly
PRESET_FAMILY = {"k3-mini": "per-expert", "mixtral-mini": "per-expert",
                 "deepseek-mini": "per-expert", "granite-mini": "fused",
                 "gptoss-mini": "fused", "huge-sparse": "per-expert"}


def _spec_dict(**over: object) -> dict:
    """A small valid per-expert spec, with fields replaced."""
    d = {"name": "fam", "layers": 2, "experts": 4, "top_k": 2,
         "expert_template": PER,
         "expert_tensors": [{"name": "w1.weight", "dtype": "BF16", "shape": [4, 4]}]}
    d.update(over)
    return d


def test_engine_and_generator_name_the_same_families():
    """The two packages spell the families alike (neither may import the other)."""
    assert FAMILIES == SPEC_FAMILIES == ("per-expert", "fused")
    assert (PER_EXPERT, FUSED) == ("per-expert", "fused")


def test_every_preset_has_its_family_exactly():
    """Each preset's Spec carries the family the table says; no preset is missing."""
    assert {n: fixtures.preset(n).family for n in fixtures.PRESETS} == PRESET_FAMILY


def test_a_layout_left_without_a_family_takes_the_templates():
    """A Layout built without a family gets the one its template implies."""
    assert Layout(PER, ("w",), (0,), 4, 2).family == "per-expert"
    lay = Layout(STACKED, ("w",), (0,), 4, 2)
    assert (lay.family, lay.fused) == ("fused", True)


def test_a_layout_whose_family_contradicts_its_template_is_refused():
    """Layout(..., family=) that the template contradicts is a LayoutError."""
    with pytest.raises(engine.LayoutError) as ei:
        Layout(PER, ("w",), (0,), 4, 2, "test", family=FUSED)
    assert str(ei.value) == (
        "layout (test): key 'family' is 'fused' but key 'expert_template' holds "
        "{expert}, which only a 'per-expert' layout may: "
        "'model.layers.{layer}.mlp.experts.{expert}.{tensor}'")


def _write(path: Path, d: dict) -> Path:
    """A layout mapping written as TOML."""
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in d.items()))
    return path


def test_a_layout_file_may_name_its_family_or_leave_it_to_the_template(tmp_path):
    """family in a layout file is kept; an old file without it derives it at load."""
    base = {"expert_template": STACKED, "tensors": ["a", "b"], "layers": [1, 3],
            "n_experts": 8, "top_k": 2}
    old = load_file(_write(tmp_path / "old.toml", base))
    new = load_file(_write(tmp_path / "new.toml", {**base, "family": "fused"}))
    assert old.family == new.family == "fused"
    assert old.cache_kwargs() == new.cache_kwargs() == {
        "expert_template": STACKED, "tensors": ["a", "b"], "layers": [1, 3],
        "n_experts": 8, "top_k": 2}


def test_a_layout_file_whose_family_contradicts_names_file_and_key(tmp_path):
    """A per-expert family over a fused template: the error names file and key."""
    f = _write(tmp_path / "xcache-layout.toml", {
        "expert_template": STACKED, "tensors": ["a"], "layers": [0],
        "n_experts": 8, "top_k": 2, "family": "per-expert"})
    with pytest.raises(engine.LayoutError) as ei:
        load_file(f)
    assert str(ei.value) == (
        f"layout file {f}: key 'family' is 'per-expert' but key 'expert_template' "
        "has no {expert}, which a 'per-expert' layout needs: "
        "'model.layers.{layer}.mlp.experts.{tensor}'")


def test_a_stored_spec_carries_its_family_and_the_engine_reads_it():
    """to_json holds family; the engine's from_spec keeps it; without it, derives it."""
    spec = fixtures.preset("granite-mini")
    stored = json.loads(spec.to_json())
    assert stored["family"] == "fused"
    assert from_spec(spec.to_json(), "here").family == "fused"
    del stored["family"]  # a container written before the field
    assert from_spec(json.dumps(stored), "here").family == "fused"
    assert load_spec(stored).family == "fused"


def test_a_stored_spec_whose_family_contradicts_is_refused_by_the_engine():
    """The engine names the spec it read and the key when its family is wrong."""
    stored = {**json.loads(fixtures.preset("mixtral-mini").to_json()),
              "family": "fused"}
    with pytest.raises(engine.LayoutError) as ei:
        from_spec(json.dumps(stored), "xcache.spec in /x/model.safetensors")
    assert str(ei.value) == (
        "xcache.spec in /x/model.safetensors: key 'family' is 'fused' but key "
        "'expert_template' holds {expert}, which only a 'per-expert' layout may: "
        "'model.layers.{layer}.block_sparse_moe.experts.{expert}.{tensor}'")


def test_a_spec_file_whose_family_contradicts_names_file_and_field(tmp_path):
    """load_spec of a TOML file: SpecError on field family, naming the file."""
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(_spec_dict(family="fused")))
    with pytest.raises(SpecError) as ei:
        load_spec(f)
    assert ei.value.field == "family"
    assert str(ei.value) == (
        "spec field 'family': is 'fused' but expert_template "
        "'model.layers.{layer}.mlp.experts.{expert}.{tensor}' holds {expert}, "
        f"which only a per-expert spec may (in {f})")


@pytest.mark.parametrize("over, message", [
    ({"expert_template": STACKED, "family": "per-expert"},
     "spec field 'family': is 'per-expert' but expert_template "
     "'model.layers.{layer}.mlp.experts.{tensor}' has no {expert}, which a "
     "per-expert spec needs"),
    ({"family": "stacked"},
     "spec field 'family': must be one of per-expert, fused, got 'stacked'"),
])
def test_a_spec_mapping_with_a_bad_family_is_refused(over, message):
    """A family outside the set, or against the template, is a SpecError on family."""
    with pytest.raises(SpecError) as ei:
        load_spec(_spec_dict(**over))
    assert (ei.value.field, str(ei.value)) == ("family", message)


def test_a_spec_family_round_trips_and_a_matching_one_is_kept():
    """A declared family that agrees is kept; to_dict/load_spec give it back."""
    spec = load_spec(_spec_dict(expert_template=STACKED, family="fused"))
    assert (spec.family, spec.fused) == ("fused", True)
    assert load_spec(spec.to_dict()) == spec
    assert load_spec(_spec_dict()).family == "per-expert"


def test_a_spec_without_experts_has_no_family():
    """A trunk-only spec has family None and is not fused."""
    spec = load_spec({"name": "dense", "layers": [],
                      "trunk": [{"name": "w", "dtype": "F32", "shape": [2]}]})
    assert (spec.family, spec.fused) == (None, False)


#: where the family may be decided from a template: the engine's and the
#: generator's one rule, and the oracle (independent on purpose)
DECIDERS = {"engine/layout_core.py", "fixtures/spec.py", "oracle/layout.py"}
_DECIDE = re.compile(r"""["']\{expert\}["']\s+(?:not\s+)?in\b""")


def test_no_module_decides_the_family_from_a_template_but_the_deciders():
    """No Python module outside DECIDERS tests a template for {expert}."""
    found = set()
    for pkg in ("engine", "fixtures", "gate", "lab", "faults", "hunt", "oracle"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if _DECIDE.search(path.read_text(encoding="utf-8")):
                found.add(path.relative_to(ROOT).as_posix())
    assert found == DECIDERS


def _engine_imports(module: str) -> set[tuple[str, str]]:
    """(engine module, name) pairs one engine module imports, anywhere in it."""
    tree = ast.parse((ROOT / "engine" / f"{module}.py").read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "xcache.engine."):
            out.update((node.module.split(".")[2], a.name) for a in node.names)
    return out


def test_the_layout_modules_form_no_circle_and_share_no_private_name():
    """layout_core imports neither; detect only layout_core; nothing private crosses."""
    imports = {m: _engine_imports(m) for m in ("layout", "detect", "layout_core")}
    uses = {m: {mod for mod, _ in v} & set(imports) for m, v in imports.items()}
    assert uses == {"layout": {"detect", "layout_core"},
                    "detect": {"layout_core"}, "layout_core": set()}
    private = sorted((m, mod, name) for m, v in imports.items()
                     for mod, name in v if name.startswith("_"))
    assert private == []
