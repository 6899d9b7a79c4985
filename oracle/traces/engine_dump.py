"""Traces the engine records (``trace_path``): the binary XCTRACE1 file.

docs/TRACE_FORMAT.md gives the layout; the record kinds and outcomes are
the oracle's own copy of the engine's vocabulary.  Beside the readers
(:func:`read_engine_trace`, :func:`load_engine_trace`), the format's other
half: :func:`engine_fingerprint` (the header's container fingerprint),
:func:`engine_trace_bytes` (the bytes of a file from its header and
records) and :func:`decode_engine_trace` (every field of a file's bytes as
they are, refusing nothing: what the gate compares, docs/SCENARIOS.md).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

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


#: The header's fields in file order (48 bytes), and the record's (24).
ENGINE_HEADER_FIELDS = _ENGINE_HEADER.names
ENGINE_RECORD_FIELDS = ("step", "layer", "expert", "kind", "outcome",
                        "reserved")
ENGINE_HEADER_BYTES = _ENGINE_HEADER.itemsize
ENGINE_RECORD_BYTES = _ENGINE_RECORD.itemsize

#: FNV-1a 64 (docs/TRACE_FORMAT.md "Fingerprint").
FNV_OFFSET = 0xcbf29ce484222325
FNV_PRIME = 0x100000001b3
_U64 = (1 << 64) - 1


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


def engine_fingerprint(expert_bytes: int, n_experts: int,
                       keys: Iterable[tuple[int, int]]) -> int:
    """The container fingerprint of docs/TRACE_FORMAT.md.

    FNV-1a 64 over the little-endian u64 words ``expert_bytes``,
    ``n_experts``, then for each key in key-id order its layer (the layer's
    index in the model, not its place in the cache's list) and the file
    offset of its first tensor: ``keys`` gives those (layer, offset) pairs.
    """
    h = FNV_OFFSET
    words = [expert_bytes, n_experts]
    words += [w for pair in keys for w in pair]
    for w in words:
        for b in (w & _U64).to_bytes(8, "little"):
            h = ((h ^ b) * FNV_PRIME) & _U64
    return h


def engine_trace_bytes(header: EngineTraceHeader,
                       records: Iterable[tuple[int, int, int, str, str]]) -> bytes:
    """The bytes of an engine trace: the 48-byte header (magic ``XCTRACE1``,
    reserved 0), then per record ``(step, layer, expert, kind, outcome)``
    (names of :data:`ENGINE_TRACE_KINDS` and :data:`ENGINE_TRACE_OUTCOMES`)
    its 24 bytes, reserved 0."""
    head = np.zeros(1, _ENGINE_HEADER)
    head[0] = (ENGINE_MAGIC, header.version, header.record_bytes,
               header.fingerprint, header.layer_limit, header.n_experts,
               header.top_k, header.n_slots, 0)
    rows = [(step, layer, expert, ENGINE_TRACE_KINDS.index(kind),
             ENGINE_TRACE_OUTCOMES.index(outcome), 0, 0)
            for step, layer, expert, kind, outcome in records]
    body = np.array(rows, _ENGINE_RECORD) if rows else np.zeros(0, _ENGINE_RECORD)
    return head.tobytes() + body.tobytes()


@dataclass(frozen=True)
class EngineTraceFile:
    """Every field of an engine trace's bytes, as they are (nothing refused).

    ``header``: each field of :data:`ENGINE_HEADER_FIELDS` (the magic as
    text, the rest as numbers), None when the file is shorter than the
    header; ``records``: each whole record as a tuple of
    :data:`ENGINE_RECORD_FIELDS` (kind and outcome as numbers, ``reserved``
    the six bytes after them as one little-endian number); ``trailing``:
    the bytes after the last whole record (a record cut short); ``size``
    and ``sha256`` of the whole file.
    """

    header: dict[str, Any] | None
    records: list[tuple[int, int, int, int, int, int]]
    trailing: bytes
    size: int
    sha256: str


def decode_engine_trace(raw: bytes) -> EngineTraceFile:
    """Every field of the bytes ``raw`` of an engine trace file.

    Unlike :func:`read_engine_trace` it refuses nothing: a wrong magic,
    version or size is decoded as it is, so that two files can be compared
    field by field (the gate's ``trace`` step).  Two files decode equal
    exactly when their bytes are equal.
    """
    raw = bytes(raw)
    n_head = ENGINE_HEADER_BYTES
    header: dict[str, Any] | None = None
    if len(raw) >= n_head:
        h = np.frombuffer(raw[:n_head], _ENGINE_HEADER)[0]
        header = {f: int(h[f]) for f in ENGINE_HEADER_FIELDS if f != "magic"}
        header = {"magic": bytes(raw[:8]).decode("latin-1"), **header}
        body = raw[n_head:]
    else:
        body = b""
    whole = len(body) - len(body) % ENGINE_RECORD_BYTES
    rec = np.frombuffer(body[:whole], _ENGINE_RECORD)
    records = [(int(r["step"]), int(r["layer"]), int(r["expert"]),
                int(r["kind"]), int(r["outcome"]),
                int(r["pad"]) | int(r["reserved"]) << 16) for r in rec]
    trailing = body[whole:] if len(raw) >= n_head else raw
    return EngineTraceFile(header, records, trailing, len(raw),
                           hashlib.sha256(raw).hexdigest())


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
