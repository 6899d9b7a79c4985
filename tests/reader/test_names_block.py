"""xc_st_names_block: the names as one block in place, or NULL and a copy.

The parser moves each tensor name down over header bytes it has already
parsed, so a shard's names end up back to back (xc_st.c, compact_name).
These tests pin when the block is handed out, that it is byte for byte what
xc_st_names writes, and that what the move writes over (the header below the
current name) is never needed again: metadata, escaped names, names that
fail, names next to each other.
"""

from __future__ import annotations

import json
import struct

import pytest

from xcache import engine
from xcache.engine import FormatError, _lib


def entry(name: str, begin: int, end: int, dtype: str = "U8") -> str:
    """One entry; name is inserted raw (it may hold JSON escapes)."""
    return (f'"{name}":{{"dtype":"{dtype}","shape":[{end - begin}],'
            f'"data_offsets":[{begin},{end}]}}')


def write(tmp_path, header: str, data: bytes, name="t.safetensors") -> str:
    hb = header.encode()
    hb += b" " * (-len(hb) % 8)
    p = tmp_path / name
    p.write_bytes(struct.pack("<Q", len(hb)) + hb + data)
    return str(p)


def block_and_copy(c: engine.Container) -> tuple[bytes | None, bytes]:
    """(the in-place block or None, what xc_st_names writes)."""
    ffi, lib = _lib.ffi(), _lib.lib()
    n = ffi.new("size_t *")
    ptr = lib.xc_st_names_block(c._ptr, n)
    block = None if ptr == ffi.NULL else bytes(ffi.buffer(ptr, n[0]))
    needed = ffi.new("size_t *")
    lib.xc_st_names(c._ptr, ffi.NULL, 0, needed)
    assert needed[0] == n[0]
    buf = ffi.new("char[]", max(needed[0], 1))
    assert lib.xc_st_names(c._ptr, buf, len(buf), needed) == 0
    return block, bytes(ffi.buffer(buf, needed[0]))


def joined(names: list[str]) -> bytes:
    """The names as xc_st_names writes them: each followed by a NUL."""
    return b"".join(n.encode() + b"\0" for n in names)


def test_block_in_header_order_with_escapes_and_metadata_first(tmp_path):
    """Tensors in offset order after metadata: the block is handed out, decoded."""
    raw = ["a", "b\\u00e9", "c\\n\\\"d", "\\ud83d\\ude00x", "e" * 100, "f"]
    want = [json.loads(f'"{r}"') for r in raw]
    meta = '"__metadata__":{"format":"pt","k\\u00e9":"v\\n"}'
    header = "{" + meta + "," + ",".join(
        entry(r, i, i + 1) for i, r in enumerate(raw)) + "}"
    with engine.Container(write(tmp_path, header, bytes(range(6)))) as c:
        block, copy = block_and_copy(c)
        assert block is not None and block == copy == joined(want)
        assert list(c) == want
        assert c.metadata == {"format": "pt", "k\u00e9": "v\n"}
        for i, name in enumerate(want):
            assert c.read_bytes(name) == bytes([i])
            assert c.info(name).name == name


def test_metadata_last_keeps_the_block(tmp_path):
    """Metadata after every tensor does not break the block of names."""
    names = [f"t{i}" for i in range(5)]
    header = "{" + ",".join(entry(n, i, i + 1) for i, n in enumerate(names))
    header += ',"__metadata__":{"a":"b"}}'
    with engine.Container(write(tmp_path, header, bytes(5))) as c:
        block, copy = block_and_copy(c)
        assert block == copy == joined(names)
        assert c.metadata == {"a": "b"}


def test_metadata_between_tensors_gives_no_block(tmp_path):
    """Metadata between two tensors: no block, and xc_st_names still lists both."""
    header = ("{" + entry("x", 0, 1) + ',"__metadata__":{"m":"n"},'
              + entry("y", 1, 2) + "}")
    with engine.Container(write(tmp_path, header, bytes(2))) as c:
        block, copy = block_and_copy(c)
        assert block is None and copy == joined(["x", "y"])
        assert list(c) == ["x", "y"] and c.metadata == {"m": "n"}


def test_header_not_in_offset_order_gives_no_block(tmp_path):
    """Entries out of offset order: no block; the names come in offset order."""
    header = "{" + entry("late", 1, 2) + "," + entry("early", 0, 1) + "}"
    with engine.Container(write(tmp_path, header, b"\x07\x09")) as c:
        block, copy = block_and_copy(c)
        assert block is None and copy == joined(["early", "late"])
        assert list(c) == ["early", "late"]
        assert c.read_bytes("late") == b"\x09"


def test_no_tensors_gives_no_block(tmp_path):
    """An empty header: no block and an empty list of names."""
    with engine.Container(write(tmp_path, "{}", b"")) as c:
        block, copy = block_and_copy(c)
        assert block is None and copy == b"" and list(c) == []


def test_sharded_gives_no_block(tmp_path):
    """A sharded container: no block; the names of every shard, in order."""
    shards = {}
    for s, names in enumerate((["a", "b"], ["c"])):
        fn = f"model-0000{s + 1}-of-00002.safetensors"
        header = "{" + ",".join(entry(n, i, i + 1)
                                for i, n in enumerate(names)) + "}"
        write(tmp_path, header, bytes(len(names)), fn)
        shards.update({n: fn for n in names})
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 3}, "weight_map": shards}))
    with engine.Container(tmp_path) as c:
        block, copy = block_and_copy(c)
        assert block is None and copy == joined(["a", "b", "c"])


def test_duplicate_and_failing_entry_names_survive_the_move(tmp_path):
    """Messages name tensors after their names were moved."""
    long = "n" * 300
    header = ("{" + entry(long, 0, 1) + "," + entry("z", 1, 2) + ","
              + entry(long, 2, 3) + "}")
    with pytest.raises(FormatError) as ei:
        engine.Container(write(tmp_path, header, bytes(3)))
    assert ei.value.kind == "duplicate"
    assert f'"{long[:200]}"' in str(ei.value)
    header = "{" + entry("ok", 0, 1) + ',"bad\\u00e9":{"dtype":"Q"}}'
    with pytest.raises(FormatError) as ei:
        engine.Container(write(tmp_path, header, bytes(1)))
    assert ei.value.kind == "dtype" and '"bad\u00e9"' in str(ei.value)
