"""Which bytes make an expert, computed from the oracle's own reader.

An expert (layer, e) is the concatenation, in the layout's tensor order, of
pieces ``(tensor name, byte start within the tensor's data, nbytes)``.  With
``{expert}`` in the template every expert has whole tensors of its own; a
template without it names fused tensors of leading dimension
``n_experts`` or a multiple of it (stacked ``[E*I, ...]`` rows, expert e
owning rows ``[e*I, (e+1)*I)``), of which expert e owns slice e: bytes
``[e*nbytes/E, (e+1)*nbytes/E)`` (one contiguous range, the leading
dimension being outermost).  :func:`expert_reads` models the reads the
engine's loader makes for one buffered load (docs/CACHE.md "How the bytes
are read"): a contiguous expert is one run cut at multiples of
``chunk_bytes``; a scattered one is one read per piece, a fused slice being
a run cut the same way and a per-expert tensor one read, uncut.

Never imports ``engine``.

The family (per-expert or fused) is decided here from the template, on
purpose, and not taken from the caller's ``Layout.family`` or
``Spec.family``: the oracle models the C engine, whose ABI is the five
layout keys and whose loader decides the family from the template alone
(``engine/csrc/xc_load.c``), so reading the template independently is what
lets a wrong family recorded by the engine's Python side or the generator
show up as a disagreement instead of being copied into the reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xcache.oracle.reads import cut_run
from xcache.oracle.regular import open_regular
from xcache.oracle.safetensors import Container


class LayoutMismatch(ValueError):
    """The container does not hold what the layout says an expert is."""


@dataclass(frozen=True)
class Piece:
    """One contiguous part of an expert: a tensor's byte range, and where it lies."""

    name: str
    start: int  # byte start within the tensor's data
    nbytes: int
    shard: str  # path of the shard file
    offset: int  # absolute byte offset of the piece in the shard
    fused: bool = False  # a slice of a fused tensor (read as a chunked run)


def expert_pieces(reader: Container, expert_template: str,
                  tensors: Sequence[str], n_experts: int, layer: int,
                  expert: int) -> list[Piece]:
    """The pieces of expert (layer, expert), in ``tensors`` order.

    Raises :class:`LayoutMismatch` naming the tensor, layer and expert when a
    tensor is missing or a fused tensor's leading dimension or byte count
    does not split into ``n_experts`` equal slices.
    """
    if not 0 <= expert < n_experts:
        raise LayoutMismatch(f"layer {layer}: expert {expert} is outside "
                             f"0..{n_experts - 1}")
    fused = "{expert}" not in expert_template
    out = []
    for t in tensors:
        name = expert_template.format(layer=layer, expert=expert, tensor=t)
        try:
            info = reader.tensor(name)
        except Exception as e:  # noqa: BLE001 - NotFound, re-worded
            raise LayoutMismatch(f"layer {layer} expert {expert}: no tensor "
                                 f"{name!r} in {reader.path}") from e
        if not fused:
            out.append(Piece(name, 0, info.nbytes, info.shard, info.offset))
            continue
        # [E, ...] or stacked [E*I, ...] rows: expert e is 1/E of the bytes
        if (not info.shape or info.shape[0] <= 0 or info.shape[0] % n_experts
                or info.nbytes % n_experts):
            raise LayoutMismatch(
                f"fused tensor {name!r} (layer {layer}) has shape "
                f"{list(info.shape)} and {info.nbytes} bytes; it must have "
                f"leading dimension {n_experts} (n_experts) or a multiple of "
                f"it and bytes that divide by it")
        nb = info.nbytes // n_experts
        out.append(Piece(name, expert * nb, nb, info.shard,
                         info.offset + expert * nb, fused=True))
    return out


def is_contiguous(pieces: Sequence[Piece]) -> bool:
    """Whether the pieces lie back to back, in order, in one shard."""
    return all(p.shard == pieces[0].shard and p.offset == q.offset + q.nbytes
               for q, p in zip(pieces, pieces[1:], strict=False))


def expert_reads(pieces: Sequence[Piece], chunk_bytes: int = 0
                 ) -> list[tuple[str, int, int]]:
    """The (shard, offset, nbytes) reads the engine makes to load these pieces.

    A contiguous expert is one run, cut where the absolute offset crosses a
    multiple of ``chunk_bytes`` (0: no cut); a scattered one is read piece by
    piece, a fused slice cut like a run and a per-expert tensor uncut.
    """
    if not pieces:
        return []
    if is_contiguous(pieces):
        runs = [(pieces[0].shard, pieces[0].offset, sum(p.nbytes for p in pieces),
                 chunk_bytes)]
    else:
        runs = [(p.shard, p.offset, p.nbytes, chunk_bytes if p.fused else 0)
                for p in pieces]
    return [(shard, at, n) for shard, offset, nbytes, chunk in runs
            for at, n in cut_run(offset, nbytes, chunk)]


def read_pieces(reader: Container, pieces: Sequence[Piece]) -> bytes:
    """The bytes of the pieces, read through the oracle's reader, concatenated."""
    out = []
    for p in pieces:
        with open_regular(p.shard) as f:
            f.seek(p.offset)
            data = f.read(p.nbytes)
        if len(data) != p.nbytes:
            raise OSError(f"{p.shard}: short read of {p.name!r} "
                          f"({len(data)} of {p.nbytes} bytes)")
        out.append(data)
    return b"".join(out)
