"""Atomic writes: disk full, permission denied, and never clobbering output."""

from __future__ import annotations

import errno
import os

import pytest
from pyfakefs.helpers import set_uid

import fixtures.writer as writer
from fixtures import WriteError, generate, verify


@pytest.fixture
def user_fs(fs):
    """A fake filesystem seen by an ordinary user (root ignores permissions)."""
    set_uid(1000)
    fs.create_dir("/work")
    yield fs
    set_uid(0)


def _listing(root: str) -> list[str]:
    out = []
    for d, dirs, files in os.walk(root):
        out += [os.path.join(d, x) for x in dirs + files]
    return sorted(out)


@pytest.mark.parametrize("limit", [100, 60_000, 90_000])
def test_disk_full_leaves_nothing_and_names_the_file(user_fs, limit):
    """ENOSPC mid-write: WriteError naming a shard, no partial container left."""
    user_fs.set_disk_usage(limit)
    with pytest.raises(WriteError) as ei:
        generate("mixtral-mini", "/work/out")
    assert ei.value.errno == errno.ENOSPC
    assert ei.value.filename.startswith("/work/out/model-0000")
    assert "/work/out/" in str(ei.value)
    assert _listing("/work") == []


def test_disk_full_on_the_index_leaves_nothing(user_fs):
    """Running out of space on the last file (the index) still leaves nothing."""
    need = 59_776  # k3-mini's shard fits, its index does not
    user_fs.set_disk_usage(need + 100)
    with pytest.raises(WriteError) as ei:
        generate("k3-mini", "/work/k3")
    assert ei.value.filename == "/work/k3/model.safetensors.index.json"
    assert _listing("/work") == []


def test_read_only_parent_is_permission_denied(user_fs):
    """A folder we may not write to gives EACCES naming the target."""
    os.chmod("/work", 0o555)
    with pytest.raises(WriteError) as ei:
        generate("k3-mini", "/work/k3")
    assert ei.value.errno == errno.EACCES
    assert "/work/k3" in str(ei.value)
    assert _listing("/work") == []


def test_permission_lost_mid_write(user_fs, monkeypatch):
    """Permission withdrawn after the first shard: nothing partial remains."""
    real = writer._write_shard

    def flaky(path, layout, k):
        if k == 1:
            os.chmod(path.parent, 0o555)
        return real(path, layout, k)

    monkeypatch.setattr(writer, "_write_shard", flaky)
    with pytest.raises(WriteError) as ei:
        generate("mixtral-mini", "/work/m")
    assert ei.value.errno == errno.EACCES
    assert ei.value.filename == "/work/m/model-00002-of-00003.safetensors"
    assert _listing("/work") == []


def test_existing_output_is_kept_without_force(tmp_path):
    """A second generate into a used folder refuses; force replaces it."""
    out = tmp_path / "c"
    generate("k3-mini", out)
    (out / "note.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="force"):
        generate("mixtral-mini", out)
    assert (out / "note.txt").read_text() == "mine"
    lay = generate("mixtral-mini", out, force=True)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f.name for f in lay.files] + ["model.safetensors.index.json"])
    assert verify(out) == []
    assert [p.name for p in tmp_path.iterdir()] == ["c"]


def test_empty_folder_counts_as_absent(tmp_path):
    """An existing empty folder (e.g. tmp_path) is filled without force."""
    lay = generate("k3-mini", tmp_path)
    assert lay.dir == tmp_path and verify(tmp_path) == []


def test_failed_force_keeps_the_old_container(user_fs):
    """A replacement that fails for lack of space leaves the old container."""
    user_fs.set_disk_usage(10**9)  # pyfakefs counts usage only with a total
    generate("k3-mini", "/work/k3")
    before = {p: open(p, "rb").read() for p in _listing("/work/k3")}
    # room for part of the first new shard: the write fails midway
    user_fs.set_disk_usage(user_fs.get_disk_usage().used + 20_000)
    with pytest.raises(WriteError):
        generate("mixtral-mini", "/work/k3", force=True)
    assert {p: open(p, "rb").read() for p in _listing("/work/k3")} == before
    assert _listing("/work") == sorted(["/work/k3", *before])
