"""Other engines' routing dumps: a text dump, fixed-k int32 ids, int32
``(layer, expert)`` pairs and Megatron-Core's router trace.

The text dump is one line ``pos layer id0 .. idK-1 [w0 .. wK-1]`` per token
and layer; the int32 file holds the fixed-k expert ids of each routed call;
a pair dump holds one request per pair, and its layer runs may hold a chunk
of several tokens, whose boundaries it does not record.
"""

from __future__ import annotations

import os

import numpy as np

from xcache.oracle.traces.model import (
    MAX_EXPERTS,
    MAX_LAYERS,
    Trace,
    TraceFormatError,
    check_ids,
    chunk_note,
    file_size,
    fromfile,
    infer_top_k,
    int_token,
    is_expert_list,
    is_uint,
    json_records,
    layer_runs,
    text_lines,
    trace_from_lists,
)


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
    for number, line in text_lines(path):
        text = line.split("#", 1)[0].split()
        if not text:
            continue
        head = [int_token(x) for x in text[:2]]
        if len(text) < 3 or None in head:
            raise TraceFormatError(path, number, "needs 'pos layer id0 ..' "
                                   "with unsigned integer pos and layer")
        pos, layer = head
        rest = text[2:]
        k = top_k
        if k is None:
            k = 0
            while k < len(rest) and int_token(rest[k]) is not None:
                k += 1
        ids = [int_token(x) for x in rest[:k]]
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
        check_ids(path, number, layer, ids)
        prev = (pos, layer)
        for e in ids:
            seq.append(s)
            tok.append(pos)
            lay.append(layer)
            exp.append(e)
    return trace_from_lists(path, seq, tok, lay, exp, n_layers, n_experts)


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
    raw = fromfile(path, dtype="<i4")
    size = file_size(path)
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
        check_ids(path, int(big[0]) + 1, 0, row.tolist())
    dup = np.flatnonzero((np.sort(ids, axis=1)[:, 1:] ==
                          np.sort(ids, axis=1)[:, :-1]).any(axis=1))
    if len(dup):
        raise TraceFormatError(path, int(dup[0]) + 1, "repeated expert id (a "
                               "dump of (layer, expert) pairs is --format pairs)")
    calls = np.arange(len(ids))
    tok = np.repeat(calls // n_layers, top_k)
    lay = np.repeat(calls % n_layers, top_k)
    return trace_from_lists(path, [0] * len(tok), tok.tolist(), lay.tolist(),
                   ids.ravel().tolist(), n_layers, n_experts)


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
    size = file_size(path)
    if size % 8:
        raise TraceFormatError(path, size // 8 + 1, f"{size} bytes is not a whole "
                               "number of 8-byte (layer, expert) int32 pairs")
    if not size:
        raise TraceFormatError(path, 0, "no records")
    pairs = fromfile(path, "<i4").reshape(-1, 2).astype(np.int64)
    bad = np.flatnonzero((pairs < 0).any(axis=1))
    if len(bad):
        i = int(bad[0])
        col = 0 if pairs[i, 0] < 0 else 1
        raise TraceFormatError(path, i + 1, f"negative {('layer', 'expert')[col]} "
                               f"id {int(pairs[i, col])}")
    big = np.flatnonzero((pairs[:, 0] >= MAX_LAYERS) | (pairs[:, 1] >= MAX_EXPERTS))
    if len(big):
        i = int(big[0])
        check_ids(path, i + 1, int(pairs[i, 0]), [int(pairs[i, 1])])
    layer = np.ascontiguousarray(pairs[:, 0])
    expert = np.ascontiguousarray(pairs[:, 1])
    starts, lengths = layer_runs(layer)
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
                 steps_unknown=chunk_note(lengths // k, k))


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
    for number, obj in json_records(path):
        rows = obj.get("top_indices")
        block = obj.get("block", "decoder")
        mtp = obj.get("mtp_idx", 0 if block == "mtp" else -1)
        if not (is_uint(obj.get("step")) and is_uint(obj.get("layer"))
                and isinstance(block, str) and type(mtp) is int):
            raise TraceFormatError(path, number, "needs unsigned ints step and "
                                   "layer (a Megatron-Core router trace record)")
        if not isinstance(rows, list) or not rows or not all(
                is_expert_list(r) for r in rows):
            raise TraceFormatError(path, number, "top_indices must be rows of "
                                   "distinct unsigned ints, one row per token")
        if "num_tokens" in obj and obj["num_tokens"] != len(rows):
            raise TraceFormatError(path, number, f"num_tokens {obj['num_tokens']} "
                                   f"but {len(rows)} rows of top_indices")
        check_ids(path, number, obj["layer"], [e for r in rows for e in r])
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
        check_ids(path, number, layer, [])
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
