"""python -m xcache.engine.inspector prints the expert layout after its OK line.

Exit 0 with the layout; ``FAIL layout: <message>`` and exit 1 when the
layout cannot be found or does not fit; a container without any sign of
experts keeps the single OK line (docs/LAYOUT.md "Inspect").
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xcache import fixtures
from xcache.engine.inspector import main

K3_LINES = [
    "template: language_model.model.layers.{layer}.block_sparse_moe.experts."
    "{expert}.{tensor}",
    "MoE layers: 0 (1 layer)",
    "experts per layer: 24",
    "top-k: 4",
    "tensors per expert: 6: w1.weight_packed, w1.weight_scale, "
    "w2.weight_packed, w2.weight_scale, w3.weight_packed, w3.weight_scale",
    "bytes per expert: 1632",
    "stored: contiguous (every expert one run)",
    "fused: no",
]


def _run(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(list(args))
    return rc, out.getvalue()


@pytest.fixture(scope="module")
def k3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """k3-mini generated once for this file."""
    folder = tmp_path_factory.mktemp("inspect-layout") / "k3-mini"
    fixtures.generate("k3-mini", folder)
    return folder


def test_k3_mini_prints_its_layout(k3):
    """The command prints the OK line, then k3-mini's layout, exit 0."""
    r = subprocess.run([sys.executable, "-m", "xcache.engine.inspector", str(k3)],
                       capture_output=True, text=True, env=os.environ.copy())
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"OK {k3}: 144 tensors, 1 shard(s), 39168 bytes of tensor data in 59776 "
        "bytes of shard files, dtypes U8x144",
        f"layout: fixture spec (xcache.spec in {k3}/model.safetensors.index.json)",
        *K3_LINES]


def test_deepseek_mini_is_scattered_over_layers_1_to_3(tmp_path):
    """A dtype-sorted preset reports its MoE layers and scattered experts."""
    fixtures.generate("deepseek-mini", tmp_path / "ds")
    rc, out = _run(str(tmp_path / "ds"))
    assert rc == 0
    lines = out.splitlines()
    assert lines[3:5] == ["MoE layers: 1-3 (3 layers)", "experts per layer: 16"]
    assert lines[7:] == ["bytes per expert: 2448",
                         "stored: scattered (48 of 48 experts in several runs)",
                         "fused: no"]


def test_an_explicit_layout_file_is_used(k3, tmp_path):
    """--layout FILE replaces the stored spec; the source names the file."""
    f = tmp_path / "l.toml"
    f.write_text(
        'expert_template = "language_model.model.layers.{layer}.'
        'block_sparse_moe.experts.{expert}.{tensor}"\n'
        'tensors = ["w2.weight_packed", "w2.weight_scale"]\n'
        "layers = [0]\nn_experts = 24\ntop_k = 3\n")
    rc, out = _run(str(k3), "--layout", str(f))
    assert rc == 0
    assert out.splitlines()[1:] == [
        f"layout: layout file {f}", K3_LINES[0], *K3_LINES[1:3], "top-k: 3",
        "tensors per expert: 2: w2.weight_packed, w2.weight_scale",
        "bytes per expert: 544", "stored: contiguous (every expert one run)",
        "fused: no"]


def test_a_layout_that_does_not_fit_is_fail_layout(k3, tmp_path):
    """A layout naming a tensor the container lacks: FAIL layout, exit 1."""
    f = tmp_path / "l.toml"
    f.write_text('expert_template = "x.layers.{layer}.experts.{expert}.{tensor}"\n'
                 'tensors = ["w1"]\nlayers = [0]\nn_experts = 2\ntop_k = 1\n')
    rc, out = _run(str(k3), "--layout", str(f))
    assert rc == 1
    assert out.splitlines()[1:] == [
        "FAIL layout: missing expert tensor: layer 0 expert 0 has no 'w1': "
        "x.layers.0.experts.0.w1 is not in the container"]


def test_a_bad_layout_file_is_fail_layout(k3, tmp_path):
    """A layout file with a bad key: FAIL layout naming the file and key."""
    f = tmp_path / "l.toml"
    f.write_text("top_k = 1\n")
    rc, out = _run(str(k3), "--layout", str(f))
    assert (rc, out.splitlines()[1]) == (
        1, f"FAIL layout: layout file {f}: missing key 'expert_template' (a "
           "layout has exactly expert_template, tensors, layers, n_experts, "
           "top_k)")


def test_detection_failure_is_fail_layout(k3, tmp_path):
    """k3-mini without its spec and without config.json: top-k unknown, the
    layout file's lines before the FAIL line; written there, inspect passes."""
    folder = Path(shutil.copytree(k3, tmp_path / "k3"))
    idx = folder / "model.safetensors.index.json"
    j = json.loads(idx.read_text())
    del j["metadata"]["xcache.spec"]
    idx.write_text(json.dumps(j))
    rc, out = _run(str(folder))
    lay = folder / "xcache-layout.toml"
    lines = [
        '    expert_template = "language_model.model.layers.{layer}.'
        'block_sparse_moe.experts.{expert}.{tensor}"',
        '    tensors = ["w1.weight_packed", "w1.weight_scale", '
        '"w2.weight_packed", "w2.weight_scale", "w3.weight_packed", '
        '"w3.weight_scale"]',
        "    layers = [0]", "    n_experts = 24",
        "    top_k = 1  # unknown: the model's experts per token go here"]
    assert (rc, out.splitlines()[1:]) == (1, [
        *lines,
        f"FAIL layout: {folder / 'config.json'}: top-k unknown (there is no "
        "config.json); give --top-k, or a layout file (xcache-layout.toml) "
        f"with top_k; these lines in {lay} settle it"])
    lay.write_text("\n".join(lines) + "\n")
    rc, out = _run(str(folder))
    assert (rc, out.splitlines()[1:]) == (0, [
        f"layout: layout file {lay}", *K3_LINES[:3], "top-k: 1", *K3_LINES[4:]])
    lay.unlink()
    (folder / "config.json").write_text(json.dumps(
        {"num_hidden_layers": 1, "num_local_experts": 24,
         "num_experts_per_tok": 4}))
    rc, out = _run(str(folder))
    assert rc == 0
    assert out.splitlines()[1:] == [
        "layout: detected (config.json and tensor names)", *K3_LINES]


def test_a_container_without_experts_keeps_one_line(tmp_path):
    """No layout file, spec, config.json or expert name: only the OK line."""
    save_file = pytest.importorskip("safetensors.numpy").save_file
    import numpy as np

    save_file({"a": np.zeros(2, np.float32)}, str(tmp_path / "m.safetensors"))
    rc, out = _run(str(tmp_path / "m.safetensors"))
    assert (rc, out) == (0, f"OK {tmp_path / 'm.safetensors'}: 1 tensors, "
                            "1 shard(s), 8 bytes of tensor data in 72 bytes of "
                            "shard files, dtypes F32x1\n")


@pytest.mark.parametrize("model, line", [
    ("deepseek-v2-lite", "shared experts: 2 per layer (n_shared_experts 2), not "
     "routed: model.layers.{layer}.mlp.shared_experts.{tensor} in layers 1-2 "
     "(2 layers); tensors 3: down_proj.weight, gate_proj.weight, up_proj.weight"),
    ("qwen2-moe-lm", "shared experts: 1 per layer (one module, no config key "
     "says more), not routed: model.language_model.layers.{layer}.mlp."
     "shared_expert.{tensor} in layers 1-2 (2 layers); tensors 3: "
     "down_proj.weight, gate_proj.weight, up_proj.weight"),
    ("mixtral-8x7b", None),
])
def test_shared_experts_are_reported_apart_from_the_routed(tmp_path, model, line):
    """A twin with shared experts: one line after fused naming their count, why,
    pattern, layers and tensors; the routed count stays 'experts per layer'."""
    from xcache.fixtures import realistic
    from xcache.fixtures.from_header import from_header

    desc = Path(__file__).resolve().parents[2] / "fixtures" / "models" / \
        f"{model}.json"
    src = realistic.expand(desc, tmp_path / "src", form="index", layers=[1, 2],
                           experts=4)
    from_header(src, tmp_path / "twin", scale=0.01)
    rc, out = _run(str(tmp_path / "twin"))
    lines = out.splitlines()
    assert (rc, lines[4], lines[9]) == (0, "experts per layer: 4", "fused: no")
    assert lines[10:] == ([line] if line else [])
