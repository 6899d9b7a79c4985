"""A checkpoint's folder without its weights: the engine's refusals say what to do.

A folder holding only a model's index and config (shards missing,
Git-LFS pointers or header-only copies) has no expert bytes to serve; the
C reader's own error names the first shard that is missing or short.
:mod:`xcache.weightless` says what the folder is and what to do instead
(make a twin with ``xcache-fixtures from-header``), in the one sentence
every tool uses: ``xcache-inspect`` prints it as its ``hint:`` line;
:meth:`engine.ExpertCache.open` and :func:`engine.layout.resolve` raise the
reader's error with it in front (:func:`explained`).
"""

from __future__ import annotations

import os

from xcache.engine.errors import EngineError
from xcache.weightless import weightless_hint

__all__ = ["explained", "weightless_hint"]


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
