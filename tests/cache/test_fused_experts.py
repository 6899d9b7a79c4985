"""Fused (stacked) expert tensors read: expert e is slice e of one [E, ...] tensor.

Each expert of a Granite-MoE-like and a GPT-OSS-like container (see
``fused_containers.py``), and of one written by the official ``safetensors``
writer, equals the peer's slice of each tensor, with exact counters: through
get, chunked reads (preads counted), getmany, read-ahead on reader threads,
streams and O_DIRECT (each slice widened to 4,096).  Faults, refused opens
and allocation failures are in ``test_fused_experts_refused.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.cache.fused_containers import (
    ALIGN,
    GPT_OSS_TENSORS,
    Peer,
    chunk_pieces,
    gpt_oss_entries,
    granite,
    nbytes_of,
    open_direct,
    slot_tensors,
    widened,
    window_preads,
)
from xcache import engine
from xcache.faults.io import Fault

# -- layout and bytes -----------------------------------------------------------------

def test_granite_slot_layout_is_the_slice_of_each_tensor(granite_box):
    """C reports shape[1:], the same dtype and nbytes / E for each fused tensor."""
    with engine.Container(str(granite_box.folder)) as c, engine.ExpertCache(
            c, n_slots=3, **granite_box.kwargs()) as cache:
        assert slot_tensors(cache) == [
            ("input_linear.weight", "BF16", (80, 48), 0, 7680),
            ("output_linear.weight", "BF16", (48, 40), 7680, 3840)]
        assert cache.expert_bytes == 11520
        assert not any(cache.contiguous(*k) for k in granite_box.keys)


def test_gpt_oss_slot_layout_is_the_slice_of_each_tensor(oss_box):
    """Six fused tensors, MXFP4 blocks and scales as U8, biases BF16: sliced shapes."""
    with engine.Container(str(oss_box.folder)) as c, engine.ExpertCache(
            c, n_slots=3, **oss_box.kwargs()) as cache:
        assert slot_tensors(cache) == [
            ("gate_up_proj_blocks", "U8", (128, 3, 16), 0, 6144),
            ("gate_up_proj_scales", "U8", (128, 3), 6144, 384),
            ("gate_up_proj_bias", "BF16", (128,), 6528, 256),
            ("down_proj_blocks", "U8", (96, 2, 16), 6784, 3072),
            ("down_proj_scales", "U8", (96, 2), 9856, 192),
            ("down_proj_bias", "BF16", (96,), 10048, 192)]
        assert cache.expert_bytes == 10240


@pytest.mark.parametrize("which", ["granite", "gpt-oss"])
def test_every_fused_expert_equals_the_peer_slices(granite_box, oss_box, which):
    """get: every expert's bytes and views are arr[e] of each tensor; exact counters."""
    box = granite_box if which == "granite" else oss_box
    peer = Peer(box)
    with engine.Container(str(box.folder)) as c, engine.ExpertCache(
            c, n_slots=3, **box.kwargs()) as cache:
        for k in box.keys:
            with cache.get(*k) as ex:
                peer.assert_expert(ex)
        s = cache.stats()
        n = len(box.keys)
        assert (s["misses"], s["hits"], s["load_failures"]) == (n, 0, 0)
        assert s["payload_bytes"] == s["io_bytes"] == n * cache.expert_bytes
        cache.check()


def test_one_tensor_fused_expert_is_contiguous(tmp_path):
    """A fused layout of one tensor: each expert is one run of its shard."""
    box = granite(tmp_path / "c")
    box.tensors = ("output_linear.weight",)
    peer = Peer(box)
    with engine.Container(str(box.folder)) as c, engine.ExpertCache(
            c, n_slots=3, **box.kwargs()) as cache:
        assert all(cache.contiguous(*k) for k in box.keys)
        for k in box.keys:
            with cache.get(*k) as ex:
                peer.assert_expert(ex)
        cache.check()


def test_official_writer_container_and_reader(tmp_path):
    """Written by safetensors (GPT-OSS-like, F16 biases): experts are arr[e]."""
    sn = pytest.importorskip("safetensors.numpy")
    safetensors = pytest.importorskip("safetensors")
    rng = np.random.default_rng(7)
    E, tensors = 4, {}
    for la in (0, 1):
        for name, dtype, shape in gpt_oss_entries(la, E, 64, 32, bias="F16"):
            dt = np.float16 if dtype in ("F16", "BF16") else np.uint8
            raw = rng.integers(0, 256, nbytes_of(dtype, shape), dtype=np.uint8)
            tensors[name] = raw.view(dt).reshape(shape)
    path = tmp_path / "model.safetensors"
    sn.save_file(tensors, str(path))
    tmpl = "model.layers.{layer}.mlp.experts.{tensor}"
    with safetensors.safe_open(str(path), framework="np") as f:
        peer = {(la, t): f.get_tensor(tmpl.format(layer=la, tensor=t))
                for la in (0, 1) for t in GPT_OSS_TENSORS}
    with engine.Container(str(path)) as c, engine.ExpertCache(
            c, n_slots=3, top_k=2, expert_template=tmpl, tensors=GPT_OSS_TENSORS,
            layers=[0, 1], n_experts=E) as cache:
        for la in (0, 1):
            for e in range(E):
                with cache.get(la, e) as ex:
                    assert bytes(ex.data) == b"".join(
                        peer[la, t][e].tobytes() for t in GPT_OSS_TENSORS)
                    for t, view in ex.tensors.items():
                        want = peer[la, t][e]
                        assert (view.dtype, view.shape) == (want.dtype, want.shape)
                        assert view.tobytes() == want.tobytes()
        cache.check()


# -- chunks, batches, read-ahead, streams --------------------------------------------

@pytest.mark.parametrize("chunk", [0, 1000, 1024, 3840, 4096, 5000, 1 << 20])
def test_chunked_fused_reads_cut_each_slice_at_chunk_multiples(granite_box, faults,
                                                               chunk):
    """Each slice is one run cut at multiples of chunk_bytes: preads counted, exact."""
    peer = Peer(granite_box)
    with engine.Container(str(granite_box.folder), io=faults) as c, engine.ExpertCache(
            c, n_slots=3, chunk_bytes=chunk, **granite_box.kwargs()) as cache:
        faults.arm(Fault("delay", nth=10**9))  # never fires: counts preads
        for k in granite_box.keys:
            before = faults.reads
            with cache.get(*k) as ex:
                peer.assert_expert(ex)
            assert faults.reads - before == sum(
                chunk_pieces(off, n, chunk) for _, off, n, _ in peer.slices(*k)), k
        s = cache.stats()
        assert s["payload_bytes"] == s["io_bytes"] == 12 * 11520
        cache.check()


def test_getmany_loads_fused_experts_exactly(oss_box):
    """getmany over a layer's experts, then gets: hits with the peer's bytes."""
    peer = Peer(oss_box)
    with engine.Container(str(oss_box.folder)) as c, engine.ExpertCache(
            c, n_slots=5, batch_threads=3, chunk_bytes=2048,
            **oss_box.kwargs()) as cache:
        keys = [(2, e) for e in range(4)]
        assert cache.getmany(keys) == 4
        for k in keys:
            with cache.get(*k) as ex:
                peer.assert_expert(ex)
        s = cache.stats()
        assert (s["prefetch_loads"], s["hits"], s["misses"]) == (4, 4, 0)
        assert s["payload_bytes"] == s["io_bytes"] == 4 * 10240
        cache.check()


def test_prefetch_on_reader_threads_loads_fused_experts_exactly(oss_box):
    """Read-ahead on two reader threads publishes every expert with its slices."""
    peer = Peer(oss_box)
    with engine.Container(str(oss_box.folder)) as c, engine.ExpertCache(
            c, n_slots=13, io_threads=2, chunk_bytes=1000, **oss_box.kwargs()) as cache:
        cache.prefetch(oss_box.keys)
        cache.drain()
        assert cache.resident() == set(oss_box.keys)
        for k in oss_box.keys:
            with cache.get(*k) as ex:
                peer.assert_expert(ex)
        s = cache.stats()
        assert (s["prefetch_loads"], s["hits"], s["misses"]) == (12, 12, 0)
        assert s["payload_bytes"] == s["io_bytes"] == 12 * 10240
        cache.check()


def test_stream_yields_fused_experts_exactly(granite_box):
    """A stream over a layer yields each expert with the peer's slices."""
    peer = Peer(granite_box)
    with engine.Container(str(granite_box.folder)) as c, engine.ExpertCache(
            c, n_slots=6, io_threads=2, **granite_box.kwargs()) as cache:
        with cache.get(1, 2) as ex:
            peer.assert_expert(ex)
        keys = [(1, e) for e in range(4)]
        seen = []
        with cache.stream(keys) as st:
            for ex in st:
                peer.assert_expert(ex)
                seen.append(ex.key)
                ex.release()
        assert sorted(seen) == keys and seen[0] == (1, 2)
        s = cache.stats()
        assert (s["requests"], s["hits"], s["misses"]) == (5, 1, 4)
        assert s["payload_bytes"] == s["io_bytes"] == 4 * 11520
        cache.check()


# -- O_DIRECT -------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["granite", "gpt-oss"])
@pytest.mark.parametrize("chunk", [0, 4096, 8192])
def test_direct_reads_each_slice_widened(granite_box, oss_box, faults, which, chunk):
    """O_DIRECT: every expert exact; io_bytes adds each slice widened to 4,096."""
    box = granite_box if which == "granite" else oss_box
    peer = Peer(box)
    with open_direct(box, io=faults) as c, engine.ExpertCache(
            c, n_slots=3, chunk_bytes=chunk, **box.kwargs()) as cache:
        faults.arm(Fault("delay", nth=10**9))  # never fires: counts preads
        want_io = 0
        for k in box.keys:
            before = faults.reads
            with cache.get(*k) as ex:
                peer.assert_expert(ex)
            sl = peer.slices(*k)
            want_io += sum(widened(off, n) for _, off, n, _ in sl)
            assert faults.reads - before == sum(
                window_preads(off // ALIGN * ALIGN, widened(off, n), chunk,
                              Path(path).stat().st_size)
                for path, off, n, _ in sl), k
        s = cache.stats()
        assert s["payload_bytes"] == len(box.keys) * cache.expert_bytes
        assert s["io_bytes"] == want_io
        assert s["device_loads"] == len(box.keys)
        cache.check()


def test_direct_fused_chunk_must_be_aligned(granite_box):
    """O_DIRECT with chunk_bytes not a multiple of 4,096 is misuse at open."""
    with open_direct(granite_box) as c:
        with pytest.raises(engine.MisuseError) as ei:
            engine.ExpertCache(c, n_slots=3, chunk_bytes=1000, **granite_box.kwargs())
        assert str(ei.value) == ("chunk_bytes 1000 must be a multiple of 4096 "
                                 "for O_DIRECT reads")
