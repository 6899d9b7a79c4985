"""k3-mini for the cache tests: write it, open it, know its bytes.

The container itself comes from ``fixtures.generate("k3-mini", ...)``
(DESIGN.md section 3).  A variant with each expert's tensors stored in
reverse order (so no expert is contiguous) is written here, with the same
per-tensor content, to drive the per-tensor read path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fixtures
from engine import Container
from engine.cache import K3_TEMPLATE, K3_TENSORS

N_EXPERTS = 24
EXPERT_BYTES = 1632
DATA_START = 20608
FILE_BYTES = 59776
SHAPES = {"weight_packed": [8, 64], "weight_scale": [8, 4]}
SHARD = "model-00001-of-00001.safetensors"


def tensor_bytes(expert: int, suffix: str) -> bytes:
    """What the generator writes for (layer 0, expert, suffix)."""
    name = K3_TEMPLATE.format(layer=0, expert=expert, tensor=suffix)
    return fixtures.expected_bytes("k3-mini", name)


def write_k3_mini(out_dir: Path, *, reversed_tensors: bool = False) -> Path:
    """Write k3-mini into out_dir/k3-mini and return its shard's path.

    ``reversed_tensors`` writes the per-tensor variant instead (its header
    and file sizes are its own, not k3-mini's).
    """
    folder = Path(out_dir) / "k3-mini"
    if not reversed_tensors:
        fixtures.generate("k3-mini", folder)
        path = folder / SHARD
        assert path.stat().st_size == FILE_BYTES
        return path
    header: dict[str, Any] = {}
    payload = bytearray()
    for e in range(N_EXPERTS):
        for suffix in reversed(K3_TENSORS):
            data = tensor_bytes(e, suffix)
            name = K3_TEMPLATE.format(layer=0, expert=e, tensor=suffix)
            header[name] = {"dtype": "U8", "shape": SHAPES[suffix.split(".")[1]],
                            "data_offsets": [len(payload), len(payload) + len(data)]}
            payload += data
    text = json.dumps(header, separators=(", ", ": ")).encode()
    text += b" " * (-len(text) % 8)
    folder.mkdir(parents=True)
    path = folder / SHARD
    path.write_bytes(len(text).to_bytes(8, "little") + text + payload)
    return path


def expert_bytes(path: Path, expert: int) -> bytes:
    """k3-mini expert's payload read straight from the file (it is contiguous)."""
    with open(path, "rb") as f:
        f.seek(DATA_START + EXPERT_BYTES * expert)
        return f.read(EXPERT_BYTES)


def open_container(path: Path) -> Any:
    """The engine's container over path."""
    return Container(str(path))
