"""Content encoding, identify() and verify()'s reports of wrong bytes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fixtures import (
    expected_bytes,
    generate,
    identify,
    identify_all,
    load_spec,
    preset,
    verify,
)
from fixtures.content import decode_words, encode_words

MIX = preset("mixtral-mini")
DS = preset("deepseek-mini")


@pytest.fixture(scope="module")
def mix_dir(tmp_path_factory):
    """mixtral-mini generated once for this module."""
    return generate("mixtral-mini", tmp_path_factory.mktemp("c") / "mix")


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**24 - 1),
       st.lists(st.integers(0, 2**40 - 1), min_size=1, max_size=20))
def test_decode_inverts_encode(seed, tid, words):
    """decode_words(encode_words(...)) gives back tensor id and word index."""
    w = np.array(words, dtype=np.uint64)
    tids, idx = decode_words(seed, encode_words(seed, tid, w))
    assert (tids == tid).all() and (idx == w).all()


def test_seed_changes_every_byte_pattern():
    """Two seeds give different content for the same tensor."""
    name = MIX.all_tensors[5].name
    other = load_spec({**MIX.to_dict(), "seed": 12})
    assert expected_bytes(MIX, name) != expected_bytes(other, name)


@given(st.data())
def test_identify_names_any_slice_of_15_bytes(data):
    """Any slice of >= 15 bytes at any offset names its tensor and offset."""
    td = data.draw(st.sampled_from(DS.all_tensors))
    n = data.draw(st.integers(min(15, td.nbytes), td.nbytes))
    off = data.draw(st.integers(0, td.nbytes - n))
    blob = expected_bytes(DS, td.name)[off:off + n]
    if n < 15 and not (off % 8 == 0 and n >= 8):
        return  # too short to hold a full word: documented limit
    m = identify(blob, DS)
    assert (m.name, m.layer, m.expert, m.part) == (td.name, td.layer, td.expert,
                                                   td.part)
    assert (m.offset, m.buf_offset, m.nbytes) == (off, 0, n)


def test_identify_eight_aligned_bytes_and_reject_noise():
    """8 bytes at an aligned offset suffice; random bytes identify as nothing."""
    td = MIX.by_name["model.layers.2.block_sparse_moe.experts.5.w2.weight"]
    m = identify(expected_bytes(MIX, td.name)[64:72], MIX)
    assert (m.name, m.offset, m.nbytes) == (td.name, 64, 8)
    assert "layer 2 expert 5 w2.weight" in str(m)
    rng = np.random.default_rng(0)
    assert identify(rng.integers(0, 256, 4096, dtype=np.uint8), MIX) is None
    assert identify(bytes(64), MIX) is None


def test_identify_all_cuts_an_expert_run_into_tensors(mix_dir):
    """A whole expert run reads back as its tensors in order."""
    (run,) = mix_dir.expert_runs(1, 3)
    with open(mix_dir.path(run.file), "rb") as f:
        f.seek(run.offset)
        data = f.read(run.nbytes)
    pieces = identify_all(data, mix_dir.dir)
    assert [p.name for p in pieces] == list(run.names)
    assert all(p.offset == 0 for p in pieces)


def test_identify_tells_which_expert_was_served_instead():
    """Bytes of expert 17 served for expert 3 are named as expert 17."""
    k3 = preset("k3-mini")
    wrong = k3.expert_names(0, 17)[2]
    m = identify(expected_bytes(k3, wrong)[100:200], "k3-mini")
    assert (m.layer, m.expert, m.part, m.offset) == (0, 17, "w2.weight_packed", 100)


def test_identify_at_a_tensor_boundary():
    """A slice straddling two tensors starts with the second one's match."""
    a, b = DS.all_tensors[10], DS.all_tensors[11]
    blob = expected_bytes(DS, a.name)[-5:] + expected_bytes(DS, b.name)[:40]
    m = identify(blob, DS)
    assert (m.name, m.offset, m.buf_offset, m.nbytes) == (b.name, 0, 5, 40)
    cut = identify_all(blob, DS)
    assert [(p.name, p.nbytes) for p in cut] == [(None, 5), (b.name, 40)]


def test_verify_names_a_flipped_byte(tmp_path):
    """A flipped byte is reported with its tensor and offset; exit clean before."""
    lay = generate("deepseek-mini", tmp_path / "c")
    e = lay.entries[40]
    with open(lay.path(e.file), "r+b") as f:
        f.seek(e.offset + 13)
        b = f.read(1)
        f.seek(e.offset + 13)
        f.write(bytes([b[0] ^ 0x40]))
    (p,) = verify(lay.dir)
    assert (p.tensor, p.offset) == (e.name, 13)
    assert e.name in str(p) and "byte 13" in str(p)


def test_verify_names_a_swapped_expert(tmp_path):
    """Expert 3's run overwritten with expert 5's is reported as expert 5's bytes."""
    lay = generate("k3-mini", tmp_path / "k3")
    (r3,), (r5,) = lay.expert_runs(0, 3), lay.expert_runs(0, 5)
    path = lay.path(r3.file)
    raw = bytearray(path.read_bytes())
    raw[r3.offset:r3.offset + r3.nbytes] = raw[r5.offset:r5.offset + r5.nbytes]
    path.write_bytes(bytes(raw))
    problems = verify(lay.dir)
    assert len(problems) == 6
    assert "expert 5 w1.weight_packed" in str(problems[0])
    assert problems[0].tensor == lay.spec.expert_names(0, 3)[0]


def test_verify_reports_size_header_and_missing_files(tmp_path):
    """Truncation, a changed header and a missing shard each give a problem."""
    lay = generate("mixtral-mini", tmp_path / "m")
    p0, p1, p2 = (lay.path(f.name) for f in lay.files)
    with open(p0, "r+b") as f:
        f.truncate(lay.files[0].size - 1)
    raw = bytearray(p1.read_bytes())
    i = raw.index(b'"BF16"')
    raw[i:i + 6] = b'"F16" '
    p1.write_bytes(bytes(raw))
    p2.unlink()
    probs = verify(lay.dir)
    assert len(probs) == 3
    assert "expected" in str(probs[0]) and str(p0) in probs[0].file
    assert "header differs" in str(probs[1])
    assert probs[2].file == str(p2)
    assert "cannot recover the spec" in str(verify(tmp_path)[0])
