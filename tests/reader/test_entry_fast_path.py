"""The header entry spelled as writers spell it takes a fast path; same results.

``{"dtype":"U8","shape":[1],"data_offsets":[0,1]}`` with no whitespace and
no escapes is parsed by a straight-line matcher (xc_header.c,
parse_entry_fast); anything else -- and anything it cannot accept -- goes
to the general parser from the same place.  Each case here is written twice
with the same byte offsets: once in the writers' spelling (ending ``]}``)
and once with a space before the entry's ``}``, which only the general
parser takes.  The header is padded so both files have the same length.
Both must give the same tensors, or the same error with the same kind,
offset and message; a few messages are also pinned exactly.

The tensor-table checks (steps 6-9) likewise run in one pass when every
tensor passes and step by step otherwise; the last tests pin that a file
with problems of several kinds still reports the earliest kind.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from xcache import engine
from xcache.engine import FormatError

Outcome = tuple[str, object]


def header_file(path: Path, entries: list[str], data: bytes,
                extra: int = 0) -> str:
    """A file of the given entry texts; extra spaces go after the object."""
    hb = ("{" + ",".join(entries) + "}" + " " * extra).encode()
    hb += b" " * (-len(hb) % 8)
    path.write_bytes(struct.pack("<Q", len(hb)) + hb + data)
    return str(path)


def outcome(path: str) -> Outcome:
    """Every tensor's info, or the error's (kind, offset, message).

    The file's path in the message is replaced by FILE, so that two files
    compare.
    """
    try:
        with engine.Container(path) as c:
            return ("ok", c.tensors())
    except FormatError as e:
        assert str(e).count(path) == 1
        return ("error", (e.kind, e.offset, str(e).replace(path, "FILE")))


def both(tmp_path: Path, body: str, data: bytes,
         before: tuple[str, ...] = ()) -> tuple[Outcome, Outcome]:
    """(fast spelling, general spelling) of entry "t" with value body.

    body is the entry's object without its closing brace; the entries in
    before are written ahead of it in the writers' spelling.
    """
    fast = header_file(tmp_path / "fast.safetensors",
                       [*before, f'"t":{body}}}'], data, extra=1)
    slow = header_file(tmp_path / "slow.safetensors",
                       [*before, f'"t":{body} }}'], data)
    return outcome(fast), outcome(slow)


def entry(dtype: str, shape: str, offs: str) -> str:
    """An entry object in the writers' spelling, without its closing brace."""
    return f'{{"dtype":"{dtype}","shape":[{shape}],"data_offsets":[{offs}]'


CASES = [
    # (id, dtype, shape, data_offsets, data bytes)
    ("scalar", "F32", "", "0,4", 4),
    ("one-dim", "U8", "3", "0,3", 3),
    ("eight-dims", "U8", "1,1,1,1,1,1,1,2", "0,2", 2),
    ("zero-size", "F16", "0,7", "0,0", 0),
    ("bf16", "BF16", "2,3", "0,12", 12),
    ("f8", "F8_E4M3", "5", "0,5", 5),
    ("nine-dims", "U8", "1,1,1,1,1,1,1,1,2", "0,2", 2),
    ("leading-zero-dim", "U8", "01", "0,1", 1),
    ("leading-zero-offset", "U8", "1", "00,1", 1),
    ("fraction", "U8", "1.0", "0,1", 1),
    ("exponent", "U8", "1", "0,1e0", 1),
    ("negative", "U8", "-1", "0,1", 1),
    ("unknown-dtype", "X9", "1", "0,1", 1),
    ("lower-case-dtype", "u8", "1", "0,1", 1),
    ("long-dtype", "ABCDEFGHIJKLMNOPQ", "1", "0,1", 1),
    ("dim-19-digits", "U8", "0,9999999999999999999", "0,0", 0),
    ("dim-20-digits-max", "U8", "0,18446744073709551615", "0,0", 0),
    ("dim-20-digits-over", "U8", "0,18446744073709551616", "0,0", 0),
    ("dim-above-48-bits", "U8", "281474976710656", "0,1", 1),
    ("offset-above-48-bits", "U8", "1", "0,281474976710656", 1),
    ("three-offsets", "U8", "1", "0,1,2", 1),
    ("one-offset", "U8", "1", "1", 1),
    ("no-offsets", "U8", "1", "", 1),
    ("size-mismatch", "U8", "2", "0,1", 1),
    ("four-bit-odd", "F4", "3", "0,2", 2),
    ("gap", "U8", "1", "1,2", 2),
    ("inverted", "U8", "1", "1,0", 1),
    ("trailing-bytes", "U8", "1", "0,1", 2),
    ("truncated", "U8", "4", "0,4", 2),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_fast_and_general_spelling_agree(tmp_path: Path, case) -> None:
    """The writers' spelling and a spaced one give identical results."""
    _, dtype, shape, offs, nbytes = case
    fast, slow = both(tmp_path, entry(dtype, shape, offs), bytes(nbytes))
    assert fast == slow


def test_fast_spelling_after_other_entries_agrees(tmp_path: Path) -> None:
    """An entry after others (its offsets continue theirs) agrees as well."""
    before = tuple(f'"p{i}":{entry("U8", "1", f"{i},{i + 1}")}}}'
                   for i in range(3))
    fast, slow = both(tmp_path, entry("U8", "2", "3,5"), bytes(5), before)
    assert fast == slow
    assert fast[0] == "ok"
    assert [t.name for t in fast[1]] == ["p0", "p1", "p2", "t"]
    assert (fast[1][3].shape, fast[1][3].nbytes) == ((2,), 2)


def test_fast_spelling_reads_values_exactly(tmp_path: Path) -> None:
    """Dtype, shape and offsets read by the fast path are the written ones."""
    (kind, tensors), _ = both(tmp_path, entry("BF16", "2,3", "0,12"),
                              bytes(range(12)))
    assert kind == "ok"
    (t,) = tensors
    assert (t.name, t.dtype, t.shape, t.nbytes) == ("t", "BF16", (2, 3), 12)


@pytest.mark.parametrize("case,kind,at,message", [
    ("nine-dims", "schema", 52, 'tensor "t": shape has more than 8 entries'),
    ("leading-zero-dim", "json", 36, "number with a leading zero"),
    ("fraction", "schema", 36,
     "a shape entry must be a non-negative integer, found 1.0"),
    ("unknown-dtype", "dtype", 22, 'tensor "t": unknown dtype "X9"'),
    ("dim-20-digits-over", "schema", 38,
     "a shape entry 18446744073709551616 exceeds the limit of "
     "18446744073709551615"),
    ("offset-above-48-bits", "schema", 57,
     "a data_offsets entry 281474976710656 exceeds the limit of "
     "281474976710655"),
    ("one-offset", "schema", 54,
     'tensor "t": data_offsets must hold exactly two integers'),
    ("dim-above-48-bits", "overflow", 9,
     'tensor "t": dimension 0 is 281474976710656, above the 48-bit limit'),
    ("four-bit-odd", "bits", 9,
     'tensor "t": 3 elements of F4 are 12 bits, not a whole number of bytes'),
], ids=lambda v: v if isinstance(v, str) and "-" in v else None)
def test_fast_spelling_errors_are_the_general_ones(tmp_path: Path, case: str,
                                                   kind: str, at: int,
                                                   message: str) -> None:
    """A bad entry in the writers' spelling gets the general path's report."""
    _, dtype, shape, offs, nbytes = next(c for c in CASES if c[0] == case)
    (status, got), _ = both(tmp_path, entry(dtype, shape, offs),
                            bytes(nbytes))
    assert status == "error"
    assert (got[0], got[1]) == (kind, at)
    assert got[2] == f"FILE: byte {got[1]}: {message}"


def test_several_problems_report_the_earliest_kind(tmp_path: Path) -> None:
    """A size problem first and a gap later: the gap (step 6) is reported."""
    entries = [f'"a":{entry("U8", "2", "0,1")}}}',    # size (step 9)
               f'"b":{entry("U8", "1", "1,2")}}}',
               f'"c":{entry("U8", "1", "3,4")}}}']    # gap (step 6)
    path = header_file(tmp_path / "m.safetensors", entries, bytes(4))
    kind, (k, offset, message) = outcome(path)
    assert (kind, k) == ("error", "offsets")
    assert 'tensor "c": data_offsets [3, 4] leave a gap of 1 bytes after ' \
           "offset 2" in message
    hb = Path(path).read_bytes()
    assert offset == hb.index(b'"c"')


def test_overflow_reported_before_a_later_size_problem(tmp_path: Path) -> None:
    """A size problem first and an overflow later: the overflow (step 7) wins."""
    entries = [f'"a":{entry("U8", "2", "0,1")}}}',    # size (step 9)
               f'"b":{entry("U8", "0,281474976710656", "1,1")}}}']
    path = header_file(tmp_path / "m.safetensors", entries, bytes(1))
    kind, (k, offset, message) = outcome(path)
    assert (kind, k) == ("error", "overflow")
    assert ('tensor "b": dimension 1 is 281474976710656, above the 48-bit '
            "limit") in message
    assert offset == Path(path).read_bytes().index(b'"b"')


# -- a big header: the tensor table reserved up front -------------------------

def big_header(path: Path, n: int) -> str:
    """n zero-size tensors "t<i>" (about 55 header bytes each) at offset 0."""
    entries = [f'"t{i}":{entry("U8", "0", "0,0")}}}' for i in range(n)]
    return header_file(path, entries, b"")


def test_big_header_with_more_tensors_than_reserved(tmp_path: Path) -> None:
    """A 5 MB header of 100,000 short entries: reserved table, then grown."""
    path = big_header(tmp_path / "big.safetensors", 100_000)
    assert Path(path).stat().st_size > 5_000_000
    with engine.Container(path) as c:
        assert len(c) == 100_000
        names = c.names()
        assert names[0] == "t0" and names[-1] == "t99999"
        assert "t54321" in c and "t100000" not in c
        assert c.info("t99999").offset == Path(path).stat().st_size
        assert c.read_bytes("t77777") == b""


def test_big_header_allocation_failures_are_clean(tmp_path: Path) -> None:
    """Each allocation of a big header's open refused in turn: a clean OOM."""
    from xcache.engine import alloc

    path = big_header(tmp_path / "big.safetensors", 100_000)
    live = alloc.live()
    n, messages = 1, []
    while True:
        alloc.fail_alloc(n)
        try:
            c = engine.Container(path)
        except engine.OutOfMemoryError as e:
            assert e.kind == "nomem"
            messages.append(str(e))
        else:
            alloc.disarm()
            assert len(c) == 100_000
            c.close()
            break
        finally:
            alloc.disarm()
        assert alloc.live() == live
        n += 1
    assert alloc.live() == live
    assert f"{path}: out of memory (tensor table)" in messages
    assert f"{path}: out of memory (header buffer)" in messages
