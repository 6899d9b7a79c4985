"""The probe's containers: the layout they hold, their bytes, and the files written."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xcache.oracle.bounds import DIRECT_ALIGN
from xcache.oracle.policies import POLICIES as _POLICIES

#: The layout every container of the probe holds (per expert, or fused).
LAYERS = (1, 3)
N_EXPERTS = 3
TENSORS = (("up", "F32", (2, 4)), ("down", "F16", (4, 2)))
TEMPLATE = "layers.{layer}.experts.{expert}.{tensor}"
FUSED_TEMPLATE = "layers.{layer}.experts.{tensor}"
_DTYPE_BYTES = {"F32": 4, "F16": 2}
#: XC_ALIGN: a slot's stride is the expert's bytes plus two alignments,
#: rounded up to one (xc_load.c).
ALIGN = DIRECT_ALIGN
#: Parameters other than the defaults the countdown opens a policy with.
_NON_DEFAULT = {"lfru": "lfru:sample=2,seed=5", "hotness": "hotness:period=3",
                "s3fifo": "s3fifo:small=50,ghost=20,promote=3"}
#: Every policy of the oracle's registry (the engine's, which a test holds
#: equal), with parameters other than its defaults where it has some, as
#: the countdown opens them (lru, the default, first).
POLICY_SPECS: tuple[str, ...] = tuple(_NON_DEFAULT.get(n, n) for n in
                                    sorted(_POLICIES, key=lambda n: n != "lru"))
#: The most allocations one countdown may need before it ends.
MAX_N = 400


def tensor_names(layer: int, expert: int) -> list[str]:
    return [TEMPLATE.format(layer=layer, expert=expert, tensor=t)
            for t, _, _ in TENSORS]


def _nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    n = _DTYPE_BYTES[dtype]
    for d in shape:
        n *= d
    return n


def tensor_bytes(layer: int, expert: int, t: int) -> bytes:
    """The payload of tensor ``t`` of an expert: a pattern no two share."""
    _, dt, shape = TENSORS[t]
    base = (layer * 7 + expert * 3 + t * 11) % 251
    return bytes((base + i * 13) % 256 for i in range(_nbytes(dt, shape)))


def expert_bytes(layer: int, expert: int) -> bytes:
    """An expert's payload as a slot holds it: its tensors in list order."""
    return b"".join(tensor_bytes(layer, expert, t) for t in range(len(TENSORS)))


EXPERT_BYTES = len(expert_bytes(LAYERS[0], 0))
STRIDE = (EXPERT_BYTES + 3 * ALIGN - 1) // ALIGN * ALIGN
N_KEYS = len(LAYERS) * N_EXPERTS


def write_safetensors(path: Path, tensors: list[tuple[str, str, list[int],
                                                      bytes]],
                      header_order: list[str] | None = None) -> None:
    """Write ``tensors`` (name, dtype, shape, bytes) in data order; the header
    lists them in ``header_order`` (default: data order)."""
    placed: dict[str, dict[str, Any]] = {}
    data = b""
    for name, dt, shape, b in tensors:
        placed[name] = {"dtype": dt, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    order = header_order or [t[0] for t in tensors]
    head = json.dumps({n: placed[n] for n in order}).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + data)


def _experts(layers: tuple[int, ...] = LAYERS
             ) -> list[tuple[str, str, list[int], bytes]]:
    return [(name, dt, list(shape), tensor_bytes(layer, e, t))
            for layer in layers for e in range(N_EXPERTS)
            for t, (name, (_, dt, shape)) in enumerate(
                zip(tensor_names(layer, e), TENSORS, strict=True))]


@dataclass
class Files:
    """The probe's containers, written under ``folder``."""

    folder: Path
    one: Path = field(init=False)
    index: Path = field(init=False)
    fused: Path = field(init=False)
    shape: Path = field(init=False)
    perm: Path = field(init=False)
    perm3: Path = field(init=False)

    def __post_init__(self) -> None:
        f = self.folder
        ts = _experts()
        # one file whose header lists the tensors against data order (the
        # reader sorts them: its allocations run too)
        self.one = f / "one.safetensors"
        write_safetensors(self.one, ts, [t[0] for t in reversed(ts)])
        # an index of two shards; layer 3 expert 0's first tensor sits in
        # the first shard, so that expert straddles both
        d = f / "index"
        d.mkdir()
        cut = N_EXPERTS * len(TENSORS) + 1
        write_safetensors(d / "b.safetensors", ts[cut:])
        write_safetensors(d / "a.safetensors", ts[:cut])
        wmap = {t[0]: "a.safetensors" for t in ts[:cut]}
        wmap.update({t[0]: "b.safetensors" for t in ts[cut:]})
        (d / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": sum(len(t[3]) for t in ts)},
             "weight_map": wmap}), encoding="utf-8")
        self.index = d
        # fused: one tensor per (layer, tensor), expert e its slice e
        fused = []
        for layer in LAYERS:
            for t, (tn, dt, shape) in enumerate(TENSORS):
                fused.append((FUSED_TEMPLATE.format(layer=layer, tensor=tn),
                              dt, [N_EXPERTS, *shape],
                              b"".join(tensor_bytes(layer, e, t)
                                       for e in range(N_EXPERTS))))
        self.fused = f / "fused.safetensors"
        write_safetensors(self.fused, fused)
        # layer 1 expert 1's "up" of another size, and of the same size
        # with its dimensions swapped
        self.shape = f / "shape.safetensors"
        self.perm = f / "perm.safetensors"
        odd = tensor_names(LAYERS[0], 1)[0]
        for path, shape in ((self.shape, [2, 2]), (self.perm, [4, 2])):
            changed = [(n, dt, shape if n == odd else s,
                        b[:_nbytes(dt, tuple(shape))] if n == odd else b)
                       for n, dt, s, b in ts]
            write_safetensors(path, changed)
        # one tensor "w" of [2, 3, 4]; layer 1 expert 1's is [2, 4, 3]: the
        # first dimension agrees, so only a walk over every one tells
        self.perm3 = f / "perm3.safetensors"
        write_safetensors(self.perm3, [
            (TEMPLATE.format(layer=layer, expert=e, tensor="w"), "F32",
             [2, 4, 3] if (layer, e) == (LAYERS[0], 1) else [2, 3, 4],
             bytes(96)) for layer in LAYERS for e in range(N_EXPERTS)])
