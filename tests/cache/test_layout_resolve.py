"""Explicit layouts, fixture specs and ExpertCache.open: which layout a cache gets.

``engine.layout.resolve`` takes an explicit layout (a TOML file, a mapping,
a Layout), else ``xcache-layout.toml`` in the folder, else the fixture spec
in the container's metadata, else detection (docs/LAYOUT.md).  Every bad
key of a layout file is a LayoutError naming the file and the key.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from xcache import engine, fixtures
from xcache.engine.layout import LAYOUT_FILE, Layout, load_file, resolve
from xcache.fixtures.presets import preset_dict

K3_TEMPLATE = ("language_model.model.layers.{layer}.block_sparse_moe.experts."
               "{expert}.{tensor}")
K3_PARTS = ("w1.weight_packed", "w1.weight_scale", "w2.weight_packed",
            "w2.weight_scale", "w3.weight_packed", "w3.weight_scale")
GOOD = {"expert_template": K3_TEMPLATE, "tensors": list(K3_PARTS),
        "layers": [0], "n_experts": 24, "top_k": 4}


def _toml(d: dict) -> str:
    """A layout mapping as TOML text (strings, integers and lists only)."""
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in d.items())


def _expected(spec: fixtures.Spec, layer: int, expert: int) -> bytes:
    """The expert's payload as the generator wrote it, tensor by tensor."""
    return b"".join(fixtures.expected_bytes(spec, n)
                    for n in spec.expert_names(layer, expert))


@pytest.fixture(scope="module")
def presets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """k3-mini, mixtral-mini and deepseek-mini generated once into one folder."""
    root = tmp_path_factory.mktemp("layout-presets")
    for name in ("k3-mini", "mixtral-mini", "deepseek-mini"):
        fixtures.generate(name, root / name)
    return root


# -- the fixture spec ----------------------------------------------------------


def test_the_fixture_spec_of_k3_mini_is_its_layout(presets):
    """k3-mini's spec (kept in its index) resolves to exactly its layout."""
    folder = presets / "k3-mini"
    assert resolve(folder) == Layout(
        K3_TEMPLATE, K3_PARTS, (0,), 24, 4,
        f"fixture spec (xcache.spec in {folder}/model.safetensors.index.json)")


@pytest.mark.parametrize("name, layers, n, top_k", [
    ("mixtral-mini", (0, 1, 2, 3), 8, 2),
    ("deepseek-mini", (1, 2, 3), 16, 4),
])
def test_every_preset_spec_resolves_to_its_cache_layout(presets, name, layers,
                                                         n, top_k):
    """A preset's resolved layout equals its spec's cache_layout() and top_k."""
    spec = fixtures.preset(name)
    lay = resolve(presets / name)
    assert (lay.layers, lay.n_experts, lay.top_k) == (layers, n, top_k)
    assert lay.cache_kwargs() == {**spec.cache_layout(), "top_k": spec.top_k}
    assert not lay.fused


def test_a_spec_in_the_shard_header_is_found_without_an_index(tmp_path):
    """A single-file fixture (no index) gives its layout from __metadata__."""
    d = preset_dict("mixtral-mini")
    d.update(index=False, spec_in_header=True)
    d.pop("shards")
    fixtures.generate(fixtures.load_spec(d), tmp_path / "mm")
    shard = tmp_path / "mm" / "model.safetensors"
    lay = resolve(tmp_path / "mm")
    assert lay.source == f"fixture spec (xcache.spec in {shard})"
    assert lay.layers == (0, 1, 2, 3) and lay.tensors == (
        "w1.weight", "w2.weight", "w3.weight")
    assert resolve(shard) == lay  # the shard path itself


# -- explicit layouts -----------------------------------------------------------


def test_a_layout_file_in_the_folder_wins_over_the_spec(presets, tmp_path):
    """xcache-layout.toml beside the shards is used before the fixture spec."""
    folder = Path(shutil.copytree(presets / "k3-mini", tmp_path / "k3"))
    (folder / LAYOUT_FILE).write_text(_toml({**GOOD, "top_k": 2}))
    assert resolve(folder) == Layout(K3_TEMPLATE, K3_PARTS, (0,), 24, 2,
                                     f"layout file {folder / LAYOUT_FILE}")


def test_an_explicit_layout_wins_over_everything(presets, tmp_path):
    """A path, a mapping or a Layout given to resolve is the layout."""
    f = tmp_path / "mine.toml"
    f.write_text(_toml({**GOOD, "layers": [0], "top_k": 3}))
    assert resolve(presets / "k3-mini", f).top_k == 3
    assert resolve(presets / "k3-mini", str(f)).source == f"layout file {f}"
    m = resolve(presets / "k3-mini", {**GOOD, "top_k": 5})
    assert (m.top_k, m.source) == (5, "given")
    assert resolve(presets / "k3-mini", m) is m


@pytest.mark.parametrize("change, message", [
    ({"extra": 1}, "unknown key 'extra' (a layout has exactly expert_template, "
                   "tensors, layers, n_experts, top_k, and optionally family)"),
    ({"family": "per-expert", "expert_template": "m.{layer}.{tensor}"},
     "key 'family' is 'per-expert' but key 'expert_template' has no {expert}, "
     "which a 'per-expert' layout needs: 'm.{layer}.{tensor}'"),
    ({"family": "fused"},
     "key 'family' is 'fused' but key 'expert_template' holds {expert}, which "
     "only a 'per-expert' layout may: "
     "'language_model.model.layers.{layer}.block_sparse_moe.experts.{expert}."
     "{tensor}'"),
    ({"family": "stacked"}, "key 'family' must be one of 'per-expert', "
                            "'fused', got 'stacked'"),
    ({"family": 1}, "key 'family' must be one of 'per-expert', 'fused', got 1"),
    ({"top_k": None}, "missing key 'top_k' (a layout has exactly "
                      "expert_template, tensors, layers, n_experts, top_k)"),
    ({"expert_template": "a.{expert}.{tensor}"},
     "key 'expert_template' must be a string holding {layer} and {tensor} "
     "(and {expert} unless the experts are fused), got 'a.{expert}.{tensor}'"),
    ({"expert_template": "a.{layer}.{x}.{tensor}"},
     "key 'expert_template' may hold no braces other than {layer}, {expert} "
     "and {tensor}, got 'a.{layer}.{x}.{tensor}'"),
    ({"tensors": []}, "key 'tensors' must be a non-empty list of non-empty "
                      "strings, got []"),
    ({"tensors": ["w1", "w1"]}, "key 'tensors' names 'w1' twice"),
    ({"layers": [0, "1"]}, "key 'layers' must be a non-empty list of integers "
                           "from 0 to 2147483647, got [0, '1']"),
    ({"layers": [2, 1]}, "key 'layers' must be strictly ascending: 1 follows 2"),
    ({"n_experts": 0}, "key 'n_experts' must be an integer from 1 to "
                       "2147483647, got 0"),
    ({"top_k": 25}, "key 'top_k' must be an integer from 1 to 24 (n_experts), "
                    "got 25"),
    ({"top_k": True}, "key 'top_k' must be an integer from 1 to 24 "
                      "(n_experts), got True"),
])
def test_every_bad_key_of_a_layout_file_is_named(tmp_path, change, message):
    """Each invalid layout file gives a LayoutError naming the file and the key."""
    d = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    f = tmp_path / LAYOUT_FILE
    f.write_text(_toml(d))
    with pytest.raises(engine.LayoutError) as ei:
        load_file(f)
    assert str(ei.value) == f"layout file {f}: {message}"
    assert ei.value.kind == "layout"


def test_a_layout_file_that_is_not_toml_or_missing_is_named(tmp_path):
    """Unreadable and malformed layout files say so with the file's path."""
    f = tmp_path / "x.toml"
    with pytest.raises(engine.LayoutError, match=r"^layout file .*x\.toml: "
                       r"cannot read it: No such file or directory$"):
        load_file(f)
    f.write_text("expert_template = [")
    with pytest.raises(engine.LayoutError) as ei:
        load_file(f)
    assert str(ei.value).startswith(f"layout file {f}: not valid TOML: ")


def test_a_bad_layout_file_in_the_folder_stops_resolve(presets, tmp_path):
    """A broken xcache-layout.toml is an error, never silently skipped."""
    folder = Path(shutil.copytree(presets / "k3-mini", tmp_path / "k3"))
    (folder / LAYOUT_FILE).write_text(_toml({**GOOD, "n_experts": -1}))
    with pytest.raises(engine.LayoutError) as ei:
        resolve(folder)
    assert str(ei.value) == (f"layout file {folder / LAYOUT_FILE}: key "
                             f"'n_experts' must be an integer from 1 to "
                             f"2147483647, got -1")


def test_a_layout_of_the_wrong_type_is_misuse(presets):
    """layout=42 is a MisuseError naming layout."""
    with pytest.raises(engine.MisuseError, match="^layout must be an "
                       "engine.layout.Layout, a mapping or a path to a TOML "
                       "layout file, got int 42$"):
        resolve(presets / "k3-mini", 42)


def test_a_spec_with_a_bad_key_is_named(tmp_path, presets):
    """A stored spec whose top_k is wrong names the spec, its file and the key."""
    folder = Path(shutil.copytree(presets / "k3-mini", tmp_path / "k3"))
    idx = folder / "model.safetensors.index.json"
    j = json.loads(idx.read_text())
    spec = json.loads(j["metadata"]["xcache.spec"])
    spec["top_k"] = 0
    j["metadata"]["xcache.spec"] = json.dumps(spec)
    idx.write_text(json.dumps(j))
    with pytest.raises(engine.LayoutError) as ei:
        resolve(folder)
    assert str(ei.value) == (f"xcache.spec in {idx}: key 'top_k' must be an "
                             f"integer from 1 to 24 (experts), got 0")


# -- ExpertCache(layout=...) and ExpertCache.open --------------------------------


def test_the_cache_takes_a_layout_instead_of_the_keywords(presets):
    """layout= as a Layout, a mapping or a file path opens the same cache."""
    folder = presets / "k3-mini"
    spec = fixtures.preset("k3-mini")
    with engine.Container(folder) as cont:
        for lay in (resolve(folder), GOOD):
            with engine.ExpertCache(cont, layout=lay, n_slots=8) as c:
                with c.get(0, 5) as x:
                    assert bytes(x.data) == _expected(spec, 0, 5)


def test_layout_and_the_keywords_together_are_misuse(presets):
    """Giving layout= with any of the five layout keywords is refused."""
    with engine.Container(presets / "k3-mini") as cont:
        with pytest.raises(engine.MisuseError) as ei:
            engine.ExpertCache(cont, layout=GOOD, top_k=4, n_slots=8)
        assert str(ei.value) == (
            "give either layout or the layout keywords (expert_template, "
            "tensors, layers, n_experts, top_k), not both: layout and top_k "
            "were given")
        with pytest.raises(engine.MisuseError, match="^n_experts is required "
                           r"\(or give layout=\)$"):
            engine.ExpertCache(cont, n_slots=8, **{k: v for k, v in GOOD.items()
                                                   if k != "n_experts"})


@pytest.mark.parametrize("name", ["k3-mini", "mixtral-mini", "deepseek-mini"])
def test_open_serves_every_expert_byte_exact(presets, name):
    """ExpertCache.open(folder) serves each expert exactly as generated."""
    spec = fixtures.preset(name)
    with engine.ExpertCache.open(presets / name, n_slots=8, chunk_bytes=4096,
                                 verify=True) as c:
        assert c.expert_bytes == spec.expert_nbytes
        for layer in spec.layers:
            for e in range(spec.n_experts):
                with c.get(layer, e) as x:
                    assert bytes(x.data) == _expected(spec, layer, e), (layer, e)
        c.check()


def test_open_owns_its_container(presets):
    """The container open() made is closed with the cache, and not before."""
    c = engine.ExpertCache.open(presets / "k3-mini", n_slots=8)
    cont = c._container
    assert "closed" not in repr(cont)
    c.close()
    assert repr(cont) == f"Container({str(presets / 'k3-mini')!r}: closed)"
    c.close()  # idempotent
    with pytest.raises(engine.MisuseError, match="the cache is closed"):
        c.get(0, 0)


def test_open_with_a_bad_layout_raises_and_keeps_nothing_open(presets):
    """A layout error from open() propagates; the container is not leaked open."""
    with pytest.raises(engine.LayoutError, match="key 'top_k'"):
        engine.ExpertCache.open(presets / "k3-mini", layout={**GOOD, "top_k": 0},
                                n_slots=8)
    with pytest.raises(engine.NotFoundError, match="not in the container"):
        engine.ExpertCache.open(presets / "k3-mini", n_slots=8,
                                layout={**GOOD, "tensors": ["w9.weight"]})


def test_open_takes_an_explicit_layout_file(presets, tmp_path):
    """open(path, layout=FILE) uses the file's top_k, not the spec's."""
    f = tmp_path / "l.toml"
    f.write_text(_toml({**GOOD, "top_k": 1}))
    with engine.ExpertCache.open(presets / "k3-mini", layout=f,
                                 budget_bytes=10**6) as c:
        with c.get(0, 23) as x:
            assert bytes(x.data) == _expected(fixtures.preset("k3-mini"), 0, 23)
