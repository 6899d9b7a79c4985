"""Fused (stacked) expert containers for the tests, and the peer that reads them.

A template without ``{expert}`` names one tensor per (layer, tensor) whose
leading dimension is the layer's expert count; expert e's piece of it is
bytes [e * nbytes / E, (e + 1) * nbytes / E) of its data, seen with shape
``shape[1:]``.  The containers here are Granite-MoE-like (``input_linear`` /
``output_linear``, BF16) and GPT-OSS-like (MXFP4 ``*_blocks`` and ``*_scales``
as U8 plus BF16 biases), written with distinct random bytes per tensor by a
tiny raw writer (numpy has no BF16); the peer that says what each expert
must be is the oracle's reader, sliced with numpy.  Also here: what C
reports for each slot tensor, the pread counts of chunked and O_DIRECT
reads, and an O_DIRECT open that skips where the filesystem refuses it.
The fixtures over these containers live in ``tests/cache/conftest.py``;
the tests in ``test_fused_experts.py`` and ``test_fused_experts_refused.py``.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from xcache import engine
from xcache.engine import _lib
from xcache.oracle import safetensors as ost

ALIGN = 4096

#: bits per element of the dtypes these containers use
BITS = {"BF16": 16, "F16": 16, "F32": 32, "U8": 8, "F4": 4}
#: how the peer sees a dtype in numpy (BF16 as its raw 16 bits)
PEER_NP = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "U8": np.uint8}


@dataclass
class Box:
    """A written container and the layout that reads its fused experts."""

    folder: Path
    template: str
    tensors: tuple[str, ...]
    layers: tuple[int, ...]
    n_experts: int
    top_k: int = 2
    dtypes: dict[str, str] = field(default_factory=dict)

    def kwargs(self) -> dict:
        """The five layout keyword arguments of ExpertCache."""
        return {"expert_template": self.template, "tensors": list(self.tensors),
                "layers": list(self.layers), "n_experts": self.n_experts,
                "top_k": self.top_k}

    def name(self, layer: int, tensor: str) -> str:
        """The container name of (layer, tensor)."""
        return self.template.format(layer=layer, tensor=tensor)

    @property
    def keys(self) -> list[tuple[int, int]]:
        """Every (layer, expert) of the layout, in key order."""
        return [(la, e) for la in self.layers for e in range(self.n_experts)]


def nbytes_of(dtype: str, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor of this dtype and shape."""
    return int(np.prod(shape, dtype=np.int64)) * BITS[dtype] // 8


def write_shards(folder: Path, shards: list[list[tuple[str, str, tuple[int, ...]]]],
                 seed: int) -> None:
    """Raw safetensors shards (names sorted in each), distinct random bytes per tensor.

    One shard is ``model.safetensors``; several get an index.
    """
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    weight_map, total = {}, 0
    for i, entries in enumerate(shards):
        fname = ("model.safetensors" if len(shards) == 1 else
                 f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors")
        header, data = {}, bytearray()
        for name, dtype, shape in sorted(entries):
            n = nbytes_of(dtype, shape)
            raw = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
            header[name] = {"dtype": dtype, "shape": list(shape),
                            "data_offsets": [len(data), len(data) + len(raw)]}
            data += raw
            weight_map[name] = fname
            total += len(raw)
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        (folder / fname).write_bytes(struct.pack("<Q", len(text)) + text + bytes(data))
    if len(shards) > 1:
        (folder / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": total}, "weight_map": weight_map}))


def granite(folder: Path, *, E: int = 4, h: int = 48, f: int = 40,
            layers: tuple[int, ...] = (0, 1, 2), n_shards: int = 1,
            seed: int = 1) -> Box:
    """Granite-MoE-like: input_linear [E, 2f, h], output_linear [E, h, f]."""
    per_layer = []
    for la in layers:
        p = f"model.layers.{la}."
        per_layer.append([
            (p + "input_layernorm.weight", "BF16", (h,)),
            (p + "self_attn.q_proj.weight", "BF16", (h, h)),
            (p + "block_sparse_moe.router.layer.weight", "BF16", (E, h)),
            (p + "block_sparse_moe.input_linear.weight", "BF16", (E, 2 * f, h)),
            (p + "block_sparse_moe.output_linear.weight", "BF16", (E, h, f)),
        ])
    embed = [("model.embed_tokens.weight", "BF16", (50, h))]
    shards = _split(per_layer, n_shards, embed)
    write_shards(folder, shards, seed)
    return Box(folder, "model.layers.{layer}.block_sparse_moe.{tensor}",
               ("input_linear.weight", "output_linear.weight"), layers, E,
               dtypes={"input_linear.weight": "BF16", "output_linear.weight": "BF16"})


GPT_OSS_TENSORS = ("gate_up_proj_blocks", "gate_up_proj_scales", "gate_up_proj_bias",
                   "down_proj_blocks", "down_proj_scales", "down_proj_bias")


def gpt_oss_entries(la: int, E: int, h: int, f: int, bias: str = "BF16"
                    ) -> list[tuple[str, str, tuple[int, ...]]]:
    """One GPT-OSS-like layer: MXFP4 blocks and scales as U8, biases, router."""
    p = f"model.layers.{la}.mlp."
    return [
        (p + "router.weight", "BF16", (E, h)),
        (p + "router.bias", "BF16", (E,)),
        (p + "experts.gate_up_proj_blocks", "U8", (E, 2 * f, h // 32, 16)),
        (p + "experts.gate_up_proj_scales", "U8", (E, 2 * f, h // 32)),
        (p + "experts.gate_up_proj_bias", bias, (E, 2 * f)),
        (p + "experts.down_proj_blocks", "U8", (E, h, f // 32, 16)),
        (p + "experts.down_proj_scales", "U8", (E, h, f // 32)),
        (p + "experts.down_proj_bias", bias, (E, h)),
        (f"model.layers.{la}.self_attn.sinks", "BF16", (8,)),
    ]


def gpt_oss(folder: Path, *, E: int = 4, h: int = 96, f: int = 64,
            layers: tuple[int, ...] = (0, 1, 2), n_shards: int = 1,
            seed: int = 2) -> Box:
    """A GPT-OSS-like container (MXFP4 experts fused per layer)."""
    per_layer = [gpt_oss_entries(la, E, h, f) for la in layers]
    embed = [("model.embed_tokens.weight", "BF16", (40, h))]
    shards = _split(per_layer, n_shards, embed)
    write_shards(folder, shards, seed)
    dt = {"gate_up_proj_bias": "BF16", "down_proj_bias": "BF16"}
    return Box(folder, "model.layers.{layer}.mlp.experts.{tensor}", GPT_OSS_TENSORS,
               layers, E, top_k=2, dtypes={t: dt.get(t, "U8") for t in GPT_OSS_TENSORS})


def _split(per_layer: list[list], n_shards: int, extra: list) -> list[list]:
    """Layers spread over n_shards shards in order; extra tensors in the first."""
    shards: list[list] = [list(extra)] + [[] for _ in range(n_shards - 1)]
    for i, entries in enumerate(per_layer):
        shards[i * n_shards // len(per_layer)].extend(entries)
    return shards


class Peer:
    """What each fused expert must be: the oracle reader's arrays, sliced by numpy."""

    def __init__(self, box: Box) -> None:
        self.box = box
        self.oc = ost.open_container(box.folder)
        self.arrays: dict[str, np.ndarray] = {}
        for la in box.layers:
            for t in box.tensors:
                info = self.oc.tensor(box.name(la, t))
                raw = np.frombuffer(self.oc.read_bytes(info.name), np.uint8)
                arr = raw.view(PEER_NP[info.dtype]).reshape(info.shape)
                self.arrays[info.name] = arr

    def array(self, layer: int, tensor: str) -> np.ndarray:
        """The whole [E, ...] tensor of (layer, tensor)."""
        return self.arrays[self.box.name(layer, tensor)]

    def payload(self, layer: int, expert: int) -> bytes:
        """The expert's bytes: slice ``expert`` of each tensor, in tensor order."""
        return b"".join(self.array(layer, t)[expert].tobytes()
                        for t in self.box.tensors)

    def slices(self, layer: int, expert: int) -> list[tuple[str, int, int, int]]:
        """Per tensor: (shard path, absolute offset, nbytes) of the expert's slice."""
        out = []
        for t in self.box.tensors:
            info = self.oc.tensor(self.box.name(layer, t))
            n = info.nbytes // self.box.n_experts
            out.append((info.shard, info.offset + expert * n, n, info.offset))
        return out

    def assert_expert(self, ex: engine.Expert) -> None:
        """The expert's bytes and every tensor view equal the peer's slices, exactly."""
        layer, e = ex.key
        assert bytes(ex.data) == self.payload(layer, e), ex.key
        views = ex.tensors
        assert list(views) == list(self.box.tensors)
        for t, view in views.items():
            want = self.array(layer, t)[e]
            if want.dtype == np.uint16:  # BF16: raw bytes, flat, in the engine's view
                want = want.view(np.uint8).reshape(-1)
            assert (view.dtype, view.shape) == (want.dtype, want.shape), t
            assert np.array_equal(view, want), (ex.key, t)
            assert not view.flags.writeable


def slot_tensors(cache: engine.ExpertCache) -> list[tuple[str, str, tuple, int, int]]:
    """What C reports for each slot tensor: name, dtype, shape, offset, nbytes."""
    ffi, lib = _lib.ffi(), _lib.lib()
    info = ffi.new("xc_slot_tensor *")
    out = []
    for i in range(lib.xc_cache_n_tensors(cache._ptr)):
        _lib.check(lib.xc_cache_tensor(cache._ptr, i, info))
        out.append((ffi.string(info.name).decode(),
                    ffi.string(lib.xc_dtype_name(info.dtype)).decode(),
                    tuple(int(info.shape[d]) for d in range(info.ndim)),
                    int(info.offset), int(info.nbytes)))
    return out


def widened(offset: int, n: int) -> int:
    """Length of [offset, offset + n) widened to ALIGN on both ends."""
    return (-(-(offset + n) // ALIGN) - offset // ALIGN) * ALIGN


def chunk_pieces(offset: int, n: int, chunk: int) -> int:
    """Preads of a run [offset, offset + n) cut at multiples of chunk (0: one)."""
    if chunk == 0 or n == 0:
        return 1
    return (offset + n - 1) // chunk - offset // chunk + 1


def window_preads(offset: int, n: int, chunk: int, file_size: int) -> int:
    """Preads of a widened window: one per chunk, and one more that meets end of file.

    A piece running past the end of the file gets the bytes up to it, and
    the read loop asks once more to find end of file (a 0).
    """
    reads, at, end = 0, offset, offset + n
    while at < end:
        stop = min(end, (at // chunk + 1) * chunk) if chunk else end
        reads += 2 if stop > file_size else 1
        at = stop
    return reads


def open_direct(box: Box, **kw) -> engine.Container:
    """The box's container opened O_DIRECT, or the test skipped with the reason."""
    c = engine.Container(str(box.folder), direct=True, **kw)
    if not c.direct_active:  # pragma: no cover - filesystem without O_DIRECT
        note = c.direct_note
        c.close()
        pytest.skip(f"O_DIRECT unavailable: {note}")
    return c
