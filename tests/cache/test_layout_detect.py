"""Layout detection from config.json and tensor names: both families, every error.

Containers come from the fixture generator (per-expert layouts, with the
stored spec taken out so detection has to work) and from the official
``safetensors`` writer (fused layouts and hand-made bad ones), each with a
``config.json`` written beside it (docs/LAYOUT.md "Detection").
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from xcache import engine, fixtures
from xcache.engine.detect import detect
from xcache.engine.layout import Layout, resolve

save_file = pytest.importorskip("safetensors.numpy").save_file

INDEX = "model.safetensors.index.json"
DETECTED = "detected (config.json and tensor names)"


def _config(folder: Path, **keys: object) -> None:
    (folder / "config.json").write_text(json.dumps(keys))


def _fixture(folder: Path, spec: dict, **config: object) -> fixtures.Spec:
    """Generate ``spec`` into folder with no stored spec, plus a config.json."""
    s = fixtures.load_spec({**spec, "spec_in_header": False, "index": True})
    fixtures.generate(s, folder)
    idx = folder / INDEX
    j = json.loads(idx.read_text())
    del j["metadata"]["xcache.spec"]
    idx.write_text(json.dumps(j))
    _config(folder, **config)
    return s


def _write(folder: Path, shards: list[dict[str, np.ndarray]]) -> None:
    """Write tensors with the official writer: one file, or shards and an index."""
    folder.mkdir(parents=True, exist_ok=True)
    if len(shards) == 1:
        save_file(shards[0], str(folder / "model.safetensors"))
        return
    wm, total = {}, 0
    for i, t in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(t, str(folder / name))
        wm.update(dict.fromkeys(t, name))
        total += sum(a.nbytes for a in t.values())
    (folder / INDEX).write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": wm}))


def _per_expert(layers: list[int], n: int, parts: tuple[str, ...] = ("w1.weight",
                "w2.weight"), prefix: str = "model.layers.{L}.block_sparse_moe."
                ) -> dict[str, np.ndarray]:
    out = {}
    for la in layers:
        for e in range(n):
            for p in parts:
                out[f"{prefix.format(L=la)}experts.{e}.{p}"] = np.full(
                    (2, 4), la * 100 + e, np.float32)
    return out


def _expected(spec: fixtures.Spec, lay: Layout, layer: int, e: int) -> bytes:
    return b"".join(fixtures.expected_bytes(spec, lay.tensor_name(layer, e, t))
                    for t in lay.tensors)


# -- per-expert tensors ----------------------------------------------------------


MIXTRAL_LIKE = {
    "name": "mixtral-like", "seed": 5, "layers": 2, "experts": 4, "top_k": 2,
    "expert_template":
        "model.layers.{layer}.block_sparse_moe.experts.{expert}.{tensor}",
    "expert_tensors": [
        {"name": "w1.weight", "dtype": "BF16", "shape": [8, 4]},
        {"name": "w2.weight", "dtype": "BF16", "shape": [4, 8]},
        {"name": "w3.weight", "dtype": "BF16", "shape": [8, 4]}],
    "trunk": [{"name": "model.embed_tokens.weight", "dtype": "BF16",
               "shape": [16, 4]},
              {"name": "model.layers.0.block_sparse_moe.gate.weight",
               "dtype": "BF16", "shape": [4, 4]},
              {"name": "model.layers.1.block_sparse_moe.gate.weight",
               "dtype": "BF16", "shape": [4, 4]}],
    "shards": 1,
}


def test_per_expert_names_and_config_give_the_layout(tmp_path):
    """A Mixtral-style container is detected exactly, routers left out."""
    _fixture(tmp_path / "m", MIXTRAL_LIKE, num_hidden_layers=2,
             num_local_experts=4, num_experts_per_tok=2)
    assert resolve(tmp_path / "m") == Layout(
        "model.layers.{layer}.block_sparse_moe.experts.{expert}.{tensor}",
        ("w1.weight", "w2.weight", "w3.weight"), (0, 1), 4, 2, DETECTED)


def _deepseek_like() -> dict:
    """FP8 experts with scale_inv, dense layer 0, shared experts, a prefix."""
    parts = []
    for proj, shape in (("gate_proj", [8, 16]), ("up_proj", [8, 16]),
                        ("down_proj", [16, 8])):
        parts += [{"name": f"{proj}.weight", "dtype": "F8_E4M3", "shape": shape},
                  {"name": f"{proj}.weight_scale_inv", "dtype": "F32",
                   "shape": [1, 2]}]
    p = "model.language_model.layers."
    trunk = [{"name": p + "0.mlp.gate_proj.weight", "dtype": "BF16",
              "shape": [8, 16]}]
    for la in (1, 2, 3):
        trunk += [
            {"name": f"{p}{la}.mlp.gate.weight", "dtype": "BF16", "shape": [6, 16]},
            {"name": f"{p}{la}.mlp.gate.e_score_correction_bias", "dtype": "F32",
             "shape": [6]},
            {"name": f"{p}{la}.mlp.shared_experts.gate_proj.weight",
             "dtype": "F8_E4M3", "shape": [8, 16]}]
    return {"name": "ds-like", "seed": 9, "layers": [1, 2, 3], "experts": 6,
            "top_k": 2, "expert_template": p + "{layer}.mlp.experts.{expert}."
            "{tensor}", "expert_tensors": parts, "trunk": trunk,
            "layout": "dtype-sorted", "shards": 1}


def test_dense_first_layers_shared_experts_and_a_prefix(tmp_path):
    """DeepSeek-style: MoE layers 1-3, text_config keys, tensors in file order."""
    _fixture(tmp_path / "d", _deepseek_like(), architectures=["X"],
             text_config={"num_hidden_layers": 4, "first_k_dense_replace": 1,
                          "moe_layer_freq": 1, "n_routed_experts": 6,
                          "n_shared_experts": 1, "num_experts_per_tok": 2})
    assert detect(tmp_path / "d") == Layout(
        "model.language_model.layers.{layer}.mlp.experts.{expert}.{tensor}",
        ("down_proj.weight_scale_inv", "gate_proj.weight_scale_inv",
         "up_proj.weight_scale_inv", "down_proj.weight", "gate_proj.weight",
         "up_proj.weight"), (1, 2, 3), 6, 2, DETECTED)


def test_a_detected_cache_serves_every_expert_byte_exact(tmp_path):
    """ExpertCache.open on a detected layout serves the generator's bytes."""
    spec = _fixture(tmp_path / "d", _deepseek_like(), num_hidden_layers=4,
                    first_k_dense_replace=1, n_routed_experts=6,
                    num_experts_per_tok=2)
    lay = resolve(tmp_path / "d")
    with engine.ExpertCache.open(tmp_path / "d", n_slots=4) as c:
        for la in lay.layers:
            for e in range(lay.n_experts):
                with c.get(la, e) as x:
                    assert bytes(x.data) == _expected(spec, lay, la, e)


def test_sparse_step_and_mlp_only_layers_pick_the_moe_layers(tmp_path):
    """decoder_sparse_step and mlp_only_layers say which layers are MoE."""
    t = _per_expert([1, 3], 2, prefix="model.layers.{L}.mlp.")
    t["model.layers.0.mlp.up_proj.weight"] = np.zeros(4, np.float32)
    _write(tmp_path / "q", [t])
    _config(tmp_path / "q", num_hidden_layers=4, decoder_sparse_step=2,
            mlp_only_layers=[], num_experts=2, num_experts_per_tok=1)
    assert resolve(tmp_path / "q").layers == (1, 3)
    _config(tmp_path / "q", num_hidden_layers=4, decoder_sparse_step=1,
            mlp_only_layers=[0, 2], num_experts=2, num_experts_per_tok=1)
    assert resolve(tmp_path / "q").layers == (1, 3)


# -- fused tensors ---------------------------------------------------------------


def _gpt_oss_like(n: int = 4, lead: int | None = None) -> dict[str, np.ndarray]:
    t = {"model.embed_tokens.weight": np.zeros((10, 8), np.float32)}
    for la in range(2):
        p = f"model.layers.{la}.mlp."
        t[p + "router.weight"] = np.zeros((n, 8), np.float32)
        t[p + "router.bias"] = np.zeros((n,), np.float32)
        t[p + "experts.gate_up_proj_blocks"] = np.arange(
            n * 16 * 2 * 16, dtype=np.uint8).reshape(n, 16, 2, 16)
        t[p + "experts.gate_up_proj_scales"] = np.arange(
            (lead or n) * 16 * 2, dtype=np.uint8).reshape(lead or n, 16, 2)
        t[p + "experts.gate_up_proj_bias"] = np.arange(
            n * 16, dtype=np.float32).reshape(n, 16) + la
        t[p + "experts.down_proj_blocks"] = np.arange(
            n * 8 * 16, dtype=np.uint8).reshape(n, 8, 1, 16)
    return t


def test_fused_experts_under_an_experts_module_are_detected(tmp_path):
    """GPT-OSS style stacked tensors: a template without {expert}, fused."""
    _write(tmp_path / "g", [_gpt_oss_like()])
    _config(tmp_path / "g", num_hidden_layers=2, num_local_experts=4,
            experts_per_token=2)
    lay = resolve(tmp_path / "g")
    assert lay == Layout(
        "model.layers.{layer}.mlp.experts.{tensor}",
        ("gate_up_proj_bias", "down_proj_blocks", "gate_up_proj_blocks",
         "gate_up_proj_scales"), (0, 1), 4, 2, DETECTED)
    assert lay.fused


def _granite_like(n: int = 4) -> dict[str, np.ndarray]:
    t = {}
    for la in range(3):
        p = f"model.layers.{la}.block_sparse_moe."
        t[p + "input_linear.weight"] = np.arange(
            n * 8 * 4, dtype=np.float32).reshape(n, 8, 4) + la
        t[p + "output_linear.weight"] = np.arange(
            n * 4 * 4, dtype=np.float32).reshape(n, 4, 4) - la
        t[p + "router.layer.weight"] = np.zeros((n, 4), np.float32)
    return t


def test_fused_module_names_are_detected(tmp_path):
    """input_linear/output_linear stacked projections are one fused layout."""
    _write(tmp_path / "gr", [_granite_like()])
    _config(tmp_path / "gr", num_hidden_layers=3, num_local_experts=4,
            num_experts_per_tok=2)
    assert resolve(tmp_path / "gr") == Layout(
        "model.layers.{layer}.block_sparse_moe.{tensor}",
        ("input_linear.weight", "output_linear.weight"), (0, 1, 2), 4, 2,
        DETECTED)


def test_fused_detected_layout_serves_every_slice_byte_exact(tmp_path):
    """Expert e of a fused layout is slice e of each stacked tensor, in order."""
    t = _gpt_oss_like()
    _write(tmp_path / "g", [t])
    _config(tmp_path / "g", num_hidden_layers=2, num_local_experts=4,
            num_experts_per_tok=2)
    lay = resolve(tmp_path / "g")
    with engine.ExpertCache.open(tmp_path / "g", n_slots=4) as c:
        assert not c.contiguous(0, 0)
        for la in lay.layers:
            for e in range(4):
                want = b"".join(t[lay.tensor_name(la, e, p)][e].tobytes()
                                for p in lay.tensors)
                with c.get(la, e) as x:
                    assert bytes(x.data) == want


# -- errors ----------------------------------------------------------------------


def _err(path: Path) -> str:
    with pytest.raises(engine.LayoutError) as ei:
        resolve(path)
    assert ei.value.kind == "layout"
    return str(ei.value)


def _settled(folder: Path, message: str) -> Layout:
    """The lines a refusal prints, written to the layout file it names: resolved."""
    head, _, text = message.partition("\n")
    path = folder / "xcache-layout.toml"
    assert head.endswith(f"; these lines in {path} settle it"), head
    path.write_text(text + "\n")
    lay = resolve(folder)
    assert lay.source == f"layout file {path}"
    return lay


NO_FORM = ("no routed experts found: no tensor name has the form "
           "...layers.<N>....experts.<N>.<tensor> (one tensor per expert) or "
           "...layers.<N>....experts.<tensor> / ...layers.<N>....input_linear... "
           "/ ...layers.<N>....output_linear... (fused; the layer module may be "
           "any of ...layers.<N>.... / ...blocks.<N>.... / ...h.<N>....)")


def test_no_experts_lists_the_near_misses(tmp_path):
    """Shared experts and routers are not routed experts; the error lists them."""
    t = {"model.layers.0.mlp.shared_experts.up_proj.weight": np.zeros(2),
         "model.layers.1.mlp.shared_experts.up_proj.weight": np.zeros(2),
         "model.layers.0.mlp.experts_router.weight": np.zeros(2),
         "model.norm.weight": np.zeros(2)}
    _write(tmp_path / "n", [t])
    _config(tmp_path / "n", num_experts_per_tok=2)
    assert _err(tmp_path / "n") == (
        f"{tmp_path / 'n'}: {NO_FORM}; names that mention experts: "
        "model.layers.N.mlp.experts_router.weight, "
        "model.layers.N.mlp.shared_experts.up_proj.weight")


def test_no_experts_in_a_dense_container(tmp_path):
    """A container with no expert names at all says so, with a few names."""
    _write(tmp_path / "n", [{"a": np.zeros(2), "b": np.zeros(2)}])
    _config(tmp_path / "n", num_hidden_layers=1)
    assert _err(tmp_path / "n") == (
        f"{tmp_path / 'n'}: {NO_FORM}; none of the 2 tensor names mentions "
        "experts (a, b)")


def test_several_candidate_groups_are_listed(tmp_path):
    """Experts under two different modules are ambiguous: both are listed, and
    the first one's layout file lines (the other's commented) choose it."""
    t = {**_per_expert([0], 2), **_per_expert([0], 2, prefix="model.layers.{L}."
                                                            "moe.")}
    _write(tmp_path / "a", [t])
    _config(tmp_path / "a", num_experts_per_tok=1)
    assert _err(tmp_path / "a") == (
        f"{tmp_path / 'a'}: several candidate expert layouts; give a layout "
        "file (xcache-layout.toml) to choose: "
        "model.layers.{layer}.block_sparse_moe.experts.{expert}.{tensor} "
        "(per-expert, 4 tensors, layers 0); "
        "model.layers.{layer}.moe.experts.{expert}.{tensor} "
        f"(per-expert, 4 tensors, layers 0); these lines in {tmp_path / 'a'}"
        "/xcache-layout.toml settle it\n"
        '    expert_template = "model.layers.{layer}.block_sparse_moe.experts.'
        '{expert}.{tensor}"\n'
        '    tensors = ["w1.weight", "w2.weight"]\n'
        "    layers = [0]\n    n_experts = 2\n    top_k = 1\n"
        "    # or, for model.layers.{layer}.moe.experts.{expert}.{tensor}:\n"
        '    # expert_template = "model.layers.{layer}.moe.experts.{expert}.'
        '{tensor}"\n'
        '    # tensors = ["w1.weight", "w2.weight"]\n'
        "    # layers = [0]\n    # n_experts = 2\n    # top_k = 1")
    lay = _settled(tmp_path / "a", _err(tmp_path / "a"))
    assert lay.expert_template == ("model.layers.{layer}.block_sparse_moe."
                                   "experts.{expert}.{tensor}")


def test_per_expert_and_fused_together_are_ambiguous(tmp_path):
    """A layout never mixes families: both groups are named."""
    t = {**_per_expert([0, 1], 4, prefix="model.layers.{L}.mlp."),
         **_gpt_oss_like()}
    _write(tmp_path / "x", [t])
    _config(tmp_path / "x", num_experts_per_tok=1)
    msg = _err(tmp_path / "x")
    assert "model.layers.{layer}.mlp.experts.{expert}.{tensor} (per-expert, " \
           "16 tensors, layers 0-1)" in msg
    assert "model.layers.{layer}.mlp.experts.{tensor} (fused, 8 tensors, " \
           "layers 0-1)" in msg


def test_a_missing_expert_names_layer_expert_and_tensor(tmp_path):
    """Every layer must have every expert: the first gap is named."""
    t = _per_expert([0, 1], 4)
    del t["model.layers.1.block_sparse_moe.experts.2.w2.weight"]
    _write(tmp_path / "m", [t])
    _config(tmp_path / "m", num_local_experts=4, num_experts_per_tok=2)
    with pytest.raises(engine.LayoutError) as ei:
        resolve(tmp_path / "m")
    assert str(ei.value) == (
        "missing expert tensor: layer 1 expert 2 has no 'w2.weight': "
        "model.layers.1.block_sparse_moe.experts.2.w2.weight is not in the "
        "container")
    assert (ei.value.layer, ei.value.expert) == (1, 2)


def test_a_missing_last_expert_is_found_from_the_config(tmp_path):
    """Experts 0..6 of 8 in one layer: expert 7 is missing, not a disagreement."""
    t = _per_expert([0, 1], 8)
    for p in ("w1.weight", "w2.weight"):
        del t[f"model.layers.0.block_sparse_moe.experts.7.{p}"]
    _write(tmp_path / "m", [t])
    _config(tmp_path / "m", num_local_experts=8, num_experts_per_tok=2)
    assert _err(tmp_path / "m") == (
        "missing expert tensor: layer 0 expert 7 has no 'w1.weight': "
        "model.layers.0.block_sparse_moe.experts.7.w1.weight is not in the "
        "container")


def test_an_expert_split_across_shards_is_detected_and_served(tmp_path):
    """mixtral-mini cuts an expert at each shard boundary: detected from its
    names and config alone (no stored spec), it is the preset's layout and
    the engine serves every expert byte-exact, the split ones included."""
    from xcache.fixtures.content import expected_expert_bytes  # noqa: PLC0415
    from xcache.fixtures.presets import preset_dict  # noqa: PLC0415

    spec = _fixture(tmp_path / "m", preset_dict("mixtral-mini"),
                    num_local_experts=8, num_experts_per_tok=2)
    lay = resolve(tmp_path / "m")
    assert lay.source == DETECTED
    assert (list(lay.layers), lay.n_experts, lay.top_k) == (
        list(spec.layers), spec.n_experts, spec.top_k)
    with engine.ExpertCache.open(tmp_path / "m", n_slots=4) as cache:
        for la in spec.layers:
            for e in range(spec.n_experts):
                with cache.get(la, e) as x:
                    assert x.data.tobytes() == \
                        expected_expert_bytes(spec, la, e), (la, e)


def test_a_fused_tensor_whose_leading_dim_is_not_n_experts(tmp_path):
    """Leading dimension 3 where the config says 4 experts: tensor, shape, E."""
    _write(tmp_path / "f", [_gpt_oss_like(lead=3)])
    _config(tmp_path / "f", num_local_experts=4, num_experts_per_tok=2)
    assert _err(tmp_path / "f") == (
        "fused expert tensor model.layers.0.mlp.experts.gate_up_proj_scales "
        "(layer 0) has shape [3, 16, 2]: its leading dimension must be "
        "the 4 experts (num_local_experts) or a multiple of them")


def test_config_and_names_disagreeing_on_layers_say_both(tmp_path):
    """config.json's MoE layers and the names' layers differ: both are shown,
    and the layout file's lines with the names' layers settle it."""
    _write(tmp_path / "c", [_per_expert([0, 1, 2], 2)])
    _config(tmp_path / "c", num_hidden_layers=3, first_k_dense_replace=1,
            num_experts_per_tok=1)
    assert _err(tmp_path / "c") == (
        f"{tmp_path / 'c' / 'config.json'} and the tensor names disagree on "
        "the MoE layers: config.json says 1-2 of the layers present "
        "(num_hidden_layers 3, first_k_dense_replace 1); the names have "
        "experts in layers 0-2; give a layout file (xcache-layout.toml) with "
        f"the layers to use; these lines in {tmp_path / 'c'}/xcache-layout.toml "
        "settle it\n"
        '    expert_template = "model.layers.{layer}.block_sparse_moe.experts.'
        '{expert}.{tensor}"\n'
        '    tensors = ["w1.weight", "w2.weight"]\n'
        "    layers = [0, 1, 2]  # the names' (config.json: 1-2)\n"
        "    n_experts = 2\n    top_k = 1")
    lay = _settled(tmp_path / "c", _err(tmp_path / "c"))
    assert (lay.layers, lay.n_experts, lay.top_k) == ((0, 1, 2), 2, 1)


def test_config_layers_absent_from_the_container_are_not_required(tmp_path):
    """A twin keeping layers 2-3 of a 5-layer config still detects, as 2-3."""
    _write(tmp_path / "c", [_per_expert([2, 3], 2)])
    _config(tmp_path / "c", num_hidden_layers=5, first_k_dense_replace=1,
            num_experts_per_tok=1)
    assert detect(tmp_path / "c").layers == (2, 3)


def test_config_and_names_disagreeing_on_experts_say_both(tmp_path):
    """config.json says 8 experts, every layer has 0-3: a disagreement the
    layout file's lines (the names' 4) settle."""
    _write(tmp_path / "c", [_per_expert([0, 1], 4)])
    _config(tmp_path / "c", num_local_experts=8, num_experts_per_tok=1)
    assert _err(tmp_path / "c") == (
        f"{tmp_path / 'c' / 'config.json'} and the tensor names disagree on "
        "the experts per layer: config.json says 8 (num_local_experts); the "
        "names have experts 0-3 in every layer; give a layout file "
        "(xcache-layout.toml) with the experts per layer; these lines in "
        f"{tmp_path / 'c'}/xcache-layout.toml settle it\n"
        '    expert_template = "model.layers.{layer}.block_sparse_moe.experts.'
        '{expert}.{tensor}"\n'
        '    tensors = ["w1.weight", "w2.weight"]\n'
        "    layers = [0, 1]\n"
        "    n_experts = 4  # the names' (num_local_experts: 8)\n"
        "    top_k = 1")
    lay = _settled(tmp_path / "c", _err(tmp_path / "c"))
    assert (lay.layers, lay.n_experts, lay.top_k) == ((0, 1), 4, 1)


def test_top_k_needs_the_config(tmp_path):
    """No config.json, or one without a top-k key: top-k is unknown; the
    layout file's lines mark the top-k to set (1 until then)."""
    _write(tmp_path / "t", [_per_expert([0], 2)])
    cfg = tmp_path / "t" / "config.json"
    lines = (f"; these lines in {tmp_path / 't'}/xcache-layout.toml settle it\n"
             '    expert_template = "model.layers.{layer}.block_sparse_moe.experts.'
             '{expert}.{tensor}"\n'
             '    tensors = ["w1.weight", "w2.weight"]\n'
             "    layers = [0]\n    n_experts = 2\n"
             "    top_k = 1  # unknown: the model's experts per token go here")
    assert _err(tmp_path / "t") == (
        f"{cfg}: top-k unknown (there is no config.json); give --top-k, or a "
        "layout file (xcache-layout.toml) with top_k" + lines)
    _config(tmp_path / "t", num_local_experts=2)
    assert _err(tmp_path / "t") == (
        f"{cfg}: top-k unknown (it has none of num_experts_per_tok, "
        "experts_per_token, num_experts_per_token, moe_top_k, moe_topk, "
        "num_selected_experts, top_k_experts, moe_k, router_topk, top_k); give "
        "--top-k, or a layout file (xcache-layout.toml) with top_k" + lines)
    assert detect(tmp_path / "t", top_k=2).top_k == 2
    lay = _settled(tmp_path / "t", _err(tmp_path / "t"))
    assert (lay.layers, lay.n_experts, lay.top_k) == ((0,), 2, 1)


def test_a_bad_config_is_named(tmp_path):
    """config.json that is not JSON, or holds a wrong value, names the file."""
    _write(tmp_path / "b", [_per_expert([0], 2)])
    cfg = tmp_path / "b" / "config.json"
    cfg.write_text("{")
    assert _err(tmp_path / "b").startswith(f"{cfg}: not valid JSON: ")
    _config(tmp_path / "b", num_local_experts="2", num_experts_per_tok=1)
    assert _err(tmp_path / "b") == (
        f"{cfg}: num_local_experts must be an integer of at least 1, got '2'")
