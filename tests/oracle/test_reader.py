"""The oracle's safetensors reader: golden vectors per error kind, sharded
containers, and differential agreement with the official ``safetensors``."""

from __future__ import annotations

import json
import os
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import official_safe_open, official_save_file
from xcache.oracle.errors import FORMAT_KINDS, NotFound, OracleFormatError
from xcache.oracle.safetensors import Container, open_container, parse_buffer


def _file(header: str | bytes, data: bytes = b"") -> bytes:
    raw = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(raw)) + raw + data


def _entry(dtype: str = "U8", shape: str = "[2]", offsets: str = "[0,2]") -> str:
    return f'{{"dtype":"{dtype}","shape":{shape},"data_offsets":{offsets}}}'


_ONE = '{"a":' + _entry() + "}"  # 53 bytes: data starts at 61

# Golden vectors: (bytes, offset). Offsets follow the table in the module
# docstring of oracle.safetensors: header-level checks at 8 unless the parser
# locates the byte, buffer-level checks at 61 + the tensor's begin.
GOLDEN: dict[str, tuple[bytes, int | None]] = {
    "too_short": (b"\x05\x00\x00", 3),
    "header_too_large": (struct.pack("<Q", 100_000_001) + b"{}", 0),
    "header_past_end": (struct.pack("<Q", 100) + b"{}", 0),
    "not_utf8": (_file(b'{"\xff":{}}'), 10),
    "json": (_file('{"a":' + _entry() + ",}", b"xx"), 61),
    "schema": (_file('{"a":' + _entry(shape='"2"') + "}", b"xx"), 8),
    "dtype": (_file('{"a":' + _entry(dtype="Q8") + "}", b"xx"), 8),
    "duplicate": (_file('{"a":' + _entry() + ',"a":' + _entry() + "}", b"xx"), 8),
    "offsets": (_file('{"a":' + _entry(offsets="[1,3]") + "}", b"xxx"), 61),
    "overflow": (_file('{"a":' + _entry(shape="[4294967296,4294967296]") + "}",
                       b"xx"), 81),
    "bits": (_file('{"a":' + _entry(dtype="F4", shape="[3]") + "}", b"xx"), 61),
    "size": (_file('{"a":' + _entry(dtype="U16") + "}", b"xx"), 62),
    "length": (_file(_ONE, b"xxx"), 63),
}


@pytest.mark.parametrize("kind", sorted(GOLDEN))
def test_golden_vector_raises_its_kind_at_its_offset(kind, tmp_path):
    """Each golden vector fails with its kind and offset, as bytes and as a file."""
    blob, offset = GOLDEN[kind]
    with pytest.raises(OracleFormatError) as info:
        parse_buffer(blob, len(blob))
    assert (info.value.kind, info.value.offset) == (kind, offset)
    path = tmp_path / "x.safetensors"
    path.write_bytes(blob)
    with pytest.raises(OracleFormatError) as info:
        open_container(path)
    assert (info.value.kind, info.value.offset, info.value.path) == (kind, offset,
                                                                   str(path))


def test_every_kind_has_a_golden_vector_or_an_index_test():
    """The golden table plus the index tests cover every documented kind."""
    assert set(GOLDEN) | {"index"} == set(FORMAT_KINDS)


@pytest.mark.parametrize("header, kind", [
    ('{"a":' + _entry() + ', "b": NaN}', "json"),
    ('{"a":' + _entry() + ', "b": -Infinity}', "json"),
    ('{"a\\ud800":' + _entry() + "}", "json"),
    ("[]", "schema"),
    ("", "json"),
    ('{"__metadata__": {"x": 1}, "a":' + _entry() + "}", "schema"),
    ('{"a":' + _entry(shape="[2.0]") + "}", "schema"),
    ('{"a":' + _entry(shape="[-2]") + "}", "schema"),
    ('{"a":' + _entry(shape="[true]") + "}", "schema"),
    ('{"a":' + _entry(offsets="[0,2,2]") + "}", "schema"),
    ('{"a":' + _entry(dtype="u8") + "}", "dtype"),
    ('{"__metadata__":{},"__metadata__":{},"a":' + _entry() + "}", "duplicate"),
    ('{"a":' + _entry(offsets="[0,3]") + "}", "size"),
])
def test_header_edge_cases(header, kind):
    """Python-only JSON extensions and schema corner cases are rejected."""
    blob = _file(header, b"xx")
    with pytest.raises(OracleFormatError) as info:
        parse_buffer(blob, len(blob))
    assert info.value.kind == kind


@pytest.mark.parametrize("header", [
    "  " + _ONE + "   ",
    "\t\n" + _ONE + "\r\n",
    '{"__metadata__":null,"a":' + _entry() + "}",
    '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"extra":1}}',
    '{"__metadata__":{"k":"v"},"a":' + _entry() + "}",
])
def test_legal_header_variants_are_accepted(header):
    """Whitespace padding, null metadata and unknown entry keys are legal."""
    blob = _file(header, b"xx")
    tensors, _ = parse_buffer(blob, len(blob))
    got = [(t.name, t.offset, t.nbytes) for t in tensors]
    assert got == [("a", 8 + len(header), 2)]


def test_empty_tensors_and_sub_byte_dtypes():
    """Zero-sized tensors share an offset; F4 and F6 sizes follow their bit counts."""
    header = ('{"e":' + _entry(shape="[0]", offsets="[0,0]")
              + ',"f":' + _entry(dtype="F4", shape="[2,3]", offsets="[0,3]")
              + ',"g":' + _entry(dtype="F6_E3M2", shape="[4]", offsets="[3,6]")
              + ',"z":' + _entry(shape="[0]", offsets="[6,6]") + "}")
    blob = _file(header, b"abcdef")
    tensors, _ = parse_buffer(blob, len(blob))
    assert [(t.name, t.nbytes) for t in tensors] == [("e", 0), ("f", 3), ("g", 3),
                                                     ("z", 0)]


def _k3_mini_like(path: Path, n_experts: int = 3) -> dict[str, bytes]:
    """Write a small k3-mini-shaped file with the official writer; return its bytes."""
    arrays = {}
    for e in range(n_experts):
        for w in ("w1", "w2", "w3"):
            stem = f"language_model.model.layers.0.block_sparse_moe.experts.{e}.{w}"
            arrays[f"{stem}.weight_packed"] = np.full((8, 64), e * 3 + 1, np.uint8)
            arrays[f"{stem}.weight_scale"] = np.full((8, 4), 200 - e, np.uint8)
    official_save_file(arrays, str(path), metadata={"format": "k3"})
    return {k: v.tobytes() for k, v in arrays.items()}


def test_reads_bytes_of_every_tensor(tmp_path):
    """read_bytes returns exactly the bytes written, and tensors() gives sizes."""
    path = tmp_path / "m.safetensors"
    expected = _k3_mini_like(path)
    box = Container(path)
    assert {n: box.read_bytes(n) for n in box.names()} == expected
    assert box.metadata == {"format": "k3"}
    assert sum(t.nbytes for t in box.tensors()) == 3 * 1632
    with pytest.raises(NotFound):
        box.read_bytes("nope")


def _sharded(folder: Path, index: dict | None = None) -> dict[str, bytes]:
    """Two shards and an index over them; ``index`` overrides the index document."""
    a = {"x": np.arange(4, dtype=np.int32), "y": np.ones(3, np.float64)}
    b = {"z": np.arange(6, dtype=np.uint16).reshape(2, 3)}
    official_save_file(a, str(folder / "model-00001-of-00002.safetensors"))
    official_save_file(b, str(folder / "model-00002-of-00002.safetensors"))
    wmap = {"x": "model-00001-of-00002.safetensors",
            "y": "model-00001-of-00002.safetensors",
            "z": "model-00002-of-00002.safetensors"}
    doc = index or {"metadata": {"total_size": 16 + 24 + 12}, "weight_map": wmap}
    (folder / "model.safetensors.index.json").write_text(json.dumps(doc))
    return {k: v.tobytes() for k, v in {**a, **b}.items()}


def test_sharded_container_through_folder_and_index(tmp_path):
    """A folder and its index file open the same container; stray files are ignored."""
    expected = _sharded(tmp_path)
    (tmp_path / "notes.txt").write_text("stray")
    (tmp_path / "old.safetensors").write_bytes(b"garbage")
    for path in (tmp_path, tmp_path / "model.safetensors.index.json"):
        box = open_container(path)
        assert {n: box.read_bytes(n) for n in box.names()} == expected
        assert len(box.shards()) == 2
        assert box.index_metadata == {"total_size": 52}


_S1, _S2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


@pytest.mark.parametrize("doc", [
    {"metadata": {"total_size": 51}, "weight_map": {"x": _S1, "y": _S1, "z": _S2}},
    {"metadata": {"total_size": -1}, "weight_map": {"x": _S1, "y": _S1, "z": _S2}},
    {"metadata": {"total_size": 52}, "weight_map": {"x": _S1, "y": _S2, "z": _S2}},
    {"metadata": {"total_size": 52}, "weight_map": {"x": _S1, "z": _S2}},
    {"metadata": {"total_size": 52},
     "weight_map": {"x": _S1, "y": _S1, "z": _S2, "w": _S2}},
    {"metadata": {"total_size": 52},
     "weight_map": {"x": _S1, "y": _S1, "z": "model-00003-of-00003.safetensors"}},
    {"metadata": {"total_size": 52}, "weight_map": {"x": _S1, "y": _S1, "z": "../z"}},
    {"metadata": {"total_size": 52}, "weight_map": [1]},
], ids=["total_size", "negative_total_size", "wrong_shard", "unmapped",
        "missing_tensor", "missing_shard", "not_a_name", "schema"])
def test_index_violations(tmp_path, doc):
    """Every broken promise of an index is an ``index`` error."""
    _sharded(tmp_path, doc)
    with pytest.raises(OracleFormatError) as info:
        open_container(tmp_path)
    assert info.value.kind == "index" and info.value.offset is None


@pytest.mark.parametrize("metadata", [None, {}, {"format": "pt"}])
def test_index_total_size_is_optional(tmp_path, metadata):
    """An index whose metadata is null or lacks total_size opens (docs/DESIGN.md §3)."""
    _sharded(tmp_path, {"metadata": metadata,
                        "weight_map": {"x": _S1, "y": _S1, "z": _S2}})
    assert sorted(t.name for t in open_container(tmp_path).tensors()) == ["x", "y", "z"]


def test_broken_shard_reports_its_own_kind_and_path(tmp_path):
    """A truncated shard under a valid index fails with the shard's kind and path."""
    _sharded(tmp_path)
    shard = tmp_path / _S2
    shard.write_bytes(shard.read_bytes()[:-1])
    with pytest.raises(OracleFormatError) as info:
        open_container(tmp_path)
    assert (info.value.kind, info.value.path) == ("length", str(shard))


def test_folder_without_index(tmp_path):
    """A folder with one file opens it; with several and no index it is an error."""
    a = tmp_path / "a.safetensors"
    official_save_file({"t": np.zeros(2, np.uint8)}, str(a))
    assert open_container(tmp_path).names() == ["t"]
    official_save_file({"u": np.zeros(2, np.uint8)}, str(tmp_path / "b.safetensors"))
    with pytest.raises(OracleFormatError) as info:
        open_container(tmp_path)
    assert info.value.kind == "index"


def test_bad_index_json(tmp_path):
    """An index that is not strict JSON is an ``index`` error."""
    _sharded(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": NaN}')
    with pytest.raises(OracleFormatError, match="index"):
        open_container(tmp_path)


@pytest.mark.parametrize("header, kind", [
    # an entry's fields in document order (docs/DESIGN.md §3, step 5)
    ('{"a":{"dtype":"U9","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,2]}}',
     "dtype"),
    ('{"a":{"dtype":"U9","shape":[2]}}', "dtype"),
    ('{"a":{"dtype":"U9","shape":[2],"data_offsets":[0,2],"dtype":"U8"}}', "dtype"),
    ('{"a":{"shape":[-1],"dtype":"U9","data_offsets":[0,2]}}', "schema"),
    ('{"a":{"dtype":"U8","dtype":"U9","shape":[2],"data_offsets":[0,2]}}', "schema"),
    # __metadata__ pair by pair: U+0000 in a key or a value, a key twice first
    ('{"__metadata__":{"k\\u0000":"v"},"a":' + _entry() + "}", "schema"),
    ('{"__metadata__":{"k":"v\\u0000"},"a":' + _entry() + "}", "schema"),
    ('{"__metadata__":{"k":"v","k":"w","x":1},"a":' + _entry() + "}", "duplicate"),
    ('{"__metadata__":{"x":1,"k":"v","k":"w"},"a":' + _entry() + "}", "schema"),
    # -0 is no unsigned integer (serde_json reads the float -0.0)
    ('{"a":' + _entry(shape="[-0]", offsets="[0,0]") + "}", "schema"),
    ('{"a":' + _entry(offsets="[-0,2]") + "}", "schema"),
    # the element count multiplied left to right, checked at every dimension
    ('{"a":' + _entry(shape="[1099511627776,1099511627776,0]", offsets="[0,0]")
     + "}", "overflow"),
    ('{"a":' + _entry(shape="[281474976710655,65537,0]", offsets="[0,0]") + "}",
     "overflow"),
    ('{"a":' + _entry(shape="[0,1125899906842624]", offsets="[0,0]") + "}",
     "overflow"),
])
def test_several_problems_in_the_engines_order(header, kind):
    """The first problem the engine's one pass meets is the oracle's kind too."""
    blob = _file(header, b"xx"[:2 if "[0,2]" in header else 0])
    with pytest.raises(OracleFormatError) as info:
        parse_buffer(blob, len(blob))
    assert info.value.kind == kind


@pytest.mark.parametrize("shape", ["[0,1099511627776,1099511627776]",
                                   "[4294967295,4294967297,0]",
                                   "[281474976710655,65536,0]"])
def test_zero_element_shapes_within_the_limits_are_accepted(shape):
    """A count that never passes 2**64 - 1 on the way to 0 is accepted."""
    blob = _file('{"a":' + _entry(shape=shape, offsets="[0,0]") + "}")
    tensors, _ = parse_buffer(blob, len(blob))
    assert [t.nbytes for t in tensors] == [0]


def test_a_sharded_containers_metadata_is_its_first_shards(tmp_path):
    """The first shard by name gives the metadata, as the engine's xc_st_metadata
    (the others' are not merged in); none there is none."""
    def shard(path: Path, name: str, meta: dict | None) -> None:
        h = {name: {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}
        if meta is not None:
            h["__metadata__"] = meta
        path.write_bytes(_file(json.dumps(h), b"xx"))

    for first, second, want in (({"a": "1"}, {"a": "2", "b": "3"}, {"a": "1"}),
                                (None, {"b": "3"}, {}), ({"a": "1"}, None,
                                                         {"a": "1"})):
        folder = tmp_path / f"c{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        shard(folder / "model-10.safetensors", "x", first)  # before model-2
        shard(folder / "model-2.safetensors", "y", second)
        (folder / "model.safetensors.index.json").write_text(json.dumps(
            {"weight_map": {"y": "model-2.safetensors",
                            "x": "model-10.safetensors"}}))
        assert open_container(folder).metadata == want


def test_shard_names_are_plain_file_names(tmp_path):
    """A backslash is part of a file name (accepted); U+0000 is no file name
    (index, not an error of the operating system)."""
    (tmp_path / "a\\b.safetensors").write_bytes(
        _file('{"x":' + _entry() + "}", b"xx"))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"x": "a\\b.safetensors"}}))
    assert open_container(tmp_path).names() == ["x"]
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"x": "a\u0000.safetensors"}}))
    with pytest.raises(OracleFormatError) as info:
        open_container(tmp_path)
    assert info.value.kind == "index" and "not a file name" in str(info.value)


# --- differential agreement with the official package ----------------------

_NP_DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.uint16, np.float16,
              np.int32, np.uint32, np.float32, np.int64, np.uint64, np.float64,
              np.complex64]


@st.composite
def _arrays(draw: st.DrawFn) -> dict[str, np.ndarray]:
    names = draw(st.lists(st.text(st.characters(codec="utf-8",
                                                exclude_characters="\0"),
                                  min_size=1, max_size=6),
                          max_size=4, unique=True))
    result = {}
    for name in names:
        if name == "__metadata__":
            continue
        dtype = draw(st.sampled_from(_NP_DTYPES))
        shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
        raw = draw(st.binary(min_size=int(np.prod(shape)) * np.dtype(dtype).itemsize,
                             max_size=int(np.prod(shape)) * np.dtype(dtype).itemsize))
        arr = np.frombuffer(raw, np.uint8).view(dtype) if raw else np.zeros(0, dtype)
        if dtype is np.bool_:
            arr = arr.astype(np.uint8).clip(0, 1).astype(np.bool_)
        result[name] = arr.reshape(shape)
    return result


def _official(path: str) -> dict[str, bytes | None] | None:
    """The official reader's view: None if it rejects the file, else name -> bytes."""
    try:
        with official_safe_open(path, "np") as f:
            out: dict[str, bytes | None] = {}
            for name in f.keys():
                try:
                    out[name] = f.get_tensor(name).tobytes()
                except Exception:  # a dtype numpy cannot hold (BF16, F8, ...)
                    out[name] = None
            return out
    except Exception:
        return None


def _ours(path: str) -> dict[str, bytes] | OracleFormatError:
    try:
        box = open_container(path)
    except OracleFormatError as exc:
        return exc
    return {n: box.read_bytes(n) for n in box.names()}


def _agree(blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.safetensors")
        with open(path, "wb") as f:
            f.write(blob)
        theirs, ours = _official(path), _ours(path)
    if isinstance(ours, OracleFormatError):
        # The one documented disagreement: the official reader keeps the last
        # of duplicate tensor names (a serde HashMap); DESIGN §3 rejects them.
        if ours.kind != "duplicate":
            assert theirs is None, f"official accepts what we reject: {ours}"
        return
    assert theirs is not None, "official rejects what we accept"
    assert set(theirs) == set(ours)
    for name, data in theirs.items():
        if data is not None:
            assert ours[name] == data


@given(_arrays())
def test_agrees_with_official_on_written_files(arrays):
    """Files written by save_file read back identically in both readers."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.safetensors")
        official_save_file(arrays, path)
        with open(path, "rb") as f:
            blob = f.read()
    _agree(blob)
    tensors, _ = parse_buffer(blob, len(blob))
    assert {t.name: t.shape for t in tensors} == {k: v.shape for k, v in arrays.items()}


@given(_arrays(), st.data())
def test_agrees_with_official_on_mutated_files(arrays, data):
    """Flips, truncations, extensions and header edits are judged alike by both."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.safetensors")
        official_save_file(arrays, path)
        with open(path, "rb") as f:
            blob = bytearray(f.read())
    n_header = struct.unpack_from("<Q", blob)[0]
    how = data.draw(st.sampled_from(["flip", "header", "truncate", "extend", "length"]))
    if how == "flip":
        pos = data.draw(st.integers(0, len(blob) - 1))
        blob[pos] ^= data.draw(st.integers(1, 255))
    elif how == "header":
        pos = data.draw(st.integers(8, 8 + n_header - 1))
        blob[pos] = ord(data.draw(st.sampled_from('0123456789[]{}",: xFUIB')))
    elif how == "truncate":
        blob = blob[:data.draw(st.integers(0, len(blob) - 1))]
    elif how == "extend":
        blob += data.draw(st.binary(min_size=1, max_size=9))
    else:
        struct.pack_into("<Q", blob, 0, n_header + data.draw(st.integers(-8, 8)))
    _agree(bytes(blob))


_EDGE_NUMBERS = [
    "1e999", "-1e999", "1E400", "1e308", "1.7e308", "1.7976931348623157e308",
    "1.7976931348623158e308", "17976931348623157" + "0" * 292,
    "17976931348623157" + "0" * 291, "1" + "0" * 309, "0e99999999999",
    "1e99999999999", "1e-99999999999", "4.9e-324", "1e-400", "-0.0e400",
    "18446744073709551616", "123",
]


def _number_file(tmp_path, number: str) -> Path:
    """A one-tensor file whose entry carries ``number`` in an ignored field."""
    head = ('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":'
            + number + "}}").encode()
    head += b" " * (-len(head) % 8)
    path = tmp_path / "n.safetensors"
    path.write_bytes(len(head).to_bytes(8, "little") + head + b"\0")
    return path


def _accepts(path: Path) -> tuple[bool, bool]:
    """(engine accepts, oracle accepts) for one file."""
    from xcache import engine

    try:
        engine.Container(str(path)).close()
        mine = True
    except engine.FormatError as e:
        assert e.kind == "json" and "out of range" in str(e), str(e)
        mine = False
    try:
        open_container(path)
        theirs = True
    except OracleFormatError as e:
        assert e.kind == "json" and "out of range" in str(e), str(e)
        theirs = False
    return mine, theirs


@pytest.mark.parametrize("number", _EDGE_NUMBERS)
def test_numbers_out_of_double_range_agree_with_the_engine(tmp_path, number):
    """A number that overflows a double is refused by both readers, exactly alike."""
    mine, theirs = _accepts(_number_file(tmp_path, number))
    assert mine == theirs
    want = number not in ("1e999", "-1e999", "1E400", "1.7976931348623158e308",
                          "17976931348623157" + "0" * 292, "1" + "0" * 309,
                          "1e99999999999")
    assert mine is want


@given(st.integers(1, 10**20), st.integers(250, 330), st.booleans())
def test_generated_numbers_near_the_limit_agree(tmp_path_factory, mant, exp, point):
    """Generated numbers near the top of the double range: both readers agree."""
    text = str(mant)
    if point and len(text) > 1:
        text = text[0] + "." + text[1:]
    path = _number_file(tmp_path_factory.mktemp("num"), f"{text}e{exp}")
    mine, theirs = _accepts(path)
    assert mine == theirs, text
