"""The engine's preads for one load are the reads the oracle plans, on every layout.

For every generated preset (contiguous, scattered per-expert, fused) and
several ``chunk_bytes``, each expert is loaded once cleanly and once failing
at each of its reads in turn (EIO at the n-th pread).  The engine's pread
count must equal the length of :func:`oracle.layout.expert_reads`, and the
``io_bytes`` a load failing at read n adds must equal the first n planned
lengths (docs/CACHE.md "How the bytes are read": the first failed piece ends
the load, and ``io_bytes`` adds every piece asked).  The gate's expected
``io_bytes`` under ``--container`` come from that plan, so a layout it
mis-plans fails here first.
"""

from __future__ import annotations

import pytest

from tests.helpers import load_preset
from xcache import engine
from xcache.faults.io import Fault, IOFaults
from xcache.oracle.layout import expert_pieces, expert_reads, read_pieces
from xcache.oracle.safetensors import Container

#: huge-sparse is left out: its experts are DeepSeek-V3-sized (14 MiB)
PRESETS = ["k3-mini", "mixtral-mini", "deepseek-mini", "granite-mini", "gptoss-mini"]
CHUNKS = [0, 256, 1000, 4096]


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("preset", PRESETS)
def test_each_load_asks_the_reads_the_oracle_plans(preset, chunk):
    """Pread count and io_bytes at a failure at every read equal the oracle's plan."""
    p = load_preset(preset)
    reader = Container(p.path)
    faults = IOFaults()
    try:
        with engine.Container(str(p.path), io=faults.io) as c, engine.ExpertCache(
                c, n_slots=p.top_k + 1, chunk_bytes=chunk,
                **p.cache_kwargs()) as cache:
            for layer, e in p.keys:
                pieces = expert_pieces(reader, p.spec.expert_template, p.parts,
                                       p.n_experts, layer, e)
                plan = [n for _, _, n in expert_reads(pieces, chunk)]
                for nth in range(1, len(plan) + 1):
                    before = cache.stats()["io_bytes"]
                    faults.arm(Fault("eio", nth=nth))
                    with pytest.raises(engine.EngineError):
                        cache.get(layer, e)
                    assert faults.fired == 1, (layer, e, nth)
                    assert cache.stats()["io_bytes"] - before == sum(plan[:nth]), (
                        layer, e, nth, plan)
                faults.arm(Fault("delay", nth=10**9))  # never fires: counts preads
                before = cache.stats()["io_bytes"]
                with cache.get(layer, e) as ex:
                    assert bytes(ex.data) == read_pieces(reader, pieces)
                assert faults.reads == len(plan), (layer, e, plan)
                assert cache.stats()["io_bytes"] - before == p.expert_bytes == sum(plan)
            faults.disarm()
            cache.check()
    finally:
        faults.close()
