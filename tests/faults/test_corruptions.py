"""Byte-level corruptions: the documented FormatError kind and offset (F15-F21)."""

from __future__ import annotations

import collections
import os
import shutil

import pytest

from tests.helpers import DATA_START
from xcache import engine
from xcache.faults import corrupt
from xcache.faults.loops import Baseline
from xcache.oracle import safetensors as osf
from xcache.oracle.errors import OracleFormatError


def _engine_kind(path) -> tuple[str, int | None] | None:
    """The engine's verdict on path: None (valid) or (kind, offset)."""
    try:
        engine.Container(str(path)).close()
    except engine.FormatError as e:
        return e.kind, e.offset
    return None


def _oracle_kind(path) -> str | None:
    """The oracle reader's verdict on path: None (valid) or the kind."""
    try:
        osf.open_container(path)
    except OracleFormatError as e:
        return e.kind
    return None


EXPECTED = {  # kind, offset for k3-mini (DATA_START 20,608, FILE_BYTES 59,776)
    "too_short": ("too_short", 5),
    "header_too_large": ("header_too_large", 0),
    "header_past_end": ("header_past_end", 59776),
    "not_utf8": ("not_utf8", 11),
    "json": ("json", 84),
    "schema": ("schema", 233),
    "dtype": ("dtype", 233),
    "duplicate": ("duplicate", 147),
    "offsets": ("offsets", 147),
    "overflow": ("overflow", 147),
    "bits": ("bits", 147),
    "size": ("size", 147),
    "length": ("length", 59676),
    "trailing": ("length", 59776),
}


@pytest.mark.parametrize("maker", sorted(corrupt.MAKERS))
def test_each_kind_from_a_valid_file(k3_shard, tmp_path, maker):
    """Each corruptor gives its kind at its offset; the oracle agrees on the kind."""
    dst = tmp_path / "bad.safetensors"
    base = Baseline.now()
    want = corrupt.MAKERS[maker](k3_shard, dst)
    assert tuple(want) == EXPECTED[maker]
    with pytest.raises(engine.FormatError) as info:
        engine.Container(str(dst))
    assert (info.value.kind, info.value.offset) == tuple(want)
    assert str(dst) in str(info.value)
    assert _oracle_kind(dst) == want.kind
    base.assert_back(maker)


def test_dropped_index_entry_is_index(mixtral_dir, tmp_path):
    """A tensor missing from weight_map: kind index in both readers, shard named."""
    folder = tmp_path / "mm"
    shutil.copytree(mixtral_dir, folder)
    name = corrupt.drop_from_index(folder)
    with pytest.raises(engine.FormatError) as info:
        engine.Container(str(folder))
    assert info.value.kind == "index" and name in str(info.value)
    assert "model-00003-of-00003.safetensors" in str(info.value)
    assert _oracle_kind(folder) == "index"


def test_missing_shard_is_index(mixtral_dir, tmp_path):
    """A shard the index names but the folder lacks: kind index in both readers."""
    folder = tmp_path / "mm"
    shutil.copytree(mixtral_dir, folder)
    os.remove(folder / "model-00002-of-00003.safetensors")
    base = Baseline.now()
    with pytest.raises(engine.FormatError) as info:
        engine.Container(str(folder))
    assert info.value.kind == "index"
    assert "model-00002-of-00003.safetensors" in str(info.value)
    assert _oracle_kind(folder) == "index"
    base.assert_back("missing shard")


def test_trailing_bytes_on_one_shard(mixtral_dir, tmp_path):
    """Three stray bytes after shard 2's data: length at its old end, in that file."""
    folder = tmp_path / "mm"
    shutil.copytree(mixtral_dir, folder)
    shard = folder / "model-00002-of-00003.safetensors"
    end = corrupt.append_trailing(shard)
    with pytest.raises(engine.FormatError) as info:
        engine.Container(str(folder))
    assert (info.value.kind, info.value.offset) == ("length", end)
    assert str(shard) in str(info.value)
    assert _oracle_kind(folder) == "length"


@pytest.mark.parametrize("cut,kind", [
    (0, "too_short"), (7, "too_short"), (8, "header_past_end"),
    (20607, "header_past_end"), (20608, "length"), (59775, "length"),
])
def test_truncate_at(k3_shard, tmp_path, cut, kind):
    """Truncating k3-mini at each boundary gives the first check it breaks."""
    dst = tmp_path / "cut.safetensors"
    shutil.copyfile(k3_shard, dst)
    corrupt.truncate_at(dst, cut)
    got = _engine_kind(dst)
    assert got is not None and got[0] == kind == _oracle_kind(dst)
    offset = {"too_short": cut, "header_past_end": cut, "length": cut}[kind]
    assert got[1] == offset


@pytest.mark.parametrize("text,at", [
    (b'"dtype": "U8"', b'"dtype":!"U8"'),     # not a value where one must be
    (b'"shape": [8, 64]', b'"shape": [\x18, 64]'),
    (b'"shape": [8, 64]', b'"shape": [8, 6x]'),
    (b'"shape": [8, 64]', b'"shape": tru    '),
])
def test_malformed_value_is_json_not_schema(k3_shard, tmp_path, text, at):
    """Regression: a malformed value where a typed one belongs is json, not schema."""
    raw = k3_shard.read_bytes()
    assert len(text) == len(at)
    dst = tmp_path / "bad.safetensors"
    dst.write_bytes(raw.replace(text, at, 1))
    got = _engine_kind(dst)
    assert got is not None and got[0] == "json" == _oracle_kind(dst)
    first_diff = next(i for i, (a, b) in enumerate(zip(text, at, strict=True))
                      if a != b)
    assert got[1] == raw.index(text) + first_diff


def test_wrong_but_wellformed_type_stays_schema(k3_shard, tmp_path):
    """A well-formed value of the wrong type is still schema in both readers."""
    raw = k3_shard.read_bytes()
    dst = tmp_path / "bad.safetensors"
    dst.write_bytes(raw.replace(b'"dtype": "U8"', b'"dtype": true', 1))
    assert _engine_kind(dst) == ("schema", raw.index(b'"dtype": "U8"') + 9)
    assert _oracle_kind(dst) == "schema"


#: Header byte flips on which the two readers still name different kinds,
#: by design on each side (faults/README.md, "Known disagreements"): the
#: engine checks offsets for every tensor before sizes (DESIGN §3 read as
#: check-major) where the oracle checks each tensor fully in turn; and the
#: engine reports the first problem in document order where the oracle
#: parses the whole JSON before any schema check.
KNOWN = {("offsets", "size"), ("dtype", "json"), ("schema", "json"),
         ("duplicate", "json")}


def test_header_byte_flips_agree_with_the_oracle(k3_shard, tmp_path):
    """Header byte flips: both reject the same files; kinds differ only in KNOWN."""
    raw = k3_shard.read_bytes()
    dst = tmp_path / "flip.safetensors"
    verdicts: collections.Counter = collections.Counter()
    for off in range(0, DATA_START, 37):
        for mask in (0x01, 0x20, 0x80):
            dst.write_bytes(raw)
            corrupt.flip_byte(dst, off, mask)
            got = _engine_kind(dst)
            ekind = None if got is None else got[0]
            okind = _oracle_kind(dst)
            assert (ekind is None) == (okind is None), (off, mask, ekind, okind)
            if ekind != okind:
                assert (ekind, okind) in KNOWN, (off, mask, ekind, okind)
            verdicts[ekind] += 1
    assert verdicts[None] > 0 and verdicts["json"] > 0


@pytest.fixture(scope="module")
def sparse_shard(tmp_path_factory):
    """A 2 GiB safetensors file of one U8 tensor, nearly all holes, and its header."""
    from xcache.fixtures.layout import build_header

    path = tmp_path_factory.mktemp("sparse") / "sparse.safetensors"
    size = 2 << 30
    entries = [("a", "U8", (64,), 0, 64), ("b", "U8", (64,), 64, 128),
               ("c", "U8", (size - 128,), 128, size)]
    head = build_header(entries, {"format": "pt"}, 8)
    with open(path, "wb") as f:
        f.write(head)
        f.write(b"\x11" * 128)
        f.seek(len(head) + size - 64)
        f.write(b"\x22" * 64)
    if os.stat(path).st_blocks * 512 > 64 << 20:
        pytest.skip("the file system keeps no holes")
    return path, len(head)


@pytest.mark.parametrize("maker", sorted(corrupt.MAKERS))
def test_each_kind_keeps_a_sparse_shard_sparse(sparse_shard, tmp_path, maker):
    """A corrupted copy of a 2 GiB sparse shard is written without its holes
    (huge-sparse's 20 GB shards were read whole and written dense), and the
    engine and the oracle give the kind."""
    src, data_start = sparse_shard
    dst = tmp_path / "bad.safetensors"
    want = corrupt.MAKERS[maker](src, dst)
    assert os.stat(dst).st_blocks * 512 < 64 << 20
    assert _engine_kind(dst) == tuple(want)
    assert _oracle_kind(dst) == want.kind
    if maker in ("length", "trailing", "header_too_large"):
        with open(src, "rb") as a, open(dst, "rb") as b:  # the data moved unchanged
            a.seek(data_start)
            b.seek(data_start)
            assert a.read(128) == b.read(128) == b"\x11" * 128


def test_replace_same_size_keeps_a_sparse_shard_sparse(sparse_shard, tmp_path):
    """The replacement inverts the stored data bytes; the holes stay holes."""
    src, data_start = sparse_shard
    copy = tmp_path / "copy.safetensors"
    corrupt._write(copy, b"", src, 0, os.path.getsize(src))  # a sparse copy
    corrupt.replace_same_size(copy)
    assert os.path.getsize(copy) == os.path.getsize(src)
    assert os.stat(copy).st_blocks * 512 < 64 << 20
    with open(src, "rb") as a, open(copy, "rb") as b:
        assert a.read(data_start) == b.read(data_start)
        assert b.read(128) == b"\xee" * 128
        b.seek(os.path.getsize(src) - 64)
        assert b.read() == b"\xdd" * 64


@pytest.fixture(scope="module")
def official_shard(tmp_path_factory):
    """A shard the official ``safetensors`` writer made: compact JSON, its own
    key order, a name that is not ASCII."""
    np = pytest.importorskip("numpy")
    st = pytest.importorskip("safetensors.numpy")
    path = tmp_path_factory.mktemp("official") / "model.safetensors"
    rng = np.random.default_rng(7)
    st.save_file({name: rng.standard_normal((4, 8)).astype(np.float32)
                  for name in ("a.weight", "b.w\u00e9ight", "c.weight",
                               "d.weight")}, str(path), metadata={"format": "pt"})
    return path


@pytest.mark.parametrize("maker", sorted(corrupt.MAKERS))
def test_each_kind_from_the_official_writers_file(official_shard, tmp_path, maker):
    """Each corruptor works on a header in the official writer's style (no
    spaces, raw UTF-8 names) and claims what the engine reports; the oracle
    agrees on the kind."""
    dst = tmp_path / "bad.safetensors"
    want = corrupt.MAKERS[maker](official_shard, dst)
    with pytest.raises(engine.FormatError) as info:
        engine.Container(str(dst))
    assert (info.value.kind, info.value.offset) == tuple(want)
    assert _oracle_kind(dst) == want.kind
