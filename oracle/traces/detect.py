"""Which format a trace file is in, by name or by content, and the one
reader of any of them (:func:`read_trace`).

docs/TRACE_FORMAT.md lists the formats and the detection rules.
"""

from __future__ import annotations

import os

import numpy as np

from xcache.oracle.regular import open_regular
from xcache.oracle.traces.dumps import (
    load_int32,
    load_megatron,
    load_pairs,
    load_text_dump,
)
from xcache.oracle.traces.engine_dump import ENGINE_MAGIC, load_engine_trace
from xcache.oracle.traces.general import (
    NO_NEXT_ACCESS,
    ORACLE_GENERAL_DTYPE,
    load_oracle_general,
)
from xcache.oracle.traces.jsonl import load_csv, load_trace
from xcache.oracle.traces.model import (
    MAX_EXPERTS,
    MAX_LAYERS,
    Trace,
    TraceFormatError,
    file_size,
    fromfile,
    layer_runs,
)

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
    rec = fromfile(path, ORACLE_GENERAL_DTYPE)
    zero = np.flatnonzero(rec["obj_size"] == 0)
    if len(zero):
        return 1, f"record {int(zero[0]) + 1} has obj_size 0"
    nxt = rec["next_access_vtime"]
    pos = np.arange(len(rec))
    has = (nxt != NO_NEXT_ACCESS) & (nxt != -1)
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
    pairs = fromfile(path, "<i4").reshape(-1, 2)
    for col, what, limit in ((0, "layer", MAX_LAYERS), (1, "expert", MAX_EXPERTS)):
        off = np.flatnonzero((pairs[:, col] < 0) | (pairs[:, col] >= limit))
        if len(off):
            i = int(off[0])
            return 1, (f"pair {i + 1}: {what} {int(pairs[i, col])} is outside "
                       f"0..{limit - 1}")
    layer = pairs[:, 0].astype(np.int64)
    starts, _ = layer_runs(layer)
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
    raw = fromfile(path, "<i4")
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
    if head.startswith(ENGINE_MAGIC):
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
    size = file_size(path)
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
            magic = f.read(len(ENGINE_MAGIC))
        ext = os.path.splitext(path)[1].lower()
        fmt = "engine" if magic == ENGINE_MAGIC else {
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
