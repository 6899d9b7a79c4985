"""Differential tests: our reader against the official ``safetensors`` package.

Files written by ``safetensors.numpy.save_file`` must open with identical
bytes; byte-level mutations of them must be accepted by us exactly when the
official reader accepts them.  Principled differences, each investigated and
each deliberate (DESIGN §3 is stricter than the official reader, or the C
boundary cannot carry what it accepts):

* duplicate tensor names -- the official reader keeps the last entry; we
  refuse with ``duplicate`` (a name must identify one tensor);
* duplicate ``__metadata__`` keys -- same (last wins there; ``duplicate``
  here);
* a tensor name or metadata string containing U+0000 -- refused as
  ``schema`` because names cross the C boundary NUL-terminated;
* more than 8 dimensions, or a dimension / offset above 2**48 -- refused
  (``schema`` / ``overflow``); the official reader takes any usize;
* tensors whose dtype numpy lacks (BF16, F8_*, F4, F6_*): the official
  ``get_tensor(..., "np")`` raises a TypeError / AttributeError, which is a
  conversion limit of its numpy path, not a validation verdict; we return the
  raw bytes, so for those the comparison is validation only.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("safetensors", reason="the official reader is the reference here")
from safetensors import SafetensorError, safe_open  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

from xcache import engine
from xcache.engine import FormatError
from xcache.engine.container import NUMPY_DTYPES

DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.uint16, np.float16,
          np.int32, np.uint32, np.float32, np.int64, np.uint64, np.float64,
          np.complex64]

names = st.text(alphabet="abcxyz._0123é", min_size=1, max_size=12)
shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)


@st.composite
def tensor_sets(draw) -> dict[str, np.ndarray]:
    """A dict of up to 5 small arrays of any numpy-representable dtype."""
    out = {}
    for name in draw(st.lists(names, min_size=0, max_size=5, unique=True)):
        dt = np.dtype(draw(st.sampled_from(DTYPES)))
        shape = draw(shapes)
        n = int(np.prod(shape)) * dt.itemsize
        raw = draw(st.binary(min_size=n, max_size=n))
        out[name] = np.frombuffer(raw, dtype=np.uint8).view(dt).reshape(shape).copy()
    return out


def official(path: str) -> dict[str, bytes] | None:
    """The official reader's verdict: every tensor's bytes, or None if rejected."""
    try:
        with safe_open(path, "np") as f:
            out = {}
            for k in f.keys():
                try:
                    out[k] = f.get_tensor(k).tobytes()
                except (TypeError, AttributeError):
                    out[k] = None  # numpy cannot hold this dtype: see above
            return out
    except SafetensorError:
        return None


def ours(path: str) -> tuple[dict[str, bytes] | None, FormatError | None]:
    """Our verdict: every tensor's bytes, or the FormatError."""
    try:
        with engine.Container(path) as c:
            return {k: c.read_bytes(k) for k in c}, None
    except FormatError as e:
        return None, e


def principled_difference(raw: bytes, err: FormatError) -> bool:
    """Whether our rejection is one of the documented deliberate differences."""
    if err.kind == "duplicate":
        return True
    if err.kind == "schema" and ("U+0000" in str(err) or "more than 8" in str(err)
                                 or "exceeds the limit" in str(err)):
        return True
    return err.kind == "overflow" and "48-bit" in str(err)


def compare(path: str) -> str:
    """Run both readers on path and assert they agree; return the verdict."""
    theirs = official(path)
    mine, err = ours(path)
    if theirs is None:
        assert mine is None, f"we accept what the official reader rejects: {path}"
        return "rejected"
    if mine is None:
        raw = open(path, "rb").read()
        assert principled_difference(raw, err), (
            f"we reject ({err.kind}: {err}) what the official reader accepts")
        return "differs"
    assert sorted(mine) == sorted(theirs)
    with engine.Container(path) as c:
        for k, data in theirs.items():
            if data is None:
                assert c.info(k).dtype not in NUMPY_DTYPES
            else:
                assert mine[k] == data, k
    return "accepted"


@given(tensors=tensor_sets(), meta=st.dictionaries(names, names, max_size=2))
def test_files_written_by_the_official_writer_open_with_equal_bytes(
        tmp_path_factory, tensors, meta):
    """Every save_file output is accepted, metadata kept, every tensor's bytes equal."""
    path = str(tmp_path_factory.mktemp("d") / "w.safetensors")
    save_file(tensors, path, metadata=meta or None)
    with engine.Container(path) as c:
        assert sorted(c) == sorted(tensors)
        assert c.metadata == meta
        for name, arr in tensors.items():
            got = c.read(name)
            assert got.dtype == arr.dtype.newbyteorder("<") or got.dtype == arr.dtype
            assert got.shape == arr.shape and got.tobytes() == arr.tobytes()
    assert compare(path) == "accepted"


mutations = st.one_of(
    st.tuples(st.just("flip"), st.floats(0, 1), st.integers(1, 255)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.floats(0, 1), st.just(0)),
    st.tuples(st.just("truncate"), st.floats(0, 1), st.just(0)),
    st.tuples(st.just("set"), st.floats(0, 1),
              st.sampled_from(b' "{}[],:0123456789-.eE\\u')),
)


def mutate(raw: bytes, op: str, where: float, arg: int, header_only: bool) -> bytes:
    """Apply one byte-level mutation at a relative position."""
    n = struct.unpack("<Q", raw[:8])[0] if len(raw) >= 8 else 0
    lo, hi = (0, min(8 + n, len(raw))) if header_only else (0, len(raw))
    if hi <= lo:
        return raw
    i = lo + min(int(where * (hi - lo)), hi - lo - 1)
    if op == "flip":
        return raw[:i] + bytes([raw[i] ^ arg]) + raw[i + 1:]
    if op == "set":
        return raw[:i] + bytes([arg]) + raw[i + 1:]
    if op == "insert":
        return raw[:i] + bytes([arg]) + raw[i:]
    if op == "delete":
        return raw[:i] + raw[i + 1:]
    return raw[:i]


@settings(max_examples=3 * settings.default.max_examples)
@given(tensors=tensor_sets(), edits=st.lists(mutations, min_size=1, max_size=3),
       header_only=st.booleans())
def test_mutated_files_are_accepted_exactly_when_the_official_reader_accepts(
        tmp_path_factory, tensors, edits, header_only):
    """Flip / insert / delete / set / truncate bytes: same verdict, same bytes."""
    path = tmp_path_factory.mktemp("m") / "m.safetensors"
    save_file(tensors, str(path))
    raw = path.read_bytes()
    for op, where, arg in edits:
        raw = mutate(raw, op, where, arg, header_only)
    path.write_bytes(raw)
    compare(str(path))


def test_known_differences_are_the_documented_ones(tmp_path):
    """Duplicate names: the official reader keeps one, we say duplicate."""
    h = (b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
         b'"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}')
    p = tmp_path / "dup.safetensors"
    p.write_bytes(struct.pack("<Q", len(h)) + h + b"x")
    assert compare(str(p)) == "differs"
