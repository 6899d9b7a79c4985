"""Sharded containers (model.safetensors.index.json), allocation failures, and scale."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from tests.helpers import INDEX, SHARD1, SHARD2, make_sharded, st_file
from xcache import engine
from xcache.engine import FormatError, NotFoundError, OutOfMemoryError, _lib


def fail(path) -> FormatError:
    with pytest.raises(FormatError) as ei:
        engine.Container(str(path))
    return ei.value


def test_folder_with_index_opens_every_shard_in_order(tmp_path):
    """Shards in sorted order, tensors shard by shard, bytes exact."""
    tensors = make_sharded(tmp_path)
    for path in (tmp_path, tmp_path / INDEX):
        with engine.Container(str(path)) as c:
            assert [os.path.basename(s) for s in c.shards] == [SHARD1, SHARD2]
            assert sorted(c) == ["a", "b", "c"] and list(c)[-1] == "c"
            assert c.info("c").shard == 1
            for name, arr in tensors.items():
                got = c.read(name)
                assert got.dtype == arr.dtype and np.array_equal(got, arr)


def test_missing_shard(tmp_path):
    """A shard the index names but the folder lacks: index error naming it."""
    make_sharded(tmp_path)
    (tmp_path / SHARD2).unlink()
    e = fail(tmp_path)
    assert e.kind == "index" and SHARD2 in str(e) and "does not exist" in str(e)
    text = (tmp_path / INDEX).read_text()
    assert e.offset == text.index('"c"')


def test_tensor_in_the_wrong_shard(tmp_path):
    """The map puts c in shard 1 but shard 2 holds it: index error at c's entry."""
    make_sharded(tmp_path, weight_map={"a": SHARD1, "b": SHARD1, "c": SHARD1,
                                       "z": SHARD2})
    e = fail(tmp_path)
    assert e.kind == "index" and '"c"' in str(e) and SHARD1 in str(e)
    assert SHARD2 in str(e)  # the file where c actually is
    assert e.offset == 8 + (tmp_path / SHARD2).read_bytes()[8:].index(b'"c"')


def test_tensor_missing_from_the_map(tmp_path):
    """A shard tensor the map does not name: index error."""
    make_sharded(tmp_path, weight_map={"a": SHARD1, "c": SHARD2})
    e = fail(tmp_path)
    assert e.kind == "index" and '"b"' in str(e) and "not in the weight_map" in str(e)


def test_map_entry_missing_from_its_shard(tmp_path):
    """The map names q in shard 2, which has no q: index error at the map entry."""
    make_sharded(tmp_path, weight_map={"a": SHARD1, "b": SHARD1, "c": SHARD2,
                                       "q": SHARD2})
    e = fail(tmp_path)
    assert e.kind == "index" and '"q"' in str(e)
    assert e.offset == (tmp_path / INDEX).read_text().index('"q"')


def test_wrong_total_size(tmp_path):
    """total_size 44 for 45 bytes of tensors: index error at the number."""
    make_sharded(tmp_path, total_size=44)
    e = fail(tmp_path)
    assert e.kind == "index" and "44" in str(e) and "45" in str(e)
    assert e.offset == (tmp_path / INDEX).read_text().index("44")


def test_total_size_may_be_absent(tmp_path):
    """An index without metadata.total_size is accepted."""
    make_sharded(tmp_path, total_size=None)
    with engine.Container(str(tmp_path)) as c:
        assert len(c) == 3


def test_stray_extra_shard_is_ignored(tmp_path):
    """A .safetensors file the index does not name is not part of the container."""
    make_sharded(tmp_path)
    (tmp_path / "model-00003-of-00002.safetensors").write_bytes(
        st_file({"stray": np.zeros(3, np.uint8)}))
    with engine.Container(str(tmp_path)) as c:
        assert len(c.shards) == 2 and "stray" not in c and len(c) == 3


def test_several_shards_without_index(tmp_path):
    """Two .safetensors files and no index: an index error that says so."""
    make_sharded(tmp_path)
    (tmp_path / INDEX).unlink()
    with pytest.raises(FormatError) as ei:
        engine.Container(str(tmp_path))
    assert ei.value.kind == "index"
    assert "2 .safetensors files" in str(ei.value) and INDEX in str(ei.value)


def test_one_shard_without_index(tmp_path):
    """A folder with exactly one .safetensors file and no index opens it."""
    (tmp_path / "only.safetensors").write_bytes(st_file({"x": np.ones(2, np.float64)}))
    (tmp_path / "notes.txt").write_text("ignored")
    with engine.Container(str(tmp_path)) as c:
        assert c.read("x").tolist() == [1.0, 1.0]


def test_empty_folder_is_not_found(tmp_path):
    """A folder with no shard and no index raises NotFoundError."""
    with pytest.raises(NotFoundError, match="no .safetensors file"):
        engine.Container(str(tmp_path))


def test_shard_names_must_stay_in_the_folder(tmp_path):
    """A weight_map value with a slash is an index error, never a path outside."""
    make_sharded(tmp_path, weight_map={"a": "../x.safetensors"})
    assert fail(tmp_path).kind == "index"


def test_format_error_inside_a_shard_names_the_shard(tmp_path):
    """A truncated second shard fails with length, naming that shard's file."""
    make_sharded(tmp_path)
    raw = (tmp_path / SHARD2).read_bytes()
    (tmp_path / SHARD2).write_bytes(raw[:-1])
    e = fail(tmp_path)
    assert e.kind == "length" and SHARD2 in str(e) and e.offset == len(raw) - 1


# -- allocation countdown -------------------------------------------------------


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_every_allocation_failure_is_clean(tmp_path):
    """Fail allocation N = 1, 2, ... of a sharded open until it succeeds: only
    OutOfMemoryError, and allocations and descriptors return to baseline."""
    make_sharded(tmp_path)
    lib = _lib.lib()
    live, fds = lib.xc_alloc_live(), _fds()
    failures = 0
    for n in range(1, 500):
        lib.xc_alloc_fail_at(n, 0)
        try:
            c = engine.Container(str(tmp_path), direct=True)
        except OutOfMemoryError:
            failures += 1
        else:
            lib.xc_alloc_fail_at(0, 0)
            assert len(c) == 3 and c.read("c").tolist() == [0, 1, 2, 3, 4]
            c.close()
            break
        finally:
            lib.xc_alloc_fail_at(0, 0)
        assert lib.xc_alloc_live() == live, f"leak after failing allocation {n}"
        assert _fds() == fds, f"descriptor leak after failing allocation {n}"
    else:
        pytest.fail("open never succeeded")
    assert failures >= 10
    assert lib.xc_alloc_live() == live and _fds() == fds


# -- real scale -----------------------------------------------------------------


def write_real_scale(path) -> int:
    """92 layers x 384 experts x 6 tensors of U8 [1] (~29 MB of header)."""
    parts = []
    off = 0
    for layer in range(92):
        for ex in range(384):
            for w in ("w1", "w2", "w3"):
                for part in ("weight_packed", "weight_scale"):
                    parts.append(
                        f'"language_model.model.layers.{layer}.block_sparse_moe.'
                        f'experts.{ex}.{w}.{part}":{{"dtype":"U8","shape":[1],'
                        f'"data_offsets":[{off},{off + 1}]}}')
                    off += 1
    header = ("{" + ",".join(parts) + "}").encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        f.write(bytes(i % 251 for i in range(off)))
    return off


def test_real_scale_header_opens_and_finds_names(tmp_path):
    """211,968 entries open and every lookup lands."""
    p = tmp_path / "big.safetensors"
    n = write_real_scale(p)
    assert n == 211_968 and 28_000_000 < p.stat().st_size < 30_000_000
    with engine.Container(str(p)) as c:
        names = list(c)
        assert len(c) == n and len(names) == n
        stem = "language_model.model.layers.{}.block_sparse_moe.experts.{}.{}"
        assert names[0] == stem.format(0, 0, "w1.weight_packed")
        last = stem.format(91, 383, "w3.weight_scale")
        assert names[-1] == last
        info = c.info(last)
        assert (info.offset - c.info(names[0]).offset, info.nbytes) == (n - 1, 1)
        assert c.read_bytes(last) == bytes([(n - 1) % 251])
        for i in range(0, n, 997):
            assert c.info(names[i]).offset - c.info(names[0]).offset == i
        assert stem.format(92, 0, "w1.weight_packed") not in c
