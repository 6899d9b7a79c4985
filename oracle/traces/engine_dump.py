"""Traces the engine records (``trace_path``): the binary XCTRACE1 file.

docs/TRACE_FORMAT.md gives the layout; the record kinds and outcomes are
the oracle's own copy of the engine's vocabulary.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from xcache.oracle.traces.model import (
    MAX_EXPERTS,
    MAX_LAYERS,
    Trace,
    TraceFormatError,
    fromfile,
)

#: Record kinds and outcomes, by number, as docs/TRACE_FORMAT.md lists them:
#: the oracle's own copy (it decodes traces without the engine), held equal to
#: the engine's csrc/xc_kinds.h by tests/boundary/test_trace_vocabulary.py.
ENGINE_TRACE_KINDS = ("get", "prefetch", "speculative", "stream")


ENGINE_TRACE_OUTCOMES = ("hit", "miss", "wait_hit", "resident", "inflight",
                         "issued", "no_slot", "duplicate")


ENGINE_MAGIC = b"XCTRACE1"


_ENGINE_HEADER = np.dtype([("magic", "S8"), ("version", "<u4"),
                           ("record_bytes", "<u4"), ("fingerprint", "<u8"),
                           ("layer_limit", "<u4"), ("n_experts", "<u4"),
                           ("top_k", "<u4"), ("n_slots", "<u4"),
                           ("reserved", "<u8")])


_ENGINE_RECORD = np.dtype([("step", "<u8"), ("layer", "<i4"), ("expert", "<i4"),
                           ("kind", "u1"), ("outcome", "u1"), ("pad", "<u2"),
                           ("reserved", "<u4")])


@dataclass(frozen=True)
class EngineTraceHeader:
    """The header of an engine-recorded trace."""

    version: int
    record_bytes: int
    fingerprint: int
    layer_limit: int
    n_experts: int
    top_k: int
    n_slots: int


def read_engine_trace(path: str | os.PathLike) -> tuple[EngineTraceHeader, np.ndarray]:
    """The header and every record (a numpy structured array) of an engine trace.

    Raises ``TraceFormatError`` for a bad magic, version or record size, or a
    file that does not end on a record boundary (line 0: a binary file).
    """
    path = str(path)
    raw = fromfile(path, dtype=np.uint8)
    if len(raw) < _ENGINE_HEADER.itemsize:
        raise TraceFormatError(path, 0, "shorter than the 48-byte header")
    h = raw[:_ENGINE_HEADER.itemsize].view(_ENGINE_HEADER)[0]
    if bytes(h["magic"]) != ENGINE_MAGIC:
        raise TraceFormatError(path, 0, f"bad magic {bytes(h['magic'])!r}")
    if int(h["version"]) != 1 or int(h["record_bytes"]) != _ENGINE_RECORD.itemsize:
        raise TraceFormatError(path, 0, f"version {int(h['version'])} record size "
                               f"{int(h['record_bytes'])}: only 1 and 24 are read")
    body = raw[_ENGINE_HEADER.itemsize:]
    if len(body) % _ENGINE_RECORD.itemsize:
        raise TraceFormatError(path, 0, f"{len(body)} record bytes is not a "
                               "whole number of 24-byte records")
    header = EngineTraceHeader(int(h["version"]), int(h["record_bytes"]),
                               int(h["fingerprint"]), int(h["layer_limit"]),
                               int(h["n_experts"]), int(h["top_k"]),
                               int(h["n_slots"]))
    return header, body.view(_ENGINE_RECORD)


def load_engine_trace(path: str | os.PathLike,
                      kinds: Sequence[str] = ("get", "stream")) -> Trace:
    """The demand accesses of an engine trace as a :class:`Trace`.

    Keeps records of ``kinds`` whose outcome moved ``requests`` (hit, miss,
    wait_hit); each run of records with one step becomes one token, in order.
    """
    header, rec = read_engine_trace(path)
    want = np.isin(rec["kind"], [ENGINE_TRACE_KINDS.index(k) for k in kinds])
    want &= rec["outcome"] <= ENGINE_TRACE_OUTCOMES.index("wait_hit")
    at = np.flatnonzero(want)  # record numbers in the file
    rec = rec[want]
    # the header's shape and every record's key, checked as other formats'
    # ids are: a bit flip in a file must not become a 2**32-layer table
    for what, limit, n, col in (("layer", MAX_LAYERS, header.layer_limit, "layer"),
                                ("expert", MAX_EXPERTS, header.n_experts, "expert")):
        if n > limit:
            raise TraceFormatError(path, 0, f"header {what} count {n} is beyond "
                                   f"the limit of {limit}")
        bad = np.flatnonzero((rec[col] < 0) | (rec[col] >= n))
        if len(bad):
            i = int(bad[0])
            raise TraceFormatError(path, 0, f"record {int(at[i])}: {what} "
                                   f"{int(rec[col][i])} is outside 0..{n - 1} "
                                   "(the header's count)")
    steps = rec["step"].astype(np.int64)
    if len(steps):
        change = np.ones(len(steps), bool)
        change[1:] = steps[1:] != steps[:-1]
        token = np.cumsum(change) - 1
    else:
        token = np.zeros(0, np.int64)
    layer = rec["layer"].astype(np.int64)
    expert = rec["expert"].astype(np.int64)
    if len(token):
        top_k = int(np.max(np.unique(np.stack([token, layer]), axis=1,
                                     return_counts=True)[1]))
    else:
        top_k = 0
    return Trace(token.astype(np.int64), layer, expert, header.layer_limit,
                 header.n_experts, top_k, name=os.path.basename(str(path)))
