"""Granite-4.0-H's shared MLP is fused like its experts but is not routed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from xcache.engine.detect import detect


def test_shared_mlp_is_not_a_second_expert_group(tmp_path: Path) -> None:
    """block_sparse_moe's fused experts are found; shared_mlp is left as trunk."""
    e, h, f = 4, 8, 16
    tensors = {}
    for layer in range(2):
        pre = f"model.layers.{layer}."
        tensors[pre + "block_sparse_moe.input_linear.weight"] = np.zeros(
            (e, 2 * f, h), np.float16)
        tensors[pre + "block_sparse_moe.output_linear.weight"] = np.zeros(
            (e, h, f), np.float16)
        tensors[pre + "block_sparse_moe.router.layer.weight"] = np.zeros(
            (e, h), np.float16)
        tensors[pre + "shared_mlp.input_linear.weight"] = np.zeros(
            (2 * f, h), np.float16)
        tensors[pre + "shared_mlp.output_linear.weight"] = np.zeros(
            (h, f), np.float16)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({
        "num_hidden_layers": 2, "num_local_experts": e,
        "num_experts_per_tok": 2}))
    lay = detect(tmp_path)
    assert lay.expert_template == "model.layers.{layer}.block_sparse_moe.{tensor}"
    assert (lay.family, list(lay.layers), lay.n_experts, lay.top_k) == (
        "fused", [0, 1], 4, 2)
    assert list(lay.tensors) == ["input_linear.weight", "output_linear.weight"]
