"""The gate's scratch copies of a container keep a sparse file sparse.

Every scenario run copies its container (``Target.populate``); a generated
preset is copied whole and a user's folder mirrored with symlinks except the
files a step changes.  huge-sparse is about 162 GB of holes with a few MB of
data, so a copy that fills the holes writes the whole apparent size per run
(``replay.py --container huge-sparse`` filled the disk before the copy kept
holes).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from xcache.gate.containers import Target, copy_sparse

MIB = 1 << 20


def _sparse_file(path: Path) -> bytes:
    """A 32 MiB file with data at its start, one MiB in, and its last bytes."""
    with open(path, "wb") as f:
        f.write(b"head" * 1024)
        f.seek(MIB + 5)
        f.write(b"mid" * 100)
        f.seek(32 * MIB - 7)
        f.write(b"tail!!!")
    os.utime(path, ns=(1_000_000_000, 2_000_000_000))
    return path.read_bytes()


def _allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def _holes_supported(path: Path) -> bool:
    return _allocated(path) < 8 * MIB


def test_copy_sparse_keeps_bytes_stat_and_holes(tmp_path):
    """Same bytes, size and mtime; allocation stays that of the data."""
    src = tmp_path / "src.safetensors"
    want = _sparse_file(src)
    if not _holes_supported(src):
        pytest.skip(f"{tmp_path}: the file system does not keep holes")
    dst = tmp_path / "dst.safetensors"
    copy_sparse(src, dst)
    assert dst.read_bytes() == want
    assert os.stat(dst).st_size == 32 * MIB
    assert os.stat(dst).st_mtime_ns == 2_000_000_000
    assert _allocated(dst) < 8 * MIB


def test_copy_sparse_of_a_file_ending_in_a_hole_and_an_empty_file(tmp_path):
    """A trailing hole is kept by the size; an empty file stays empty."""
    src = tmp_path / "hole.bin"
    with open(src, "wb") as f:
        f.write(b"x")
        f.truncate(3 * MIB)
    copy_sparse(src, tmp_path / "hole-copy.bin")
    assert (tmp_path / "hole-copy.bin").read_bytes() == b"x" + bytes(3 * MIB - 1)
    (tmp_path / "empty.bin").write_bytes(b"")
    copy_sparse(tmp_path / "empty.bin", tmp_path / "empty-copy.bin")
    assert (tmp_path / "empty-copy.bin").read_bytes() == b""


@pytest.mark.parametrize("linked", [False, True])
def test_populate_keeps_a_sparse_shard_sparse(tmp_path, linked):
    """A fixture's copy and a linked folder's private copy both keep the holes."""
    pristine = tmp_path / "pristine"
    pristine.mkdir()
    want = _sparse_file(pristine / "model.safetensors")
    if not _holes_supported(pristine / "model.safetensors"):
        pytest.skip(f"{tmp_path}: the file system does not keep holes")
    (pristine / "config.json").write_text("{}")
    target = Target("t", pristine, {}, linked=linked)
    scratch = tmp_path / "scratch"
    target.populate(scratch, frozenset({"model.safetensors"}))
    copy = scratch / "model.safetensors"
    assert not copy.is_symlink()
    assert copy.read_bytes() == want
    assert _allocated(copy) < 8 * MIB
    assert (scratch / "config.json").is_symlink() == linked
    assert (scratch / "config.json").read_text() == "{}"
