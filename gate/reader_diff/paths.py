"""The path and folder probes: what a container path names, engine vs oracle.

Each probe is a path the C reader must judge before any header: a missing
file (``ENOENT``), a path through a regular file (``ENOTDIR``), a missing
folder, an empty folder and one of other files only (both ``not_found``:
docs/DESIGN.md §3), a folder whose index is a folder, an index file past
the 100,000,000-byte limit (a sparse file: ``index`` at byte 0, before a
byte is read), and paths shorter than the ``.json`` suffix they are tested
for.  Those last are opened through the C face directly, laid out in
memory right after the suffix's leading bytes (``"n"`` after ``".jso"``):
a suffix test that reads before the path's first byte then sees ``.json``
and takes a shard for an index.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from xcache.gate.reader_diff.compare import compare, engine_verdict, oracle_verdict
from xcache.gate.reader_diff.containers import INDEX_NAME
from xcache.oracle.bounds import HEADER_MAX_BYTES

#: The limit of an index file's size (as a header's: docs/DESIGN.md §3).
MAX_INDEX_BYTES = HEADER_MAX_BYTES


def _shard(path: Path) -> None:
    """A valid one-tensor shard at ``path``."""
    h = b'{"t":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}'
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"abc")


def _probes(folder: Path) -> Iterator[tuple[str, Path, int | None]]:
    """(label, path, the engine's offset) for each probe, its files written."""
    folder.mkdir()
    yield "missing-file", folder / "missing.safetensors", None
    yield "missing-index", folder / "gone" / INDEX_NAME, None
    yield "missing-folder", folder / "gone", None
    _shard(folder / "file.safetensors")
    yield "through-a-file", folder / "file.safetensors" / "x.safetensors", None
    (folder / "empty").mkdir()
    yield "empty-folder", folder / "empty", None
    (folder / "others").mkdir()
    (folder / "others" / "config.json").write_text("{}")
    (folder / "others" / "x.safetensors.bak").write_bytes(b"")
    yield "folder-of-other-files", folder / "others", None
    (folder / "index-dir").mkdir()
    (folder / "index-dir" / INDEX_NAME).mkdir()
    _shard(folder / "index-dir" / "only.safetensors")
    yield "index-is-a-folder", folder / "index-dir", None
    (folder / "big").mkdir()
    _shard(folder / "big" / "model-00001-of-00001.safetensors")
    with open(folder / "big" / INDEX_NAME, "wb") as f:  # sparse: no block written
        f.truncate(MAX_INDEX_BYTES + 1)
    yield "index-past-the-limit", folder / "big", 0
    yield "index-file-past-the-limit", folder / "big" / INDEX_NAME, 0


def _raw_open(engine: Any, folder: Path, name: str) -> str | None:
    """Open the file ``name`` of ``folder`` as a relative path laid out right after
    the bytes of ``".json"`` before it; None if the C reader accepts it."""
    lib_mod = getattr(engine, "_lib", None)
    if lib_mod is None:
        return None
    ffi, lib = lib_mod.ffi(), lib_mod.lib()
    suffix = b".json"
    buf = ffi.new("char[]", suffix[:len(suffix) - len(name)] + name.encode())
    out = ffi.new("xc_st **")
    here = os.getcwd()
    os.chdir(folder)
    try:
        rc = lib.xc_st_open(buf + (len(suffix) - len(name)), ffi.NULL, out)
    finally:
        os.chdir(here)
    if rc < 0:
        return (f"the C reader refuses {name!r} (status {rc}): "
                f"{lib_mod.last_error()[4]}")
    lib.xc_st_close(out[0])
    return None


def path_probes(engine: Any, folder: Path) -> Iterator[tuple[str, str | None]]:
    """(label, the first disagreement or None) for every probe."""
    for label, path, offset in _probes(folder):
        mine, theirs = engine_verdict(engine, path), oracle_verdict(path)
        bad = compare(mine, theirs, offset)
        if bad is None and offset is not None and mine.offset != offset:
            bad = f"{mine.kind} offset: engine {mine.offset}, expected {offset}"
        yield f"path {label}", bad
    short = folder / "short"
    short.mkdir()
    for name in ("n", "on", "son", "json"):  # the tails of ".json"
        _shard(short / name)
        mine = engine_verdict(engine, short / name)
        theirs = oracle_verdict(short / name)
        bad = compare(mine, theirs, None) or _raw_open(engine, short, name)
        yield f"path {name!r} (shorter than '.json')", bad
    shutil.rmtree(folder, ignore_errors=True)
