"""Routing traces and their files: the ``Trace`` type, readers and writers.

This package is the one place traces are read and written; its rooms are
``model`` (the type and shared helpers), ``jsonl`` (the project's JSONL and
CSV), ``engine_dump`` (the engine's binary trace), ``dumps`` (other
engines' dumps), ``general`` (libCacheSim's oracleGeneral) and ``detect``
(which format a file is, and :func:`read_trace`). Import from the package.

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

from xcache.oracle.traces.detect import (
    FORMAT_TITLES,
    FORMATS,
    describe_trace,
    detect_trace,
    read_trace,
)
from xcache.oracle.traces.dumps import (
    load_int32,
    load_megatron,
    load_pairs,
    load_text_dump,
)
from xcache.oracle.traces.engine_dump import (
    ENGINE_HEADER_FIELDS,
    ENGINE_RECORD_FIELDS,
    ENGINE_TRACE_KINDS,
    ENGINE_TRACE_OUTCOMES,
    EngineTraceFile,
    EngineTraceHeader,
    decode_engine_trace,
    engine_fingerprint,
    engine_trace_bytes,
    load_engine_trace,
    read_engine_trace,
)
from xcache.oracle.traces.general import (
    ORACLE_GENERAL_DTYPE,
    load_oracle_general,
    read_oracle_general,
    write_oracle_general,
    write_oracle_general_keys,
)
from xcache.oracle.traces.jsonl import (
    load_csv,
    load_trace,
    write_csv,
    write_jsonl,
)
from xcache.oracle.traces.model import (
    MAX_EXPERTS,
    MAX_LAYERS,
    Trace,
    TraceFormatError,
    infer_top_k,
    step_refusal,
)

__all__ = [
    "Trace", "TraceFormatError", "load_trace", "EngineTraceHeader",
    "read_engine_trace", "load_engine_trace", "ENGINE_TRACE_KINDS",
    "ENGINE_TRACE_OUTCOMES", "ENGINE_HEADER_FIELDS", "ENGINE_RECORD_FIELDS",
    "EngineTraceFile", "decode_engine_trace", "engine_fingerprint",
    "engine_trace_bytes", "load_text_dump", "load_int32",
    "load_csv", "write_csv", "write_oracle_general", "read_oracle_general",
    "ORACLE_GENERAL_DTYPE", "read_trace", "FORMATS", "MAX_LAYERS", "MAX_EXPERTS",
    "load_pairs", "infer_top_k", "step_refusal", "load_oracle_general",
    "write_jsonl", "write_oracle_general_keys", "detect_trace", "describe_trace",
    "FORMAT_TITLES", "load_megatron",
]
