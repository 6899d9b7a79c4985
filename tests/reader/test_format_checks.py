"""Golden vectors for the C safetensors reader: one per check of DESIGN §3.

Every file here is built byte by byte in the test, so each expected offset
can be read off the bytes: 8 (the length field) + the header position.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import st_bytes
from xcache import engine
from xcache.engine import FormatError, NotFoundError

CAP = 100_000_000


def entry(name: str, dtype: str, shape: list[int], begin: int, end: int) -> str:
    """One header entry, compact JSON."""
    return (f'"{name}":{{"dtype":"{dtype}","shape":{json.dumps(shape)},'
            f'"data_offsets":[{begin},{end}]}}')


def write(tmp_path, raw: bytes, name: str = "t.safetensors") -> str:
    p = tmp_path / name
    p.write_bytes(raw)
    return str(p)


def fail(tmp_path, raw: bytes) -> FormatError:
    """Open raw bytes that must fail; return the FormatError."""
    path = write(tmp_path, raw)
    with pytest.raises(FormatError) as ei:
        engine.Container(path)
    assert path in str(ei.value)
    assert f"byte {ei.value.offset}" in str(ei.value)
    return ei.value


def at(header: str, needle: str) -> int:
    """Absolute file offset of needle's first byte in the header."""
    return 8 + header.encode().index(needle.encode())


# -- accepted files -----------------------------------------------------------


def test_reads_every_tensor_with_dtype_shape_and_offset(tmp_path):
    """A two-tensor file gives exact infos, values and metadata."""
    h = ('{"__metadata__":{"format":"np"},' + entry("b", "I16", [2], 0, 4)
         + "," + entry("a", "F32", [1, 2], 4, 12) + "}")
    data = struct.pack("<hh", -1, 7) + struct.pack("<ff", 1.5, -2.0)
    path = write(tmp_path, st_bytes(h, data))
    with engine.Container(path) as c:
        assert list(c) == ["b", "a"] and len(c) == 2 and "a" in c
        assert c.metadata == {"format": "np"} and c.shards == [path]
        start = 8 + len(h)
        assert c.info("a") == engine.TensorInfo("a", "F32", (1, 2), 0,
                                                start + 4, 8)
        assert c.read("b").tolist() == [-1, 7]
        assert c.read("a").dtype == np.float32
        assert c.read("a").tolist() == [[1.5, -2.0]]
        assert c.read_bytes("b") == data[:4]
        with pytest.raises(NotFoundError):
            c.info("zz")
        assert isinstance(pytest.raises(LookupError, c.read, "zz").value,
                          NotFoundError)


def test_padded_header_with_leading_and_trailing_whitespace_is_legal(tmp_path):
    """Spaces, tabs and newlines around the JSON object are accepted."""
    h = " \t\n{" + entry("x", "U8", [3], 0, 3) + "}\r\n   "
    with engine.Container(write(tmp_path, st_bytes(h, b"abc"))) as c:
        assert c.read_bytes("x") == b"abc"


def test_container_order_is_ascending_offset_not_header_order(tmp_path):
    """Entries are listed by data offset; a zero-size tensor keeps its place."""
    h = ("{" + entry("late", "U8", [2], 2, 4) + "," + entry("early", "U8", [2],
         0, 2) + "," + entry("empty", "U8", [0, 5], 4, 4) + "}")
    with engine.Container(write(tmp_path, st_bytes(h, b"EEll"))) as c:
        assert list(c) == ["early", "late", "empty"]
        assert c.read("empty").shape == (0, 5)
        assert c.read_bytes("late") == b"ll"


def test_sub_byte_dtypes_with_whole_bytes_are_raw_uint8(tmp_path):
    """F4 x 4 is 2 bytes and F6_E2M3 x 4 is 3 bytes, read back raw."""
    h = ("{" + entry("f4", "F4", [2, 2], 0, 2) + ","
         + entry("f6", "F6_E2M3", [4], 2, 5) + ","
         + entry("bf", "BF16", [1], 5, 7) + "}")
    raw = st_bytes(h, b"\x01\x02abc\x80\x3f")
    with engine.Container(write(tmp_path, raw)) as c:
        assert c.info("f4").dtype == "F4" and c.info("f4").nbytes == 2
        got = c.read("f6")
        assert got.dtype == np.uint8 and got.tobytes() == b"abc"
        assert c.read("bf").tobytes() == b"\x80\x3f"


def test_escapes_and_surrogate_pairs_in_names_decode(tmp_path):
    """\\u escapes (a surrogate pair included) and \\" decode to UTF-8 names."""
    h = ('{"a\\ud83d\\ude00\\u00e9\\"\\n":'
         '{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}')
    with engine.Container(write(tmp_path, st_bytes(h, b"z"))) as c:
        assert list(c) == ["a\U0001F600\u00e9\"\n"]


def test_empty_header_object_is_a_container_of_nothing(tmp_path):
    """'{}' with no data is valid and holds zero tensors."""
    with engine.Container(write(tmp_path, st_bytes("{}"))) as c:
        assert len(c) == 0 and list(c) == [] and c.tensors() == []


def test_unknown_fields_and_null_metadata_are_accepted(tmp_path):
    """As in the official reader: extra fields are ignored, null metadata is none."""
    h = ('{"__metadata__":null,"a":{"dtype":"U8","shape":[1],'
         '"data_offsets":[0,1],"extra":{"deep":[1,2.5,true,null]}}}')
    with engine.Container(write(tmp_path, st_bytes(h, b"q"))) as c:
        assert c.metadata == {} and c.read_bytes("a") == b"q"


# -- steps 1-3: the length field ----------------------------------------------


def test_too_short(tmp_path):
    """Three bytes: too_short at the end of the file (byte 3)."""
    e = fail(tmp_path, b"\x01\x02\x03")
    assert (e.kind, e.offset) == ("too_short", 3)


def test_header_one_past_the_cap_is_too_large(tmp_path):
    """N = 100,000,001 fails the cap check at byte 0, before the file-size check."""
    e = fail(tmp_path, struct.pack("<Q", CAP + 1))
    assert (e.kind, e.offset) == ("header_too_large", 0)


def test_header_exactly_at_the_cap_passes_the_cap_check(tmp_path):
    """N = 100,000,000 over sparse zeros passes steps 2-4, then fails JSON at byte 8."""
    p = tmp_path / "cap.safetensors"
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", CAP))
        f.truncate(8 + CAP)  # sparse: costs no disk
    with pytest.raises(FormatError) as ei:
        engine.Container(str(p))
    assert (ei.value.kind, ei.value.offset) == ("json", 8)


def test_header_at_the_cap_one_byte_short_is_past_end(tmp_path):
    """N = 100,000,000 in a file one byte short: header_past_end at the file's end."""
    p = tmp_path / "cap.safetensors"
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", CAP))
        f.truncate(8 + CAP - 1)
    with pytest.raises(FormatError) as ei:
        engine.Container(str(p))
    assert (ei.value.kind, ei.value.offset) == ("header_past_end", 8 + CAP - 1)


def test_header_past_end(tmp_path):
    """N = 100 with 42 header bytes present: header_past_end at byte 50."""
    e = fail(tmp_path, st_bytes(b"{" + b" " * 41, n=100))
    assert (e.kind, e.offset) == ("header_past_end", 50)


# -- steps 4-5: text, JSON, schema --------------------------------------------


def test_not_utf8(tmp_path):
    """A lone 0xFF inside a name: not_utf8 at that byte."""
    h = b'{"ab\xff":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    e = fail(tmp_path, st_bytes(h, b"x"))
    assert (e.kind, e.offset) == ("not_utf8", 8 + 4)


def test_overlong_utf8_is_not_utf8(tmp_path):
    """C0 80 (an overlong NUL) is rejected where it starts."""
    h = b'{"\xc0\x80":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    e = fail(tmp_path, st_bytes(h, b"x"))
    assert (e.kind, e.offset) == ("not_utf8", 8 + 2)


def test_trailing_comma_is_json(tmp_path):
    """'{..., }': json at the closing brace."""
    h = "{" + entry("a", "U8", [1], 0, 1) + ",}"
    e = fail(tmp_path, st_bytes(h, b"x"))
    assert (e.kind, e.offset) == ("json", 8 + len(h) - 1)


def test_bytes_after_the_object_are_json(tmp_path):
    """Anything but whitespace after the object: json at that byte."""
    h = "{" + entry("a", "U8", [1], 0, 1) + "} x"
    e = fail(tmp_path, st_bytes(h, b"x"))
    assert (e.kind, e.offset) == ("json", 8 + len(h) - 1)


def test_lone_surrogate_is_json(tmp_path):
    """\\ud800 not followed by a low surrogate: json at the escape."""
    h = '{"a\\ud800":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    e = fail(tmp_path, st_bytes(h, b"x"))
    assert (e.kind, e.offset) == ("json", at(h, "\\ud800"))


def test_nesting_to_level_128_is_json(tmp_path):
    """An unknown field nested 200 deep: json where the limit is crossed."""
    deep = "[" * 200 + "]" * 200
    h = '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":' + deep + "}}"
    e = fail(tmp_path, st_bytes(h, b"x"))
    # level 1 is the header, 2 the entry: the 126th '[' is the 128th level,
    # the first the official reader (serde_json) refuses.
    assert (e.kind, e.offset) == ("json", at(h, "[[[") + 125)


@pytest.mark.parametrize(("site", "level"), [
    ('{"a":%s}', 2),                                          # the entry
    ('{"__metadata__":%s}', 2),                               # the metadata
    ('{"a":{"dtype":%s,"shape":[1],"data_offsets":[0,1]}}', 3),
    ('{"a":{"dtype":"U8","shape":%s,"data_offsets":[0,1]}}', 3),
    ('{"a":{"dtype":"U8","shape":[%s],"data_offsets":[0,1]}}', 4),
    ('{"__metadata__":{"k":%s}}', 3),
])
def test_the_depth_limit_is_level_128_wherever_the_value_is(tmp_path, site, level):
    """A value of the wrong type nested to level 127 is schema; to level 128 json,
    at its 128th-level bracket, whichever field holds it."""
    k = 127 - level + 1  # brackets from the site's level to level 127
    before, after = site.split("%s")
    h = before + "[" * k + "]" * k + after
    assert fail(tmp_path, st_bytes(h, b"x")).kind == "schema"
    h = before + "[" * (k + 1) + "]" * (k + 1) + after
    e = fail(tmp_path, st_bytes(h, b"x"))
    assert (e.kind, e.offset) == ("json", 8 + len(before) + k)


def test_header_that_is_not_an_object_is_schema(tmp_path):
    """A JSON array as the header: schema at its first byte."""
    e = fail(tmp_path, st_bytes("  []"))
    assert (e.kind, e.offset) == ("schema", 10)


def test_float_in_shape_is_schema(tmp_path):
    """shape [1.0]: schema at the number."""
    h = '{"a":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}}'
    e = fail(tmp_path, st_bytes(h, b"x"))
    assert (e.kind, e.offset) == ("schema", at(h, "1.0"))


def test_negative_offset_is_schema(tmp_path):
    """data_offsets [-1, 1]: schema at the minus sign."""
    h = '{"a":{"dtype":"U8","shape":[2],"data_offsets":[-1,1]}}'
    e = fail(tmp_path, st_bytes(h, b"xy"))
    assert (e.kind, e.offset) == ("schema", at(h, "-1"))


def test_offset_above_48_bits_is_schema(tmp_path):
    """An end offset of 2**48 is refused as it is parsed."""
    h = '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,281474976710656]}}'
    e = fail(tmp_path, st_bytes(h, b"x"))
    assert (e.kind, e.offset) == ("schema", at(h, "2814"))


def test_three_data_offsets_is_schema(tmp_path):
    """data_offsets with three entries: schema at the third."""
    h = '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}'
    e = fail(tmp_path, st_bytes(h, b"x"))
    assert (e.kind, e.offset) == ("schema", at(h, "2]"))


def test_missing_field_is_schema_at_the_entry(tmp_path):
    """An entry without shape: schema at the entry's name."""
    h = '{"a":{"dtype":"U8","data_offsets":[0,1]}}'
    e = fail(tmp_path, st_bytes(h, b"x"))
    assert (e.kind, e.offset) == ("schema", 9)
    assert "has no shape" in str(e)


def test_nul_in_a_name_is_schema(tmp_path):
    """A name with \\u0000 cannot cross the C boundary: schema at the name."""
    h = '{"a\\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    e = fail(tmp_path, st_bytes(h, b"x"))
    assert (e.kind, e.offset) == ("schema", 9)


def test_metadata_value_must_be_a_string(tmp_path):
    """__metadata__ {"k": 1}: schema at the value."""
    h = '{"__metadata__":{"k":1}}'
    e = fail(tmp_path, st_bytes(h))
    assert (e.kind, e.offset) == ("schema", at(h, "1}"))


def test_unknown_dtype(tmp_path):
    """dtype "F12": dtype at the value's opening quote."""
    h = '{"a":{"dtype":"F12","shape":[1],"data_offsets":[0,1]}}'
    e = fail(tmp_path, st_bytes(h, b"x"))
    assert (e.kind, e.offset) == ("dtype", at(h, '"F12"'))


def test_duplicate_tensor_name(tmp_path):
    """A second "a": duplicate at the second key, even with a bad entry after it."""
    h = ("{" + entry("a", "U8", [1], 0, 1) + "," + entry("a", "U8", [1], 1, 2)
         + "}")
    e = fail(tmp_path, st_bytes(h, b"xy"))
    second = 8 + h.index('"a"', 2)
    assert (e.kind, e.offset) == ("duplicate", second)
    h2 = "{" + entry("a", "U8", [1], 0, 1) + ',"a":{"dtype":"Q"}}'
    e2 = fail(tmp_path, st_bytes(h2, b"x"))
    assert (e2.kind, e2.offset) == ("duplicate", 8 + h2.index('"a"', 2))


def test_duplicate_field_in_an_entry_is_schema(tmp_path):
    """dtype given twice in one entry: schema at the second field name."""
    h = '{"a":{"dtype":"U8","shape":[1],"dtype":"U8","data_offsets":[0,1]}}'
    e = fail(tmp_path, st_bytes(h, b"x"))
    assert (e.kind, e.offset) == ("schema", 8 + h.index('"dtype"', 10))


def test_duplicate_metadata_key(tmp_path):
    """A repeated __metadata__ key: duplicate at the second key."""
    h = '{"__metadata__":{"k":"v","k":"w"}}'
    e = fail(tmp_path, st_bytes(h))
    assert (e.kind, e.offset) == ("duplicate", 8 + h.index('"k"', 20))


# -- steps 6-10: the data buffer ----------------------------------------------


def test_overlapping_offsets(tmp_path):
    """b [2, 6) overlaps a [0, 4): offsets at b's name."""
    h = "{" + entry("a", "U8", [4], 0, 4) + "," + entry("b", "U8", [4], 2, 6) + "}"
    e = fail(tmp_path, st_bytes(h, b"x" * 6))
    assert (e.kind, e.offset) == ("offsets", at(h, '"b"'))
    assert "overlap" in str(e)


def test_gap_between_tensors(tmp_path):
    """b begins at 5 after a ends at 4: offsets at b's name."""
    h = "{" + entry("a", "U8", [4], 0, 4) + "," + entry("b", "U8", [4], 5, 9) + "}"
    e = fail(tmp_path, st_bytes(h, b"x" * 9))
    assert (e.kind, e.offset) == ("offsets", at(h, '"b"'))
    assert "gap of 1 bytes" in str(e)


def test_gap_at_the_start(tmp_path):
    """A first tensor at 1, not 0: offsets."""
    h = "{" + entry("a", "U8", [1], 1, 2) + "}"
    e = fail(tmp_path, st_bytes(h, b"xx"))
    assert (e.kind, e.offset) == ("offsets", 9)


def test_inverted_offsets(tmp_path):
    """b [4, 2) ends before it begins: offsets at b's name."""
    h = "{" + entry("a", "U8", [4], 0, 4) + "," + entry("b", "U8", [0], 4, 2) + "}"
    e = fail(tmp_path, st_bytes(h, b"x" * 4))
    assert (e.kind, e.offset) == ("offsets", at(h, '"b"'))


def test_offsets_are_checked_before_sizes(tmp_path):
    """A size error in a and a gap after b: offsets (step 6) wins over size (9)."""
    h = "{" + entry("a", "U8", [3], 0, 4) + "," + entry("b", "U8", [1], 6, 7) + "}"
    e = fail(tmp_path, st_bytes(h, b"x" * 7))
    assert (e.kind, e.offset) == ("offsets", at(h, '"b"'))


def test_overflowing_shape(tmp_path):
    """[2**40, 2**40, 0] overflows left to right, as in the official reader."""
    big = 2**40
    h = "{" + entry("a", "U8", [big, big, 0], 0, 0) + "}"
    e = fail(tmp_path, st_bytes(h))
    assert (e.kind, e.offset) == ("overflow", 9)
    ok = "{" + entry("a", "U8", [0, big, big], 0, 0) + "}"
    with engine.Container(write(tmp_path, st_bytes(ok), "ok.safetensors")) as c:
        assert c.info("a").shape == (0, big, big) and c.info("a").nbytes == 0


def test_dimension_above_48_bits_is_overflow(tmp_path):
    """A dimension of 2**48 (even times 0) is refused as overflow."""
    h = "{" + entry("a", "U8", [2**48, 0], 0, 0) + "}"
    e = fail(tmp_path, st_bytes(h))
    assert (e.kind, e.offset) == ("overflow", 9)


def test_elements_times_bits_overflow(tmp_path):
    """2**61 F64 elements fit in 64 bits; 2**67 bits do not."""
    h = "{" + entry("a", "F64", [2**31, 2**30], 0, 8) + "}"
    e = fail(tmp_path, st_bytes(h, b"x" * 8))
    assert (e.kind, e.offset) == ("overflow", 9)


def test_f4_with_odd_count_is_not_whole_bytes(tmp_path):
    """Three F4 elements are 12 bits: bits at the entry."""
    h = "{" + entry("a", "F4", [3], 0, 2) + "}"
    e = fail(tmp_path, st_bytes(h, b"xy"))
    assert (e.kind, e.offset) == ("bits", 9)


def test_f6_with_one_element_is_not_whole_bytes(tmp_path):
    """One F6_E3M2 element is 6 bits: bits."""
    h = "{" + entry("a", "F6_E3M2", [1], 0, 1) + "}"
    e = fail(tmp_path, st_bytes(h, b"x"))
    assert (e.kind, e.offset) == ("bits", 9)


def test_range_not_matching_the_size(tmp_path):
    """U8 [4] in a 5-byte range: size at the entry."""
    h = "{" + entry("a", "U8", [4], 0, 5) + "}"
    e = fail(tmp_path, st_bytes(h, b"x" * 5))
    assert (e.kind, e.offset) == ("size", 9)


def test_trailing_bytes(tmp_path):
    """Two bytes after the data: length at the first of them."""
    h = "{" + entry("a", "U8", [4], 0, 4) + "}"
    e = fail(tmp_path, st_bytes(h, b"x" * 6))
    assert (e.kind, e.offset) == ("length", 8 + len(h) + 4)
    assert "trailing bytes" in str(e)


def test_truncated_data(tmp_path):
    """Data one byte short: length at the end of the file."""
    h = "{" + entry("a", "U8", [4], 0, 4) + "}"
    e = fail(tmp_path, st_bytes(h, b"x" * 3))
    assert (e.kind, e.offset) == ("length", 8 + len(h) + 3)
    assert "truncated" in str(e)


# -- the io seam --------------------------------------------------------------


def test_direct_reads_are_active_or_say_why_not(tmp_path):
    """direct=True either probes O_DIRECT successfully or reports the fallback."""
    h = "{" + entry("a", "U8", [5000], 0, 5000) + "}"
    data = bytes(range(256)) * 19 + bytes(136)
    path = write(tmp_path, st_bytes(h, data))
    with engine.Container(path, direct=True) as c:
        if c.direct_active:
            assert c.direct_note.startswith("O_DIRECT active")
        else:
            assert "O_DIRECT" in c.direct_note and "buffered" in c.direct_note
        assert c.read_bytes("a") == data
    with engine.Container(path) as c:
        assert (c.direct_active, c.direct_note) == (False, "O_DIRECT not requested")


def test_aligned_read_widens_and_reports_the_payload_start(tmp_path):
    """[5000, 5100) at 4096 alignment reads [4096, 8192) and starts at 904."""
    from xcache.engine import _lib

    ffi, lib = _lib.ffi(), _lib.lib()
    p = tmp_path / "f.bin"
    data = bytes(i % 251 for i in range(6000))
    p.write_bytes(data)
    io = lib.xc_io_default()
    h = ffi.new("int64_t *")
    assert io.open(io.ctx, str(p).encode(), 0, h) == 0
    try:
        assert lib.xc_io_aligned_span(5000, 100, 4096) == 4096
        assert lib.xc_io_aligned_span(4000, 200, 4096) == 8192
        buf = ffi.new("char[]", 8192 + 4096)
        base = int(ffi.cast("uintptr_t", buf))
        aligned = ffi.cast("char *", buf) + (-base % 4096)
        start = ffi.new("size_t *")
        assert lib.xc_io_read_aligned(io, h[0], b"f", aligned, 8192, 5000, 100,
                                      4096, start) == 0
        assert start[0] == 904
        assert ffi.buffer(aligned + start[0], 100)[:] == data[5000:5100]
        rc = lib.xc_io_read_aligned(io, h[0], b"f", aligned, 8192, 5950, 100,
                                    4096, start)
        assert rc == lib.XC_E_SHORT_READ
        assert lib.xc_io_read_aligned(io, h[0], b"f", aligned + 1, 8192, 0, 1,
                                      4096, start) == lib.XC_E_MISUSE
    finally:
        io.close(io.ctx, h[0])


def test_missing_path_is_not_found(tmp_path):
    """A path that does not exist raises NotFoundError naming it."""
    with pytest.raises(NotFoundError, match="nope"):
        engine.Container(str(tmp_path / "nope.safetensors"))


def test_closed_container_refuses_use(tmp_path):
    """After close, calls raise MisuseError instead of touching freed memory."""
    c = engine.Container(write(tmp_path, st_bytes("{}")))
    c.close()
    c.close()
    with pytest.raises(engine.MisuseError):
        len(c)


# -- the command line ---------------------------------------------------------


def test_inspect_prints_one_summary_line(tmp_path):
    """python -m xcache.engine.inspector prints OK with counts, exit 0."""
    h = "{" + entry("a", "U8", [4], 0, 4) + "," + entry("b", "F16", [2], 4, 8) + "}"
    path = write(tmp_path, st_bytes(h, b"x" * 8))
    r = subprocess.run([sys.executable, "-m", "xcache.engine.inspector", path],
                       capture_output=True, text=True, env=os.environ.copy())
    assert r.returncode == 0, r.stderr
    assert r.stdout == (f"OK {path}: 2 tensors, 1 shard(s), 8 bytes of tensor "
                        "data in 122 bytes of shard files, dtypes F16x1 U8x1\n")


def test_inspect_reports_kind_file_and_offset(tmp_path):
    """A truncated file prints FAIL length with the byte, exit 1."""
    h = "{" + entry("a", "U8", [4], 0, 4) + "}"
    path = write(tmp_path, st_bytes(h, b"x" * 3))
    r = subprocess.run([sys.executable, "-m", "xcache.engine.inspector", path],
                       capture_output=True, text=True, env=os.environ.copy())
    assert r.returncode == 1
    off = 8 + len(h) + 3
    assert r.stdout.startswith(f"FAIL length byte {off}: {path}: byte {off}:")


@pytest.mark.parametrize("arg, words", [
    ("missing.safetensors", "no such file"),
    ("empty-folder", "no"),
    ("a\x01b\x00c", "embedded null byte"),
])
def test_inspect_refuses_a_mistaken_path_with_exit_2(tmp_path, arg, words):
    """A path naming nothing (or holding NUL) is one line on stderr, exit 2."""
    from xcache.engine.inspector import main

    (tmp_path / "empty-folder").mkdir()
    path = arg if "\x00" in arg else str(tmp_path / arg)
    r_out = io.StringIO()
    with contextlib.redirect_stderr(r_out), contextlib.redirect_stdout(io.StringIO()):
        assert main([path]) == 2
    text = r_out.getvalue()
    assert text.count("\n") == 1
    assert text.startswith("python -m xcache.engine.inspector: ")
    assert repr(path) in text and words in text
