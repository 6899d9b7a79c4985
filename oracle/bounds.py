"""The C core's bounds, in one place: each number the engine promises or refuses past.

Every constant here is a ``#define`` of ``engine/csrc/xc.h`` under the same
name less its ``XC_`` prefix, and tests/oracle/test_bounds.py reads xc.h and
holds the two equal; the engine's Python face takes the same numbers from
the library (``lib.XC_...``, declared in ``engine/_cdef.h``).  The oracle
never imports ``engine``, so its model, the gate and the fixtures take them
from here.  docs/CACHE.md "Bounds" says what each one means to a user.
"""

from __future__ import annotations

#: O_DIRECT reads' alignment (offset, length, buffer) and the slots' own:
#: a slot's stride is a multiple of it (docs/CACHE.md "Slots and budget").
DIRECT_ALIGN = 4096
#: The most dimensions a tensor's shape may have.
MAX_DIMS = 8
#: The largest safetensors header (and index file) a container may have.
HEADER_MAX_BYTES = 100_000_000
#: The largest ``batch_threads`` a cache takes.
MAX_BATCH_THREADS = 256
#: The largest ``io_threads`` a cache takes.
MAX_IO_THREADS = 64
#: The read-ahead queue's depth when ``io_depth`` is 0: reads queued or
#: under way at most.  Each holds an INFLIGHT slot of its own and the read
#: being queued holds one more, so with at most this many slots the queue
#: is never full and ``queue_fallbacks`` stays 0, whatever the timing.
IO_DEPTH_DEFAULT = 64
#: The trace ring's records when ``trace_ring_records`` is 0.
TRACE_RING_DEFAULT = 4096
#: The bytes of one trace record (docs/TRACE_FORMAT.md).
TRACE_RECORD_BYTES = 24
#: The most keys (layers x n_experts) a cache numbers; more is misuse.
MAX_KEYS = 2**31 - 1
#: Consecutive interrupted preads (EINTR, EAGAIN) without a byte of progress
#: after which a read gives up: that last one is an I/O error.
IO_MAX_RETRIES = 1000

#: Every bound above by its xc.h name.
BOUNDS: dict[str, int] = {
    "XC_DIRECT_ALIGN": DIRECT_ALIGN,
    "XC_MAX_DIMS": MAX_DIMS,
    "XC_HEADER_MAX_BYTES": HEADER_MAX_BYTES,
    "XC_MAX_BATCH_THREADS": MAX_BATCH_THREADS,
    "XC_MAX_IO_THREADS": MAX_IO_THREADS,
    "XC_IO_DEPTH_DEFAULT": IO_DEPTH_DEFAULT,
    "XC_TRACE_RING_DEFAULT": TRACE_RING_DEFAULT,
    "XC_TRACE_RECORD_BYTES": TRACE_RECORD_BYTES,
    "XC_MAX_KEYS": MAX_KEYS,
    "XC_IO_MAX_RETRIES": IO_MAX_RETRIES,
}
