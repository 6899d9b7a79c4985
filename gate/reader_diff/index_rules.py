"""The corruptions of a sharded container's index (or one of its shards)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

from xcache.gate.reader_diff import generators as gen
from xcache.gate.reader_diff.containers import Sharded
from xcache.gate.reader_diff.doc import Obj, Path_, Raw, Spelled
from xcache.gate.reader_diff.header_rules import (
    _draw,
    r_dtype_unknown,
    r_length,
    r_offsets_move,
    r_shape_dim,
)


def _wm_path(s: Sharded, j: int, key: bool = True) -> Path_:
    return (s.index.index("weight_map"), j)


def x_stray(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """weight_map names a tensor no shard holds (at a real shard)."""
    wm = s.wmap()
    j = rng.randrange(len(wm.pairs) + 1)
    wm.pairs.insert(j, ("model.layers.9.stray", rng.choice(list(s.shards))))
    return "key", _wm_path(s, j)


def x_missing(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """A shard's tensor is not in weight_map (the error names it in its shard)."""
    wm = s.wmap()
    wm.pairs.pop(rng.randrange(len(wm.pairs)))
    return "tensor", None


def x_wrong_shard(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """A tensor mapped to another shard that exists."""
    wm = s.wmap()
    j = rng.randrange(len(wm.pairs))
    name, shard = wm.pairs[j]
    other = rng.choice([x for x in s.shards if x != shard])
    wm.pairs[j] = (name, other)
    return "tensor", None


def x_no_shard(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """A tensor mapped to a shard file that does not exist."""
    wm = s.wmap()
    j = rng.randrange(len(wm.pairs))
    wm.pairs[j] = (wm.pairs[j][0], rng.choice(["model-9.safetensors", "x",
                                               "a" * 300]))
    return "key", _wm_path(s, j)


def x_total(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """metadata.total_size off by some bytes, or a 20-digit one."""
    meta = s.index.get("metadata")
    if "total_size" not in meta.keys():
        meta.pairs.append(("total_size", 0))
    j = meta.index("total_size")
    if rng.random() < 0.3:  # 20 digits that fit 64 bits: the general path's
        meta.pairs[j] = ("total_size", 2**64 - 1 - rng.randrange(10**6))
    else:
        meta.pairs[j] = ("total_size", max(0, meta.pairs[j][1] + rng.choice(
            [-7, -1, 1, 2, 10**6])))
    return "value", (s.index.index("metadata"), j)


def x_schema(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """The index's schema broken: weight_map or metadata of the wrong type."""
    choice = rng.randrange(5)
    wi = s.index.index("weight_map")
    if choice == 0:
        s.index.pairs[wi] = ("weight_map", rng.choice([[1], "x", None, 3]))
        return "value", (wi,)
    if choice == 1:
        wm = s.wmap()
        j = rng.randrange(len(wm.pairs))
        wm.pairs[j] = (wm.pairs[j][0], rng.choice([1, None, ["a"]]))
        return "value", (wi, j)
    if choice == 2:
        wm = s.wmap()
        j = rng.randrange(len(wm.pairs))
        wm.pairs.append(wm.pairs[j])
        return "key", (wi, len(wm.pairs) - 1)
    mi = s.index.index("metadata")
    if choice == 3:
        s.index.pairs[mi] = ("metadata", rng.choice([[1], "x", 3]))
        return "value", (mi,)
    meta = s.index.get("metadata")
    meta.pairs.append(("total_size", rng.choice([-1, "9", 1.5, None])))
    if meta.keys().count("total_size") > 1:
        return "oracle", None
    return "value", (mi, len(meta.pairs) - 1)


def x_ok(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """Accepted: entries reordered, metadata null, or with unknown nested fields."""
    s.wmap().pairs.reverse()
    choice = rng.randrange(3)
    if choice == 0:
        s.index.pairs[s.index.index("metadata")] = ("metadata", None)
    elif choice == 1:
        meta = s.index.get("metadata")
        meta.pairs.insert(rng.randrange(len(meta.pairs) + 1), (
            "extra", rng.choice([Obj([("a", [1, Obj([("b", None)])])]),
                                 [[[]]], "x", -1.5, Raw("1e-999")])))
    else:
        s.index.pairs.insert(rng.randrange(3), ("note", Obj([("k", [True])])))
    return "ok", None


def x_no_index(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """No index, and 2 to 12 .safetensors files: which container is meant?"""
    first = next(iter(s.shards.values()))
    s.index = Obj([])
    s.shards = {f"part-{i}.safetensors": first for i in range(rng.randrange(2, 13))}
    return "none", None


def x_shard_broken(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """One shard broken by a header rule: the shard's error, not the index's."""
    name = rng.choice(sorted(s.shards))
    h = s.shards[name]
    rule = _draw(rng, ((r_offsets_move, 1), (r_shape_dim, 1), (r_length, 1),
                       (r_dtype_unknown, 1)))
    rule(rng, h)
    return "shard", None


def x_names(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """A tensor renamed with escapes and UTF-8 of every length, spelled one way in
    its shard and another in weight_map: the decoded names must meet."""
    wm = s.wmap()
    j = rng.randrange(len(wm.pairs))
    name, shard = wm.pairs[j]
    nm = gen.draw_name(rng, False, prefix=name + ".")
    assert nm.value is not None
    other = json.dumps(nm.value, ensure_ascii=rng.random() < 0.5).encode()
    spellings = [nm.spelled, other]
    rng.shuffle(spellings)
    wm.pairs[j] = (Spelled(nm.value, spellings[0]), shard)
    top = s.shards[shard].top
    i = top.index(name)
    top.pairs[i] = (Spelled(nm.value, spellings[1]), top.pairs[i][1])
    return "ok", None


def x_depth(rng: random.Random, s: Sharded) -> tuple[str, Path_ | None]:
    """An unknown member of the index or of its metadata nested to just below or
    just past the deepest level accepted (the same limit as a header's)."""
    deepest = gen.MAX_LEVEL + rng.choice([0, 1, 1, 2])
    if rng.random() < 0.5 and isinstance(s.index.get("metadata"), Obj):
        meta = s.index.get("metadata")
        meta.pairs.insert(rng.randrange(len(meta.pairs) + 1), (
            "extra", Raw(gen.nested(deepest - 2, rng, "1"))))
    else:
        s.index.pairs.insert(rng.randrange(len(s.index.pairs) + 1), (
            "note", Raw(gen.nested(deepest - 1, rng, '"x"'))))
    return "json", None


INDEX_RULES: tuple[tuple[Callable[..., tuple[str, Path_ | None]], int], ...] = (
    (x_stray, 2), (x_missing, 2), (x_wrong_shard, 2), (x_no_shard, 2),
    (x_total, 2), (x_schema, 3), (x_ok, 2), (x_shard_broken, 2),
    (x_no_index, 1), (x_names, 3), (x_depth, 2),
)

