"""The cache model's vocabulary: slot states, counter names, references, views.

What :class:`~oracle.cache.CacheModel` and its batch and under-way halves
(:mod:`oracle.cache_batches`, :mod:`oracle.cache_under_way`) hand out and
share: the three slot states and the ``UNDER_WAY`` answer of a batch's read,
the counter names of one window, the slot stride, a held :class:`Ref`, what
a stream's begin leaves (:class:`StreamOpen`) and a slot's snapshot
(:class:`SlotView`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xcache.oracle.bounds import DIRECT_ALIGN

__all__ = [
    "EMPTY", "INFLIGHT", "READY", "UNDER_WAY", "ALIGN_BYTES", "COUNTERS",
    "SPEC_COUNTERS", "stride_bytes", "Ref", "StreamOpen", "SlotView",
]

EMPTY, INFLIGHT, READY = "EMPTY", "INFLIGHT", "READY"

#: What a batch's ``read`` returns for a read it leaves under way: the slot
#: stays INFLIGHT (stamped) until :meth:`CacheModel.end_read`.
UNDER_WAY = "under_way"
#: A slot's stride is a multiple of it (oracle/bounds.py).
ALIGN_BYTES = DIRECT_ALIGN

#: The counters of one window, in the order of docs/CACHE.md.
COUNTERS = (
    "requests", "hits", "misses", "prefetch_loads", "prefetch_first_uses",
    "prefetch_evicted_unused", "evictions", "payload_bytes", "io_bytes",
    "load_failures", "short_reads", "io_errors",
)

#: Speculative-prefetch counters (docs/CACHE.md "prefetch"), kept apart from
#: ``counters`` so that the window above reads as before.
SPEC_COUNTERS = ("spec_issued", "spec_loads", "spec_used", "spec_evicted_unused")


def stride_bytes(expert_bytes: int, align: int = ALIGN_BYTES) -> int:
    """Slot stride: ``round_up(expert_bytes + 2 * align, align)``."""
    return -(-(expert_bytes + 2 * align) // align) * align


@dataclass(frozen=True)
class Ref:
    """A held reference returned by ``get``; ``release`` it exactly once."""

    id: int
    layer: int
    expert: int
    slot: int
    cache_id: int
    #: the slot's publish count when the hold was taken (the C struct's
    #: generation): a copy given back after a republish is refused by it
    generation: int = 0


@dataclass
class StreamOpen:
    """What :meth:`CacheModel.open_stream` began: hits, misses to read, gets last."""

    hits: list[Ref]
    #: reserved and stamped, under way until :meth:`CacheModel.end_read`
    misses: list[tuple[int, int]]
    #: keys that found no slot: gets once the rest is yielded
    no_slot: list[tuple[int, int]]


@dataclass(frozen=True)
class SlotView:
    """A snapshot of one slot."""

    state: str
    key: tuple[int, int] | None
    holds: int
    pins: int
    mark: bool
    last_use: int
    insert_tick: int
    freq: int

