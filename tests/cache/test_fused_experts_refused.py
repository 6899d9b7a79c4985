"""Fused (stacked) expert tensors that fail: faults in reads, refused opens, OOM.

An I/O error or short read in a fused read fails that load only (buffered
and O_DIRECT), naming the slice's file and byte; an open whose fused tensors
do not fit the layout (leading dimension, expert count, 0-d, bytes not
divisible, layers unlike the first, a missing tensor) is refused naming the
tensor; refused opens leave nothing allocated, and a fused open fails
cleanly at every allocation.  Reads that succeed are in
``test_fused_experts.py``; the containers in ``fused_containers.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cache.fused_containers import (
    ALIGN,
    Box,
    Peer,
    open_direct,
    widened,
    write_shards,
)
from xcache import engine
from xcache.faults.io import Fault
from xcache.faults.loops import Baseline, Run, alloc_hooks, countdown

# -- faults ---------------------------------------------------------------------------

@pytest.mark.parametrize("direct", [False, True])
def test_io_fault_in_a_fused_read_fails_the_load_only(granite_box, faults, direct):
    """EIO on the second slice's read: the load fails, slot EMPTY, residents intact."""
    peer = Peer(granite_box)
    c = open_direct(granite_box, io=faults) if direct else engine.Container(
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
