"""The misuse matrix of the Python API: every bad argument is one MisuseError naming it.

A table of (call, bad value) over every constructor parameter and public
method of Container and ExpertCache: each is refused before C sees it with
MisuseError (a ValueError, status XC_E_MISUSE, kind "misuse") and an exact
message that starts with the parameter's name.  Strings with an embedded NUL
(which C would silently cut) are among them, as ``open()`` refuses them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import K3_LAYOUT
from xcache import engine
from xcache.engine import _lib

W = "language_model.model.layers.0.block_sparse_moe.experts.0.w1.weight_packed"
BIG = 2**31
U64 = 2**64


def _cache(cont: engine.Container, **kw: Any) -> engine.ExpertCache:
    opts = {**K3_LAYOUT, "n_slots": 8, "top_k": 4, **kw}
    return engine.ExpertCache(cont, **opts)


def _range(name: str, v: int, lo: int, hi: int) -> str:
    return f"{name} must be from {lo} to {hi}, got {v}"


I32 = (-(2**31), 2**31 - 1)

# (id, call(container, cache, k3_path), exact message)
CASES: list[tuple[str, Callable[[Any, Any, Path], Any], str]] = [
    # -- ExpertCache(...) --------------------------------------------------
    ("n_slots=-1", lambda t, c, p: _cache(t, n_slots=-1),
     _range("n_slots", -1, 0, U64 - 1)),
    ("n_slots=1.5", lambda t, c, p: _cache(t, n_slots=1.5),
     "n_slots must be an integer, got float 1.5"),
    ("budget_bytes=-5", lambda t, c, p: _cache(t, n_slots=None, budget_bytes=-5),
     _range("budget_bytes", -5, 0, U64 - 1)),
    ("both budgets", lambda t, c, p: _cache(t, budget_bytes=10**6),
     "give exactly one of n_slots and budget_bytes"),
    ("top_k=2**31", lambda t, c, p: _cache(t, top_k=BIG),
     _range("top_k", BIG, *I32)),
    ("top_k=None", lambda t, c, p: _cache(t, top_k=None),
     "top_k must be an integer, got NoneType None"),
    ("policy=None", lambda t, c, p: _cache(t, policy=None),
     "policy must be a str, got NoneType None"),
    ("policy NUL", lambda t, c, p: _cache(t, policy="lru\0x"),
     "policy: embedded null character in 'lru\\x00x'"),
    ("expert_template=3", lambda t, c, p: _cache(t, expert_template=3),
     "expert_template must be a str, got int 3"),
    ("expert_template NUL",
     lambda t, c, p: _cache(t, expert_template="a{layer}\0{expert}{tensor}"),
     "expert_template: embedded null character in "
     "'a{layer}\\x00{expert}{tensor}'"),
    ("tensors str", lambda t, c, p: _cache(t, tensors="w1.weight_packed"),
     "tensors must be a sequence of str, got str 'w1.weight_packed'"),
    ("tensors NUL", lambda t, c, p: _cache(t, tensors=["w1.weight_packed\0"]),
     "tensors[0]: embedded null character in 'w1.weight_packed\\x00'"),
    ("tensors[1]=7", lambda t, c, p: _cache(t, tensors=["w1.weight_packed", 7]),
     "tensors[1] must be a str, got int 7"),
    ("layers=None", lambda t, c, p: _cache(t, layers=None),
     "tensors and layers must be sequences: 'NoneType' object is not iterable"),
    ("layers[0]=2**40", lambda t, c, p: _cache(t, layers=[2**40]),
     _range("layers[0]", 2**40, *I32)),
    ("n_experts=2**31", lambda t, c, p: _cache(t, n_experts=BIG),
     _range("n_experts", BIG, *I32)),
    ("chunk_bytes=-1", lambda t, c, p: _cache(t, chunk_bytes=-1),
     _range("chunk_bytes", -1, 0, U64 - 1)),
    ("batch_threads='2'", lambda t, c, p: _cache(t, batch_threads="2"),
     "batch_threads must be an integer, got str '2'"),
    ("io_threads=2**31", lambda t, c, p: _cache(t, io_threads=BIG),
     _range("io_threads", BIG, *I32)),
    ("io_depth=-2**31-1", lambda t, c, p: _cache(t, io_depth=-BIG - 1),
     _range("io_depth", -BIG - 1, *I32)),
    ("split_min_misses=None", lambda t, c, p: _cache(t, split_min_misses=None),
     "split_min_misses must be an integer, got NoneType None"),
    ("lock_memory=2", lambda t, c, p: _cache(t, lock_memory=2),
     _range("lock_memory", 2, 0, 1)),
    ("lock_memory='yes'", lambda t, c, p: _cache(t, lock_memory="yes"),
     "lock_memory must be an integer, got str 'yes'"),
    ("trace_path NUL", lambda t, c, p: _cache(t, trace_path="/x/a\0b"),
     "trace_path: embedded null byte in '/x/a\\x00b'"),
    ("trace_path=3.0", lambda t, c, p: _cache(t, trace_path=3.0),
     "trace_path must be a path (str, bytes or os.PathLike), got float 3.0"),
    ("trace_ring_records=-1", lambda t, c, p: _cache(t, trace_ring_records=-1),
     _range("trace_ring_records", -1, 0, U64 - 1)),
    ("container='x'", lambda t, c, p: _cache("x"),
     "container must be an engine.Container, got str 'x'"),
    # -- ExpertCache methods ------------------------------------------------
    ("get expert=2**31", lambda t, c, p: c.get(0, BIG),
     _range("expert", BIG, *I32)),
    ("get layer=-2**31-1", lambda t, c, p: c.get(-BIG - 1, 0),
     _range("layer", -BIG - 1, *I32)),
    ("get layer=None", lambda t, c, p: c.get(None, 0),
     "layer must be an integer, got NoneType None"),
    ("get expert=1.0", lambda t, c, p: c.get(0, 1.0),
     "expert must be an integer, got float 1.0"),
    ("getmany keys=5", lambda t, c, p: c.getmany(5),
     "keys must be an iterable of (layer, expert) pairs, got int 5"),
    ("getmany keys[1]=(0,)", lambda t, c, p: c.getmany([(0, 1), (0,)]),
     "keys[1] must be a (layer, expert) pair, got (0,)"),
    ("getmany expert=10**12", lambda t, c, p: c.getmany([(0, 10**12)]),
     _range("keys[0]: expert", 10**12, *I32)),
    ("prefetch layer='0'", lambda t, c, p: c.prefetch([("0", 1)]),
     "keys[0]: layer must be an integer, got str '0'"),
    ("prefetch speculative=5", lambda t, c, p: c.prefetch([(0, 1)], speculative=5),
     _range("speculative", 5, 0, 1)),
    ("stream keys[0]=2**70", lambda t, c, p: c.stream([(0, 2**70)]),
     _range("keys[0]: expert", 2**70, *I32)),
    ("set_step=-1", lambda t, c, p: c.set_step(-1), _range("step", -1, 0, U64 - 1)),
    ("pin expert=2**31", lambda t, c, p: c.pin(0, BIG), _range("expert", BIG, *I32)),
    ("unpin layer=None", lambda t, c, p: c.unpin(None, 0),
     "layer must be an integer, got NoneType None"),
    ("contiguous expert='a'", lambda t, c, p: c.contiguous(0, "a"),
     "expert must be an integer, got str 'a'"),
    # -- Container ----------------------------------------------------------
    ("Container path NUL", lambda t, c, p: engine.Container(str(p) + "\0b"),
     "path: embedded null byte in '/k3/model.safetensors\\x00b'"),
    ("Container path=None", lambda t, c, p: engine.Container(None),
     "path must be a path (str, bytes or os.PathLike), got NoneType None"),
    ("Container direct=3", lambda t, c, p: engine.Container(p, direct=3),
     _range("direct", 3, 0, 1)),
    ("Container verify='no'", lambda t, c, p: engine.Container(p, verify="no"),
     "verify must be an integer, got str 'no'"),
    ("read NUL", lambda t, c, p: t.read(W + "\0x"),
     f"name: embedded null character in {W + chr(0) + 'x'!r}"),
    ("read_bytes=None", lambda t, c, p: t.read_bytes(None),
     "name must be a str, got NoneType None"),
    ("info NUL", lambda t, c, p: t.info("a\0"),
     "name: embedded null character in 'a\\x00'"),
]


@pytest.mark.parametrize("call,message", [(c, m) for _, c, m in CASES],
                         ids=[i for i, _, _ in CASES])
def test_misuse_is_one_exception_naming_the_parameter(k3_shard, call, message):
    """Each bad argument is MisuseError (a ValueError) with its exact message."""
    with engine.Container(str(k3_shard)) as cont:
        cache = _cache(cont)
        try:
            with pytest.raises(engine.MisuseError) as ei:
                call(cont, cache, k3_shard)
            assert str(ei.value) == message.replace(
                "/k3/model.safetensors", str(k3_shard))
            assert isinstance(ei.value, ValueError)
            assert (ei.value.status, ei.value.kind) == (
                _lib.lib().XC_E_MISUSE, "misuse")
            assert cache.stats()["requests"] == 0  # nothing reached C
        finally:
            cache.close()


def test_a_nul_name_is_not_in_the_container(k3_shard):
    """``name + '\\0x' in container`` is False, as os.path.exists says of such paths."""
    with engine.Container(str(k3_shard)) as cont:
        assert W in cont
        assert (W + "\0x") not in cont


def test_numpy_integers_are_accepted(k3_shard):
    """Keys from numpy routing arrays (np.int64) are integers like any other."""
    import numpy as np
    with engine.Container(str(k3_shard)) as cont:
        with _cache(cont, n_slots=np.int64(8)) as c:
            with c.get(np.int32(0), np.int64(3)) as x:
                assert x.key == (0, 3)
            assert c.getmany(np.array([[0, 4], [0, 5]])) == 2
