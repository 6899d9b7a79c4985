"""The engine's policy table and the oracle's registry list the same policies,
parameters and defaults, and accept exactly the same spec strings."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from xcache.engine import MisuseError, _lib
from xcache.engine.sim import simulate
from xcache.oracle.errors import Misuse
from xcache.oracle.policies import POLICIES, QUEUE_POLICIES, REGISTRY, parse_policy

KEYS = np.array([0, 1, 2, 0, 3, 1], np.uint32)


def engine_table() -> dict[str, dict[str, int]]:
    """The engine's policy table, read through its public C functions."""
    return _lib.policy_table()


def engine_accepts(spec: str) -> bool:
    """Whether the engine's spec parser takes ``spec`` (via the simulator)."""
    try:
        simulate(KEYS, spec, 2, mode="plain")
    except MisuseError:
        return False
    return True


def oracle_accepts(spec: str) -> bool:
    """Whether the oracle's spec parser takes ``spec``."""
    try:
        parse_policy(spec)
    except Misuse:
        return False
    return True


def test_same_policies_parameters_and_defaults():
    """Every engine policy is an oracle module with the same parameters and defaults."""
    assert engine_table() == {"lru": {}, "fifo": {}, "lfu": {},
                              "lfru": {"sample": 4, "seed": 0},
                              "hotness": {"period": 256},
                              "s3fifo": {"small": 10, "ghost": 90, "promote": 2},
                              "arc": {}, "sieve": {}}
    assert engine_table() == POLICIES
    assert set(REGISTRY) == set(POLICIES)
    assert set(QUEUE_POLICIES) == {"s3fifo", "arc", "sieve"}


def test_the_simulator_lists_every_engine_policy_and_belady():
    """engine.sim.POLICIES is the C table in its order, then belady."""
    from xcache.engine.sim import POLICIES as SIM_POLICIES

    assert SIM_POLICIES == (*engine_table(), "belady")


def test_the_engine_lists_its_table_when_the_name_is_unknown():
    """The engine's unknown-policy message is built from its table."""
    with pytest.raises(MisuseError) as e:
        simulate(KEYS, "nope", 2, mode="plain")
    assert str(e.value) == ("unknown policy 'nope'; valid: lru, fifo, lfu, "
                            "lfru:sample=N,seed=N, hotness:period=N, "
                            "s3fifo:small=N,ghost=N,promote=N, arc, sieve")


@pytest.mark.parametrize("spec", [
    "hotness:period=+5", "lfru:sample=0x3", "lfru:seed=1_000", "lru:", "lfru:sample=3,",
    "lfru:,sample=3", "lfru:sample", "lfru:sample=", "lfru:sample= 3", "lfru:sample=3 ",
    "lfru:seed=18446744073709551616", "lfru:sample=0", "hotness:period=0",
    "s3fifo:small=101", "arc:p=1", "LRU", "lru ", " lru", "lfru:sample=٣",
    "lfru:sample=" + "0" * 31 + "1",
])
def test_both_refuse(spec):
    """Specs outside the engine's grammar or ranges are refused by both."""
    assert (engine_accepts(spec), oracle_accepts(spec)) == (False, False)


@pytest.mark.parametrize("spec, params", [
    ("", {}), ("lru", {}), ("lfru:seed=18446744073709551615",
                            {"sample": 4, "seed": 2**64 - 1}),
    ("lfru:sample=3,sample=5", {"sample": 5, "seed": 0}),
    ("lfru:sample=" + "0" * 30 + "1", {"sample": 1, "seed": 0}),
    ("s3fifo:small=100", {"small": 100}), ("hotness:period=1", {"period": 1}),
])
def test_both_accept(spec, params):
    """Specs inside the grammar are accepted by both, with the same values."""
    assert engine_accepts(spec) and oracle_accepts(spec)
    name, got = parse_policy(spec)
    assert got == {**POLICIES[name], **params}


_names = st.sampled_from([*POLICIES, "x", ""])
_keys = st.sampled_from(["sample", "seed", "period", "small", "p", ""])
_values = st.one_of(st.integers(0, 2**65).map(str),
                    st.text("0123456789+-_x ", max_size=6))
_items = st.builds(lambda k, eq, v: k + eq + v, _keys, st.sampled_from(["=", ""]),
                   _values)


@given(_names, st.lists(_items, max_size=3), st.booleans())
def test_grammar_agrees_on_generated_specs(name, items, colon):
    """On generated specs the engine and the oracle accept exactly the same set."""
    spec = name + (":" + ",".join(items) if colon else "")
    assert engine_accepts(spec) == oracle_accepts(spec), spec
