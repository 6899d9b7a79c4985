"""The oracle's plan of one buffered load's reads (oracle.layout.expert_reads).

docs/CACHE.md "How the bytes are read": a contiguous expert is one run cut at
multiples of ``chunk_bytes``; a scattered expert is one read per piece, where
a fused slice is a run cut exactly like a contiguous expert and a per-expert
tensor is one read whatever ``chunk_bytes`` is.
"""

from __future__ import annotations

import pytest

from tests.helpers import load_preset
from xcache.oracle.layout import Piece, expert_pieces, expert_reads
from xcache.oracle.reads import cut_run
from xcache.oracle.safetensors import Container


def test_cut_run_cuts_at_absolute_multiples():
    """A run is cut where the file offset crosses a multiple, not every n bytes."""
    assert cut_run(4000, 5000, 4096) == [(4000, 96), (4096, 4096), (8192, 808)]
    assert cut_run(4096, 4096, 4096) == [(4096, 4096)]
    assert cut_run(10, 7, 0) == [(10, 7)]
    assert cut_run(10, 0, 4096) == []
    with pytest.raises(ValueError, match="chunk_bytes must be >= 0"):
        cut_run(0, 1, -1)


def test_scattered_fused_slices_are_cut_like_runs():
    """Each fused slice of a scattered expert is cut at chunk multiples, in order."""
    pieces = [Piece("a", 2048, 2048, "s1", 7000, fused=True),
              Piece("b", 1024, 1024, "s1", 12000, fused=True)]
    assert expert_reads(pieces, 4096) == [("s1", 7000, 1192), ("s1", 8192, 856),
                                          ("s1", 12000, 288), ("s1", 12288, 736)]
    assert expert_reads(pieces, 0) == [("s1", 7000, 2048), ("s1", 12000, 1024)]


def test_scattered_per_expert_tensors_are_never_cut():
    """A per-expert tensor of a scattered expert is one read, chunks or not."""
    pieces = [Piece("a", 0, 5000, "s1", 4000), Piece("b", 0, 100, "s2", 0)]
    assert expert_reads(pieces, 4096) == [("s1", 4000, 5000), ("s2", 0, 100)]


def test_contiguous_expert_is_one_run_cut():
    """Pieces back to back in one shard are one run, cut across piece borders."""
    pieces = [Piece("a", 0, 3000, "s1", 3000), Piece("b", 0, 3000, "s1", 6000)]
    assert expert_reads(pieces, 4096) == [("s1", 3000, 1096), ("s1", 4096, 4096),
                                          ("s1", 8192, 808)]


@pytest.mark.parametrize("preset", ["granite-mini", "gptoss-mini"])
def test_fused_preset_reads_cover_each_slice_cut_at_4096(preset):
    """On the fused presets, every chunked read lies in one slice and one chunk."""
    p = load_preset(preset)
    reader = Container(p.path)
    cut_any = False
    for layer, e in p.keys:
        pieces = expert_pieces(reader, p.spec.expert_template, p.parts,
                               p.n_experts, layer, e)
        assert all(q.fused for q in pieces)
        reads = expert_reads(pieces, 4096)
        assert sum(n for _, _, n in reads) == p.expert_bytes
        for _, off, n in reads:
            assert off // 4096 == (off + n - 1) // 4096, (layer, e, off, n)
        cut_any |= len(reads) > len(pieces)
    assert cut_any  # some slice of these presets does cross a 4 KiB boundary
