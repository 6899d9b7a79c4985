"""The gate's steps that change a shard in place (gate/ops.py touch, rewrite)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from xcache.gate import ops
from xcache.gate.containers import make_target


def _run(tmp_path: Path) -> tuple[Any, Path]:
    """A stand-in for a scenario run over a private copy of k3-mini."""
    target = make_target("k3-mini", tmp_path / "work")
    scratch = tmp_path / "scratch"
    target.populate(scratch, frozenset(p.name for p in
                                       target.pristine.glob("*.safetensors")))

    def first_piece(key: tuple[int, int]) -> Any:
        return min(target.pieces(*key), key=lambda p: (p.shard, p.offset))

    def changed_piece(step: dict[str, Any]) -> Any:
        if "piece" in step:
            return target.pieces(*step["key"])[step["piece"]]
        return first_piece(step["key"])

    run = SimpleNamespace(scratch=scratch, sc={"name": "t"},
                          first_piece=first_piece, changed_piece=changed_piece)
    return run, scratch / Path(first_piece((0, 2)).shard).name


def test_touch_moves_the_mtime_alone(tmp_path):
    """touch: the same inode, size and bytes; the mtime 1 s later."""
    run, shard = _run(tmp_path)
    before, data = os.stat(shard), shard.read_bytes()
    ops.OPS["touch"].run(run, {"op": "touch", "key": (0, 2)})
    now = os.stat(shard)
    assert (now.st_ino, now.st_size) == (before.st_ino, before.st_size)
    assert now.st_mtime_ns - before.st_mtime_ns == 1_000_000_000
    assert shard.read_bytes() == data


def test_rewrite_keeping_the_mtime_leaves_only_the_ctime_moved(tmp_path):
    """rewrite keep_mtime: the key's first piece inverted in place, mtime as before."""
    run, shard = _run(tmp_path)
    piece = run.first_piece((0, 2))
    before, data = os.stat(shard), shard.read_bytes()
    ops.OPS["rewrite"].run(run, {"op": "rewrite", "key": (0, 2),
                                 "keep_mtime": True})
    now, after = os.stat(shard), shard.read_bytes()
    assert (now.st_ino, now.st_size, now.st_mtime_ns) == (
        before.st_ino, before.st_size, before.st_mtime_ns)
    assert now.st_ctime_ns != before.st_ctime_ns
    lo, hi = piece.offset, piece.offset + piece.nbytes
    assert after[lo:hi] == bytes(255 - b for b in data[lo:hi])
    assert after[:lo] == data[:lo] and after[hi:] == data[hi:]
