"""The valid containers the rules break: single files, sharded folders with an index."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xcache.gate.reader_diff.doc import Doc, Obj, render

INDEX_NAME = "model.safetensors.index.json"
#: Bits of every dtype of docs/DESIGN.md §3 (as the oracle's DTYPE_BITS).
_BITS = {"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "BOOL": 8, "U8": 8, "I8": 8,
         "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8,
         "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
         "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64,
         "C64": 64}



def _entries(specs: list[tuple[str, str, list[int]]], start: int = 0
             ) -> tuple[list[tuple[str, Any]], int]:
    pairs, off = [], start
    for name, dtype, shape in specs:
        n = 1
        for s in shape:
            n *= s
        nb = n * _BITS[dtype] // 8
        pairs.append((name, Obj([("dtype", dtype), ("shape", list(shape)),
                                 ("data_offsets", [off, off + nb])])))
        off += nb
    return pairs, off


def _data(n: int, salt: int) -> bytes:
    return bytes((i * 7 + salt) % 251 for i in range(n))


#: The single-file containers: (tensors, with metadata).  Every dtype width
#: (4, 6, 8, 16, 32, 64 bits), a scalar, an empty tensor, ties in offsets.
SINGLE: tuple[list[tuple[str, str, list[int]]], ...] = (
    [("a.w", "F32", [2, 3]), ("b.w", "BF16", [4]), ("c.w", "I8", [5]),
     ("d", "F4", [2, 2])],
    [("layers.0.x", "F16", [3, 2]), ("layers.0.y", "U8", []),
     ("layers.0.z", "I64", [2]), ("e", "F32", [0, 3]),
     ("layers.1.q", "F6_E2M3", [4]), ("layers.1.r", "BOOL", [7]),
     ("layers.1.s", "F8_E4M3", [1, 1, 3])],
    # every dtype once, in the table's order: a wrong width anywhere is a
    # wrong size (the 4- and 6-bit ones with element counts that end on a
    # byte)
    [(f"t.{d.lower()}", d, {4: [2, 3], 6: [2, 2]}.get(_BITS[d], [3]))
     for d in _BITS],
)


@dataclass
class Header:
    """One file to write: its header value, the data, and how to lay it out."""

    top: Any
    data: bytes
    sep: tuple[str, str] = (", ", ": ")
    n_delta: int = 0          #: added to the true header length in the prefix
    n_is: int | None = None   #: the prefix's value itself, whatever the header
    tail: bytes = b""         #: appended after the data
    cut: int = 0              #: bytes cut from the end of the file
    edit: Callable[[bytearray], None] | None = None  #: on the header bytes

    def write(self, path: Path) -> Doc:
        """Write the file; the Doc's positions are absolute offsets in it."""
        doc = render(self.top, self.sep, base=8)
        text = bytearray(doc.text)
        if self.edit is not None:
            self.edit(text)
        n = self.n_is if self.n_is is not None else max(0, len(text) + self.n_delta)
        raw = struct.pack("<Q", n) + bytes(text)
        raw += self.data + self.tail
        if self.cut:
            raw = raw[:max(0, len(raw) - self.cut)]
        path.write_bytes(raw)
        doc.text = bytes(text)
        return doc


def base_single(rng: random.Random) -> Header:
    """One of the valid single files, with or without ``__metadata__``."""
    k = rng.randrange(len(SINGLE))
    pairs, n = _entries(SINGLE[k])
    if rng.random() < 0.7:
        pairs.insert(rng.randrange(len(pairs) + 1),
                     ("__metadata__", Obj([("format", "pt"), ("k", str(k))])))
    sep = rng.choice([(", ", ": "), (",", ":"), (" ,\n", " :\t")])
    return Header(Obj(pairs), _data(n, k), sep)



SHARDED: tuple[list[tuple[str, str, list[int]]], ...] = (
    [("model.layers.0.mlp.w1", "BF16", [4, 2]), ("model.layers.0.mlp.w2", "F32", [3])],
    [("model.layers.1.mlp.w1", "BF16", [4, 2]), ("model.layers.1.mlp.w2", "F32", [3]),
     ("model.norm", "F16", [2])],
    [("lm_head", "I8", [6])],
)


@dataclass
class Sharded:
    """A sharded container being broken: shards by name and the index document."""

    shards: dict[str, Header]
    index: Obj
    sep: tuple[str, str] = (",\n  ", ": ")

    def wmap(self) -> Obj:
        """The weight_map object."""
        return self.index.get("weight_map")

    def write(self, folder: Path) -> Doc:
        """Write shards and index; the Doc's positions are offsets in the index."""
        folder.mkdir()
        for name, h in self.shards.items():
            h.write(folder / name)
        doc = render(self.index, self.sep)
        if self.index.pairs:  # (an empty index: the folder has none)
            (folder / INDEX_NAME).write_bytes(doc.text)
        return doc


def base_sharded(rng: random.Random) -> Sharded:
    """Two or three shards, every tensor mapped, total_size given or not."""
    k = rng.choice([2, 3])
    shards, wm, total = {}, [], 0
    for s in range(k):
        name = f"model-{s + 1:05d}-of-{k:05d}.safetensors"
        pairs, n = _entries(SHARDED[s])
        shards[name] = Header(Obj(pairs), _data(n, s))
        wm += [(t, name) for t, _, _ in SHARDED[s]]
        total += n
    rng.shuffle(wm)
    meta: list[tuple[str, Any]] = [("format", "pt")]
    if rng.random() < 0.8:
        meta.insert(rng.randrange(2), ("total_size", total))
    top = [("metadata", Obj(meta)), ("weight_map", Obj(wm))]
    if rng.random() < 0.3:
        top.reverse()
    return Sharded(shards, Obj(top))



