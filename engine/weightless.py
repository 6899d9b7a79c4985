"""A checkpoint's folder without its weights, and what to do with one.

A user who downloads a model's ``model.safetensors.index.json`` and
``config.json`` (or clones a repository whose shards are Git-LFS pointers,
or keeps header-only copies of the shards) has a folder the C reader
refuses: there are no expert bytes to serve.  The reader's own error names
the first shard that is missing or short; this module says what the folder
is and what to do instead: make a twin with ``xcache-fixtures
from-header``.  ``xcache-inspect`` prints it as its ``hint:`` line;
:meth:`engine.ExpertCache.open` and :func:`engine.layout.resolve` raise the
reader's error with it in front (:func:`explained`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from xcache.engine import _lib
from xcache.engine.errors import EngineError
from xcache.engine.regular import open_regular, read_regular

__all__ = ["explained", "weightless_hint"]

#: What a Git-LFS pointer file starts with (a repository without the weights).
_LFS = b"version https://git-lfs"


def weightless_hint(path: str | os.PathLike[str], then: str = "inspect TWIN"
                    ) -> str:
    """What ``path`` is and what to do, when it is a checkpoint without its weights.

    That is a folder (or its index) holding ``model.safetensors.index.json``
    and ``config.json`` whose shards are all missing, Git-LFS pointers or
    header-only copies; "" otherwise.  ``then`` ends the advice (what to do
    with the twin).
    """
    path = os.fsdecode(path)
    p = Path(path)
    folder = p if p.is_dir() else p.parent
    index = folder / "model.safetensors.index.json"
    if not (index.is_file() and (folder / "config.json").is_file()):
        return ""
    try:
        shards = set(json.loads(read_regular(index))["weight_map"].values())
        if not shards or not all(_no_data(folder / s) for s in shards):
            return ""
    except (OSError, ValueError, KeyError, TypeError, AttributeError,
            RecursionError):
        return ""
    return (f"{path} is a checkpoint's index and config without shard data "
            f"(missing, Git-LFS pointers or header-only); make a twin the "
            f"cache can read with `xcache-fixtures from-header {path} TWIN "
            f"--scale 0.01` and {then}")


def explained(err: EngineError, path: str | os.PathLike[str]) -> EngineError:
    """``err``, or when ``path`` is a weightless checkpoint a copy led by what to do.

    The copy is of the same class with the same fields (kind, offset, ...);
    its message is :func:`weightless_hint` (``then``: open TWIN), then the
    reader's own message in parentheses.
    """
    hint = weightless_hint(path, then="open TWIN instead")
    if not hint:
        return err
    cls = type(err)
    new = cls.__new__(cls)  # no __init__: every field as it was
    new.__dict__.update(err.__dict__)
    new.args = (f"{hint} (the reader: {err})",)
    return new


def _no_data(shard: Path) -> bool:
    """Whether ``shard`` is missing, a Git-LFS pointer or shorter than its header."""
    if not shard.exists():
        return True
    with open_regular(shard) as f:  # a FIFO is refused, never waited on
        head = f.read(8)
        if head == _LFS[:8]:
            return f.read(len(_LFS) - 8) == _LFS[8:]
        if len(head) < 8:
            return False
        n = int.from_bytes(head, "little")
        if n > _lib.lib().XC_HEADER_MAX_BYTES:
            return False
        header = json.loads(f.read(n))
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    return shard.stat().st_size < 8 + n + max(ends, default=0)
