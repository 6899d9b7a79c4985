"""The engine's C reader agrees with the generator on every preset."""

from __future__ import annotations

import pytest

import engine
from fixtures import PRESETS, expected_bytes, generate


@pytest.fixture(scope="module")
def containers(tmp_path_factory):
    """Every preset generated once (huge-sparse is sparse: cheap)."""
    root = tmp_path_factory.mktemp("engine")
    return {name: generate(name, root / name) for name in PRESETS}


@pytest.mark.parametrize("name", PRESETS)
def test_engine_sees_the_planned_table(containers, name):
    """Container.tensors() lists every tensor with the planned place and size."""
    lay = containers[name]
    with engine.Container(str(lay.dir)) as c:
        got = {t.name: (t.dtype, tuple(t.shape), t.shard, t.offset, t.nbytes)
               for t in c.tensors()}
        info = c.info(lay.entries[0].name)
    want = {e.name: (e.dtype, e.shape, e.shard, e.offset, e.nbytes)
            for e in lay.entries}
    assert got == want
    assert info.name == lay.entries[0].name


@pytest.mark.parametrize("name", PRESETS)
def test_engine_reads_the_generator_bytes(containers, name):
    """read_bytes returns expected_bytes (huge-sparse: a sample of tensors)."""
    lay = containers[name]
    ents = lay.entries
    if name == "huge-sparse":
        ents = [e for e in ents if e.nbytes < 1 << 16][:50] + \
            [e for e in ents if e.offset > 2**32 and e.nbytes < 1 << 16][:50]
    with engine.Container(str(lay.dir)) as c:
        for e in ents:
            assert c.read_bytes(e.name) == expected_bytes(lay.spec, e.name), e.name
