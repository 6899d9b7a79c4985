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
line ``pos layer id0 .. idK-1 [w0 .. wK-1]`` per token and layer), a raw
little-endian int32 file of fixed-k expert ids per routed call
(:func:`load_int32`), an engine's dump of little-endian int32 ``(layer,
expert)`` pairs, one per request, whose layer runs may hold a chunk of
several tokens (:func:`load_pairs`), Megatron-Core's router trace
(:func:`load_megatron`) and libCacheSim's ``oracleGeneral``
(:func:`load_oracle_general`). Written, in request order: the per-layer
JSONL (:func:`write_jsonl`), CSV (:func:`write_csv`, read back by
:func:`load_csv`) and ``oracleGeneral`` (:func:`write_oracle_general`,
records by :func:`read_oracle_general`). :func:`read_trace` picks the
reader by name or file extension; :func:`detect_trace` by the content
(docs/TRACE_FORMAT.md lists the formats and the detection rules).

A per-layer JSONL object may carry ``"tokens": n`` (its experts are then n
tokens' worth, repeats allowed), and a CSV whose header names column 2
``pass``: both are a trace without token boundaries (``Trace.steps_unknown``).
"""


from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from oracle.regular import open_regular

__all__ = [
    "Trace", "TraceFormatError", "load_trace", "EngineTraceHeader",
    "read_engine_trace", "load_engine_trace", "ENGINE_TRACE_KINDS",
    "ENGINE_TRACE_OUTCOMES", "load_text_dump", "load_int32",
    "load_csv", "write_csv", "write_oracle_general", "read_oracle_general",
    "ORACLE_GENERAL_DTYPE", "read_trace", "FORMATS", "MAX_LAYERS", "MAX_EXPERTS",
    "load_pairs", "infer_top_k", "step_refusal", "load_oracle_general",
    "write_jsonl", "write_oracle_general_keys", "detect_trace", "describe_trace",
    "FORMAT_TITLES", "load_megatron",
]


#: The largest layer count and experts per layer a trace may have: every key
#: ``layer * n_experts + expert`` then fits the simulator's 32-bit keys.
MAX_LAYERS = 1 << 12
MAX_EXPERTS = 1 << 19
_I64_MAX = (1 << 63) - 1


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
    #: Why the (token, layer) steps are not known, or "" when they are: a
    #: pair dump whose layer runs hold several tokens of a chunk records no
    #: token boundaries, so its ``token`` counts forward passes and only
    #: plain-mode replay is exact (:func:`step_refusal`).
    steps_unknown: str = ""

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


def _fromfile(path: str | os.PathLike, dtype: object) -> np.ndarray:
    """np.fromfile of a regular file only (a FIFO would block it; DESIGN.md)."""
    with open_regular(path) as f:
        return np.fromfile(f, dtype=dtype)


def _size(path: str | os.PathLike) -> int:
    """The byte size of a regular file; NotRegularFileError for anything else."""
    with open_regular(path) as f:
        return os.fstat(f.fileno()).st_size


def _uint(value: object) -> bool:
    return type(value) is int and value >= 0


def _expert_list(value: object) -> bool:
    return (isinstance(value, list) and len(value) > 0
            and all(_uint(e) for e in value) and len(set(value)) == len(value))


def _records(path: str) -> Iterable[tuple[int, dict]]:
    with open_regular(path, "r", encoding="utf-8") as f:
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
    run_tokens: dict[tuple[int, int, int], int] = {}  # per-layer "tokens" field
    for number, obj in _records(path):
        if fmt is None and "top_indices" in obj:  # a Megatron-Core router trace
            return load_megatron(path, n_layers, n_experts)
        this = ("token" if "layers" in obj else "layer")
        fmt = fmt or this
        if this != fmt:
            raise TraceFormatError(path, number, "mixes the two trace formats")
        if fmt == "layer":
            fields = ("problem_id", "token_idx", "layer")
            if not all(_uint(obj.get(k)) for k in fields):
                raise TraceFormatError(path, number, f"needs unsigned ints {fields}")
            n_tok = obj.get("tokens", 1)
            if not _uint(n_tok) or n_tok < 1:
                raise TraceFormatError(path, number, "tokens must be a positive int")
            experts = obj.get("experts")
            if n_tok == 1 and not _expert_list(experts):
                raise TraceFormatError(path, number,
                                       "experts must be distinct unsigned ints")
            if n_tok > 1 and not (isinstance(experts, list) and experts and all(
                    _uint(e) for e in experts) and len(experts) % n_tok == 0):
                raise TraceFormatError(path, number, f"experts must be unsigned "
                                       f"ints, a whole number per each of the "
                                       f"{n_tok} tokens")
            _check_ids(path, number, obj["layer"], experts)
            where = (obj["problem_id"], obj["token_idx"], obj["layer"])
            if where in steps:
                raise TraceFormatError(path, number, f"repeats {fields} = {where}")
            steps[where] = experts
            run_tokens[where] = n_tok
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
    top_k = max(len(v) // run_tokens.get(w, 1) for w, v in steps.items())
    per_run = np.asarray([run_tokens.get(w, 1) for w in order], np.int64)
    return Trace(np.asarray(tok, np.int64), np.asarray(lay, np.int64),
                 np.asarray(exp, np.int64), n_layers, n_experts, top_k,
                 np.asarray(seq, np.int64), name=os.path.basename(path),
                 steps_unknown=_chunk_note(per_run, top_k))


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
    raw = _fromfile(path, dtype=np.uint8)
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
            exp: list[int], n_layers: int | None, n_experts: int | None,
            passes: bool = False) -> Trace:
    """Dense token ordinals, shape checks and top_k for parsed accesses.

    With ``passes`` the token column counts forward passes whose layer runs
    may hold several tokens: top_k is then :func:`infer_top_k`'s.
    """
    if not tok:
        raise TraceFormatError(path, 0, "no records")
    for what, col in (("token", tok), ("sequence", seq)):
        big = max(col, default=0)
        if big > _I64_MAX:
            raise TraceFormatError(path, 0, f"{what} number {big} is beyond "
                                   "2**63 - 1")
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
    lengths = np.diff(np.append(np.flatnonzero(step), len(step)))
    top_k = infer_top_k(expert, lengths) if passes else int(np.max(lengths))
    return Trace(ordinal.astype(np.int64), layer, expert, n_layers, n_experts,
                 top_k, seq_a, name=os.path.basename(path),
                 steps_unknown=_chunk_note(lengths // top_k, top_k) if passes
                 else "")


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
    with open_regular(path, "r", encoding="utf-8") as f:
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
    raw = _fromfile(path, dtype="<i4")
    size = _size(path)
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
        raise TraceFormatError(path, int(dup[0]) + 1, "repeated expert id (a "
                               "dump of (layer, expert) pairs is --format pairs)")
    calls = np.arange(len(ids))
    tok = np.repeat(calls // n_layers, top_k)
    lay = np.repeat(calls % n_layers, top_k)
    return _finish(path, [0] * len(tok), tok.tolist(), lay.tolist(),
                   ids.ravel().tolist(), n_layers, n_experts)


def _runs(layer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first index and the length of every maximal run of one layer."""
    starts = np.flatnonzero(np.diff(layer)) + 1
    starts = np.concatenate([np.zeros(1, np.int64), starts]) if len(layer) else starts
    return starts, np.diff(np.append(starts, len(layer)))


def _divisors(n: int) -> list[int]:
    """Every divisor of ``n`` (at least 1), largest first."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)}, reverse=True)


def infer_top_k(expert: np.ndarray, lengths: np.ndarray) -> int:
    """The top-k of runs that hold whole tokens: the largest k dividing every run
    length such that each consecutive block of k requests names k distinct experts.

    ``lengths`` are the lengths of the runs that tile ``expert`` in order, so
    with every length a multiple of k the blocks are ``expert`` cut every k.
    A token's k experts are distinct, so a block of one token never repeats
    one; a block spanning two tokens of a chunk almost always does.
    """
    expert = np.asarray(expert)
    g = int(np.gcd.reduce(np.asarray(lengths, np.int64))) if len(lengths) else 1
    def distinct(part: np.ndarray, d: int) -> bool:
        blocks = np.sort(part.reshape(-1, d), axis=1)
        return not (blocks[:, 1:] == blocks[:, :-1]).any()

    for d in _divisors(max(g, 1)):
        if d == 1:
            return 1
        head = expert[:max(d, (1 << 16) // d * d)]  # most wrong k fail here
        if distinct(head, d) and distinct(expert, d):
            return d
    return 1  # pragma: no cover - d == 1 returns above


def _chunk_note(tokens_per_run: np.ndarray, top_k: int) -> str:
    """The ``steps_unknown`` text for runs holding these many tokens ("" if all 1)."""
    several = int((tokens_per_run > 1).sum())
    if not several:
        return ""
    return (f"{several} of its {len(tokens_per_run)} layer runs hold several "
            f"tokens of a chunk ({int(tokens_per_run.min())}-"
            f"{int(tokens_per_run.max())} tokens of top-{top_k} each) and "
            "nothing marks where one token ends")


def load_pairs(path: str | os.PathLike, top_k: int | None = None,
               n_layers: int | None = None, n_experts: int | None = None) -> Trace:
    """Read a ``(layer, expert)`` dump: headerless little-endian int32 pairs,
    one pair per request in request order (docs/TRACE_FORMAT.md "Pair dumps").

    A maximal run of one layer is that layer's turn in a forward pass; a run
    whose layer is not above the one before starts the next pass, and
    ``Trace.token`` counts passes. A run holds ``top_k`` requests for each
    token of its pass (a chunk of prefill holds several, so an expert may
    repeat); without ``top_k`` it is :func:`infer_top_k`'s. When a run holds
    several tokens the trace records no token boundaries: ``steps_unknown``
    says so, and only plain-mode replay is exact. ``TraceFormatError`` names
    the 1-based pair (its ``line``).
    """
    path = str(path)
    size = _size(path)
    if size % 8:
        raise TraceFormatError(path, size // 8 + 1, f"{size} bytes is not a whole "
                               "number of 8-byte (layer, expert) int32 pairs")
    if not size:
        raise TraceFormatError(path, 0, "no records")
    pairs = _fromfile(path, "<i4").reshape(-1, 2).astype(np.int64)
    bad = np.flatnonzero((pairs < 0).any(axis=1))
    if len(bad):
        i = int(bad[0])
        col = 0 if pairs[i, 0] < 0 else 1
        raise TraceFormatError(path, i + 1, f"negative {('layer', 'expert')[col]} "
                               f"id {int(pairs[i, col])}")
    big = np.flatnonzero((pairs[:, 0] >= MAX_LAYERS) | (pairs[:, 1] >= MAX_EXPERTS))
    if len(big):
        i = int(big[0])
        _check_ids(path, i + 1, int(pairs[i, 0]), [int(pairs[i, 1])])
    layer = np.ascontiguousarray(pairs[:, 0])
    expert = np.ascontiguousarray(pairs[:, 1])
    starts, lengths = _runs(layer)
    run_layer = layer[starts]
    new_pass = np.ones(len(starts), bool)
    new_pass[1:] = run_layer[1:] <= run_layer[:-1]
    token = np.repeat(np.cumsum(new_pass) - 1, lengths)
    if top_k is None:
        k = infer_top_k(expert, lengths)
    else:
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        off = np.flatnonzero(lengths % top_k)
        if len(off):
            r = int(off[0])
            raise TraceFormatError(path, int(starts[r]) + 1, f"the run of layer "
                                   f"{int(run_layer[r])} starting here holds "
                                   f"{int(lengths[r])} requests, not a whole "
                                   f"number of tokens of top-{top_k}")
        k = top_k
        one = starts[lengths == k]
        if len(one) and k > 1:
            rows = np.sort(expert[one[:, None] + np.arange(k)], axis=1)
            dup = np.flatnonzero((rows[:, 1:] == rows[:, :-1]).any(axis=1))
            if len(dup):
                raise TraceFormatError(path, int(one[dup[0]]) + 1, "repeated "
                                       "expert id in a run of one token")
    n_layers = int(layer.max()) + 1 if n_layers is None else n_layers
    n_experts = int(expert.max()) + 1 if n_experts is None else n_experts
    if layer.max() >= n_layers or expert.max() >= n_experts:
        raise TraceFormatError(path, 0, f"ids exceed n_layers={n_layers} or "
                               f"n_experts={n_experts}")
    return Trace(token.astype(np.int64), layer, expert, n_layers, n_experts, k,
                 name=os.path.basename(path),
                 steps_unknown=_chunk_note(lengths // k, k))


def step_refusal(trace: Trace) -> str | None:
    """Why ``trace`` cannot be replayed step by step, or None when it can."""
    if not trace.steps_unknown:
        return None
    return (f"{trace.name}: step mode needs each token's (token, layer) steps, "
            f"and this trace does not record where one token ends: "
            f"{trace.steps_unknown}")


_CSV_HEADER = "sequence,token,layer,expert,key"
#: The header of a trace without token boundaries: column 2 counts passes.
_CSV_PASS_HEADER = "sequence,pass,layer,expert,key"


def write_csv(trace: Trace, path: str | os.PathLike) -> None:
    """Write one row ``sequence,token,layer,expert,key`` per access, with a header.

    ``key`` (column 5) is ``layer * n_experts + expert``, the obj_id a
    libCacheSim CSV reader can use (``obj-id-col=5, has-header=true``).
    Rows keep the trace's request order.  A trace without token boundaries
    (``steps_unknown``) names column 2 ``pass``: it counts forward passes.
    """
    cols = np.stack([trace.sequence, trace.token, trace.layer, trace.expert,
                     trace.keys()], axis=1)
    header = _CSV_PASS_HEADER if trace.steps_unknown else _CSV_HEADER
    with open(path, "w", encoding="utf-8") as f:
        f.write(header + "\n")
        np.savetxt(f, cols, fmt="%d", delimiter=",")


def load_csv(path: str | os.PathLike, n_layers: int | None = None,
             n_experts: int | None = None) -> Trace:
    """Read a CSV written by :func:`write_csv` (``TraceFormatError`` on bad rows)."""
    path = str(path)
    seq, tok, lay, exp = [], [], [], []
    passes = False
    with open_regular(path, "r", encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            text = line.strip()
            if not text or (number == 1 and text == _CSV_HEADER):
                continue
            if number == 1 and text == _CSV_PASS_HEADER:
                passes = True
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
    return _finish(path, seq, tok, lay, exp, n_layers, n_experts, passes)


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
    size = _size(path)
    if size % ORACLE_GENERAL_DTYPE.itemsize:
        raise TraceFormatError(str(path), size // 24 + 1,
                               f"{size} bytes is not whole 24-byte records")
    return _fromfile(str(path), ORACLE_GENERAL_DTYPE)


def load_oracle_general(path: str | os.PathLike, n_layers: int | None = None,
                        n_experts: int | None = None) -> Trace:
    """Read libCacheSim oracleGeneral records as a trace of their keys, in order.

    Key ``obj_id`` is ``layer * n_experts + expert``; without ``n_experts``
    every key is an expert of one layer. The records hold no tokens, so the
    trace's steps are unknown (plain-mode replay only).
    """
    path = str(path)
    rec = read_oracle_general(path)
    if not len(rec):
        raise TraceFormatError(path, 0, "no records")
    keys = rec["obj_id"]
    top = int(keys.max())
    if n_experts is None:
        if top >= MAX_EXPERTS:
            raise TraceFormatError(path, int(np.argmax(keys)) + 1, f"key {top} is "
                                   f"beyond {MAX_EXPERTS} experts of one layer; "
                                   "give the experts per layer to split keys "
                                   "into layers")
        n_experts = top + 1
    keys = keys.astype(np.int64)
    layer, expert = keys // n_experts, keys % n_experts
    if int(layer.max()) >= MAX_LAYERS:
        i = int(np.argmax(layer))
        _check_ids(path, i + 1, int(layer[i]), [])
    n_layers = int(layer.max()) + 1 if n_layers is None else n_layers
    if layer.max() >= n_layers:
        raise TraceFormatError(path, 0, f"keys exceed n_layers={n_layers} x "
                               f"n_experts={n_experts}")
    return Trace(np.zeros(len(keys), np.int64), layer, expert, n_layers,
                 n_experts, 1, name=os.path.basename(path),
                 steps_unknown="libCacheSim oracleGeneral records keys, not tokens")


def load_megatron(path: str | os.PathLike, n_layers: int | None = None,
                  n_experts: int | None = None) -> Trace:
    """Read a Megatron-Core router trace (``--moe-routing-trace-path``), in file order.

    One JSON object per (step, block, layer) router call: ``{"step", "block",
    "layer", "top_indices": [[e, ..], ..], ...}``, a row of ``top_indices``
    per token (docs/TRACE_FORMAT.md "Megatron-Core router traces"). Requests
    keep the file's order: the calls in turn, each call's tokens in turn.
    A new ``step``, or a call of a layer already seen since the last pass
    began (Megatron's own rule for inference), starts the next pass; token
    ``i`` of a pass is ``Trace.token`` base + ``i``, so each (token, layer)
    row is one step. Decoder layers keep their numbers; MTP
    layers (``"block": "mtp"``) are numbered after the highest decoder layer,
    in (``mtp_idx``, ``layer``) order. ``TraceFormatError`` names the line.
    """
    path = str(path)
    calls: list[tuple[tuple[str, int, int], list[list[int]], int, int]] = []
    for number, obj in _records(path):
        rows = obj.get("top_indices")
        block = obj.get("block", "decoder")
        mtp = obj.get("mtp_idx", 0 if block == "mtp" else -1)
        if not (_uint(obj.get("step")) and _uint(obj.get("layer"))
                and isinstance(block, str) and type(mtp) is int):
            raise TraceFormatError(path, number, "needs unsigned ints step and "
                                   "layer (a Megatron-Core router trace record)")
        if not isinstance(rows, list) or not rows or not all(
                _expert_list(r) for r in rows):
            raise TraceFormatError(path, number, "top_indices must be rows of "
                                   "distinct unsigned ints, one row per token")
        if "num_tokens" in obj and obj["num_tokens"] != len(rows):
            raise TraceFormatError(path, number, f"num_tokens {obj['num_tokens']} "
                                   f"but {len(rows)} rows of top_indices")
        _check_ids(path, number, obj["layer"], [e for r in rows for e in r])
        calls.append(((block, mtp, obj["layer"]), rows, number, obj["step"]))
    if not calls:
        raise TraceFormatError(path, 0, "no records")
    decoder = [c[0][2] for c in calls if c[0][0] == "decoder"]
    top = max(decoder) + 1 if decoder else 0
    others = sorted({c[0] for c in calls if c[0][0] != "decoder"},
                    key=lambda i: (i[1], i[2], i[0]))
    number_of = {ident: top + i for i, ident in enumerate(others)}
    tok, lay, exp = [], [], []
    seen: set[tuple[str, int, int]] = set()
    base = width = 0
    step = calls[0][3]
    for ident, rows, number, at in calls:
        if ident in seen or at != step:  # a layer fires again, or a new step
            base, width, step = base + width, 0, at
            seen.clear()
        seen.add(ident)
        layer = ident[2] if ident[0] == "decoder" else number_of[ident]
        _check_ids(path, number, layer, [])
        width = max(width, len(rows))
        for i, row in enumerate(rows):
            tok.extend([base + i] * len(row))
            lay.extend([layer] * len(row))
            exp.extend(row)
    token = np.asarray(tok, np.int64)
    layer_a, expert_a = np.asarray(lay, np.int64), np.asarray(exp, np.int64)
    n_layers = int(layer_a.max()) + 1 if n_layers is None else n_layers
    n_experts = int(expert_a.max()) + 1 if n_experts is None else n_experts
    if layer_a.max() >= n_layers or expert_a.max() >= n_experts:
        raise TraceFormatError(path, 0, f"ids exceed n_layers={n_layers} or "
                               f"n_experts={n_experts}")
    top_k = max(len(r) for _, rows, _, _ in calls for r in rows)
    return Trace(token, layer_a, expert_a, n_layers, n_experts, top_k,
                 name=os.path.basename(path))


def write_jsonl(trace: Trace, path: str | os.PathLike) -> int:
    """Write ``trace`` as per-layer JSONL, one object per (token, layer) run in order.

    Each object is ``{"problem_id", "token_idx", "layer", "experts"}``
    (``problem_id`` the sequence, ``token_idx`` the token ordinal); a trace
    without token boundaries (``steps_unknown``) writes each layer run of a
    pass with ``"tokens": n``, the tokens it holds (its experts may repeat).
    :func:`load_trace` reads it back in the same request order. Returns the
    number of objects; ``ValueError`` when that order cannot be kept (a run
    not after the one before in (sequence, token, layer) order, or a repeated
    expert within one token's step).
    """
    starts = np.flatnonzero(trace.step_starts()).tolist() + [len(trace)]
    seq, tok, lay = (trace.sequence.tolist(), trace.token.tolist(),
                     trace.layer.tolist())
    expert = trace.expert.tolist()
    lines, prev = [], None
    for a, b in zip(starts[:-1], starts[1:], strict=True):
        where = (seq[a], tok[a], lay[a])
        if prev is not None and where <= prev:
            raise ValueError(f"cannot keep the request order in JSONL: access "
                             f"{a + 1} is (sequence, token, layer) {where}, "
                             f"after {prev}")
        prev = where
        experts = expert[a:b]
        obj = {"problem_id": where[0], "token_idx": where[1], "layer": where[2],
               "experts": experts}
        if trace.steps_unknown and len(experts) > trace.top_k:
            if len(experts) % trace.top_k:
                raise ValueError(f"cannot write JSONL: the run at access {a + 1} "
                                 f"holds {len(experts)} requests, not whole "
                                 f"tokens of top-{trace.top_k}")
            obj["tokens"] = len(experts) // trace.top_k
        elif len(set(experts)) != len(experts):
            raise ValueError(f"cannot write JSONL: the step at access {a + 1} "
                             "repeats an expert")
        lines.append(json.dumps(obj, separators=(",", ":")))
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return len(lines)


#: Formats :func:`read_trace` knows, by name, and what each is.
FORMAT_TITLES = {
    "jsonl": "JSON lines, per layer or per token",
    "megatron": "Megatron-Core router trace, JSON lines of top_indices per call",
    "text": "text dump 'pos layer ids [weights]'",
    "int32": "bare int32 expert ids, top-k per call, cycling through the layers",
    "pairs": "(layer, expert) int32 pairs, one per request",
    "csv": "CSV sequence,token,layer,expert,key",
    "engine": "this engine's recorded trace, XCTRACE1",
    "oracle-general": "libCacheSim oracleGeneral, 24-byte records",
}
FORMATS = tuple(FORMAT_TITLES)


def _as_text(head: bytes) -> str | None:
    """``head`` as UTF-8 text, or None for binary (a NUL byte or bad UTF-8)."""
    if b"\0" in head:
        return None
    try:
        return head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start >= len(head) - 3:  # a character cut at the end of head
            return head[:exc.start].decode("utf-8")
        return None


def _text_kind(text: str) -> str:
    """jsonl, csv or text, from the first line that is not blank or a comment."""
    for line in text.splitlines():
        body = line.strip()
        if body and not body.startswith("#"):
            if body.startswith("{") and '"top_indices"' in body:
                return "megatron"
            return ("jsonl" if body.startswith("{") else
                    "csv" if "," in body else "text")
    return "text"


def _oracle_general_misfit(path: str, size: int) -> tuple[int, str] | None:
    """Why the file is not oracleGeneral (how far it got, the reason), or None."""
    if size % ORACLE_GENERAL_DTYPE.itemsize:
        return 0, f"{size} bytes is not a whole number of 24-byte records"
    rec = _fromfile(path, ORACLE_GENERAL_DTYPE)
    zero = np.flatnonzero(rec["obj_size"] == 0)
    if len(zero):
        return 1, f"record {int(zero[0]) + 1} has obj_size 0"
    nxt = rec["next_access_vtime"]
    pos = np.arange(len(rec))
    has = (nxt != _NEVER) & (nxt != -1)
    wild = np.flatnonzero(has & ((nxt <= pos) | (nxt >= len(rec))))
    if len(wild):
        i = int(wild[0])
        return 1, (f"record {i + 1}: next_access_vtime {int(nxt[i])} is not a "
                   "later record")
    src = np.flatnonzero(has)
    other = src[rec["obj_id"][nxt[src]] != rec["obj_id"][src]]
    if len(other):
        return 2, (f"record {int(other[0]) + 1}: next_access_vtime points at a "
                   "record of another obj_id")
    return None


def _pairs_misfit(path: str, size: int) -> tuple[int, str] | None:
    """Why the file is not a pair dump an engine wrote (closeness, reason), or None.

    Beyond the reader's checks, an engine's passes visit the MoE layers in
    turn: each layer run is followed by the next layer, or, after the highest
    layer, by the lowest (a new pass).
    """
    if size % 8:  # not even whole int32 values: bare ids are closer
        return (0 if size % 4 == 0 else -1,
                f"{size} bytes is not a whole number of 8-byte pairs")
    pairs = _fromfile(path, "<i4").reshape(-1, 2)
    for col, what, limit in ((0, "layer", MAX_LAYERS), (1, "expert", MAX_EXPERTS)):
        off = np.flatnonzero((pairs[:, col] < 0) | (pairs[:, col] >= limit))
        if len(off):
            i = int(off[0])
            return 1, (f"pair {i + 1}: {what} {int(pairs[i, col])} is outside "
                       f"0..{limit - 1}")
    layer = pairs[:, 0].astype(np.int64)
    starts, _ = _runs(layer)
    rl = layer[starts]
    lo, hi = int(rl.min()), int(rl.max())
    ok = (rl[1:] == rl[:-1] + 1) | ((rl[:-1] == hi) & (rl[1:] == lo))
    bad = np.flatnonzero(~ok)
    if len(bad):
        t = int(bad[0])
        # a few stray transitions: a damaged pair dump; many: something else
        closeness = 3 if len(bad) <= 0.1 * len(ok) else 1
        return closeness, (f"pair {int(starts[t + 1]) + 1} goes from layer "
                           f"{int(rl[t])} to layer {int(rl[t + 1])}, where a "
                           f"pass visits layers {lo}..{hi} in turn")
    return None


def _int32_misfit(path: str, size: int, top_k: int | None,
                  n_layers: int | None) -> tuple[int, str]:
    """Why bare int32 ids cannot be taken without asking (depth, reason)."""
    if size % 4:
        return 0, f"{size} bytes is not a whole number of int32 ids"
    raw = _fromfile(path, "<i4")
    neg = np.flatnonzero(raw < 0)
    if len(neg):
        return 1, f"int32 {int(neg[0]) + 1} is negative ({int(raw[neg[0]])})"
    return 2, ("bare expert ids name no layer and no top-k: read them with "
               "--format int32 --top-k K --layers N")


def detect_trace(path: str | os.PathLike, top_k: int | None = None,
                 n_layers: int | None = None, n_experts: int | None = None
                 ) -> tuple[str, Trace]:
    """Detect the format of ``path`` and read it: ``(format name, trace)``.

    Rules (docs/TRACE_FORMAT.md "Detection"): the engine's magic; else text
    (no NUL byte, UTF-8) by its first line: ``{`` with ``"top_indices"``
    megatron, other ``{`` jsonl, a comma csv,
    otherwise a text dump; else binary: oracleGeneral when every record's
    ``next_access_vtime`` points at a later record of the same ``obj_id``,
    a pair dump when its passes visit the layers in turn, bare int32 ids
    when ``top_k`` and ``n_layers`` are given. A file that fits none is
    ``TraceFormatError`` naming the closest format and why it does not fit.
    """
    path = str(path)
    with open_regular(path) as f:
        head = f.read(1 << 16)
    if not head:
        raise TraceFormatError(path, 0, "empty: no trace format fits")
    if head.startswith(_ENGINE_MAGIC):
        return "engine", load_engine_trace(path)
    text = _as_text(head)
    if text is not None:
        fmt = _text_kind(text)
        try:
            return fmt, read_trace(path, fmt, top_k, n_layers, n_experts)
        except TraceFormatError as exc:
            raise TraceFormatError(path, exc.line, f"fits no trace format; the "
                                   f"closest, {fmt} ({FORMAT_TITLES[fmt]}), "
                                   f"fails: {exc.detail}") from None
    size = _size(path)
    misfits: dict[str, tuple[int, str]] = {}
    why = _oracle_general_misfit(path, size)
    if why is None:
        return "oracle-general", load_oracle_general(path, n_layers, n_experts)
    misfits["oracle-general"] = why
    why = _pairs_misfit(path, size)
    if why is None:
        return "pairs", load_pairs(path, top_k, n_layers, n_experts)
    misfits["pairs"] = why
    if top_k is not None and n_layers is not None:
        try:
            return "int32", load_int32(path, top_k, n_layers, n_experts)
        except TraceFormatError as exc:
            misfits["int32"] = (3, f"int32 call {exc.line}: {exc.detail}")
    else:
        misfits["int32"] = _int32_misfit(path, size, top_k, n_layers)
    rank = ("oracle-general", "int32", "pairs")  # later wins a tie
    fmt = max(misfits, key=lambda f: (misfits[f][0], rank.index(f)))
    raise TraceFormatError(path, 0, f"fits no trace format; the closest, {fmt} "
                           f"({FORMAT_TITLES[fmt]}), fails: {misfits[fmt][1]}")


def describe_trace(fmt: str, trace: Trace, top_k: int | None = None,
                   n_layers: int | None = None, n_experts: int | None = None
                   ) -> str:
    """One line: the format detected and the shape inferred (or given)."""
    def how(given: int | None, inferred: str = "inferred") -> str:
        return "given" if given is not None else inferred

    header = "from the header" if fmt == "engine" else "inferred"
    line = (f"{trace.name}: detected {fmt} ({FORMAT_TITLES[fmt]}): "
            f"{trace.n_layers} layers ({how(n_layers, header)}), "
            f"{trace.n_experts} experts ({how(n_experts, header)}), "
            + (f"top-{trace.top_k} ({how(top_k)})" if fmt != "oracle-general"
               else "top-k unknown (keys only)") + f"; {len(trace)} requests")
    if fmt == "pairs":
        line += (f" in {trace.n_tokens} passes, layers counted from the first "
                 "MoE layer")
    if trace.steps_unknown:
        line += f"; plain mode only: {trace.steps_unknown}"
    return line


def read_trace(path: str | os.PathLike, fmt: str | None = None,
               top_k: int | None = None, n_layers: int | None = None,
               n_experts: int | None = None) -> Trace:
    """Read any supported trace; ``fmt`` defaults from the extension.

    ``.jsonl``/``.json`` -> both shared formats, ``.csv`` -> :func:`load_csv`,
    ``.bin``/``.i32`` -> :func:`load_int32` (needs ``top_k`` and
    ``n_layers``), ``.oraclegeneral`` -> :func:`load_oracle_general`, a file
    starting with the engine's trace magic -> :func:`load_engine_trace`,
    anything else -> :func:`load_text_dump`. ``fmt="pairs"`` reads a
    ``(layer, expert)`` dump (:func:`load_pairs`); ``fmt="auto"``
    detects the format (:func:`detect_trace`).
    """
    path = str(path)
    try:
        return _read_trace(path, fmt, top_k, n_layers, n_experts)
    except UnicodeDecodeError as e:  # a text format over a binary file
        raise TraceFormatError(path, 0, f"not UTF-8 text ({e.reason} at byte "
                               f"{e.start} of a chunk): a binary trace needs "
                               "its --format (or --format auto)") from None
    except RecursionError:  # json over a deeply nested line
        raise TraceFormatError(path, 0, "a value nested too deeply") from None


def _read_trace(path: str, fmt: str | None, top_k: int | None,
                n_layers: int | None, n_experts: int | None) -> Trace:
    if fmt == "auto":
        return detect_trace(path, top_k, n_layers, n_experts)[1]
    if fmt is None:
        with open_regular(path) as f:
            magic = f.read(len(_ENGINE_MAGIC))
        ext = os.path.splitext(path)[1].lower()
        fmt = "engine" if magic == _ENGINE_MAGIC else {
            ".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv",
            ".bin": "int32", ".i32": "int32",
            ".oraclegeneral": "oracle-general"}.get(ext, "text")
    if fmt == "engine":
        return load_engine_trace(path)
    if fmt == "jsonl":
        return load_trace(path, n_layers, n_experts)
    if fmt == "megatron":
        return load_megatron(path, n_layers, n_experts)
    if fmt == "csv":
        return load_csv(path, n_layers, n_experts)
    if fmt == "int32":
        if top_k is None or n_layers is None:
            raise ValueError(f"{path}: an int32 trace of bare expert ids needs "
                             "top_k and n_layers (--top-k, --layers); a dump of "
                             "(layer, expert) pairs is --format pairs, and "
                             "--format auto detects either")
        return load_int32(path, top_k, n_layers, n_experts)
    if fmt == "pairs":
        return load_pairs(path, top_k, n_layers, n_experts)
    if fmt == "oracle-general":
        return load_oracle_general(path, n_layers, n_experts)
    if fmt == "text":
        return load_text_dump(path, top_k, n_layers, n_experts)
    raise ValueError(f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}, "
                     "auto")
