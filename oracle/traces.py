"""Routing-trace importers and analyses (formats of ../shared/traces/README.md).

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
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "Trace", "TraceFormatError", "load_trace", "reuse_distances",
    "reuse_histogram", "median_reuse_distance", "adjacent_overlap",
    "reload_counts", "miss_ratio_curve", "EngineTraceHeader",
    "read_engine_trace", "load_engine_trace", "ENGINE_TRACE_KINDS",
    "ENGINE_TRACE_OUTCOMES",
]


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

#: Record kinds and outcomes, by number, as docs/TRACE_FORMAT.md lists them.
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


# -- analyses ---------------------------------------------------------------

def reuse_distances(trace: Trace) -> np.ndarray:
    """For every access of a key seen before: tokens since its previous access."""
    keys = trace.keys()
    order = np.argsort(keys, kind="stable")
    k, t = keys[order], trace.token[order]
    same = k[1:] == k[:-1]
    return (t[1:] - t[:-1])[same]


def reuse_histogram(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Distinct reuse distances (ascending) and how often each occurs."""
    return np.unique(reuse_distances(trace), return_counts=True)


def median_reuse_distance(trace: Trace) -> float:
    """The median reuse distance in tokens (nan if no key is reused)."""
    d = reuse_distances(trace)
    return float(np.median(d)) if len(d) else float("nan")


def adjacent_overlap(trace: Trace) -> float:
    """Mean fraction of a layer's experts at token t also used at t-1.

    Taken over every (t, layer) step whose layer also has a step at token
    t-1 of the same sequence; nan if there is none.
    """
    sets: dict[tuple[int, int], set[int]] = {}
    seq_of: dict[int, int] = {}
    for s, t, layer, e in zip(trace.sequence.tolist(), trace.token.tolist(),
                              trace.layer.tolist(), trace.expert.tolist(), strict=True):
        sets.setdefault((t, layer), set()).add(e)
        seq_of[t] = s
    fractions = [len(now & sets[(t - 1, layer)]) / len(now)
                 for (t, layer), now in sets.items()
                 if (t - 1, layer) in sets and seq_of[t - 1] == seq_of[t]]
    return float(np.mean(fractions)) if fractions else float("nan")


def reload_counts(trace: Trace, policy: str, capacity: int,
                  mode: str = "step") -> np.ndarray:
    """Per key, how often a simulation reloads it (misses after its first)."""
    from oracle.sim import simulate

    misses = simulate(trace, policy, capacity, mode=mode).key_misses
    return np.maximum(misses - 1, 0)


def miss_ratio_curve(trace: Trace, policies: Sequence[str], sizes: Sequence[int],
                     mode: str = "step", per_layer: bool = False
                     ) -> dict[str, np.ndarray]:
    """Miss ratio of each policy (``belady`` allowed) at each cache size."""
    from oracle.sim import simulate

    return {p: np.array([simulate(trace, p, n, mode=mode, per_layer=per_layer
                                  ).miss_ratio for n in sizes])
            for p in policies}
