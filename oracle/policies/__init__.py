"""The oracle's eviction policies: one module per policy, found by name.

Each module of this package (one a policy: ``lru``, ``fifo``, ``arc``
...) is one policy of docs/CACHE.md, written from
its text, and declares:

- ``NAME``: the policy's name in a spec;
- ``PARAMS``: its parameters, in the engine table's order, with defaults;
- ``validate(params)`` (optional): raises ``Misuse`` for values the engine
  refuses;
- ``LIBCACHESIM`` (optional): the name of the same policy in libCacheSim,
  which it must equal miss for miss (tests/policies/test_libcachesim_cells.py,
  bench/policy_replay.py);
- either ``victim(params, cands, last_use, insert_tick, freq, hot,
  n_evictions)`` -- a *tick* policy, a pure function of the candidates'
  ticks -- or ``make(n_slots, params)`` -- a *queue* policy, whose state
  object is told the events of docs/CACHE.md "Events a policy sees"
  (``hit``, ``insert``, ``evict``) and names the next victim with
  ``victim(cand)``.

The registry is built from the modules present, so adding a policy to the
oracle is adding its module.  The spec grammar is the engine's exactly:
``name`` or ``name:key=value,...`` with each value 1 to 31 ASCII decimal
digits no larger than 2**64 - 1, a repeated key taking its last value, and
no empty item; an empty spec means ``lru``.  One implementation serves the
live-cache model (:class:`oracle.cache.CacheModel`) and the simulator
(:mod:`oracle.sim`).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np

from xcache.oracle.errors import Misuse
from xcache.oracle.policies.arc import ARC
from xcache.oracle.policies.s3fifo import S3FIFO

__all__ = ["REGISTRY", "POLICIES", "QUEUE_POLICIES", "LIBCACHESIM", "S3FIFO", "ARC",
           "QueuePolicy",
           "parse_policy", "choose_victim", "make_queue_policy", "valid_specs"]

QueuePolicy = S3FIFO | ARC

_MAX_U64 = (1 << 64) - 1
_DIGITS = re.compile(r"[0-9]{1,31}")


def _discover() -> dict[str, ModuleType]:
    """Import every policy module of this package, keyed by its ``NAME``."""
    found: dict[str, ModuleType] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(mod, "victim") == hasattr(mod, "make"):
            raise ImportError(f"policy module {mod.__name__} must define exactly "
                              "one of victim() and make()")
        found[mod.NAME] = mod
    return found


#: Every policy module, by name.
REGISTRY: dict[str, ModuleType] = _discover()
#: Every policy and its parameters with their defaults (docs/CACHE.md).
POLICIES: dict[str, dict[str, int]] = {n: dict(m.PARAMS) for n, m in REGISTRY.items()}
#: The queue policies (their own state) and their parameters with defaults.
QUEUE_POLICIES: dict[str, dict[str, int]] = {
    n: dict(m.PARAMS) for n, m in REGISTRY.items() if hasattr(m, "make")}
#: The policies libCacheSim has too: our name -> its class name.
LIBCACHESIM: dict[str, str] = {n: m.LIBCACHESIM for n, m in REGISTRY.items()
                               if getattr(m, "LIBCACHESIM", None)}


def valid_specs() -> str:
    """Every policy as a spec template, e.g. ``lfru:sample=N,seed=N``."""
    return ", ".join(n + (":" + ",".join(f"{p}=N" for p in ps) if ps else "")
                     for n, ps in POLICIES.items())


def parse_policy(spec: str | None) -> tuple[str, dict[str, int]]:
    """Parse a policy spec into its name and full parameter map (engine grammar).

    An unknown policy or parameter, a value that is not plain decimal digits
    or is out of range, and an empty item are ``Misuse`` naming what is valid.
    """
    if not spec:
        spec = "lru"
    name, colon, rest = spec.partition(":")
    if name not in REGISTRY:
        raise Misuse(f"unknown policy {name!r}; valid: {valid_specs()}")
    params = dict(POLICIES[name])
    if colon:
        for item in rest.split(","):
            key, eq, value = item.partition("=")
            if (not eq or key not in params or not _DIGITS.fullmatch(value)
                    or int(value) > _MAX_U64):
                valid = ", ".join(params) or "none"
                raise Misuse(f"policy {name}: bad parameter {item!r}; valid "
                             f"parameters: {valid} (as key=unsigned integer)")
            params[key] = int(value)
    validate = getattr(REGISTRY[name], "validate", None)
    if validate is not None:
        validate(params)
    return name, params


def choose_victim(policy: str, params: Mapping[str, int], cands: np.ndarray,
                  last_use: np.ndarray, insert_tick: np.ndarray, freq: np.ndarray,
                  hot: np.ndarray, n_evictions: int) -> int:
    """A tick policy's ``to_evict``: the victim slot among ``cands``; pure.

    ``cands`` are the candidate slot numbers in ascending order (not empty);
    the other arrays are indexed by slot (``hot`` holds each slot's key's
    hotness count); ``n_evictions`` is the number of policy evictions so far.
    A queue policy needs its own state (:func:`make_queue_policy`): ``Misuse``.
    """
    mod = REGISTRY.get(policy)
    if mod is None:
        raise Misuse(f"unknown policy {policy!r}")
    if not hasattr(mod, "victim"):
        raise Misuse(f"{policy} keeps queues: use make_queue_policy, not "
                     "choose_victim")
    return mod.victim(params, cands, last_use, insert_tick, freq, hot, n_evictions)


def make_queue_policy(name: str, params: Mapping[str, int],
                      n_slots: int) -> Any:
    """Fresh queue-policy state for a cache of ``n_slots``; None for tick policies."""
    mod = REGISTRY.get(name)
    if mod is None or not hasattr(mod, "make"):
        return None
    return mod.make(n_slots, params)
