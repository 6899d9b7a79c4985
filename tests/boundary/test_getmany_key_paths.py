"""getmany's two ways in: a list of (int, int) tuples and every other iterable.

A list of plain tuples skips the per-key Python checks; everything else --
and anything in such a list that array("i") refuses -- goes through
check_keys.  Both must accept, refuse and word their refusals alike: each
case runs on two fresh caches, once as the list and once as a generator
(always the checked path), and the outcomes must be equal.
"""

from __future__ import annotations

import collections
import decimal
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers import K3_LAYOUT
from xcache import engine
from xcache.engine import args as engine_args


class _Index:
    """An int-like with only __index__ (operator.index takes it)."""

    def __init__(self, v: int) -> None:
        self.v = v

    def __index__(self) -> int:
        return self.v

    def __repr__(self) -> str:
        return f"_Index({self.v})"


class _IntOnly:
    """An int-like with only __int__ (operator.index refuses it)."""

    def __int__(self) -> int:
        return 1

    def __repr__(self) -> str:
        return "_IntOnly()"


def _outcome(k3_shard: Path, call: Callable[[engine.ExpertCache], Any]
             ) -> tuple[Any, ...]:
    """What call does to a fresh cache: its result or error, stats, residents."""
    with engine.Container(str(k3_shard)) as cont:
        cache = engine.ExpertCache(cont, **K3_LAYOUT, n_slots=8, top_k=4,
                                   batch_threads=2)
        try:
            got: Any = ("ok", call(cache))
        except engine.EngineError as e:
            got = ("error", type(e).__name__, str(e), e.layer, e.expert)
        out = (got, cache.stats()["prefetch_loads"], sorted(cache.resident()))
        cache.check()
        cache.close()
    return out


def _as_generator(keys: list[Any]) -> Iterable[Any]:
    """The same keys as a generator, which never takes the list path."""
    return (k for k in keys)


ACCEPTED = [
    ("one key", [(0, 3)], 1),
    ("top-4", [(0, 4), (0, 0), (0, 5), (0, 7)], 4),
    ("a repeat", [(0, 4), (0, 4)], 1),
    ("numpy ints", [(np.int64(0), np.int32(6)), (np.uint8(0), np.int16(2))], 2),
    ("bools", [(False, True)], 1),
    ("__index__ only", [(_Index(0), _Index(9))], 1),
]


@pytest.mark.parametrize("name,keys,loaded", ACCEPTED,
                         ids=[a[0] for a in ACCEPTED])
def test_accepted_keys_load_alike(k3_shard: Path, name: str, keys: list[Any],
                                  loaded: int) -> None:
    """Accepted keys load the same experts by either path, with the exact count."""
    fast = _outcome(k3_shard, lambda c: c.getmany(keys))
    slow = _outcome(k3_shard, lambda c: c.getmany(_as_generator(keys)))
    assert fast == slow
    assert fast[0] == ("ok", loaded)
    assert fast[1] == loaded


REFUSED = [
    ("int32 overflow", [(0, 1), (0, 2**31)], "MisuseError",
     "keys[1]: expert must be from -2147483648 to 2147483647, got 2147483648"),
    ("int32 underflow", [(-2**31 - 1, 0)], "MisuseError",
     "keys[0]: layer must be from -2147483648 to 2147483647, got "
     "-2147483649"),
    ("float", [(0, 1.0)], "MisuseError",
     "keys[0]: expert must be an integer, got float 1.0"),
    ("numpy float", [(np.float64(0), 1)], "MisuseError",
     "keys[0]: layer must be an integer, got float64 np.float64(0.0)"),
    ("Decimal", [(0, decimal.Decimal(2))], "MisuseError",
     "keys[0]: expert must be an integer, got Decimal Decimal('2')"),
    ("__int__ only", [(0, _IntOnly())], "MisuseError",
     "keys[0]: expert must be an integer, got _IntOnly _IntOnly()"),
    ("string", [(0, "1")], "MisuseError",
     "keys[0]: expert must be an integer, got str '1'"),
    ("None", [(None, 1)], "MisuseError",
     "keys[0]: layer must be an integer, got NoneType None"),
    ("triple", [(0, 1, 2)], "MisuseError",
     "keys[0] must be a (layer, expert) pair, got (0, 1, 2)"),
    ("triple after a pair", [(0, 1), (0, 1, 2)], "MisuseError",
     "keys[1] must be a (layer, expert) pair, got (0, 1, 2)"),
    ("single", [(0, 1), (0,)], "MisuseError",
     "keys[1] must be a (layer, expert) pair, got (0,)"),
    ("empty tuple", [()], "MisuseError",
     "keys[0] must be a (layer, expert) pair, got ()"),
    ("not a key of the cache", [(0, 1), (3, 0)], "MisuseError",
     "(layer 3, expert 0) is not a key of this cache (1 layers from 0 to 0, "
     "24 experts each)"),
    ("expert past the last", [(0, 24)], "MisuseError",
     "(layer 0, expert 24) is not a key of this cache (1 layers from 0 to 0, "
     "24 experts each)"),
]


@pytest.mark.parametrize("name,keys,kind,message", REFUSED,
                         ids=[r[0] for r in REFUSED])
def test_refused_keys_alike(k3_shard: Path, name: str, keys: list[Any],
                            kind: str, message: str) -> None:
    """A bad key is refused alike by either path, with its message; nothing loads."""
    fast = _outcome(k3_shard, lambda c: c.getmany(keys))
    slow = _outcome(k3_shard, lambda c: c.getmany(_as_generator(keys)))
    assert fast == slow
    assert fast[0][:3] == ("error", kind, message)
    assert fast[1:] == (0, [])


def test_other_containers_of_pairs(k3_shard: Path) -> None:
    """A tuple of pairs, lists, arrays or named tuples loads like a list of tuples."""
    pairs = [(0, 2), (0, 5)]
    want = _outcome(k3_shard, lambda c: c.getmany(pairs))
    assert want[0] == ("ok", 2)
    key = collections.namedtuple("key", "layer expert")
    for keys in (tuple(pairs), [list(p) for p in pairs],
                 [np.array(p) for p in pairs], np.array(pairs),
                 [key(*p) for p in pairs]):
        assert _outcome(k3_shard, lambda c, ks=keys: c.getmany(ks)) == want


def test_empty_list_loads_nothing(k3_shard: Path) -> None:
    """An empty list is a batch of nothing: 0 loaded, nothing changed."""
    assert _outcome(k3_shard, lambda c: c.getmany([])) == (("ok", 0), 0, [])


def test_list_of_int_pairs_skips_check_keys(k3_shard: Path,
                                            monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    """A list of (int, int) tuples reaches C without check_keys; others use it."""
    calls = []

    def counting(name: str, value: Any) -> list[tuple[int, int]]:
        calls.append(name)
        return checked(name, value)

    checked = engine_args.check_keys
    monkeypatch.setattr(engine_args, "check_keys", counting)
    assert _outcome(k3_shard, lambda c: c.getmany([(0, 1), (0, 2)]))[0] == \
        ("ok", 2)
    assert calls == []
    assert _outcome(k3_shard, lambda c: c.getmany([[0, 1], (0, 2)]))[0] == \
        ("ok", 2)
    assert calls == ["keys"]
