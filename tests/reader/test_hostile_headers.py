"""Hostile headers: numbers past a double's range, names crafted to collide."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.header_parse import FLOOD_LEN, crafted_names, table_slots, unkeyed_hash32
from tests.helpers import st_bytes
from xcache import engine

T = '"dtype":"U8","shape":[2],"data_offsets":[0,2]'
#: Where the extra field's value starts in '{"x":{' + T + ',"extra":...': the
#: 8-byte length field plus its position in the header.
AT = 8 + len('{"x":{' + T + ',"extra":')


def write(tmp_path, header: str) -> str:
    """A one-file container whose header is header and data two bytes."""
    p = tmp_path / "t.safetensors"
    p.write_bytes(st_bytes(header, b"\x01\x02"))
    return str(p)


def ours_accepts(path: str) -> bool:
    """Whether the engine opens path; any refusal must be a FormatError."""
    try:
        engine.Container(path).close()
    except engine.FormatError:
        return False
    return True


def official_accepts(path: str) -> bool:
    """Whether the official reader opens path."""
    safetensors = pytest.importorskip("safetensors")
    try:
        with safetensors.safe_open(path, "np"):
            pass
    except safetensors.SafetensorError:
        return False
    return True


# -- numbers out of double range (item 9) ------------------------------------

OUT_OF_RANGE = [
    "1e999", "-1e999", "1e309", "-1E+309", "1.8e308", "17976931348623159e292",
    # the official reader is not correctly rounded at the top: the largest
    # double's own shortest spelling overflows its multiply
    "1.7976931348623158e308",
    "1" + "0" * 400, "-" + "9" * 310, "0.5e2147483648", "1e99999999999",
    "123456789012345678901234567890e300",
]
IN_RANGE = [
    "1.7976931348623157e308", "1e308", "-1e308", "1e-999", "-1e-99999999999",
    "0e99999999999", "0.0e999", "1" + "0" * 308, "18446744073709551616",
    "-9223372036854775809", "1.5", "0", "-0", "4.9e-324", "1e-400",
    "0.00000000000000000000000000000000000001e330",
]


@pytest.mark.parametrize("number", OUT_OF_RANGE)
def test_a_number_past_a_double_in_an_ignored_field_is_json(tmp_path, number):
    """Refused as json at the number's first byte, naming it, as officially."""
    path = write(tmp_path, '{"x":{' + T + ',"extra":' + number + '}}')
    with pytest.raises(engine.FormatError) as ei:
        engine.Container(path)
    shown = number if len(number) <= 40 else number[:40] + "..."
    assert (ei.value.kind, ei.value.offset) == ("json", AT)
    assert str(ei.value) == (
        f"{path}: byte {AT}: number {shown} is out of range (a double overflows)")
    assert official_accepts(path) is False


@pytest.mark.parametrize("number", IN_RANGE)
def test_a_number_inside_a_double_in_an_ignored_field_opens(tmp_path, number):
    """Underflow, long integers that round into range and -0 open, as officially."""
    path = write(tmp_path, '{"x":{' + T + ',"extra":' + number + '}}')
    with engine.Container(path) as c:
        assert c.read_bytes("x") == b"\x01\x02"
    assert official_accepts(path) is True


@pytest.mark.parametrize("header,number", [
    ('{"x":{' + T + ',"extra":[0,{"k":[1e999]}]}}', "1e999"),
    ('{"__metadata__":{"k":1e999},"x":{' + T + '}}', "1e999"),
    ('{"x":{"dtype":"U8","shape":[1e999],"data_offsets":[0,2]}}', "1e999"),
    ('{"x":{"dtype":"U8","shape":[2],"data_offsets":[0,-1e999]}}', "-1e999"),
])
def test_a_number_past_a_double_anywhere_is_json(tmp_path, header, number):
    """Nested, a metadata value, a shape or offset entry: json at its byte."""
    path = write(tmp_path, header)
    at = 8 + header.index(number)
    with pytest.raises(engine.FormatError) as ei:
        engine.Container(path)
    assert (ei.value.kind, ei.value.offset) == ("json", at)
    assert str(ei.value) == (
        f"{path}: byte {at}: number {number} is out of range (a double overflows)")
    assert official_accepts(path) is False


@st.composite
def numbers(draw) -> str:
    """JSON numbers near the edges of a double: long mantissas, exponents near 308."""
    sign = draw(st.sampled_from(["", "-"]))
    whole = draw(st.sampled_from(["0", "1", "9", "17976931348623157",
                                  "17976931348623158", "18446744073709551615",
                                  "18446744073709551616", "1" + "0" * 25]))
    whole += draw(st.text("0123456789", max_size=3))
    if whole.startswith("0") and len(whole) > 1:
        whole = whole.lstrip("0") or "0"
    frac = draw(st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=25)
                          .map(lambda s: "." + s)))
    exp = draw(st.one_of(st.just(""), st.integers(-340, 340).map(lambda e: f"e{e}"),
                         st.integers(280, 320).map(lambda e: f"E+{e}")))
    return sign + whole + frac + exp


@given(number=numbers())
def test_any_number_gets_the_official_readers_verdict(tmp_path_factory, number):
    """Numbers at a double's edges: we accept exactly when the official reader does."""
    header = '{"x":{' + T + ',"extra":' + number + '}}'
    path = write(tmp_path_factory.mktemp("n"), header)
    assert ours_accepts(path) == official_accepts(path), number


# -- names crafted to collide (item 7) -----------------------------------------

N_CRAFTED = 3000


@pytest.fixture(scope="module")
def crafted() -> list[str]:
    """Names that all fell in the first 1/64 of the table under the old hash."""
    names = crafted_names(N_CRAFTED)
    rows = np.frombuffer("".join(names).encode(), np.uint8).reshape(-1, FLOOD_LEN)
    cap = table_slots(N_CRAFTED)
    assert (unkeyed_hash32(rows) & np.uint32(cap - 1)).max() < cap // 64
    assert len(set(names)) == N_CRAFTED
    return names


def entries(names: list[str]) -> str:
    """One U8 [1] entry per name, tiling the data buffer in order."""
    return ",".join(f'"{nm}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{i + 1}]}}'
                    for i, nm in enumerate(names))


def test_names_crafted_against_the_old_hash_open_and_each_is_found(tmp_path, crafted):
    """Every crafted name is listed, found and read with its own byte."""
    p = tmp_path / "t.safetensors"
    p.write_bytes(st_bytes("{" + entries(crafted) + "}",
                           bytes(i % 251 for i in range(N_CRAFTED))))
    with engine.Container(str(p)) as c:
        assert c.names() == crafted
        for i, nm in enumerate(crafted):
            assert c.read_bytes(nm) == bytes([i % 251])
        with pytest.raises(engine.NotFoundError):
            c.read_bytes(crafted[0][:-1] + "x")


def test_a_duplicate_among_crafted_names_is_still_refused(tmp_path, crafted):
    """The duplicate check walks the same table: the repeat is found, at its byte."""
    names = [*crafted, crafted[1234]]
    header = "{" + entries(names) + "}"
    p = tmp_path / "t.safetensors"
    p.write_bytes(st_bytes(header, bytes(len(names))))
    with pytest.raises(engine.FormatError) as ei:
        engine.Container(str(p))
    at = 8 + header.rindex(f'"{crafted[1234]}"')
    first = 8 + header.index(f'"{crafted[1234]}"')
    assert (ei.value.kind, ei.value.offset) == ("duplicate", at)
    assert str(ei.value) == (f'{p}: byte {at}: tensor name "{crafted[1234]}" '
                             f"appears twice (first at byte {first})")


def test_crafted_metadata_keys_are_each_kept(tmp_path, crafted):
    """The __metadata__ table takes crafted keys too: every key keeps its value."""
    meta = ",".join(f'"{k}":"v{i}"' for i, k in enumerate(crafted))
    header = '{"__metadata__":{' + meta + '},' + entries(crafted[:1]) + "}"
    p = tmp_path / "t.safetensors"
    p.write_bytes(st_bytes(header, b"\x00"))
    with engine.Container(str(p)) as c:
        assert c.metadata == {k: f"v{i}" for i, k in enumerate(crafted)}
