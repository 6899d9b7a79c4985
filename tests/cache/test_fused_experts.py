"""Fused (stacked) expert tensors: expert e is slice e of one [E, ...] tensor per layer.

A template without ``{expert}`` names one tensor per (layer, tensor) whose
leading dimension is the layer's expert count; expert e's piece of it is
bytes [e * nbytes / E, (e + 1) * nbytes / E) of its data, seen with shape
``shape[1:]``.  The containers here are Granite-MoE-like (``input_linear`` /
``output_linear``, BF16) and GPT-OSS-like (MXFP4 ``*_blocks`` and ``*_scales``
as U8 plus BF16 biases), written with distinct random bytes per tensor by a
tiny raw writer (numpy has no BF16) or by the official ``safetensors``
writer; the peer that says what each expert must be is the oracle's reader
(or ``safetensors``' own), sliced with numpy.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from xcache import engine
from xcache.engine import _lib
from xcache.faults.io import Fault, IOFaults
from xcache.faults.loops import Baseline, Run, alloc_hooks, countdown
from xcache.oracle import safetensors as ost

ALIGN = 4096

#: bits per element of the dtypes these containers use
BITS = {"BF16": 16, "F16": 16, "F32": 32, "U8": 8, "F4": 4}
#: how the peer sees a dtype in numpy (BF16 as its raw 16 bits)
PEER_NP = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "U8": np.uint8}


@dataclass
class Box:
    """A written container and the layout that reads its fused experts."""

    folder: Path
    template: str
    tensors: tuple[str, ...]
    layers: tuple[int, ...]
    n_experts: int
    top_k: int = 2
    dtypes: dict[str, str] = field(default_factory=dict)

    def kwargs(self) -> dict:
        """The five layout keyword arguments of ExpertCache."""
        return {"expert_template": self.template, "tensors": list(self.tensors),
                "layers": list(self.layers), "n_experts": self.n_experts,
                "top_k": self.top_k}

    def name(self, layer: int, tensor: str) -> str:
        """The container name of (layer, tensor)."""
        return self.template.format(layer=layer, tensor=tensor)

    @property
    def keys(self) -> list[tuple[int, int]]:
        """Every (layer, expert) of the layout, in key order."""
        return [(la, e) for la in self.layers for e in range(self.n_experts)]


def nbytes_of(dtype: str, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor of this dtype and shape."""
    return int(np.prod(shape, dtype=np.int64)) * BITS[dtype] // 8


def write_shards(folder: Path, shards: list[list[tuple[str, str, tuple[int, ...]]]],
                 seed: int) -> None:
    """Raw safetensors shards (names sorted in each), distinct random bytes per tensor.

    One shard is ``model.safetensors``; several get an index.
    """
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    weight_map, total = {}, 0
    for i, entries in enumerate(shards):
        fname = ("model.safetensors" if len(shards) == 1 else
                 f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors")
        header, data = {}, bytearray()
        for name, dtype, shape in sorted(entries):
            n = nbytes_of(dtype, shape)
            raw = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
            header[name] = {"dtype": dtype, "shape": list(shape),
                            "data_offsets": [len(data), len(data) + len(raw)]}
            data += raw
            weight_map[name] = fname
            total += len(raw)
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        (folder / fname).write_bytes(struct.pack("<Q", len(text)) + text + bytes(data))
    if len(shards) > 1:
        (folder / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": total}, "weight_map": weight_map}))


def granite(folder: Path, *, E: int = 4, h: int = 48, f: int = 40,
            layers: tuple[int, ...] = (0, 1, 2), n_shards: int = 1,
            seed: int = 1) -> Box:
    """Granite-MoE-like: input_linear [E, 2f, h], output_linear [E, h, f]."""
    per_layer = []
    for la in layers:
        p = f"model.layers.{la}."
        per_layer.append([
            (p + "input_layernorm.weight", "BF16", (h,)),
            (p + "self_attn.q_proj.weight", "BF16", (h, h)),
            (p + "block_sparse_moe.router.layer.weight", "BF16", (E, h)),
            (p + "block_sparse_moe.input_linear.weight", "BF16", (E, 2 * f, h)),
            (p + "block_sparse_moe.output_linear.weight", "BF16", (E, h, f)),
        ])
    embed = [("model.embed_tokens.weight", "BF16", (50, h))]
    shards = _split(per_layer, n_shards, embed)
    write_shards(folder, shards, seed)
    return Box(folder, "model.layers.{layer}.block_sparse_moe.{tensor}",
               ("input_linear.weight", "output_linear.weight"), layers, E,
               dtypes={"input_linear.weight": "BF16", "output_linear.weight": "BF16"})


GPT_OSS_TENSORS = ("gate_up_proj_blocks", "gate_up_proj_scales", "gate_up_proj_bias",
                   "down_proj_blocks", "down_proj_scales", "down_proj_bias")


def gpt_oss_entries(la: int, E: int, h: int, f: int, bias: str = "BF16"
                    ) -> list[tuple[str, str, tuple[int, ...]]]:
    """One GPT-OSS-like layer: MXFP4 blocks and scales as U8, biases, router."""
    p = f"model.layers.{la}.mlp."
    return [
        (p + "router.weight", "BF16", (E, h)),
        (p + "router.bias", "BF16", (E,)),
        (p + "experts.gate_up_proj_blocks", "U8", (E, 2 * f, h // 32, 16)),
        (p + "experts.gate_up_proj_scales", "U8", (E, 2 * f, h // 32)),
        (p + "experts.gate_up_proj_bias", bias, (E, 2 * f)),
        (p + "experts.down_proj_blocks", "U8", (E, h, f // 32, 16)),
        (p + "experts.down_proj_scales", "U8", (E, h, f // 32)),
        (p + "experts.down_proj_bias", bias, (E, h)),
        (f"model.layers.{la}.self_attn.sinks", "BF16", (8,)),
    ]


def gpt_oss(folder: Path, *, E: int = 4, h: int = 96, f: int = 64,
            layers: tuple[int, ...] = (0, 1, 2), n_shards: int = 1,
            seed: int = 2) -> Box:
    """A GPT-OSS-like container (MXFP4 experts fused per layer)."""
    per_layer = [gpt_oss_entries(la, E, h, f) for la in layers]
    embed = [("model.embed_tokens.weight", "BF16", (40, h))]
    shards = _split(per_layer, n_shards, embed)
    write_shards(folder, shards, seed)
    dt = {"gate_up_proj_bias": "BF16", "down_proj_bias": "BF16"}
    return Box(folder, "model.layers.{layer}.mlp.experts.{tensor}", GPT_OSS_TENSORS,
               layers, E, top_k=2, dtypes={t: dt.get(t, "U8") for t in GPT_OSS_TENSORS})


def _split(per_layer: list[list], n_shards: int, extra: list) -> list[list]:
    """Layers spread over n_shards shards in order; extra tensors in the first."""
    shards: list[list] = [list(extra)] + [[] for _ in range(n_shards - 1)]
    for i, entries in enumerate(per_layer):
        shards[i * n_shards // len(per_layer)].extend(entries)
    return shards


class Peer:
    """What each fused expert must be: the oracle reader's arrays, sliced by numpy."""

    def __init__(self, box: Box) -> None:
        self.box = box
        self.oc = ost.open_container(box.folder)
        self.arrays: dict[str, np.ndarray] = {}
        for la in box.layers:
            for t in box.tensors:
                info = self.oc.tensor(box.name(la, t))
                raw = np.frombuffer(self.oc.read_bytes(info.name), np.uint8)
                arr = raw.view(PEER_NP[info.dtype]).reshape(info.shape)
                self.arrays[info.name] = arr

    def array(self, layer: int, tensor: str) -> np.ndarray:
        """The whole [E, ...] tensor of (layer, tensor)."""
        return self.arrays[self.box.name(layer, tensor)]

    def payload(self, layer: int, expert: int) -> bytes:
        """The expert's bytes: slice ``expert`` of each tensor, in tensor order."""
        return b"".join(self.array(layer, t)[expert].tobytes()
                        for t in self.box.tensors)

    def slices(self, layer: int, expert: int) -> list[tuple[str, int, int, int]]:
        """Per tensor: (shard path, absolute offset, nbytes) of the expert's slice."""
        out = []
        for t in self.box.tensors:
            info = self.oc.tensor(self.box.name(layer, t))
            n = info.nbytes // self.box.n_experts
            out.append((info.shard, info.offset + expert * n, n, info.offset))
        return out

    def assert_expert(self, ex: engine.Expert) -> None:
        """The expert's bytes and every tensor view equal the peer's slices, exactly."""
        layer, e = ex.key
        assert bytes(ex.data) == self.payload(layer, e), ex.key
        views = ex.tensors
        assert list(views) == list(self.box.tensors)
        for t, view in views.items():
            want = self.array(layer, t)[e]
            if want.dtype == np.uint16:  # BF16: raw bytes, flat, in the engine's view
                want = want.view(np.uint8).reshape(-1)
            assert (view.dtype, view.shape) == (want.dtype, want.shape), t
            assert np.array_equal(view, want), (ex.key, t)
            assert not view.flags.writeable


def slot_tensors(cache: engine.ExpertCache) -> list[tuple[str, str, tuple, int, int]]:
    """What C reports for each slot tensor: name, dtype, shape, offset, nbytes."""
    ffi, lib = _lib.ffi(), _lib.lib()
    info = ffi.new("xc_slot_tensor *")
    out = []
    for i in range(lib.xc_cache_n_tensors(cache._ptr)):
        _lib.check(lib.xc_cache_tensor(cache._ptr, i, info))
        out.append((ffi.string(info.name).decode(),
                    ffi.string(lib.xc_dtype_name(info.dtype)).decode(),
                    tuple(int(info.shape[d]) for d in range(info.ndim)),
                    int(info.offset), int(info.nbytes)))
    return out


def widened(offset: int, n: int) -> int:
    """Length of [offset, offset + n) widened to ALIGN on both ends."""
    return (-(-(offset + n) // ALIGN) - offset // ALIGN) * ALIGN


def chunk_pieces(offset: int, n: int, chunk: int) -> int:
    """Preads of a run [offset, offset + n) cut at multiples of chunk (0: one)."""
    if chunk == 0 or n == 0:
        return 1
    return (offset + n - 1) // chunk - offset // chunk + 1


def window_preads(offset: int, n: int, chunk: int, file_size: int) -> int:
    """Preads of a widened window: one per chunk, and one more that meets end of file.

    A piece running past the end of the file gets the bytes up to it, and
    the read loop asks once more to find end of file (a 0).
    """
    reads, at, end = 0, offset, offset + n
    while at < end:
        stop = min(end, (at // chunk + 1) * chunk) if chunk else end
        reads += 2 if stop > file_size else 1
        at = stop
    return reads


@pytest.fixture(scope="module")
def granite_box(tmp_path_factory: pytest.TempPathFactory) -> Box:
    """A three-layer Granite-like container, one shard."""
    return granite(tmp_path_factory.mktemp("granite") / "c")


@pytest.fixture(scope="module")
def oss_box(tmp_path_factory: pytest.TempPathFactory) -> Box:
    """A three-layer GPT-OSS-like container over two shards."""
    return gpt_oss(tmp_path_factory.mktemp("oss") / "c", n_shards=2)


@pytest.fixture()
def faults():
    """A fresh injector, closed after the test."""
    f = IOFaults()
    yield f
    f.close()


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

def _direct(box: Box, **kw) -> engine.Container:
    """The box's container opened O_DIRECT, or the test skipped with the reason."""
    c = engine.Container(str(box.folder), direct=True, **kw)
    if not c.direct_active:  # pragma: no cover - filesystem without O_DIRECT
        note = c.direct_note
        c.close()
        pytest.skip(f"O_DIRECT unavailable: {note}")
    return c


@pytest.mark.parametrize("which", ["granite", "gpt-oss"])
@pytest.mark.parametrize("chunk", [0, 4096, 8192])
def test_direct_reads_each_slice_widened(granite_box, oss_box, faults, which, chunk):
    """O_DIRECT: every expert exact; io_bytes adds each slice widened to 4,096."""
    box = granite_box if which == "granite" else oss_box
    peer = Peer(box)
    with _direct(box, io=faults) as c, engine.ExpertCache(
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
    with _direct(granite_box) as c:
        with pytest.raises(engine.MisuseError) as ei:
            engine.ExpertCache(c, n_slots=3, chunk_bytes=1000, **granite_box.kwargs())
        assert str(ei.value) == ("chunk_bytes 1000 must be a multiple of 4096 "
                                 "for O_DIRECT reads")


# -- faults ---------------------------------------------------------------------------

@pytest.mark.parametrize("direct", [False, True])
def test_io_fault_in_a_fused_read_fails_the_load_only(granite_box, faults, direct):
    """EIO on the second slice's read: the load fails, slot EMPTY, residents intact."""
    peer = Peer(granite_box)
    c = _direct(granite_box, io=faults) if direct else engine.Container(
        str(granite_box.folder), io=faults)
    with c, engine.ExpertCache(c, n_slots=4, **granite_box.kwargs()) as cache:
        for k in [(0, 0), (0, 1)]:
            with cache.get(*k) as ex:
                peer.assert_expert(ex)
        sl = peer.slices(2, 3)
        # buffered: forward order, the 2nd pread is output_linear's slice;
        # O_DIRECT: last tensor first, the 2nd pread is input_linear's window
        path, off, n, _ = sl[0] if direct else sl[1]
        at, size = (off // ALIGN * ALIGN, widened(off, n)) if direct else (off, n)
        faults.arm(Fault("eio", nth=2))
        with pytest.raises(engine.EngineIOError) as ei:
            cache.get(2, 3)
        assert faults.fired == 1
        faults.disarm()
        e = ei.value
        assert (e.offset, e.layer, e.expert) == (at, 2, 3)
        assert str(e) == (f"layer 2 expert 3: {path}: read of {size} bytes at byte "
                          f"{at} failed after 0 bytes: Input/output error (errno 5)")
        cache.check()
        assert cache.resident() == {(0, 0), (0, 1)}
        s = cache.stats()
        assert (s["load_failures"], s["io_errors"], s["misses"]) == (1, 1, 3)
        for k in [(0, 0), (0, 1), (2, 3)]:
            with cache.get(*k) as ex:
                peer.assert_expert(ex)
        cache.check()


def test_short_read_in_a_chunked_fused_read(granite_box, faults):
    """EOF on a middle chunk of a slice: ShortReadError naming that chunk."""
    peer = Peer(granite_box)
    with engine.Container(str(granite_box.folder), io=faults) as c, engine.ExpertCache(
            c, n_slots=3, chunk_bytes=4096, **granite_box.kwargs()) as cache:
        path, off, n, _ = peer.slices(1, 2)[0]
        cut = (off // 4096 + 1) * 4096  # the second chunk starts here
        faults.arm(Fault("eof", nth=2))
        with pytest.raises(engine.ShortReadError) as ei:
            cache.get(1, 2)
        faults.disarm()
        stop = min(cut + 4096, off + n)
        assert (ei.value.layer, ei.value.expert) == (1, 2)
        assert str(ei.value) == (
            f"layer 1 expert 2: {path}: short read: 0 of {stop - cut} bytes at byte "
            f"{cut} (end of file at byte {cut})")
        assert cache.resident() == set()
        assert cache.stats()["short_reads"] == 1
        cache.check()


# -- open-time errors -----------------------------------------------------------------

def _open_error(folder: Path, box: Box, **kw) -> engine.EngineError:
    """The error ExpertCache raises at open over folder with box's layout."""
    args = {**box.kwargs(), **kw}
    with engine.Container(str(folder)) as c:
        with pytest.raises(engine.EngineError) as ei:
            engine.ExpertCache(c, n_slots=3, **args)
    return ei.value


def _granite_with(folder: Path, replace: dict[str, tuple[str, tuple[int, ...]]],
                  E: int = 4) -> Box:
    """A one-shard Granite-like box with some tensors' dtype and shape replaced."""
    entries = []
    for la in (0, 1):
        p = f"model.layers.{la}.block_sparse_moe."
        entries += [(p + "input_linear.weight", "BF16", (E, 16, 8)),
                    (p + "output_linear.weight", "BF16", (E, 8, 8))]
    entries = [(n, *replace.get(n, (d, s))) for n, d, s in entries]
    write_shards(folder, [entries], seed=3)
    return Box(folder, "model.layers.{layer}.block_sparse_moe.{tensor}",
               ("input_linear.weight", "output_linear.weight"), (0, 1), E)


def test_leading_dim_not_n_experts_is_refused(tmp_path):
    """A fused tensor's leading dim no multiple of n_experts: misuse naming it."""
    name = "model.layers.1.block_sparse_moe.output_linear.weight"
    box = _granite_with(tmp_path, {name: ("BF16", (6, 8, 4))})
    e = _open_error(tmp_path, box)
    assert type(e) is engine.MisuseError
    assert (e.layer, e.expert) == (1, None)
    assert str(e) == (f"layer 1: fused tensor 'output_linear.weight' ({name}) has "
                      "shape [6, 8, 4]: leading dimension 6 is neither n_experts 4 "
                      "nor a multiple of it")


def test_wrong_n_experts_is_refused_at_the_first_tensor(tmp_path):
    """Asking 8 experts of [4, ...] tensors: the first layer's first tensor is named."""
    box = _granite_with(tmp_path, {})
    e = _open_error(tmp_path, box, n_experts=8)
    assert str(e) == (
        "layer 0: fused tensor 'input_linear.weight' "
        "(model.layers.0.block_sparse_moe.input_linear.weight) has shape [4, 16, 8]: "
        "leading dimension 4 is neither n_experts 8 nor a multiple of it")


def test_zero_dim_fused_tensor_is_refused(tmp_path):
    """A 0-d tensor cannot be sliced by expert: misuse naming it."""
    name = "model.layers.0.block_sparse_moe.input_linear.weight"
    box = _granite_with(tmp_path, {name: ("F32", ())})
    e = _open_error(tmp_path, box)
    assert type(e) is engine.MisuseError
    assert str(e) == (f"layer 0: fused tensor 'input_linear.weight' ({name}) is 0-d "
                      "(shape []); a fused expert tensor needs a leading dimension "
                      "equal to n_experts 4")


def test_bytes_not_divisible_by_n_experts_is_refused(tmp_path):
    """F4 [2, 3] is 3 bytes: two experts cannot each have whole bytes of it."""
    name = "model.layers.1.block_sparse_moe.input_linear.weight"
    box = _granite_with(tmp_path, {
        name: ("F4", (2, 3)),
        "model.layers.0.block_sparse_moe.input_linear.weight": ("F4", (2, 4)),
        "model.layers.0.block_sparse_moe.output_linear.weight": ("BF16", (2, 8)),
        "model.layers.1.block_sparse_moe.output_linear.weight": ("BF16", (2, 8))},
        E=4)
    e = _open_error(tmp_path, box, n_experts=2)
    assert type(e) is engine.MisuseError
    assert str(e) == (f"layer 1: fused tensor 'input_linear.weight' ({name}) of shape "
                      "[2, 3] F4 is 3 bytes, which do not split into n_experts 2 "
                      "whole-byte slices")


@pytest.mark.parametrize("dtype, shape, text", [
    ("F16", (4, 8, 8), "has dtype F16 shape [4, 8, 8] (512 bytes)"),
    ("BF16", (4, 8, 4), "has dtype BF16 shape [4, 8, 4] (256 bytes)"),
    ("BF16", (4, 4, 16), "has dtype BF16 shape [4, 4, 16] (512 bytes)"),
])
def test_layers_differing_in_dtype_or_shape_are_refused(tmp_path, dtype, shape, text):
    """A later layer's fused tensor unlike the first layer's: misuse naming both."""
    name = "model.layers.1.block_sparse_moe.output_linear.weight"
    box = _granite_with(tmp_path, {name: (dtype, shape)})
    e = _open_error(tmp_path, box)
    assert type(e) is engine.MisuseError
    assert (e.layer, e.expert) == (1, None)
    assert str(e) == (f"layer 1: fused tensor 'output_linear.weight' ({name}) {text}, "
                      "unlike layer 0's BF16 [4, 8, 8] (512 bytes); every layer must "
                      "share one layout")


def test_missing_fused_tensor_is_not_found(tmp_path):
    """A layer without one of the fused tensors: NotFoundError naming layer and name."""
    box = _granite_with(tmp_path, {})
    box.layers = (0, 1, 2)
    e = _open_error(tmp_path, box)
    assert type(e) is engine.NotFoundError
    assert (e.layer, e.expert) == (2, None)
    assert str(e) == ("layer 2: fused tensor 'input_linear.weight' "
                      "(model.layers.2.block_sparse_moe.input_linear.weight) is not "
                      "in the container")


# -- allocations ----------------------------------------------------------------------

def test_refused_fused_opens_leave_nothing_allocated(tmp_path):
    """Every open-time refusal frees what the open had allocated."""
    name = "model.layers.1.block_sparse_moe.output_linear.weight"
    box = _granite_with(tmp_path, {name: ("BF16", (8, 8, 4))})
    with engine.Container(str(tmp_path)) as c:
        before = Baseline.now()
        for kw in ({}, {"n_experts": 8}, {"layers": [0, 1, 2]}):
            with pytest.raises(engine.EngineError):
                engine.ExpertCache(c, n_slots=3, **{**box.kwargs(), **kw})
        before.assert_back("refused fused opens")


def test_fused_open_fails_cleanly_at_every_allocation(granite_box):
    """With the Nth engine allocation failing, a fused open is OOM or works."""
    peer = Peer(granite_box)
    with engine.Container(str(granite_box.folder)) as cont:
        base = Baseline.now()

        def op() -> engine.ExpertCache:
            return engine.ExpertCache(cont, n_slots=3, batch_threads=1,
                                      **granite_box.kwargs())

        def check(run: Run) -> None:
            if run.error is not None:
                assert type(run.error) is engine.OutOfMemoryError, run.error
            else:
                with run.result.get(2, 1) as ex:
                    peer.assert_expert(ex)
                run.result.check()
                run.result.close()
                run.result = None
            base.assert_back(f"N={run.n}")

        arm, disarm = alloc_hooks()
        runs = countdown(op, arm, disarm, check, 100,
                         allowed=(engine.OutOfMemoryError,))
        assert len(runs) >= 5 and runs[-1].error is None
