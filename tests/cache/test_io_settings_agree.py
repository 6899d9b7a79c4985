"""Two engine caches, one container, different I/O settings: the same answers.

Batch threads, chunking and O_DIRECT change how bytes are fetched, never
which bytes are served or what the counters say -- except ``io_bytes``,
which docs/CACHE.md "Reads" pins exactly: without O_DIRECT a load asks
``expert_bytes`` whatever ``chunk_bytes`` is; with O_DIRECT it asks the
expert's run widened to 4,096 on both ends.  ``load_ns`` is timing.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import Preset, family, load_preset, open_preset
from xcache import engine
from xcache.engine import MisuseError
from xcache.oracle.cache import CacheModel
from xcache.oracle.errors import OracleError

ALIGN = 4096
SANITIZED = bool(os.environ.get("XC_ENGINE_LIB"))

#: Every counter but io_bytes (checked by its own rule) and load_ns (timing).
SAME_STATS = (
    "requests", "hits", "misses", "prefetch_loads", "prefetch_first_uses",
    "prefetch_evicted_unused", "evictions", "payload_bytes", "load_failures",
    "short_reads", "io_errors", "prefetch_unused_resident",
    "adjusted_hits_aggregate", "adjusted_hits_exact", "hit_rate",
    "adjusted_hit_rate_aggregate", "adjusted_hit_rate_exact",
)

#: (preset, batch_threads, chunk_bytes, direct) of the variant; the baseline
#: is always 1 thread, no chunks, no O_DIRECT.  mixtral-mini has experts
#: split across shards, which O_DIRECT cannot pack (see test below).
VARIANTS = [
    ("k3-mini", 4, 0, False), ("k3-mini", 1, 4096, False),
    ("k3-mini", 1, 512, False), ("k3-mini", 4, 512, False),
    ("k3-mini", 1, 0, True), ("k3-mini", 4, 4096, True),
    ("mixtral-mini", 4, 0, False), ("mixtral-mini", 1, 512, False),
    ("mixtral-mini", 4, 4096, False),
]

_op = st.one_of(
    st.tuples(st.just("get"), st.integers(0, 31), st.booleans()),
    st.tuples(st.just("release"), st.integers(0, 7)),
    st.tuples(st.just("getmany"), st.lists(st.integers(0, 31), max_size=6)),
    st.tuples(st.just("pin"), st.integers(0, 31)),
    st.tuples(st.just("unpin"), st.integers(0, 31)),
    st.tuples(st.just("reset")),
)


def widened_bytes(offset: int, nbytes: int) -> int:
    """Length of [offset, offset + nbytes) widened to ALIGN on both ends."""
    return (-(-(offset + nbytes) // ALIGN) - offset // ALIGN) * ALIGN


def load_io_bytes(p: Preset, key: tuple[int, int], direct: bool) -> int:
    """What one successful load of key asks of io (docs/CACHE.md "Reads")."""
    return widened_bytes(p.file_offset[key], p.expert_bytes) if direct else (
        p.expert_bytes)


def outcome(call, family) -> object:
    """The call's result, or the family of the error it raised."""
    try:
        return call()
    except (engine.EngineError, OracleError) as exc:
        return family(exc)


class Side:
    """One cache under test, and an oracle model whose io_bytes it must show.

    The model (docs/CACHE.md) knows which experts each operation loads --
    a batch may evict a resident key it names and load it again -- so its
    ``io_bytes`` is the exact sum of "Reads"' per-load rule for this side.
    """

    def __init__(self, p: Preset, n_slots: int, policy: str,
                 batch_threads: int, chunk_bytes: int, direct: bool) -> None:
        self.container = open_preset(p, direct=direct)
        active = self.container.direct_active
        self.cache = engine.ExpertCache(
            self.container, n_slots=n_slots, policy=policy,
            batch_threads=batch_threads, chunk_bytes=chunk_bytes,
            **p.cache_kwargs())
        self.model = CacheModel(
            p.layers, p.n_experts, p.top_k, expert_bytes=p.expert_bytes,
            n_slots=n_slots, policy=policy,
            io_bytes_per_load=lambda key: load_io_bytes(p, key, active))
        self.p = p
        self.held: list[tuple[engine.Expert, object]] = []

    def apply(self, op: tuple) -> object:
        """Run one operation on the cache and the model; the cache's result."""
        c, m, keys = self.cache, self.model, self.p.keys
        kind = op[0]
        if kind == "get":
            key = keys[op[1] % len(keys)]
            res = outcome(lambda: c.get(*key), family)
            ref = outcome(lambda: m.get(*key), family)
            if isinstance(res, engine.Expert):
                data = bytes(res.data)
                if op[2]:
                    self.held.append((res, ref))
                else:
                    res.release()
                    m.release(ref)
                return ("expert", data)
            assert res == ref, f"{op}: engine {res}, oracle {ref}"
            return res
        if kind == "release":
            if self.held:
                x, ref = self.held.pop(op[1] % len(self.held))
                x.release()
                m.release(ref)
            return None
        if kind == "getmany":
            batch = [keys[i % len(keys)] for i in op[1]]
            res = c.getmany(batch)
            assert res == m.getmany(batch), f"{op}: oracle count differs"
            return res
        if kind in ("pin", "unpin"):
            key = keys[op[1] % len(keys)]
            res = outcome(lambda: getattr(c, kind)(*key), family)
            assert res == outcome(lambda: getattr(m, kind)(*key), family)
            return res
        c.reset_stats()
        m.reset_stats()
        return None

    def close(self) -> None:
        for x, _ in self.held:
            x.release()
        self.cache.close()
        self.container.close()


@pytest.mark.parametrize(("preset", "threads", "chunk", "direct"), VARIANTS)
@settings(max_examples=max(settings.default.max_examples // (
    10 if SANITIZED else 2), 5))
@given(n_slots=st.integers(0, 6), policy=st.sampled_from(
    ["lru", "lfu", "lfru:sample=2,seed=7", "hotness:period=3"]),
    ops=st.lists(_op, max_size=40))
def test_io_settings_serve_the_same(preset, threads, chunk, direct, n_slots, policy,
                                    ops):
    """Both caches agree on every result, byte, slot and counter after each step."""
    p = load_preset(preset)
    n_slots += p.top_k + 1
    a = Side(p, n_slots, policy, 1, 0, False)
    b = Side(p, n_slots, policy, threads, chunk, direct)
    try:
        for i, op in enumerate(ops):
            ra, rb = a.apply(op), b.apply(op)
            assert ra == rb, f"step {i} {op}: results differ"
            if isinstance(ra, tuple):
                key = p.keys[op[1] % len(p.keys)]
                assert ra[1] == p.payload[key], f"{key} served {p.who(ra[1])}"
            assert a.cache.slots() == b.cache.slots(), f"step {i} {op}: slots"
            sa, sb = a.cache.stats(), b.cache.stats()
            assert {k: sa[k] for k in SAME_STATS} == {k: sb[k] for k in SAME_STATS}
            assert (sa["io_bytes"], sb["io_bytes"]) == (
                a.model.stats()["io_bytes"], b.model.stats()["io_bytes"])
            assert sa["io_bytes"] == sa["payload_bytes"]  # baseline: no widening
        a.cache.check()
        b.cache.check()
    finally:
        a.close()
        b.close()


def test_direct_io_bytes_golden():
    """k3-mini under O_DIRECT: 24 loads ask 131,072 bytes, 8 of them two blocks."""
    p = load_preset("k3-mini")
    cont = open_preset(p, direct=True)
    if not cont.direct_active:  # pragma: no cover - filesystem without O_DIRECT
        pytest.skip(f"O_DIRECT unavailable: {cont.direct_note}")
    c = engine.ExpertCache(cont, n_slots=8, chunk_bytes=4096, **p.cache_kwargs())
    for key in p.keys:
        with c.get(*key) as x:
            assert bytes(x.data) == p.payload[key], p.who(bytes(x.data))
    # Expert e runs [20608 + 1632e, 22240 + 1632e): 16 fit one 4 KiB block
    # (4,096 asked), 8 cross a boundary (8,192): 16 * 4096 + 8 * 8192.
    s = c.stats()
    assert (s["io_bytes"], s["payload_bytes"]) == (131072, 24 * 1632)
    c.check()
    model = CacheModel(p.layers, p.n_experts, p.top_k, expert_bytes=p.expert_bytes,
                       n_slots=8, io_bytes_per_load=lambda k: load_io_bytes(p, k, True))
    for key in p.keys:
        model.release(model.get(*key))
    assert model.stats()["io_bytes"] == 131072


@pytest.mark.parametrize(("preset", "chunk", "needle"), [
    ("k3-mini", 512, "multiple of 4096"),
    ("mixtral-mini", 0, "not one contiguous run"),
])
def test_direct_refuses_what_it_cannot_read(preset, chunk, needle):
    """O_DIRECT with unaligned chunks, or with split experts, is misuse at open."""
    p = load_preset(preset)
    cont = open_preset(p, direct=True)
    if not cont.direct_active:  # pragma: no cover - filesystem without O_DIRECT
        pytest.skip(f"O_DIRECT unavailable: {cont.direct_note}")
    with pytest.raises(MisuseError, match=needle):
        engine.ExpertCache(cont, n_slots=8, chunk_bytes=chunk, **p.cache_kwargs())
