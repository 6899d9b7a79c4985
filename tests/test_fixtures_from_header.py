"""from-header: a synthetic twin of a checkpoint made from its headers alone."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from fixtures import container_spec, generate, read_header, verify
from fixtures.__main__ import main
from fixtures.from_header import (
    from_header,
    infer_moe,
    parse_layers,
    scale_shape,
    spec_from_header,
)
from fixtures.spec import DTYPE_BITS, tensor_nbytes

T = "model.layers.{l}.mlp.experts.{e}.{p}"


def _checkpoint_tensors() -> list[tuple[str, str, list[int]]]:
    """DeepSeek-like names: dense layer 0, MoE layers 1-3 with 4 experts."""
    out = [("model.embed_tokens.weight", "BF16", [50, 64])]
    out += [(f"model.layers.0.mlp.{p}.weight", "BF16", [96, 64])
            for p in ("gate_proj", "up_proj", "down_proj")]
    for layer in (1, 2, 3):
        out.append((f"model.layers.{layer}.mlp.gate.weight", "BF16", [4, 64]))
        out.append((f"model.layers.{layer}.mlp.shared_experts.up_proj.weight",
                    "F8_E4M3", [32, 64]))
        for e in range(4):
            for p, shape in (("gate_proj", [32, 64]), ("down_proj", [64, 32])):
                out.append((T.format(l=layer, e=e, p=p + ".weight"), "F8_E4M3", shape))
                out.append((T.format(l=layer, e=e, p=p + ".weight_scale_inv"),
                            "F32", [shape[0] // 16, shape[1] // 16]))
    out.append(("lm_head.weight", "BF16", [50, 64]))
    return out


def _write_header_only(path, tensors) -> None:
    """A shard cut right after its header: dtype-sorted data, name-sorted keys."""
    ordered = sorted(tensors, key=lambda t: (-DTYPE_BITS[t[1]], t[0]))
    hdr, pos = {}, 0
    for name, dtype, shape in ordered:
        n = tensor_nbytes(dtype, tuple(shape))
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + n]}
        pos += n
    body = json.dumps({"__metadata__": {"format": "pt"},
                       **dict(sorted(hdr.items()))}).encode()
    body += b" " * (-len(body) % 8)
    path.write_bytes(len(body).to_bytes(8, "little") + body)


@pytest.fixture
def checkpoint(tmp_path):
    """Two truncated shards with an index and a config.json (top-3)."""
    src = tmp_path / "ckpt"
    src.mkdir()
    tensors = _checkpoint_tensors()
    half = len(tensors) // 2
    wmap = {}
    for i, part in enumerate((tensors[:half], tensors[half:])):
        name = f"model-{i + 1:05d}-of-00002.safetensors"
        _write_header_only(src / name, part)
        wmap.update({t[0]: name for t in part})
    (src / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 0}, "weight_map": wmap}))
    (src / "config.json").write_text(json.dumps({"num_experts_per_tok": 3}))
    return src


def _names_in_data_order(folder):
    out = {}
    for p in sorted(folder.glob("*.safetensors")):
        hdr, _, _ = read_header(p)
        hdr.pop("__metadata__", None)
        out[p.name] = [(n, e["dtype"], e["shape"]) for n, e in
                       sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"])]
    return out


def test_twin_keeps_names_dtypes_order_and_shards(checkpoint, tmp_path):
    """The twin has the checkpoint's names, dtypes, data order and shard split."""
    lay = from_header(checkpoint / "model.safetensors.index.json", tmp_path / "out")
    assert _names_in_data_order(tmp_path / "out") == _names_in_data_order(checkpoint)
    spec = lay.spec
    assert spec.layers == [1, 2, 3] and spec.n_experts == 4 and spec.top_k == 3
    assert spec.expert_template == "model.layers.{layer}.mlp.experts.{expert}.{tensor}"
    # in order of appearance in the data: F32 scales first (dtype-sorted)
    assert [p for p, _, _ in spec.expert_tensors] == [
        "down_proj.weight_scale_inv", "gate_proj.weight_scale_inv",
        "down_proj.weight", "gate_proj.weight"]
    assert verify(lay.dir) == []
    assert container_spec(lay.dir) == spec
    assert len(lay.expert_runs(2, 1)) > 1  # dtype-sorted source: scattered


def test_scale_and_filters(checkpoint, tmp_path):
    """--scale shrinks dims, --layers and --experts keep subsets."""
    spec = spec_from_header(checkpoint, scale=0.25, layers=[0, 2], experts=2)
    names = [t.name for t in spec.all_tensors]
    assert not any(".layers.1." in n or ".layers.3." in n for n in names)
    assert not any(".experts.2." in n for n in names)
    assert "model.embed_tokens.weight" in names and "lm_head.weight" in names
    assert spec.layers == [2] and spec.n_experts == 2 and spec.top_k == 2
    assert spec.by_name[T.format(l=2, e=1, p="gate_proj.weight")].shape == (8, 16)
    assert spec.by_name[T.format(l=2, e=1, p="gate_proj.weight_scale_inv")].shape \
        == (1, 1)


def test_filter_that_empties_a_shard_drops_it(tmp_path):
    """A shard left with no tensors is dropped; the rest keep their names."""
    tensors = _checkpoint_tensors()
    only_1 = [t for t in tensors if ".layers.1." in t[0]]
    rest = [t for t in tensors if ".layers.1." not in t[0]]
    wmap = {}
    for name, part in (("a.safetensors", only_1), ("b.safetensors", rest)):
        _write_header_only(tmp_path / name, part)
        wmap.update({t[0]: name for t in part})
    idx = tmp_path / "model.safetensors.index.json"
    idx.write_text(json.dumps({"metadata": {}, "weight_map": wmap}))
    assert spec_from_header(idx).shard_files == ["a.safetensors", "b.safetensors"]
    spec = spec_from_header(idx, layers=[3])
    assert spec.shard_files == ["b.safetensors"]
    lay = generate(spec, tmp_path / "o")
    assert [f.name for f in lay.files] == ["b.safetensors"]
    assert verify(lay.dir) == []


def test_single_file_made_by_the_official_writer(tmp_path):
    """A one-file checkpoint (official writer, no index) gives a one-file twin."""
    arrs = {"model.layers.0.block_sparse_moe.experts.0.w1.weight":
            np.zeros((4, 8), np.float32),
            "model.layers.0.block_sparse_moe.experts.1.w1.weight":
            np.zeros((4, 8), np.float32),
            "model.norm.weight": np.zeros((8,), np.float16)}
    save_file(arrs, tmp_path / "model.safetensors")
    lay = from_header(tmp_path / "model.safetensors", tmp_path / "twin", top_k=1)
    assert [f.name for f in lay.files] == ["model.safetensors"]
    assert lay.index is None and (lay.spec.n_experts, lay.spec.top_k) == (2, 1)
    assert sorted(p.name for p in (tmp_path / "twin").iterdir()) == [
        "model.safetensors"]
    assert verify(tmp_path / "twin") == []


def test_cli_from_header(checkpoint, tmp_path, capsys):
    """`python -m fixtures from-header` writes the twin and prints a summary."""
    rc = main(["from-header", str(checkpoint), str(tmp_path / "o"),
               "--scale", "0.5", "--layers", "1-2", "--experts", "3"])
    assert rc == 0
    assert "tensors" in capsys.readouterr().out
    assert main(["verify", str(tmp_path / "o")]) == 0
    assert main(["from-header", str(tmp_path / "nothing"), str(tmp_path / "p")]) == 2


def test_helpers():
    """Layer lists parse, scaled shapes stay >= 1 and whole bytes."""
    assert parse_layers("3,5-7") == [3, 5, 6, 7]
    assert scale_shape("BF16", (4096, 7), 1 / 64) == (64, 1)
    assert scale_shape("F4", (3, 3), 1 / 3) == (1, 2)
    assert scale_shape("F6_E2M3", (5,), 0.2) == (4,)
    assert infer_moe([("model.norm.weight", "F32", (4,))]) == {}
