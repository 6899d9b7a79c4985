"""A checkpoint's folder without its weights, and what to do with one.

A user who downloads a model's ``model.safetensors.index.json`` and
``config.json`` (or clones a repository whose shards are Git-LFS pointers,
or keeps header-only copies of the shards) has a folder no tool can read
experts from: there are no expert bytes.  Each tool that refuses such a
folder says what it is and what to do instead -- make a twin with
``xcache-fixtures from-header`` -- in the words of :func:`weightless_hint`,
the one test and the one sentence: ``xcache-inspect`` (its ``hint:``
line), ``ExpertCache.open`` and ``engine.layout.resolve``
(``engine.weightless.explained``), ``xcache-replay --container`` and
``xcache-replay CKPT``, and ``xcache-fixtures verify``.

It imports nothing of the project (docs/DESIGN.md §2): the engine, the
generator and the gate all ask it.  Files are opened without blocking and
only when regular (a FIFO where a shard belongs is no shard: no hint).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

__all__ = ["HEADER_MAX_BYTES", "INDEX_MAX_BYTES", "is_weightless",
           "weightless_hint"]

#: What a Git-LFS pointer file starts with (a repository without the weights).
LFS_MAGIC = b"version https://git-lfs"
#: The largest safetensors header the readers take (``XC_HEADER_MAX_BYTES``,
#: ``oracle.bounds.HEADER_MAX_BYTES``): a longer one is no header-only shard.
HEADER_MAX_BYTES = 100_000_000
#: The largest index read (``oracle.bounded.MAX_JSON_BYTES``): a longer one,
#: a sparse terabyte say, is refused unread, and the folder gets no hint.
INDEX_MAX_BYTES = 256 << 20
INDEX_NAME = "model.safetensors.index.json"
CONFIG_NAME = "config.json"


def weightless_hint(path: str | os.PathLike[str], then: str = "inspect TWIN"
                    ) -> str:
    """What ``path`` is and what to do, when it is a checkpoint without its weights.

    That is a folder (or its index) holding ``model.safetensors.index.json``
    and ``config.json`` whose shards are all missing, Git-LFS pointers or
    header-only copies; "" otherwise.  ``then`` ends the advice (what to do
    with the twin).
    """
    path = os.fsdecode(path)
    if not is_weightless(path):
        return ""
    return (f"{path} is a checkpoint's index and config without shard data "
            f"(missing, Git-LFS pointers or header-only); make a twin the "
            f"cache can read, of at most 4 MiB, with `xcache-fixtures "
            f"from-header {path} TWIN` and {then}")


def is_weightless(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` (a folder or its index) is a checkpoint without weights."""
    p = Path(os.fsdecode(path))
    folder = p if p.is_dir() else p.parent
    index = folder / INDEX_NAME
    if not (index.is_file() and (folder / CONFIG_NAME).is_file()):
        return False
    try:
        shards = set(json.loads(_read(index, INDEX_MAX_BYTES, whole=True))[
            "weight_map"].values())
        return bool(shards) and all(_no_data(folder / s) for s in shards)
    except (OSError, ValueError, KeyError, TypeError, AttributeError,
            RecursionError):
        return False


def _read(path: Path, at_most: int, offset: int = 0, whole: bool = False
          ) -> bytes:
    """Up to ``at_most`` bytes of a regular file from ``offset``.

    OSError for anything else: opened with ``O_NONBLOCK``, so a FIFO is
    never waited on, then refused by ``fstat``; with ``whole``, also for a
    file of more than ``at_most`` bytes (asked before a byte is read).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path}: not a regular file")
        if whole and st.st_size > at_most:
            raise OSError(f"{path}: larger than {at_most:,} bytes")
        with os.fdopen(os.dup(fd), "rb") as f:
            f.seek(offset)
            return f.read(at_most)
    finally:
        os.close(fd)


def _no_data(shard: Path) -> bool:
    """Whether ``shard`` is missing, a Git-LFS pointer or shorter than its header."""
    if not shard.exists():
        return True
    head = _read(shard, len(LFS_MAGIC))
    if head == LFS_MAGIC:
        return True
    if len(head) < 8:
        return False
    n = int.from_bytes(head[:8], "little")
    if n > HEADER_MAX_BYTES:
        return False
    header = json.loads(_read(shard, n, 8))
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    return shard.stat().st_size < 8 + n + max(ends, default=0)
