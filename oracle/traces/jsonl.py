"""The project's own trace files: per-layer or per-token JSONL, and CSV.

Two JSONL shapes are read (detected from the first record):

- per layer (mixtral): ``{"problem_id", "token_idx", "layer", "experts", ...}``
  one object per (problem, token, layer), in any order; tokens are ordered
  by ``(problem_id, token_idx)`` and a token may lack some layers;
- per token (olmoe): ``{"tok", "layers": [[...], ...]}``, one object per token
  with the experts of every layer in layer order.

A per-layer JSONL object may carry ``"tokens": n`` (its experts are then n
tokens' worth, repeats allowed), and a CSV whose header names column 2
``pass``: both are a trace without token boundaries (``Trace.steps_unknown``).
Written in request order: the per-layer JSONL and the CSV.
"""

from __future__ import annotations

import json
import os

import numpy as np

from xcache.oracle.traces.dumps import load_megatron
from xcache.oracle.traces.model import (
    Trace,
    TraceFormatError,
    check_ids,
    chunk_note,
    int_token,
    is_expert_list,
    is_uint,
    json_records,
    text_lines,
    trace_from_lists,
)


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
    for number, obj in json_records(path):
        if fmt is None and "top_indices" in obj:  # a Megatron-Core router trace
            return load_megatron(path, n_layers, n_experts)
        this = ("token" if "layers" in obj else "layer")
        fmt = fmt or this
        if this != fmt:
            raise TraceFormatError(path, number, "mixes the two trace formats")
        if fmt == "layer":
            fields = ("problem_id", "token_idx", "layer")
            if not all(is_uint(obj.get(k)) for k in fields):
                raise TraceFormatError(path, number, f"needs unsigned ints {fields}")
            n_tok = obj.get("tokens", 1)
            if not is_uint(n_tok) or n_tok < 1:
                raise TraceFormatError(path, number, "tokens must be a positive int")
            experts = obj.get("experts")
            if n_tok == 1 and not is_expert_list(experts):
                raise TraceFormatError(path, number,
                                       "experts must be distinct unsigned ints")
            if n_tok > 1 and not (isinstance(experts, list) and experts and all(
                    is_uint(e) for e in experts) and len(experts) % n_tok == 0):
                raise TraceFormatError(path, number, f"experts must be unsigned "
                                       f"ints, a whole number per each of the "
                                       f"{n_tok} tokens")
            check_ids(path, number, obj["layer"], experts)
            where = (obj["problem_id"], obj["token_idx"], obj["layer"])
            if where in steps:
                raise TraceFormatError(path, number, f"repeats {fields} = {where}")
            steps[where] = experts
            run_tokens[where] = n_tok
        else:
            layers = obj.get("layers")
            if not is_uint(obj.get("tok")) or not isinstance(layers, list) or not all(
                    is_expert_list(x) for x in layers):
                raise TraceFormatError(path, number, "needs an unsigned int tok and "
                                       "layers of distinct unsigned ints")
            if obj["tok"] in seen_tokens:
                raise TraceFormatError(path, number, f"repeats tok {obj['tok']}")
            seen_tokens.add(obj["tok"])
            for layer, experts in enumerate(layers):
                check_ids(path, number, layer, experts)
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
                 steps_unknown=chunk_note(per_run, top_k))


_CSV_HEADER = "sequence,token,layer,expert,key"


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
    for number, line in text_lines(path):
        text = line.strip()
        if not text or (number == 1 and text == _CSV_HEADER):
            continue
        if number == 1 and text == _CSV_PASS_HEADER:
            passes = True
            continue
        fields = [int_token(x.strip()) for x in text.split(",")]
        if len(fields) not in (4, 5) or None in fields:
            raise TraceFormatError(path, number, "needs unsigned integers "
                                   "sequence,token,layer,expert[,key]")
        check_ids(path, number, fields[2], [fields[3]])
        seq.append(fields[0])
        tok.append(fields[1])
        lay.append(fields[2])
        exp.append(fields[3])
    return trace_from_lists(path, seq, tok, lay, exp, n_layers, n_experts, passes)


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
