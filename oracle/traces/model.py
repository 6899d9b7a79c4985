"""The ``Trace`` type, its limits and error, and the helpers every reader shares.

A trace is a sequence of accesses ``(token, layer, expert)``: tokens in
order, the layers of one token ascending, the experts of one layer step in
their recorded order. A *step* is the run of accesses of one (token, layer).
The key of an access is ``layer * n_experts + expert``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from xcache.oracle.regular import TooLargeError, open_regular

#: The largest layer count and experts per layer a trace may have: every key
#: ``layer * n_experts + expert`` then fits the simulator's 32-bit keys.
MAX_LAYERS = 1 << 12


MAX_EXPERTS = 1 << 19
#: The largest trace file read, in any format (its accesses take more room
#: in memory than in the file), and the longest line of a text trace.
MAX_TRACE_BYTES = 4 << 30
MAX_LINE_CHARS = 64 << 20


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


def check_ids(path: str, number: int, layer: int, experts: Iterable[int]) -> None:
    """Refuse a layer or expert id beyond the limits, naming the line."""
    if layer >= MAX_LAYERS:
        raise TraceFormatError(path, number, f"layer {layer} is beyond the "
                               f"limit of {MAX_LAYERS} layers")
    for e in experts:
        if e >= MAX_EXPERTS:
            raise TraceFormatError(path, number, f"expert id {e} is beyond the "
                                   f"limit of {MAX_EXPERTS} experts per layer")


def _check_size(f: IO[Any], path: str | os.PathLike) -> None:
    """Refuse an open trace file past :data:`MAX_TRACE_BYTES`, unread."""
    if os.fstat(f.fileno()).st_size > MAX_TRACE_BYTES:
        raise TooLargeError(os.fsdecode(path), MAX_TRACE_BYTES, "a trace")


def fromfile(path: str | os.PathLike, dtype: object) -> np.ndarray:
    """np.fromfile of a regular file only (a FIFO would block it; DESIGN.md),
    of at most :data:`MAX_TRACE_BYTES` (TooLargeError, an OSError)."""
    with open_regular(path) as f:
        _check_size(f, path)
        return np.fromfile(f, dtype=dtype)


def text_lines(path: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of a text trace: a regular file of at most
    :data:`MAX_TRACE_BYTES` (TooLargeError), each line at most
    :data:`MAX_LINE_CHARS` (TraceFormatError naming the line)."""
    with open_regular(path, "r", encoding="utf-8") as f:
        _check_size(f, path)
        number = 0
        while line := f.readline(MAX_LINE_CHARS + 1):
            number += 1
            if len(line) > MAX_LINE_CHARS:
                raise TraceFormatError(path, number, "longer than the limit of "
                                       f"{MAX_LINE_CHARS:,} characters for a "
                                       "line")
            yield number, line


def file_size(path: str | os.PathLike) -> int:
    """The byte size of a regular file; NotRegularFileError for anything else."""
    with open_regular(path) as f:
        return os.fstat(f.fileno()).st_size


def is_uint(value: object) -> bool:
    return type(value) is int and value >= 0


def is_expert_list(value: object) -> bool:
    return (isinstance(value, list) and len(value) > 0
            and all(is_uint(e) for e in value) and len(set(value)) == len(value))


def json_records(path: str) -> Iterable[tuple[int, dict]]:
    for number, line in text_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(path, number, f"not JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise TraceFormatError(path, number, "not a JSON object")
        yield number, obj


def trace_from_lists(path: str, seq: list[int], tok: list[int], lay: list[int],
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
                 steps_unknown=chunk_note(lengths // top_k, top_k) if passes
                 else "")


def int_token(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def step_refusal(trace: Trace) -> str | None:
    """Why ``trace`` cannot be replayed step by step, or None when it can."""
    if not trace.steps_unknown:
        return None
    return (f"{trace.name}: step mode needs each token's (token, layer) steps, "
            f"and this trace does not record where one token ends: "
            f"{trace.steps_unknown}")


def layer_runs(layer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def chunk_note(tokens_per_run: np.ndarray, top_k: int) -> str:
    """The ``steps_unknown`` text for runs holding these many tokens ("" if all 1)."""
    several = int((tokens_per_run > 1).sum())
    if not several:
        return ""
    return (f"{several} of its {len(tokens_per_run)} layer runs hold several "
            f"tokens of a chunk ({int(tokens_per_run.min())}-"
            f"{int(tokens_per_run.max())} tokens of top-{top_k} each) and "
            "nothing marks where one token ends")
