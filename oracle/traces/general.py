"""libCacheSim's ``oracleGeneral`` binary trace: written from a trace or a
key sequence in request order, and read back.
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
    file_size,
    fromfile,
)

#: libCacheSim's oracleGeneral record: packed little-endian uint32 clock_time,
#: uint64 obj_id, uint32 obj_size, int64 next_access_vtime (24 bytes; the
#: reader's item_size, libCacheSim traceReader/customizedReader/oracle/
#: oracleGeneralBin.h). next_access_vtime is the position of the key's next
#: request, INT64_MAX when there is none.
ORACLE_GENERAL_DTYPE = np.dtype([("clock_time", "<u4"), ("obj_id", "<u8"),
                                 ("obj_size", "<u4"),
                                 ("next_access_vtime", "<i8")])


NO_NEXT_ACCESS = np.iinfo(np.int64).max


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
    nxt = np.full(n, NO_NEXT_ACCESS, np.int64)
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
    size = file_size(path)
    if size % ORACLE_GENERAL_DTYPE.itemsize:
        raise TraceFormatError(str(path), size // 24 + 1,
                               f"{size} bytes is not whole 24-byte records")
    return fromfile(str(path), ORACLE_GENERAL_DTYPE)


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
        check_ids(path, i + 1, int(layer[i]), [])
    n_layers = int(layer.max()) + 1 if n_layers is None else n_layers
    if layer.max() >= n_layers:
        raise TraceFormatError(path, 0, f"keys exceed n_layers={n_layers} x "
                               f"n_experts={n_experts}")
    return Trace(np.zeros(len(keys), np.int64), layer, expert, n_layers,
                 n_experts, 1, name=os.path.basename(path),
                 steps_unknown="libCacheSim oracleGeneral records keys, not tokens")
