"""Container order: a shard's tensors sorted by (begin, end), header order on ties."""

from __future__ import annotations

import json
import struct

import pytest

from xcache import engine


def _write(path, entries: list[tuple[str, list[int], list[int]]],
           data: bytes) -> None:
    """A safetensors file with U8 tensors given as (name, shape, offsets)."""
    header = {n: {"dtype": "U8", "shape": s, "data_offsets": o}
              for n, s, o in entries}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def test_empty_tensors_sort_by_end_then_header_order(tmp_path):
    """Out-of-order entries, two empty tensors sharing an offset, one ending later."""
    p = tmp_path / "order.safetensors"
    _write(p, [("b", [4], [4, 8]), ("z2", [0], [4, 4]), ("a", [4], [0, 4]),
               ("z1", [0], [4, 4]), ("e0", [0], [0, 0])],
           bytes(range(8)))
    with engine.Container(str(p)) as c:
        table = c.tensors()
        # (begin, end): e0 (0,0), a (0,4), z2 (4,4) before z1 (4,4) by
        # header order, then b (4,8)
        assert [t.name for t in table] == ["e0", "a", "z2", "z1", "b"]
        assert [t.nbytes for t in table] == [0, 4, 0, 0, 4]
        start = table[0].offset
        assert [t.offset - start for t in table] == [0, 0, 4, 4, 4]
        assert c.read_bytes("a") == bytes(range(4))
        assert c.read_bytes("b") == bytes(range(4, 8))
        assert c.read_bytes("z1") == b""
        assert c.info("z2").shape == (0,)


def _header_with_shape(tmp_path, token: str):
    """A one-tensor file whose shape's single value is written as ``token``."""
    text = ('{"t": {"dtype": "U8", "shape": [' + token +
            '], "data_offsets": [0, 4]}}').encode()
    text += b" " * (-len(text) % 8)
    p = tmp_path / "n.safetensors"
    p.write_bytes(struct.pack("<Q", len(text)) + text + b"\0" * 4)
    return p, 8 + text.index(token.encode())


@pytest.mark.parametrize("token, kind", [
    ("4.0", "schema"), ("4e0", "schema"), ("4E0", "schema"),
    ("0.5", "schema"), ("0e1", "schema"), ("0E1", "schema"),
    ("00", "json"), ("-4", "schema"),
])
def test_numbers_the_fast_path_hands_back(tmp_path, token, kind):
    """Fractions, exponents, long and malformed numbers fail at their first byte."""
    p, at = _header_with_shape(tmp_path, token)
    with pytest.raises(engine.FormatError) as ei:
        engine.Container(str(p))
    assert (ei.value.kind, ei.value.offset) == (kind, at)


def test_a_plain_zero_dimension_is_accepted(tmp_path):
    """A shape of [0] is a plain zero, read on the fast path."""
    text = b'{"t": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}}'
    text += b" " * (-len(text) % 8)
    p = tmp_path / "z.safetensors"
    p.write_bytes(struct.pack("<Q", len(text)) + text)
    with engine.Container(str(p)) as c:
        assert c.info("t").shape == (0,) and c.read_bytes("t") == b""


def test_a_dimension_past_48_bits_is_an_overflow_of_its_entry(tmp_path):
    """A 20-digit dimension leaves the fast path and is an overflow at the name."""
    p, _ = _header_with_shape(tmp_path, "12345678901234567890")
    with pytest.raises(engine.FormatError) as ei:
        engine.Container(str(p))
    assert (ei.value.kind, ei.value.offset) == ("overflow", 9)


def test_a_folder_of_many_shards_without_an_index_names_the_first_two(tmp_path):
    """Ten shards and no index: the error counts them and names the first two."""
    for i in range(10):
        text = json.dumps({f"t{i}": {"dtype": "U8", "shape": [1],
                                      "data_offsets": [0, 1]}}).encode()
        text += b" " * (-len(text) % 8)
        (tmp_path / f"s{9 - i:02d}.safetensors").write_bytes(
            struct.pack("<Q", len(text)) + text + b"x")
    (tmp_path / "notes.txt").write_text("not part of the container")
    with pytest.raises(engine.FormatError) as ei:
        engine.Container(str(tmp_path))
    assert (ei.value.kind, ei.value.offset) == ("index", None)
    assert str(ei.value) == (
        f'{tmp_path}: the folder holds 10 .safetensors files ("s00.safetensors", '
        '"s01.safetensors", ...) but no model.safetensors.index.json to say '
        "which form the container")
