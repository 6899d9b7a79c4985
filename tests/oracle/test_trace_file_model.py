"""The whole engine trace file as the oracle computes it (docs/TRACE_FORMAT.md):
the fingerprint, the header, every record field, the bytes, and the decoder
the gate compares them with (oracle.traces.engine_dump, oracle.trace_model).
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from xcache import fixtures
from xcache.oracle.cache import Misuse
from xcache.oracle.layout import expert_pieces
from xcache.oracle.safetensors import Container
from xcache.oracle.trace_model import TracingCacheModel, first_tensor_offsets
from xcache.oracle.traces import (
    ENGINE_HEADER_FIELDS,
    ENGINE_RECORD_FIELDS,
    EngineTraceHeader,
    decode_engine_trace,
    engine_fingerprint,
    engine_trace_bytes,
    read_engine_trace,
)

pytestmark = pytest.mark.nosan  # pure Python


def fnv1a64(data: bytes) -> int:
    """FNV-1a 64 over bytes, written out from the format's constants."""
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) % 2**64
    return h


def test_the_fingerprint_is_fnv1a_over_the_documented_words():
    """expert_bytes, n_experts, then each key's layer and first offset, as u64 LE."""
    keys = [(1, 20608), (1, 22240), (3, 7), (2**32 + 5, 2**63)]
    words = [1632, 24] + [w for k in keys for w in k]
    want = fnv1a64(b"".join(struct.pack("<Q", w) for w in words))
    assert engine_fingerprint(1632, 24, keys) == want
    # the empty hash and one word by hand
    assert fnv1a64(b"") == 0xcbf29ce484222325
    assert engine_fingerprint(0, 0, []) == fnv1a64(bytes(16))
    # the layer is hashed, so its index and its place give two fingerprints
    assert engine_fingerprint(1632, 24, [(1, 100)]) != \
        engine_fingerprint(1632, 24, [(0, 100)])


def test_bytes_are_the_documented_layout():
    """The header's and a record's bytes, field by field, at their offsets."""
    head = EngineTraceHeader(version=1, record_bytes=24,
                             fingerprint=0x0123456789abcdef, layer_limit=5,
                             n_experts=8, top_k=2, n_slots=6)
    raw = engine_trace_bytes(head, [(2**40 + 7, 4, 7, "speculative", "no_slot"),
                                    (2**64 - 1, 1, 0, "stream", "wait_hit")])
    assert len(raw) == 48 + 2 * 24
    assert raw[:48] == (b"XCTRACE1" + struct.pack("<IIQIIIIQ", 1, 24,
                                                    0x0123456789abcdef, 5, 8,
                                                    2, 6, 0))
    assert raw[48:72] == struct.pack("<QiiBB", 2**40 + 7, 4, 7, 2, 6) + bytes(6)
    assert raw[72:96] == struct.pack("<QiiBB", 2**64 - 1, 1, 0, 3, 2) + bytes(6)


def test_decode_gives_every_field_and_refuses_nothing():
    """Every header and record field, as they are; a bad file decodes too."""
    head = EngineTraceHeader(1, 24, 0xfeedface, 4, 16, 4, 8)
    raw = engine_trace_bytes(head, [(9, 3, 15, "get", "miss")])
    f = decode_engine_trace(raw)
    assert tuple(f.header) == ENGINE_HEADER_FIELDS
    assert f.header == {"magic": "XCTRACE1", "version": 1, "record_bytes": 24,
                        "fingerprint": 0xfeedface, "layer_limit": 4,
                        "n_experts": 16, "top_k": 4, "n_slots": 8,
                        "reserved": 0}
    assert len(ENGINE_RECORD_FIELDS) == 6
    assert f.records == [(9, 3, 15, 0, 1, 0)]
    assert (f.trailing, f.size) == (b"", 72)
    # a wrong magic, a reserved byte set and a record cut short
    bad = b"XCTRACE2" + raw[8:66] + b"\x01" + raw[67:] + b"\xaa\xbb"
    g = decode_engine_trace(bad)
    assert g.header["magic"] == "XCTRACE2"
    assert g.records == [(9, 3, 15, 0, 1, 1)]
    assert (g.trailing, g.size) == (b"\xaa\xbb", 74)
    short = decode_engine_trace(raw[:40])
    assert (short.header, short.records, short.trailing) == (None, [], raw[:40])


def test_a_change_of_any_byte_changes_the_decoded_fields():
    """Decoding is one to one: each of a file's bytes is in some field."""
    head = EngineTraceHeader(1, 24, 0x5af3f7bdc2b515af, 4, 16, 4, 8)
    raw = engine_trace_bytes(head, [(1, 1, 2, "prefetch", "issued"),
                                    (2, 3, 4, "get", "hit")])
    plain = decode_engine_trace(raw)
    def fields(f):
        return (f.header, f.records, f.trailing, f.size)
    for i in range(len(raw)):
        flipped = raw[:i] + bytes([raw[i] ^ 0x80]) + raw[i + 1:]
        assert fields(decode_engine_trace(flipped)) != fields(plain), i
    assert decode_engine_trace(raw).sha256 == plain.sha256


def test_the_strict_reader_reads_the_oracle_bytes(tmp_path: Path):
    """What the oracle renders, the oracle's own reader reads back."""
    head = EngineTraceHeader(1, 24, 77, 4, 16, 4, 8)
    p = tmp_path / "t.xctrace"
    p.write_bytes(engine_trace_bytes(head, [(5, 2, 3, "get", "miss")]))
    got, rec = read_engine_trace(p)
    assert got == head
    assert [int(rec["step"][0]), int(rec["layer"][0])] == [5, 2]


def model(layers=(1, 2, 3)) -> TracingCacheModel:
    """Three layers of 16 experts, top-4, 8 slots (deepseek-mini's shape)."""
    return TracingCacheModel(list(layers), 16, 4, expert_bytes=2688, n_slots=8)


def test_records_carry_the_last_step():
    """Each record's step is the last set_step, 0 before any."""
    m = model()
    m.release(m.get(1, 0))
    m.set_step(2**40 + 7)
    m.getmany([(3, 5), (1, 0)])
    m.set_step(2**64 - 1)
    m.release(m.get(3, 5))
    assert m.file_records() == [
        (0, 1, 0, "get", "miss"),
        (2**40 + 7, 3, 5, "prefetch", "issued"),
        (2**40 + 7, 1, 0, "prefetch", "resident"),
        (2**64 - 1, 3, 5, "get", "hit")]
    for bad in (-1, 2**64, 1.0, True):
        with pytest.raises(Misuse):
            m.set_step(bad)
    assert m.step == 2**64 - 1


def test_records_name_the_layer_index_not_its_place():
    """On layers 1, 3 and 4 a record of the third layer says 4, not 2 or 3."""
    m = model((1, 3, 4))
    m.release(m.get(4, 6))
    m.release(m.get(1, 0))
    assert [r[:2] for r in m.records] == [(4, 6), (1, 0)]
    head = m.header([0] * 48)
    assert head.layer_limit == 5  # the last MoE layer + 1, not 3 layers


def test_the_header_from_the_model():
    """Every field from the model's shape, the fingerprint from its keys."""
    m = model()
    offsets = [1000 + 10 * k for k in range(48)]
    head = m.header(offsets)
    keys = [(1 + k // 16, 1000 + 10 * k) for k in range(48)]
    assert head == EngineTraceHeader(
        version=1, record_bytes=24,
        fingerprint=engine_fingerprint(2688, 16, keys), layer_limit=4,
        n_experts=16, top_k=4, n_slots=8)
    with pytest.raises(ValueError, match="47 offsets for 48 keys"):
        m.header(offsets[:47])
    m.records.append((1, 1, "get", "hit"))  # by hand: no step for it
    with pytest.raises(ValueError, match="changed by hand"):
        m.file_bytes(offsets)


def test_first_tensor_offsets_follow_the_key_order(tmp_path: Path):
    """Each key's offset is that of the cache's first tensor, key by key in
    layer order (deepseek-mini: layers 1-3, experts scattered by dtype)."""
    folder = Path(fixtures.generate("deepseek-mini", tmp_path / "d").dir
                  or tmp_path / "d")
    spec = fixtures.preset("deepseek-mini")
    layout = {**spec.cache_layout(), "top_k": spec.top_k}
    reader = Container(folder)
    offs = first_tensor_offsets(reader, layout)
    assert len(offs) == 3 * 16
    for k in (0, 17, 47):
        layer, e = layout["layers"][k // 16], k % 16
        pieces = expert_pieces(reader, layout["expert_template"],
                               layout["tensors"], 16, layer, e)
        assert offs[k] == pieces[0].offset
        assert pieces[0].name.endswith(layout["tensors"][0])
