"""Container-level edges: shards' own metadata, shard names that leave the folder.

:func:`folder_edges` writes one sharded container per edge:

- the shards' ``__metadata__`` differ, or one has none, or is null or empty,
  with shard names whose byte order is not their number's order
  (``model-10`` before ``model-2``, ``B`` before ``a``, ``é`` last) and a
  ``weight_map`` that lists them in another order: both readers give the
  first shard's metadata by name (``xc_st_metadata``, ``engine/csrc/xc.h``;
  docs/LAYOUT.md "the first shard's ``__metadata__``");
- a ``weight_map`` naming a shard outside the index's folder -- ``../x``, an
  absolute path, ``sub/x``, ``./x``, ``.``, ``..``, the empty name, U+0000 in
  it -- each naming a valid shard that is there: ``index`` at that value
  (docs/DESIGN.md §3: "a plain file name in the index's folder"); a name with
  a backslash, and a symlink in the folder to a shard elsewhere, are plain
  file names in it: accepted (the gate's own scratch copies are symlinks);
  a dangling symlink does not exist (``index`` at the first entry naming it);
  a folder named as a shard is no regular file (``io``); the index named as
  its own shard is judged as a shard;
- ``metadata.total_size`` spelled every way :mod:`~gate.reader_diff.edges`
  spells an element: ``index`` where it is no unsigned integer or not the
  sum, ``json`` where it is no JSON.

Each container's verdict (kind, the engine's offset in the index, the
metadata) is the construction's; where both readers accept, their tables
are compared too.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xcache.gate.reader_diff.compare import (
    Verdict,
    compare,
    engine_verdict,
    oracle_verdict,
)
from xcache.gate.reader_diff.containers import (
    INDEX_NAME,
    Header,
    Sharded,
    base_sharded,
)
from xcache.gate.reader_diff.doc import Doc, Obj, Raw
from xcache.gate.reader_diff.edges import SPELLINGS, classify


@dataclass
class FolderCase:
    """A sharded container to write and what each reader must say of it."""

    label: str
    s: Sharded
    engine: str | None
    oracle: str | None
    #: the engine's offset, from the index as written (None: not compared)
    at: Callable[[Doc], int] | None = None
    metadata: dict[str, str] | None = None
    #: changes the container once its folder's path is known (before writing)
    before: Callable[[Path], None] | None = None
    #: writes what lies beside or inside the folder once it is written
    after: Callable[[Path], None] | None = None


#: Shard names, in the order they sort as bytes: "B" < "a" < "model-10" <
#: "model-2" < "é" (numbers by digits, not by value).
NAMES = ("B.safetensors", "a.safetensors", "model-10.safetensors",
         "model-2.safetensors", "\u00e9.safetensors")

#: Each shard's ``__metadata__`` (None: no member), by pattern.
META_PATTERNS: dict[str, tuple[Any, ...]] = {
    "same": ({"format": "pt"}, {"format": "pt"}, {"format": "pt"}),
    "differ": ({"a": "1"}, {"a": "2", "b": "3"}, {"c": "4"}),
    "first-none": (None, {"b": "3"}, {"c": "4"}),
    "second-none": ({"a": "1"}, None, {"a": "1"}),
    "first-null": ("null", {"b": "3"}, None),
    "first-empty": ({}, {"b": "3"}, {}),
    "reordered": ({"a": "1", "b": "2"}, {"b": "2", "a": "1"}, {"a": "1"}),
}


def _renamed(rng: random.Random, s: Sharded) -> list[str]:
    """The shards renamed to drawn names of :data:`NAMES`, weight_map following;
    their names in the order the map first names them."""
    olds = list(s.shards)
    news = rng.sample(NAMES, len(olds))
    s.shards = {new: s.shards[old] for old, new in zip(olds, news, strict=True)}
    wm = s.wmap()
    wm.pairs = [(t, news[olds.index(sh)]) for t, sh in wm.pairs]
    return news


def meta_cases(rng: random.Random) -> Iterator[FolderCase]:
    """Shards whose ``__metadata__`` differ, by every pattern, names drawn."""
    for label, pattern in META_PATTERNS.items():
        s = base_sharded(rng)
        names = _renamed(rng, s)
        for name, meta in zip(names, pattern, strict=False):
            if meta is None:
                continue
            value = None if meta == "null" else Obj(list(meta.items()))
            top = s.shards[name].top
            top.pairs.insert(rng.randrange(len(top.pairs) + 1),
                             ("__metadata__", value))
        first = min(names, key=lambda n: n.encode("utf-8"))
        meta = pattern[names.index(first)]
        s.wmap().pairs.reverse()
        yield FolderCase(f"meta-{label}", s, None, None,
                         metadata={} if meta in (None, "null") else dict(meta))


def _wm_value(s: Sharded, j: int) -> Callable[[Doc], int]:
    wi = s.index.index("weight_map")
    return lambda d: d.values[(wi, j)]


def _wm_key(s: Sharded, j: int) -> Callable[[Doc], int]:
    wi = s.index.index("weight_map")
    return lambda d: d.keys[(wi, j)]


def _retarget(rng: random.Random, s: Sharded, shard: Any
              ) -> tuple[int, Header]:
    """Map a drawn tensor to ``shard`` instead, and take it out of its own
    shard: (its weight_map position, a valid shard holding just that tensor,
    to be written where ``shard`` leads)."""
    wm = s.wmap()
    j = rng.randrange(len(wm.pairs))
    t, old = wm.pairs[j]
    wm.pairs[j] = (t, shard)
    h = s.shards[old]
    entry = h.top.get(t)
    b, e = entry.get("data_offsets")
    alone = Header(Obj([(t, Obj([("dtype", entry.get("dtype")),
                                 ("shape", entry.get("shape")),
                                 ("data_offsets", [0, e - b])]))]), h.data[b:e])
    h.top.pairs = [(k, v) for k, v in h.top.pairs if k != t]
    if not h.top.pairs:
        del s.shards[old]
    else:
        s.shards[old] = _relaid(h)
    return j, alone


def _relaid(h: Header) -> Header:
    """A shard's header laid out again from 0 after a tensor left it."""
    pairs, off, data = [], 0, b""
    for k, v in h.top.pairs:
        if k == "__metadata__":
            pairs.append((k, v))
            continue
        b, e = v.get("data_offsets")
        data += h.data[b:e]
        pairs.append((k, Obj([("dtype", v.get("dtype")), ("shape", v.get("shape")),
                              ("data_offsets", [off, off + e - b])])))
        off += e - b
    return Header(Obj(pairs), data, h.sep)


#: Shard names that leave the folder: (the name as written, where the valid
#: shard it names is written from the folder; None: the absolute path).
OUTSIDE: dict[str, tuple[str | None, str]] = {
    "parent": ("../{n}", "../{n}"), "sub": ("sub/{n}", "sub/{n}"),
    "dot-slash": ("./{n}", "{n}"), "sub-dotdot": ("sub/../{n}", "{n}"),
    "absolute": (None, "../abs/{n}"),
}


def name_cases(rng: random.Random) -> Iterator[FolderCase]:
    """A weight_map naming a shard outside the folder (the shard it names valid
    and there), a name that is no file name, or plain but odd ones."""
    for label, (spelled, where) in OUTSIDE.items():
        s = base_sharded(rng)
        n = f"out-{label}.safetensors"
        j, alone = _retarget(rng, s, spelled.format(n=n) if spelled else "?")

        def absolute(folder: Path, s: Sharded = s, j: int = j,
                     where: str = where, n: str = n) -> None:
            wm = s.wmap()
            wm.pairs[j] = (wm.pairs[j][0], str((folder / where.format(n=n)
                                                ).resolve()))

        def shard(folder: Path, alone: Header = alone, where: str = where,
                  n: str = n) -> None:
            path = (folder / where.format(n=n)).resolve()
            path.parent.mkdir(parents=True, exist_ok=True)
            alone.write(path)
        yield FolderCase(f"name-{label}", s, "index", "index", _wm_value(s, j),
                         before=None if spelled else absolute, after=shard)
    for label, name in (("dot", "."), ("dotdot", ".."), ("empty", ""),
                        ("nul", "x\0.safetensors")):
        s = base_sharded(rng)
        j, _ = _retarget(rng, s, name)
        yield FolderCase(f"name-{label}", s, "index", "index", _wm_value(s, j))
    s = base_sharded(rng)
    _, alone = _retarget(rng, s, "a\\b.safetensors")
    yield FolderCase("name-backslash", s, None, None, after=lambda f, h=alone:
                     h.write(f / "a\\b.safetensors"))
    for label, relative in (("symlink-out", True), ("symlink-absolute", False)):
        s = base_sharded(rng)
        n = f"link-{label}.safetensors"
        _, alone = _retarget(rng, s, n)

        def link(folder: Path, n: str = n, alone: Header = alone,
                 relative: bool = relative) -> None:
            real = (folder / ".." / "elsewhere" / n).resolve()
            real.parent.mkdir(parents=True, exist_ok=True)
            alone.write(real)
            os.symlink(f"../elsewhere/{n}" if relative else real, folder / n)
        yield FolderCase(f"name-{label}", s, None, None, after=link)
    s = base_sharded(rng)
    j, _ = _retarget(rng, s, "dangling.safetensors")
    yield FolderCase("name-dangling", s, "index", "index", _wm_key(s, j),
                     after=lambda f: os.symlink("nowhere.safetensors",
                                                f / "dangling.safetensors"))
    s = base_sharded(rng)
    _retarget(rng, s, "folder.safetensors")
    yield FolderCase("name-a-folder", s, "io", "io",
                     after=lambda f: (f / "folder.safetensors").mkdir())
    s = base_sharded(rng)
    _retarget(rng, s, INDEX_NAME)
    yield FolderCase("name-the-index", s, "header_too_large", "header_too_large",
                     lambda d: 0)


def total_cases(rng: random.Random) -> Iterator[FolderCase]:
    """``metadata.total_size`` in every spelling of an element: the sum in odd
    spellings, wrong spellings, no JSON."""
    for spelling in SPELLINGS + ("18446744073709551615", "18446744073709551616"):
        s = base_sharded(rng)
        meta = s.index.get("metadata")
        total = sum(len(h.data) for h in s.shards.values())
        keys = meta.keys()
        if "total_size" in keys:
            meta.pairs.pop(keys.index("total_size"))
        text = spelling.replace("%", str(total))
        k = rng.randrange(len(meta.pairs) + 1)
        meta.pairs.insert(k, ("total_size", Raw(text)))
        kind, plus, _ = classify(Raw(text), "total_size")
        if kind is None and int(text) != total:
            kind = "index"  # not the sum
        mi = s.index.index("metadata")

        def at(d: Doc, mi: int = mi, k: int = k, plus: int = plus) -> int:
            return d.values[(mi, k)] + plus
        want = {None: None, "json": "json", "schema": "index", "index": "index"}[kind]
        yield FolderCase(f"total-{text!r}", s, want, want, at)


def folder_edges(rng: random.Random) -> Iterator[FolderCase]:
    """Every folder edge, one container each."""
    yield from meta_cases(rng)
    yield from name_cases(rng)
    yield from total_cases(rng)


def judge_folder(engine: Any, folder: Path, c: FolderCase) -> str | None:
    """Write ``c`` at ``folder`` (a fresh path in a scratch folder of its own),
    open it with both readers, and say how either departs from the case's
    verdict (None if neither does)."""
    if c.before is not None:
        c.before(folder)
    doc = c.s.write(folder)
    if c.after is not None:
        c.after(folder)
    mine, theirs = engine_verdict(engine, folder), oracle_verdict(folder)
    try:
        return _departs(mine, theirs, c, doc)
    finally:
        for p in sorted(folder.parent.iterdir()):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink()


def _departs(mine: Verdict, theirs: Verdict, c: FolderCase, doc: Doc) -> str | None:
    if (mine.kind, theirs.kind) != (c.engine, c.oracle):
        return (f"engine {mine.kind or 'accepts'} ({mine.message}), oracle "
                f"{theirs.kind or 'accepts'} ({theirs.detail or theirs.message}); "
                f"the construction says engine {c.engine or 'accepts'}, oracle "
                f"{c.oracle or 'accepts'}")
    want = c.at(doc) if c.at is not None else None
    if mine.kind is not None and want is not None and mine.offset != want:
        return (f"{mine.kind} offset: engine {mine.offset}, expected {want} "
                f"({mine.message})")
    if mine.kind is None and c.metadata is not None:
        if mine.metadata != c.metadata or theirs.metadata != c.metadata:
            return (f"metadata: engine {mine.metadata}, oracle {theirs.metadata}, "
                    f"the first shard's by name {c.metadata}")
    if mine.kind == "json":
        return None  # (the oracle's json offset is its parser's own)
    return compare(mine, theirs, want)
