"""`replay.py --container` on a container whose layout a layout file must settle.

The refusal is one ``CANNOT RUN`` line on stderr naming the layout file;
the file's lines for this container go to stdout before it
(xcache.layout_rules).  Written there, they make the container a target.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import ROOT
from xcache.gate.containers import make_target

LINES = ('    expert_template = "model.layers.{layer}.block_sparse_moe.experts.'
         '{expert}.{tensor}"\n'
         '    tensors = ["w1.weight", "w2.weight"]\n'
         "    layers = [0, 1]  # the names' (config.json: 1)\n"
         "    n_experts = 4\n"
         "    top_k = 2\n")


def _container(folder: Path) -> Path:
    """Experts in layers 0-1 where config.json says every second layer is MoE."""
    save_file = pytest.importorskip("safetensors.numpy").save_file
    folder.mkdir()
    save_file({f"model.layers.{la}.block_sparse_moe.experts.{e}.{p}":
               np.full((2, 4), la * 10 + e, np.float32)
               for la in (0, 1) for e in range(4) for p in ("w1.weight", "w2.weight")},
              str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(
        {"num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
         "decoder_sparse_step": 2}))
    return folder


@pytest.mark.nosan  # the front door as a subprocess: it builds the engine
def test_the_refusal_is_one_line_and_the_lines_settle_it(tmp_path: Path) -> None:
    """Exit 2, one stderr line naming the file; its lines on stdout, which
    written there make the container a target with the names' layers."""
    folder = _container(tmp_path / "c")
    p = subprocess.run([sys.executable, str(ROOT / "replay.py"), "--container",
                        str(folder), str(tmp_path / "out")], capture_output=True,
                       text=True, timeout=600, cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr == (
        f"CANNOT RUN: container {folder}: no layout: {folder}/config.json and "
        "the tensor names disagree on the MoE layers: config.json says 1 of the "
        "layers present (num_hidden_layers 2, decoder_sparse_step 2); the names "
        "have experts in layers 0-1; give a layout file (xcache-layout.toml) "
        f"with the layers to use; these lines in {folder}/xcache-layout.toml "
        "settle it\n")
    assert p.stdout.endswith(LINES)
    (folder / "xcache-layout.toml").write_text(LINES)
    target = make_target(str(folder), tmp_path / "work")
    assert (target.layout["layers"], target.layout["n_experts"],
            target.layout["top_k"]) == ([0, 1], 4, 2)
