"""How one fuzz input becomes a container on disk (shared by the target and tests).

An input is one mode byte and a body; ``data[0] % 3`` picks the mode:

0. **raw file** -- the body is the whole ``.safetensors`` file, as is.
1. **header** -- the body is a header (the 8-byte length ``N`` and ``N``
   bytes of JSON), possibly followed by data bytes.  When the JSON parses
   (loosely, with Python's ``json``) and names data offsets, the file is
   extended with a hole (``ftruncate``, no bytes written) to the length the
   largest ``data_offsets`` end implies, so a header alone reaches every
   check of docs/DESIGN.md §3 up to a valid container; a body longer than
   that stays as it is (trailing bytes).  The corpus keeps headers only.
2. **index** -- the body is a ``model.safetensors.index.json``, written into
   a folder that also holds :data:`SHARDS` (two small valid shards); the
   container opened is that folder.

:func:`materialise` writes an input into a folder and returns the path to
open.  Nothing here imports the engine, the oracle or atheris.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

__all__ = [
    "MODE_RAW",
    "MODE_HEADER",
    "MODE_INDEX",
    "INDEX_NAME",
    "SHARDS",
    "shard_bytes",
    "valid_index",
    "materialise",
    "implied_length",
]

MODE_RAW, MODE_HEADER, MODE_INDEX = 0, 1, 2
INDEX_NAME = "model.safetensors.index.json"
#: Largest file mode 1 extends to: beyond this the body is written as is.
MAX_IMPLIED_BYTES = 1 << 40

#: The fixed shards of index mode: file name -> [(name, dtype, shape)].
SHARDS: dict[str, list[tuple[str, str, tuple[int, ...]]]] = {
    "model-00001-of-00002.safetensors": [
        ("a.weight", "F32", (2, 3)),
        ("b.bias", "U8", (5,)),
    ],
    "model-00002-of-00002.safetensors": [("c.weight", "BF16", (4,))],
}
_BITS = {"F32": 32, "U8": 8, "BF16": 16}


def shard_bytes(tensors: list[tuple[str, str, tuple[int, ...]]]) -> bytes:
    """A valid safetensors file holding ``tensors`` (bytes 0, 1, 2, ...)."""
    entries, begin = {}, 0
    for name, dtype, shape in tensors:
        n = _BITS[dtype] // 8
        for d in shape:
            n *= d
        entries[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [begin, begin + n],
        }
        begin += n
    text = json.dumps(entries).encode()
    text += b" " * (-(8 + len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(i % 256 for i in range(begin))


def valid_index() -> bytes:
    """The index that makes the folder of :data:`SHARDS` a valid container."""
    total, wmap = 0, {}
    for shard, tensors in SHARDS.items():
        for name, dtype, shape in tensors:
            n = _BITS[dtype] // 8
            for d in shape:
                n *= d
            total += n
            wmap[name] = shard
    return json.dumps({"metadata": {"total_size": total}, "weight_map": wmap}).encode()


def implied_length(body: bytes) -> int | None:
    """8 + N + the largest data_offsets end the header names, or None if unknown."""
    if len(body) < 8:
        return None
    (n,) = struct.unpack_from("<Q", body, 0)
    if n > len(body) - 8:
        return None
    try:
        doc = json.loads(body[8 : 8 + n].decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    end = 0
    for entry in doc.values():
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(type(v) is int and v >= 0 for v in offsets)
        ):
            end = max(end, offsets[1])
    return 8 + n + end


def materialise(data: bytes, folder: str | os.PathLike[str]) -> Path:
    """Write input ``data`` into the empty ``folder``; return the path to open."""
    folder = Path(folder)
    mode, body = (data[0] % 3, data[1:]) if data else (MODE_RAW, b"")
    if mode == MODE_INDEX:
        for shard, tensors in SHARDS.items():
            (folder / shard).write_bytes(shard_bytes(tensors))
        (folder / INDEX_NAME).write_bytes(body)
        return folder
    path = folder / "fuzz.safetensors"
    with open(path, "wb") as f:
        f.write(body)
        if mode == MODE_HEADER:
            want = implied_length(body)
            if want is not None and len(body) < want <= MAX_IMPLIED_BYTES:
                f.truncate(want)
    return path
