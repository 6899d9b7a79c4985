"""JSON corners of the C reader: escapes, surrogates, numbers, UTF-8, index files.

Golden values: each offset is 8 (the length field) plus the position in the
header text of the character named (or, for an index, the position in the
index file); the messages are the reader's own sentences.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import INDEX, SHARD1, SHARD2, make_sharded, st_bytes
from xcache import engine

T = '"dtype":"U8","shape":[2],"data_offsets":[0,2]'


def open_header(tmp_path: Path, header: str | bytes) -> engine.Container:
    """A container whose header is ``header`` and whose data is two bytes."""
    p = tmp_path / "t.safetensors"
    p.write_bytes(st_bytes(header, b"\x01\x02"))
    return engine.Container(str(p))


@pytest.mark.parametrize("header,name", [
    ('{"a\\\\\\/\\b\\f\\n\\r\\t\\"x":{' + T + '}}', 'a\\/\b\f\n\r\t"x'),
    ('{"\\u00C9\\u00e9":{' + T + '}}', "Éé"),          # upper and lower hex
    ('{"\\u20AC":{' + T + '}}', "€"),                  # three UTF-8 bytes
    (b'{"\xe0\xa4\x85":{' + T.encode() + b'}}', "अ"),  # E0 lead, lowest legal
    ('{"\\uE000":{' + T + '}}', "\ue000"),            # just above the surrogates
])
def test_escapes_decode_to_the_name(tmp_path, header, name):
    """Every JSON escape and \\u form decodes to the exact UTF-8 name."""
    with open_header(tmp_path, header) as c:
        assert c.names() == [name]
        assert c.read_bytes(name) == b"\x01\x02"


def test_numbers_literals_and_nesting_in_unknown_fields_are_skipped(tmp_path):
    """Exponents, fractions, signs, true/false/null and nested values are legal."""
    extra = ('[1e5,-2.5E-3,3e+2,0,-0.5,true,false,null,{"n":[]},'
             + "[" * 60 + "]" * 60 + "]")
    header = '{"__metadata__":{"k":"v"},"x":{' + T + ',"extra":' + extra + '}}'
    with open_header(tmp_path, header) as c:
        assert c.names() == ["x"] and c.metadata == {"k": "v"}


@pytest.mark.parametrize("header,kind,at,message", [
    ('{"a\\q":{' + T + '}}', "json", 11, "bad escape '\\q'"),
    ('{"a\\\x01":{' + T + '}}', "json", 11, "bad escape '\\?'"),
    ('{"a\\u00G1":{' + T + '}}', "json", 15, "bad hex digit in \\u escape"),
    ('{"a\\u00', "json", 13, "truncated \\u escape"),
    ('{"a\\', "json", 9, "unterminated string"),
    ('{"\\uDC00":{' + T + '}}', "json", 10, "lone low surrogate \\uDC00"),
    ('{"\\uD800\\u0041":{' + T + '}}', "json", 10,
     "high surrogate \\uD800 not followed by a low surrogate"),
    ('{"\\uD800\\uZZZZ":{' + T + '}}', "json", 18, "bad hex digit in \\u escape"),
    ('{"\\uD800abcdefgh":{' + T + '}}', "json", 10, "lone high surrogate \\uD800"),
    ('{"x":{' + T + ',"extra":1e}}', "json", 68, "malformed number"),
    ('{"x":{' + T + ',"extra":1.}}', "json", 68, "malformed number"),
    ('{"x":{' + T + ',"extra":-x}}', "json", 68, "malformed number"),
    ('{"x":{' + T + ',"extra":fals}}', "json", 68, "expected a JSON value"),
    ('{"x":{"dtype":"U8","shape":[2e0],"data_offsets":[0,2]}}', "schema", 36,
     "a shape entry must be a non-negative integer, found 2e0"),
    ('{"x":{"dtype":"U8","shape":["2"],"data_offsets":[0,2]}}', "schema", 36,
     "a shape entry must be a non-negative integer, found a string"),
    (b'{"\xe0\x80\x80":{' + T.encode() + b'}}', "not_utf8", 10,
     "the header is not UTF-8 (byte 0xe0)"),
    (b'{"\xe2\x82\x41":{' + T.encode() + b'}}', "not_utf8", 10,
     "the header is not UTF-8 (byte 0xe2)"),
    ('{"__metadata__":"x","x":{' + T + '}}', "schema", 24,
     "__metadata__ must be an object of strings"),
    ('{"__metadata__":{"a\\u0000":"v"},"x":{' + T + '}}', "schema", 25,
     "a __metadata__ key contains U+0000"),
    ('{"__metadata__":{"a":"v\\u0000"},"x":{' + T + '}}', "schema", 25,
     '__metadata__ value of "a" contains U+0000'),
    ('{"__metadata__":{"a" "v"},"x":{' + T + '}}', "json", 29,
     "expected ':', found a string"),
    ('{"__metadata__":{"a":1},"x":{' + T + '}}', "schema", 29,
     '__metadata__ value of "a" must be a string'),
    ('{"__metadata__":{},"__metadata__":{},"x":{' + T + '}}', "duplicate", 27,
     "__metadata__ appears twice"),
    ('{"__metadata__":{"a":"\\q"},"x":{' + T + '}}', "json", 30,
     "bad escape '\\q'"),
    ('{"x":{}}', "schema", 9, 'tensor "x" has no dtype'),
    ('{"x":[1]}', "schema", 13,
     'tensor "x": expected an object with dtype, shape and data_offsets'),
    ('{"x":tru}', "json", 13, "expected a JSON value"),
    ('{"x":{"dtype":"U8","shape":[2],"data_offsets":[0]}}', "schema", 54,
     'tensor "x": data_offsets must hold exactly two integers'),
    ('{"x" {"dtype":"U8"}}', "json", 13, "expected ':', found an object"),
    ('{"x":{"dtype":5,"shape":[2],"data_offsets":[0,2]}}', "schema", 22,
     'tensor "x": dtype must be a string'),
    ('{"x":{"dtype":"U8","shape":{},"data_offsets":[0,2]}}', "schema", 35,
     'tensor "x": shape must be an array of integers'),
])
def test_header_corner_is_refused_at_its_byte(tmp_path, header, kind, at, message):
    """Each malformed header is FormatError of its kind at the exact byte."""
    with pytest.raises(engine.FormatError) as ei:
        open_header(tmp_path, header)
    e = ei.value
    assert (e.kind, e.offset) == (kind, at)
    assert str(e) == f"{tmp_path / 't.safetensors'}: byte {at}: {message}"


def test_empty_metadata_object_and_zero_length_tensors(tmp_path):
    """{} metadata is none; two empty tensors at offset 0 are both legal."""
    with open_header(tmp_path, '{"__metadata__":{},"x":{' + T + '}}') as c:
        assert c.metadata == {}
    p = tmp_path / "z.safetensors"
    z = '"dtype":"U8","shape":[0],"data_offsets":[0,0]'
    p.write_bytes(st_bytes('{"x":{' + z + '},"y":{' + z + '}}'))
    with engine.Container(str(p)) as c:
        assert c.names() == ["x", "y"] and c.read_bytes("y") == b""
    p.write_bytes(st_bytes('{"x":{' + z + '},"y":{' + T + '}}', b"\x01\x02"))
    with engine.Container(str(p)) as c:  # empty x sorts before y at 0
        assert c.names() == ["x", "y"] and c.read_bytes("y") == b"\x01\x02"


def test_two_tensors_on_one_range_overlap(tmp_path):
    """Two tensors with identical offsets: the second overlaps the first."""
    p = tmp_path / "t.safetensors"
    p.write_bytes(st_bytes('{"x":{' + T + '},"y":{' + T + '}}', b"\x01\x02"))
    with pytest.raises(engine.FormatError) as ei:
        engine.Container(str(p))
    assert (ei.value.kind, ei.value.offset) == ("offsets", 61)
    assert str(ei.value).endswith(
        'tensor "y": data_offsets [0, 2] overlap tensor "x", which ends at 2')


# -- index files -------------------------------------------------------------

WM = f'{{"a":"{SHARD1}","b":"{SHARD1}","c":"{SHARD2}"}}'


def with_index(folder: Path, text: str | bytes) -> Path:
    """A fresh two-shard folder whose index file holds ``text``."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()
    make_sharded(folder)
    (folder / INDEX).write_bytes(text.encode() if isinstance(text, str) else text)
    return folder


@pytest.mark.parametrize("text", [
    '{"metadata":null,"weight_map":' + WM + '}',
    '{"metadata":{"x":[1,{"y":2}],"total_size":45},"weight_map":' + WM + '}',
    '{"other":[1,2,{"z":null}],"weight_map":' + WM + '}',
])
def test_index_accepts_null_metadata_and_unknown_keys(tmp_path, text):
    """null metadata and keys the reader does not know are skipped."""
    with engine.Container(str(with_index(tmp_path / "d", text))) as c:
        assert sorted(c) == ["a", "b", "c"]


def test_index_with_an_empty_weight_map_names_no_tensor(tmp_path):
    """An empty weight_map is a container of nothing."""
    with engine.Container(str(with_index(tmp_path / "d", '{"weight_map":{}}'))) as c:
        assert len(c) == 0


@pytest.mark.parametrize("text,kind,at,message", [
    ('[1]', "index", 0, "the index must be a JSON object"),
    ('{}', "index", 0, "the index has no weight_map"),
    ('{"metadata":3,"weight_map":' + WM + '}', "index", 12,
     "metadata must be an object"),
    ('{"metadata":{"total_size":"45"},"weight_map":' + WM + '}', "index", 26,
     "total_size must be a non-negative integer, found a string"),
    ('{"metadata":{"total_size" 45},"weight_map":' + WM + '}', "json", 26,
     "expected ':', found a number"),
    ('{"metadata":{"a\\q":1},"weight_map":' + WM + '}', "json", 15,
     "bad escape '\\q'"),
    ('{"metadata":{"x":[1,},"weight_map":' + WM + '}', "json", 20,
     "expected a JSON value, found an unexpected character"),
    ('{"weight_map":[1]}', "index", 14, "weight_map must be an object"),
    ('{"weight_map":' + WM + ',"weight_map":' + WM + '}', "index", 133,
     "weight_map appears twice"),
    ('{"weight_map":{"a\\u0000":"x.safetensors"}}', "index", 15,
     "a weight_map name contains U+0000 or is too long"),
    ('{"weight_map":{"a" "x"}}', "json", 19, "expected ':', found a string"),
    ('{"weight_map":{"a":1}}', "index", 19,
     'weight_map value of tensor "a" must be a shard file name'),
    ('{"weight_map":{"a":"\\q"}}', "json", 20, "bad escape '\\q'"),
    ('{"weight_map":{"a\\q":"x"}}', "json", 17, "bad escape '\\q'"),
    ('{"weight_map":{"a":"' + SHARD1 + '","a":"' + SHARD1 + '"}}', "index", 54,
     'tensor "a" appears twice in weight_map'),
    ('{"weight_map":{"a":".."}}', "index", 19,
     'tensor "a": shard ".." is not a plain file name in the index\'s folder'),
    ('{"weight_map":{"a":"."}}', "index", 19,
     'tensor "a": shard "." is not a plain file name in the index\'s folder'),
    ('{"weight_map":{"a":""}}', "index", 19,
     'tensor "a": shard "" is not a plain file name in the index\'s folder'),
    ('{"weight_map":{"a":"x\\u0000"}}', "index", 19,
     'tensor "a": shard "x" is not a plain file name in the index\'s folder'),
    ('{"weight_map":' + WM + '} x', "json", 134,
     "trailing characters after the index object"),
    ('{"weight_map":' + WM + ' "x"', "json", 133, "expected '}', found a string"),
    ('{"a\\q":1}', "json", 3, "bad escape '\\q'"),
    ('{"weight_map" 1}', "json", 14, "expected ':', found a number"),
    ('{"other":[1,,2],"weight_map":' + WM + '}', "json", 12,
     "expected a JSON value, found an unexpected character"),
    (b'{"weight_map":{"\xff":"x"}}', "not_utf8", 16, "the index is not UTF-8"),
])
def test_index_corner_is_refused_at_its_byte(tmp_path, text, kind, at, message):
    """Each malformed index is FormatError of its kind at the exact byte."""
    folder = with_index(tmp_path / "d", text)
    with pytest.raises(engine.FormatError) as ei:
        engine.Container(str(folder))
    assert (ei.value.kind, ei.value.offset) == (kind, at)
    assert str(ei.value) == f"{folder / INDEX}: byte {at}: {message}"


def test_index_above_the_header_cap_is_refused_before_reading(tmp_path):
    """A sparse index file of 100,000,001 bytes is refused by its size alone."""
    folder = with_index(tmp_path / "d", "")
    with open(folder / INDEX, "wb") as f:
        f.truncate(100_000_001)
    with pytest.raises(engine.FormatError) as ei:
        engine.Container(str(folder / INDEX))
    assert (ei.value.kind, ei.value.offset) == ("index", 0)
    assert str(ei.value) == (f"{folder / INDEX}: byte 0: the index is 100000001 "
                             "bytes, above the limit of 100000000")


def test_index_path_that_does_not_exist(tmp_path):
    """Naming a missing index file is NotFoundError."""
    with pytest.raises(engine.NotFoundError):
        engine.Container(str(tmp_path / "nothing" / INDEX))


SHAPE = '{"x":{"dtype":"U8","shape":[%s],"data_offsets":[0,2]}}'


@pytest.mark.parametrize("header,kind,at,message", [
    # hex digits just outside each accepted range: below '0', above 'f'
    ('{"a\\u00!1":{' + T + '}}', "json", 15, "bad hex digit in \\u escape"),
    ('{"a\\u00g1":{' + T + '}}', "json", 15, "bad hex digit in \\u escape"),
    ('{"a\\\x7f":{' + T + '}}', "json", 11, "bad escape '\\?'"),  # DEL
    # a high surrogate followed by another escape, by the end of the
    # header, and by a \u that is not a low surrogate (above the range)
    ('{"\\uD800\\n":{' + T + '}}', "json", 10, "lone high surrogate \\uD800"),
    ('{"\\uD800"}', "json", 10, "lone high surrogate \\uD800"),
    ('{"\\uD800\\uE000":{' + T + '}}', "json", 10,
     "high surrogate \\uD800 not followed by a low surrogate"),
    # ED A0: UTF-8 of a surrogate (second byte above 0x9F)
    (b'{"\xed\xa0\x80":{' + T.encode() + b'}}', "not_utf8", 10,
     "the header is not UTF-8 (byte 0xed)"),
    (SHAPE % "0.5", "schema", 36,
     "a shape entry must be a non-negative integer, found 0.5"),
    (SHAPE % "01", "json", 36, "number with a leading zero"),
    (SHAPE % "[2]", "schema", 36,
     "a shape entry must be a non-negative integer, found an array"),
    # numbers longer than 40 characters are quoted to 40
    (SHAPE % ("1." + "0" * 45), "schema", 36,
     "a shape entry must be a non-negative integer, found 1." + "0" * 38),
    (SHAPE % ("9" * 45), "schema", 36,
     f"a shape entry {'9' * 40} exceeds the limit of {2**64 - 1}"),
    ('{"x":{' + T + ',"extra":{"n" 1}}}', "json", 73,
     "expected ':', found a number"),
    ('{"x":{' + T + ',"extra":tru', "json", 68, "expected a JSON value"),
])
def test_header_edge_is_refused_at_its_byte(tmp_path, header, kind, at, message):
    """Values just past each lexical check: FormatError of its kind at its byte."""
    with pytest.raises(engine.FormatError) as ei:
        open_header(tmp_path, header)
    e = ei.value
    assert (e.kind, e.offset) == (kind, at)
    assert str(e) == f"{tmp_path / 't.safetensors'}: byte {at}: {message}"
