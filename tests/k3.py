"""k3-mini for the cache tests: write the file, open it, know its bytes.

Until branch ``fixtures`` lands this writes DESIGN.md section 3's layout
itself; until branch ``st`` lands ``open_container`` wraps ``xc_st_open``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from engine import _lib
from engine.cache import K3_TEMPLATE, K3_TENSORS

N_EXPERTS = 24
EXPERT_BYTES = 1632
DATA_START = 20608
FILE_BYTES = 59776
SHAPES = {"weight_packed": [8, 64], "weight_scale": [8, 4]}


def _tensor_bytes(expert: int, t: int, nbytes: int) -> bytes:
    """Content unique to (expert, tensor): a seeded random run."""
    rng = np.random.default_rng(1000 * expert + t)
    return rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes()


def tensor_bytes(expert: int, suffix: str) -> bytes:
    """What the file holds for (layer 0, expert, suffix)."""
    t = K3_TENSORS.index(suffix)
    return _tensor_bytes(expert, t, int(np.prod(SHAPES[suffix.split(".")[1]])))


def write_k3_mini(out_dir: Path, *, reversed_tensors: bool = False) -> Path:
    """Write model-00001-of-00001.safetensors in the k3-mini layout.

    ``reversed_tensors`` stores each expert's tensors in reverse list order,
    so no expert is contiguous (the per-tensor read path); the header and
    file sizes are then those of this variant, not k3-mini's.
    """
    header: dict[str, Any] = {}
    payload = bytearray()
    order = list(enumerate(K3_TENSORS))
    if reversed_tensors:
        order.reverse()
    for e in range(N_EXPERTS):
        for t, suffix in order:
            shape = SHAPES[suffix.split(".")[1]]
            n = int(np.prod(shape))
            name = K3_TEMPLATE.format(layer=0, expert=e, tensor=suffix)
            header[name] = {"dtype": "U8", "shape": shape,
                            "data_offsets": [len(payload), len(payload) + n]}
            payload += _tensor_bytes(e, t, n)
    text = json.dumps(header, separators=(", ", ": ")).encode()
    text += b" " * (-len(text) % 8)
    path = Path(out_dir) / "model-00001-of-00001.safetensors"
    path.write_bytes(len(text).to_bytes(8, "little") + text + payload)
    if not reversed_tensors:
        assert 8 + len(text) == DATA_START, len(text)
        assert path.stat().st_size == FILE_BYTES
    return path


def expert_bytes(path: Path, expert: int) -> bytes:
    """The expert's payload read straight from the file (it is contiguous)."""
    with open(path, "rb") as f:
        f.seek(DATA_START + EXPERT_BYTES * expert)
        return f.read(EXPERT_BYTES)


class _StContainer:
    """Stand-in for engine.Container: owns an xc_st* as ``_ptr``."""

    def __init__(self, path: Path) -> None:
        ffi, lib = _lib.ffi(), _lib.lib()
        out = ffi.new("xc_st **")
        _lib.check(lib.xc_st_open(str(path).encode(), ffi.NULL, out))
        self._ptr = ffi.gc(out[0], lib.xc_st_close)


def open_container(path: Path) -> Any:
    """engine.Container(path) when it exists, else the stand-in."""
    import engine
    cls = getattr(engine, "Container", None)
    return cls(str(path)) if cls is not None else _StContainer(path)
