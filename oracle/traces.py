"""Routing traces and their files: the ``Trace`` type, readers and writers.

The formats are those of fixtures/traces/README.md; what is computed from a
trace (reuse distances, overlap, miss-ratio curves) is :mod:`oracle.trace_stats`.

A trace is a sequence of accesses ``(token, layer, expert)``: tokens in
order, the layers of one token ascending, the experts of one layer step in
their recorded order. A *step* is the run of accesses of one (token, layer).
The key of an access is ``layer * n_experts + expert``.

Two formats are read (detected from the first record):

- per layer (mixtral): ``{"problem_id", "token_idx", "layer", "experts", ...}``
  one object per (problem, token, layer), in any order; tokens are ordered
  by ``(problem_id, token_idx)`` and a token may lack some layers;
- per token (olmoe): ``{"tok", "layers": [[...], ...]}``, one object per token
  with the experts of every layer in layer order.

Also read: the text dump many engines write (:func:`load_text_dump`, one
line ``pos layer id0 .. idK-1 [w0 .. wK-1]`` per token and layer) and a raw
little-endian int32 file of fixed-k expert ids per routed call
(:func:`load_int32`). Written: CSV (:func:`write_csv`, read back by
:func:`load_csv`) and libCacheSim's ``oracleGeneral`` binary format
(:func:`write_oracle_general`, read back by :func:`read_oracle_general`).
:func:`read_trace` picks the reader by name or file extension.
"""


from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "Trace", "TraceFormatError", "load_trace", "EngineTraceHeader",
    "read_engine_trace", "load_engine_trace", "ENGINE_TRACE_KINDS",
    "ENGINE_TRACE_OUTCOMES", "load_text_dump", "load_int32",
    "load_csv", "write_csv", "write_oracle_general", "read_oracle_general",
    "ORACLE_GENERAL_DTYPE", "read_trace", "FORMATS", "MAX_LAYERS", "MAX_EXPERTS",
]


#: The largest layer count and experts per layer a trace may have: every key
#: ``layer * n_experts + expert`` then fits the simulator's 32-bit keys.
MAX_LAYERS = 1 << 12
MAX_EXPERTS = 1 << 19


class TraceFormatError(ValueError):
    """A trace line is malformed; ``path`` and ``line`` (1-based) say where."""

    def __init__(self, path: str, line: int, detail: str) -> None:
        super().__init__(f"{path}:{line}: {detail}")
        self.path = path
        self.line = line
        self.detail = detail


@dataclass
class Trace:
    """Accesses as parallel numpy arrays, plus the model's shape."""

    token: np.ndarray  # dense token ordinal 0..n_tokens-1, per access
    layer: np.ndarray
    expert: np.ndarray
    n_layers: int
    n_experts: int
    top_k: int
    sequence: np.ndarray = field(default=None)  # per access: problem / sequence id
    name: str = ""

    def __post_init__(self) -> None:
        if self.sequence is None:
            self.sequence = np.zeros(len(self.token), np.int64)

    @classmethod
    def from_steps(cls, steps: Iterable[tuple[int, int, Sequence[int]]],
                   n_layers: int, n_experts: int, name: str = "") -> Trace:
        """Build a trace from ``(token, layer, experts)`` steps, already in order."""
        tok, lay, exp = [], [], []
        for t, layer, experts in steps:
            for e in experts:
                tok.append(t)
                lay.append(layer)
                exp.append(e)
        token = np.asarray(tok, np.int64)
        layer_a, expert_a = np.asarray(lay, np.int64), np.asarray(exp, np.int64)
        top_k = int(np.max(np.unique(np.stack([token, layer_a]), axis=1,
                                     return_counts=True)[1])) if tok else 0
        return cls(token, layer_a, expert_a, n_layers, n_experts, top_k, name=name)

    def __len__(self) -> int:
        return len(self.token)

    @property
    def n_tokens(self) -> int:
        """How many tokens the trace has."""
        return int(self.token.max()) + 1 if len(self.token) else 0

    @property
    def n_keys(self) -> int:
        """How many distinct keys the shape allows: ``n_layers * n_experts``."""
        return self.n_layers * self.n_experts

    def keys(self) -> np.ndarray:
        """The key of every access: ``layer * n_experts + expert``."""
        return self.layer * self.n_experts + self.expert

    def step_starts(self) -> np.ndarray:
        """True at the first access of every (token, layer) step."""
        starts = np.ones(len(self.token), bool)
        if len(self.token) > 1:
            starts[1:] = (self.token[1:] != self.token[:-1]) | (
                self.layer[1:] != self.layer[:-1])
        return starts


def _check_ids(path: str, number: int, layer: int, experts: Iterable[int]) -> None:
    """Refuse a layer or expert id beyond the limits, naming the line."""
    if layer >= MAX_LAYERS:
        raise TraceFormatError(path, number, f"layer {layer} is beyond the "
                               f"limit of {MAX_LAYERS} layers")
    for e in experts:
        if e >= MAX_EXPERTS:
            raise TraceFormatError(path, number, f"expert id {e} is beyond the "
                                   f"limit of {MAX_EXPERTS} experts per layer")


def _uint(value: object) -> bool:
    return type(value) is int and value >= 0


def _expert_list(value: object) -> bool:
    return (isinstance(value, list) and len(value) > 0
            and all(_uint(e) for e in value) and len(set(value)) == len(value))


def _records(path: str) -> Iterable[tuple[int, dict]]:
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceFormatError(path, number, f"not JSON: {exc.msg}") from None
            if not isinstance(obj, dict):
                raise TraceFormatError(path, number, "not a JSON object")
            yield number, obj


def load_trace(path: str | os.PathLike, n_layers: int | None = None,
               n_experts: int | None = None) -> Trace:
    """Read a mixtral-style or olmoe-style jsonl trace (format auto-detected).

    ``n_layers`` / ``n_experts`` default to the largest id seen plus one.
    Raises ``TraceFormatError`` naming the first bad line.
    """
    path = str(path)
    steps: dict[tuple[int, int, int], list[int]] = {}  # (seq, token, layer)
    fmt = None
    seen_tokens: set[int] = set()
    for number, obj in _records(path):
        this = ("token" if "layers" in obj else "layer")
        fmt = fmt or this
        if this != fmt:
            raise TraceFormatError(path, number, "mixes the two trace formats")
        if fmt == "layer":
            fields = ("problem_id", "token_idx", "layer")
            if not all(_uint(obj.get(k)) for k in fields):
                raise TraceFormatError(path, number, f"needs unsigned ints {fields}")
            if not _expert_list(obj.get("experts")):
                raise TraceFormatError(path, number,
                                       "experts must be distinct unsigned ints")
            _check_ids(path, number, obj["layer"], obj["experts"])
            where = (obj["problem_id"], obj["token_idx"], obj["layer"])
            if where in steps:
                raise TraceFormatError(path, number, f"repeats {fields} = {where}")
            steps[where] = obj["experts"]
        else:
            layers = obj.get("layers")
            if not _uint(obj.get("tok")) or not isinstance(layers, list) or not all(
                    _expert_list(x) for x in layers):
                raise TraceFormatError(path, number, "needs an unsigned int tok and "
                                       "layers of distinct unsigned ints")
            if obj["tok"] in seen_tokens:
                raise TraceFormatError(path, number, f"repeats tok {obj['tok']}")
            seen_tokens.add(obj["tok"])
            for layer, experts in enumerate(layers):
                _check_ids(path, number, layer, experts)
                steps[(0, obj["tok"], layer)] = experts
    if not steps:
        raise TraceFormatError(path, 0, "no records")
    order = sorted(steps)
    tokens = sorted({(s, t) for s, t, _ in order})
    ordinal = {st: i for i, st in enumerate(tokens)}
    seq, tok, lay, exp = [], [], [], []
    for s, t, layer in order:
        for e in steps[(s, t, layer)]:
            seq.append(s)
            tok.append(ordinal[(s, t)])
            lay.append(layer)
            exp.append(e)
    max_layer, max_expert = max(lay), max(exp)
    n_layers = max_layer + 1 if n_layers is None else n_layers
    n_experts = max_expert + 1 if n_experts is None else n_experts
    if max_layer >= n_layers or max_expert >= n_experts:
        raise TraceFormatError(path, 0, f"ids exceed n_layers={n_layers} or "
                               f"n_experts={n_experts}")
    top_k = max(len(v) for v in steps.values())
    return Trace(np.asarray(tok, np.int64), np.asarray(lay, np.int64),
                 np.asarray(exp, np.int64), n_layers, n_experts, top_k,
                 np.asarray(seq, np.int64), name=os.path.basename(path))


# -- engine-recorded binary traces (docs/TRACE_FORMAT.md) -------------------

#: Record kinds and outcomes, by number, as docs/TRACE_FORMAT.md lists them:
#: the oracle's own copy (it decodes traces without the engine), held equal to
#: the engine's csrc/xc_kinds.h by tests/boundary/test_trace_vocabulary.py.
ENGINE_TRACE_KINDS = ("get", "prefetch", "speculative", "stream")
ENGINE_TRACE_OUTCOMES = ("hit", "miss", "wait_hit", "resident", "inflight",
                         "issued", "no_slot", "duplicate")
_ENGINE_MAGIC = b"XCTRACE1"
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
    raw = np.fromfile(path, dtype=np.uint8)
    if len(raw) < _ENGINE_HEADER.itemsize:
        raise TraceFormatError(path, 0, "shorter than the 48-byte header")
    h = raw[:_ENGINE_HEADER.itemsize].view(_ENGINE_HEADER)[0]
    if bytes(h["magic"]) != _ENGINE_MAGIC:
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
    rec = rec[want]
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


# -- other formats ------------------------------------------------------------

#: libCacheSim's oracleGeneral record: packed little-endian uint32 clock_time,
#: uint64 obj_id, uint32 obj_size, int64 next_access_vtime (24 bytes; the
#: reader's item_size, libCacheSim traceReader/customizedReader/oracle/
#: oracleGeneralBin.h). next_access_vtime is the position of the key's next
#: request, INT64_MAX when there is none.
ORACLE_GENERAL_DTYPE = np.dtype([("clock_time", "<u4"), ("obj_id", "<u8"),
                                 ("obj_size", "<u4"),
                                 ("next_access_vtime", "<i8")])
_NEVER = np.iinfo(np.int64).max


def _finish(path: str, seq: list[int], tok: list[int], lay: list[int],
            exp: list[int], n_layers: int | None, n_experts: int | None) -> Trace:
    """Dense token ordinals, shape checks and top_k for parsed accesses."""
    if not tok:
        raise TraceFormatError(path, 0, "no records")
    token = np.asarray(tok, np.int64)
    layer, expert = np.asarray(lay, np.int64), np.asarray(exp, np.int64)
    seq_a = np.asarray(seq, np.int64)
    change = np.ones(len(token), bool)
    change[1:] = (token[1:] != token[:-1]) | (seq_a[1:] != seq_a[:-1])
    ordinal = np.cumsum(change) - 1
    n_layers = int(layer.max()) + 1 if n_layers is None else n_layers
    n_experts = int(expert.max()) + 1 if n_experts is None else n_experts
    if layer.max() >= n_layers or expert.max() >= n_experts:
        raise TraceFormatError(path, 0, f"ids exceed n_layers={n_layers} or "
                               f"n_experts={n_experts}")
    step = np.ones(len(token), bool)
    step[1:] = change[1:] | (layer[1:] != layer[:-1])
    top_k = int(np.max(np.diff(np.append(np.flatnonzero(step), len(step)))))
    return Trace(ordinal.astype(np.int64), layer, expert, n_layers, n_experts,
                 top_k, seq_a, name=os.path.basename(path))


def _int_token(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def load_text_dump(path: str | os.PathLike, top_k: int | None = None,
                   n_layers: int | None = None, n_experts: int | None = None
                   ) -> Trace:
    """Read ``pos layer id0 .. idK-1 [weights ...]`` lines (one per token and layer).

    Blank lines and ``#`` comments are skipped. Without ``top_k`` the ids
    are the leading run of unsigned integers after ``pos layer``; the rest
    must be K numbers (weights) or nothing (give ``top_k`` when weights can
    be written as bare integers). A ``pos`` lower than the line
    before starts a new sequence; the layers of one token must ascend.
    Raises ``TraceFormatError`` naming the first bad line.
    """
    path = str(path)
    seq, tok, lay, exp = [], [], [], []
    s, prev = 0, None  # prev: (pos, layer) of the last line
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            text = line.split("#", 1)[0].split()
            if not text:
                continue
            head = [_int_token(x) for x in text[:2]]
            if len(text) < 3 or None in head:
                raise TraceFormatError(path, number, "needs 'pos layer id0 ..' "
                                       "with unsigned integer pos and layer")
            pos, layer = head
            rest = text[2:]
            k = top_k
            if k is None:
                k = 0
                while k < len(rest) and _int_token(rest[k]) is not None:
                    k += 1
            ids = [_int_token(x) for x in rest[:k]]
            if k < 1 or None in ids or len(set(ids)) != len(ids):
                raise TraceFormatError(path, number, f"expert ids must be "
                                       f"{k or 'some'} distinct unsigned integers")
            weights = rest[k:]
            if weights:
                if len(weights) != k:
                    raise TraceFormatError(path, number, f"{len(weights)} weights "
                                           f"for {k} expert ids")
                try:
                    [float(w) for w in weights]
                except ValueError:
                    raise TraceFormatError(path, number, "weights must be "
                                           "numbers") from None
            if prev is not None:
                if pos < prev[0]:
                    s += 1
                elif pos == prev[0] and layer <= prev[1]:
                    raise TraceFormatError(path, number, f"layer {layer} after "
                                           f"layer {prev[1]} of the same token")
            _check_ids(path, number, layer, ids)
            prev = (pos, layer)
            for e in ids:
                seq.append(s)
                tok.append(pos)
                lay.append(layer)
                exp.append(e)
    return _finish(path, seq, tok, lay, exp, n_layers, n_experts)


def load_int32(path: str | os.PathLike, top_k: int, n_layers: int,
               n_experts: int | None = None) -> Trace:
    """Read raw little-endian int32 expert ids, ``top_k`` per routed call.

    Call ``i`` is token ``i // n_layers``, layer ``i % n_layers`` (the last
    token may be cut short). A size not a multiple of ``4 * top_k`` or a
    negative id is ``TraceFormatError`` (``line`` is the 1-based call).
    """
    path = str(path)
    if top_k < 1 or n_layers < 1:
        raise ValueError("top_k and n_layers must be at least 1")
    raw = np.fromfile(path, dtype="<i4")
    size = os.path.getsize(path)
    if size % (4 * top_k):
        raise TraceFormatError(path, size // (4 * top_k) + 1,
                               f"{size} bytes is not a whole number of calls "
                               f"of {top_k} int32 ids")
    ids = raw.reshape(-1, top_k).astype(np.int64)
    bad = np.flatnonzero((ids < 0).any(axis=1))
    if len(bad):
        raise TraceFormatError(path, int(bad[0]) + 1, "negative expert id")
    big = np.flatnonzero((ids >= MAX_EXPERTS).any(axis=1))
    if len(big):
        row = ids[int(big[0])]
        _check_ids(path, int(big[0]) + 1, 0, row.tolist())
    dup = np.flatnonzero((np.sort(ids, axis=1)[:, 1:] ==
                          np.sort(ids, axis=1)[:, :-1]).any(axis=1))
    if len(dup):
        raise TraceFormatError(path, int(dup[0]) + 1, "repeated expert id")
    calls = np.arange(len(ids))
    tok = np.repeat(calls // n_layers, top_k)
    lay = np.repeat(calls % n_layers, top_k)
    return _finish(path, [0] * len(tok), tok.tolist(), lay.tolist(),
                   ids.ravel().tolist(), n_layers, n_experts)


_CSV_HEADER = "sequence,token,layer,expert,key"


def write_csv(trace: Trace, path: str | os.PathLike) -> None:
    """Write one row ``sequence,token,layer,expert,key`` per access, with a header.

    ``key`` (column 5) is ``layer * n_experts + expert``, the obj_id a
    libCacheSim CSV reader can use (``obj-id-col=5, has-header=true``).
    """
    cols = np.stack([trace.sequence, trace.token, trace.layer, trace.expert,
                     trace.keys()], axis=1)
    with open(path, "w", encoding="utf-8") as f:
        f.write(_CSV_HEADER + "\n")
        np.savetxt(f, cols, fmt="%d", delimiter=",")


def load_csv(path: str | os.PathLike, n_layers: int | None = None,
             n_experts: int | None = None) -> Trace:
    """Read a CSV written by :func:`write_csv` (``TraceFormatError`` on bad rows)."""
    path = str(path)
    seq, tok, lay, exp = [], [], [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            text = line.strip()
            if not text or (number == 1 and text == _CSV_HEADER):
                continue
            fields = [_int_token(x.strip()) for x in text.split(",")]
            if len(fields) not in (4, 5) or None in fields:
                raise TraceFormatError(path, number, "needs unsigned integers "
                                       "sequence,token,layer,expert[,key]")
            _check_ids(path, number, fields[2], [fields[3]])
            seq.append(fields[0])
            tok.append(fields[1])
            lay.append(fields[2])
            exp.append(fields[3])
    tr = _finish(path, seq, tok, lay, exp, n_layers, n_experts)
    return tr


def write_oracle_general(trace: Trace, path: str | os.PathLike,
                         repeat: int = 1) -> int:
    """Write ``trace`` (``repeat`` times over) as libCacheSim oracleGeneral.

    One 24-byte record per access: clock_time = position, obj_id = key,
    obj_size = 1, next_access_vtime = position of the key's next access
    (INT64_MAX when none). Returns the number of records.
    """
    return write_oracle_general_keys(np.tile(trace.keys(), repeat), path)


def write_oracle_general_keys(keys: np.ndarray,
                              path: str | os.PathLike) -> int:
    """Write the key sequence ``keys`` as libCacheSim oracleGeneral records.

    The record layout of :func:`write_oracle_general`; returns their number.
    """
    keys = np.asarray(keys)
    n = len(keys)
    order = np.argsort(keys, kind="stable")
    nxt = np.full(n, _NEVER, np.int64)
    same = keys[order[1:]] == keys[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    rec = np.zeros(n, ORACLE_GENERAL_DTYPE)
    rec["clock_time"] = np.arange(n) & 0xFFFFFFFF
    rec["obj_id"] = keys
    rec["obj_size"] = 1
    rec["next_access_vtime"] = nxt
    rec.tofile(str(path))
    return n


def read_oracle_general(path: str | os.PathLike) -> np.ndarray:
    """The records of an oracleGeneral file (a structured numpy array)."""
    size = os.path.getsize(path)
    if size % ORACLE_GENERAL_DTYPE.itemsize:
        raise TraceFormatError(str(path), size // 24 + 1,
                               f"{size} bytes is not whole 24-byte records")
    return np.fromfile(str(path), ORACLE_GENERAL_DTYPE)


#: Formats :func:`read_trace` knows, by name.
FORMATS = ("jsonl", "text", "int32", "csv", "engine")


def read_trace(path: str | os.PathLike, fmt: str | None = None,
               top_k: int | None = None, n_layers: int | None = None,
               n_experts: int | None = None) -> Trace:
    """Read any supported trace; ``fmt`` defaults from the extension.

    ``.jsonl``/``.json`` -> both shared formats, ``.csv`` -> :func:`load_csv`,
    ``.bin``/``.i32`` -> :func:`load_int32` (needs ``top_k`` and
    ``n_layers``), a file starting with the engine's trace magic ->
    :func:`load_engine_trace`, anything else -> :func:`load_text_dump`.
    """
    path = str(path)
    if fmt is None:
        with open(path, "rb") as f:
            magic = f.read(len(_ENGINE_MAGIC))
        ext = os.path.splitext(path)[1].lower()
        fmt = "engine" if magic == _ENGINE_MAGIC else {
            ".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv",
            ".bin": "int32", ".i32": "int32"}.get(ext, "text")
    if fmt == "engine":
        return load_engine_trace(path)
    if fmt == "jsonl":
        return load_trace(path, n_layers, n_experts)
    if fmt == "csv":
        return load_csv(path, n_layers, n_experts)
    if fmt == "int32":
        if top_k is None or n_layers is None:
            raise ValueError("an int32 trace needs top_k and n_layers")
        return load_int32(path, top_k, n_layers, n_experts)
    if fmt == "text":
        return load_text_dump(path, top_k, n_layers, n_experts)
    raise ValueError(f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")
