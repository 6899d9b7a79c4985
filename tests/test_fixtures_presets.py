"""Presets: their exact numbers, uniqueness of content, and the official reader."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
import safetensors
from safetensors import safe_open

import fixtures
from fixtures import PRESETS, expected_bytes, generate, preset, verify
from fixtures.content import identify

SMALL = [p for p in PRESETS if p != "huge-sparse"]
K3 = "language_model.model.layers.{l}.block_sparse_moe.experts.{e}.{w}.{p}"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Every small preset generated once for this module."""
    root = tmp_path_factory.mktemp("presets")
    return {name: generate(name, root / name) for name in SMALL}


@pytest.fixture(scope="module")
def huge(tmp_path_factory):
    """huge-sparse generated once, with its wall time."""
    t0 = time.perf_counter()
    lay = generate("huge-sparse", tmp_path_factory.mktemp("huge") / "huge")
    return lay, time.perf_counter() - t0


def _file_bytes(layout, entry) -> bytes:
    with open(layout.path(entry.file), "rb") as f:
        f.seek(entry.offset)
        return f.read(entry.nbytes)


def test_k3_mini_is_exactly_the_design_layout(small):
    """k3-mini: one 59,776-byte shard, data at 20,608, expert e at 20,608+1,632e."""
    lay = small["k3-mini"]
    spec = lay.spec
    assert (spec.layers, spec.n_experts, spec.top_k) == ([0], 24, 4)
    assert spec.expert_nbytes == 1632 and len(lay) == 144
    assert [f.name for f in lay.files] == ["model-00001-of-00001.safetensors"]
    path = lay.path("model-00001-of-00001.safetensors")
    raw = path.read_bytes()
    assert len(raw) == 59_776
    n = int.from_bytes(raw[:8], "little")
    assert n == 20_600 and lay.files[0].data_start == 20_608
    # Golden header, rebuilt from DESIGN §3's words: entries in order, default
    # json separators (", " and ": "), spaces up to a multiple of 8.
    entries, off = {}, 0
    for e in range(24):
        for w in ("w1", "w2", "w3"):
            for p, shape, nb in (("weight_packed", [8, 64], 512),
                                 ("weight_scale", [8, 4], 32)):
                entries[K3.format(l=0, e=e, w=w, p=p)] = {
                    "dtype": "U8", "shape": shape, "data_offsets": [off, off + nb]}
                off += nb
    text = json.dumps(entries, separators=(", ", ": "))
    assert raw[8:20_608] == (text + " " * (20_600 - len(text))).encode()
    for e in range(24):
        (run,) = lay.expert_runs(0, e)
        assert (run.offset, run.nbytes) == (20_608 + 1_632 * e, 1_632)
    index = json.loads((lay.dir / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == 39_168
    assert set(index["weight_map"]) == set(entries)
    assert set(index["weight_map"].values()) == {"model-00001-of-00001.safetensors"}
    assert sorted(os.listdir(lay.dir)) == ["model-00001-of-00001.safetensors",
                                           "model.safetensors.index.json"]


def test_mixtral_mini_numbers(small):
    """mixtral-mini: BF16 w1/w2/w3, 4 layers x 8 experts, top-2, 3 shards + index."""
    lay = small["mixtral-mini"]
    spec = lay.spec
    assert (spec.layers, spec.n_experts, spec.top_k) == ([0, 1, 2, 3], 8, 2)
    assert [p for p, _, _ in spec.expert_tensors] == ["w1.weight", "w2.weight",
                                                      "w3.weight"]
    assert {d for _, d, _ in spec.expert_tensors} == {"BF16"}
    assert spec.expert_nbytes == 3 * 32 * 16 * 2
    assert [f.name for f in lay.files] == [
        f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert (lay.dir / "model.safetensors.index.json").exists()
    assert len(lay) == 4 * 8 * 3 + 15


def test_deepseek_mini_scatters_experts(small):
    """deepseek-mini: FP8 + F32 scales, dtype-sorted so no expert is one run."""
    lay = small["deepseek-mini"]
    spec = lay.spec
    assert {d for _, d, _ in spec.expert_tensors} == {"F8_E4M3", "F32"}
    assert spec.layout == "dtype-sorted" and len(lay.files) == 4
    assert any(t.layer is None for t in spec.all_tensors)
    for layer in spec.layers:
        for e in range(spec.n_experts):
            assert len(lay.expert_runs(layer, e)) > 1
    order = [e.name for e in lay.entries if e.shard == 0]
    assert order[0] == "model.layers.1.mlp.experts.0.down_proj.weight_scale_inv"


@pytest.mark.parametrize("name", SMALL)
def test_no_two_tensors_or_words_coincide(small, name):
    """No two tensors are byte-identical and no two aligned 8-byte words repeat."""
    lay = small[name]
    blobs = [_file_bytes(lay, e) for e in lay.entries]
    assert len(set(blobs)) == len(blobs)
    words = np.concatenate([np.frombuffer(b[:len(b) // 8 * 8], "<u8") for b in blobs])
    assert len(np.unique(words)) == len(words)


@pytest.mark.parametrize("name", SMALL)
def test_files_hold_expected_bytes_and_verify_clean(small, name):
    """Every tensor on disk equals expected_bytes and verify finds nothing."""
    lay = small[name]
    for e in lay.entries:
        assert _file_bytes(lay, e) == expected_bytes(lay.spec, e.name)
    assert verify(lay.dir) == []
    assert fixtures.container_spec(lay.dir) == preset(name)


@pytest.mark.parametrize("name", SMALL)
def test_official_package_reads_the_same_bytes(small, name):
    """safetensors.deserialize and safe_open(np) agree with the generator."""
    lay = small[name]
    seen = {}
    for shard in lay.files:
        path = lay.path(shard.name)
        for tname, info in safetensors.deserialize(path.read_bytes()):
            seen[tname] = (info["dtype"], tuple(info["shape"]), bytes(info["data"]))
        with safe_open(str(path), framework="np") as f:
            for tname in f.keys():
                sl = f.get_slice(tname)
                if sl.get_dtype() in ("BF16",) or sl.get_dtype().startswith("F8"):
                    continue  # numpy has no such dtype: covered by deserialize
                arr = f.get_tensor(tname)
                assert arr.tobytes() == expected_bytes(lay.spec, tname)
    assert seen == {e.name: (e.dtype, e.shape, expected_bytes(lay.spec, e.name))
                    for e in lay.entries}


def test_huge_sparse_scale_and_cost(huge):
    """huge-sparse: real DeepSeek-V3 sizes, > 20k tensors, > 4 GiB, little disk."""
    lay, seconds = huge
    spec = lay.spec
    assert len(lay) > 20_000
    assert spec.expert_nbytes == 3 * (2048 * 7168 + 16 * 56 * 4)
    assert spec.n_experts == 256 and spec.top_k == 8
    total = sum(f.size for f in lay.files)
    assert total > 100 * 2**30
    assert all(f.size > 2**32 for f in lay.files)
    used = sum(os.stat(lay.path(f.name)).st_blocks * 512 for f in lay.files)
    assert used < 400 * 2**20
    assert seconds < 10


def test_huge_sparse_content_above_4gib(huge):
    """Tensors past byte 2**32 of a shard hold their edges and zero holes."""
    lay, _ = huge
    spec = lay.spec
    high = [e for e in lay.entries if e.offset > 2**32 and e.nbytes > 2**20][:5]
    assert len(high) == 5
    for e in high:
        with open(lay.path(e.file), "rb") as f:
            f.seek(e.offset)
            head = f.read(4096)
            f.seek(e.offset + e.nbytes - 64)
            tail = f.read(64)
        want = expected_bytes(spec, e.name)
        assert head[:64] == want[:64] and head[64:] == bytes(4096 - 64)
        assert tail == want[-64:]
        m = identify(tail, spec)
        assert (m.name, m.offset) == (e.name, e.nbytes - 64)


def test_huge_sparse_official_package_sample(huge):
    """The official reader parses huge-sparse headers and reads a sample."""
    lay, _ = huge
    spec = lay.spec
    for shard in (lay.files[0], lay.files[-1]):
        ents = [e for e in lay.entries if e.file == shard.name]
        with safe_open(str(lay.path(shard.name)), framework="np") as f:
            assert set(f.keys()) == {e.name for e in ents}
            for e in ents[-40:]:
                sl = f.get_slice(e.name)
                assert (sl.get_dtype(), tuple(sl.get_shape())) == (e.dtype, e.shape)
                if e.dtype == "F32":
                    got = f.get_tensor(e.name).tobytes()
                    assert got == expected_bytes(spec, e.name)


def test_huge_sparse_verify_is_clean(huge):
    """verify on huge-sparse checks headers and edges and finds nothing."""
    assert verify(huge[0].dir) == []
