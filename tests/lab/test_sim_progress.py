"""The simulator's progress hook: calls at every period and at the end, the
same counts with and without it, a stop that leaks nothing, exceptions (Ctrl-C
too) raised again with their traceback, and bad periods named."""

from __future__ import annotations

import os
import signal
import traceback

import numpy as np
import pytest

from tests.helpers import synthetic
from xcache.engine import _lib
from xcache.engine.sim import POLICIES, PROGRESS_EVERY, SimulationStopped, simulate

#: Ten accesses of four keys (each its own step).
KEYS = np.array([0, 1, 2, 0, 1, 3, 0, 2, 1, 3], np.uint32)
COUNTS = ("requests", "hits", "misses", "compulsory", "reloads", "evictions")


def calls(keys: np.ndarray, every: int, **kw: object) -> list[int]:
    """The ``done`` values the hook receives in one replay of ``keys``."""
    seen: list[int] = []
    simulate(keys, kw.pop("policy", "lru"), kw.pop("slots", 2),
             kw.pop("mode", "plain"), progress=seen.append, progress_every=every,
             **kw)
    return seen


@pytest.mark.parametrize(("every", "expected"), [
    (1, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
    (3, [3, 6, 9, 10]),
    (4, [4, 8, 10]),
    (5, [5, 10]),      # a multiple of the period: the final call only once
    (10, [10]),
    (11, [10]),
    (PROGRESS_EVERY, [10]),
])
@pytest.mark.parametrize("mode", ["plain", "step"])
@pytest.mark.parametrize("policy", ["lru", "arc", "belady"])
def test_calls_at_each_multiple_of_the_period_and_at_the_end(every, expected,
                                                            mode, policy):
    """done = period, 2 * period, ... below n, then n (every kind of run)."""
    assert calls(KEYS, every, mode=mode, policy=policy) == expected


def test_per_layer_counts_over_the_layers_in_order():
    """per_layer: one count across the layers' caches (6 of layer 0, then 4)."""
    keys = np.array([0, 2, 1, 3, 0, 1, 2, 0, 1, 0], np.uint32)
    assert calls(keys, 3, per_layer=True, n_experts=2) == [3, 6, 9, 10]
    assert calls(keys, 6, per_layer=True, n_experts=2) == [6, 10]


def test_an_empty_trace_has_the_final_call_alone():
    """No accesses: one call, with done = 0."""
    assert calls(np.zeros(0, np.uint32), 3) == [0]


def test_the_default_period():
    """Without progress_every the period is 65,536 accesses."""
    assert PROGRESS_EVERY == 65536 == _lib.lib().XC_SIM_PROGRESS_EVERY
    keys = np.arange(140_000, dtype=np.uint32) % 50
    seen: list[int] = []
    simulate(keys, "lru", 10, "plain", progress=seen.append)
    assert seen == [65536, 131072, 140000]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(("mode", "per_layer", "fast"), [
    ("plain", False, True), ("plain", False, False), ("step", False, True),
    ("plain", True, True), ("step", True, False)])
def test_counts_are_the_same_with_and_without_the_hook(policy, mode, per_layer,
                                                      fast):
    """Every policy (Belady too), every mode: the hook changes no count."""
    trace = synthetic()
    plain = simulate(trace, policy, 5, mode, per_layer, fast_path=fast)
    seen: list[int] = []
    hooked = simulate(trace, policy, 5, mode, per_layer, fast_path=fast,
                      progress=seen.append, progress_every=7)
    assert hooked == plain
    assert seen == [*range(7, 1200, 7), 1200]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("mode", ["plain", "step"])
def test_a_true_return_stops_with_the_counts_so_far(policy, mode):
    """Stopped at 600 of 1200: SimulationStopped carrying the first 600's counts."""
    trace = synthetic()
    seen: list[int] = []

    def stop_at_600(done: int) -> bool:
        seen.append(done)
        return done >= 600

    live = _lib.lib().xc_alloc_live()
    with pytest.raises(SimulationStopped) as info:
        simulate(trace, policy, 5, mode, progress=stop_at_600,
                 progress_every=200)
    assert _lib.lib().xc_alloc_live() == live
    assert seen == [200, 400, 600]
    e = info.value
    assert str(e) == ("sim: the progress callback stopped the replay after 600 "
                      "of 1200 accesses")
    assert (e.done, e.kind, e.status) == (600, "stopped", 1)
    first = simulate((trace.token[:600], trace.layer[:600], trace.expert[:600],
                      trace.n_experts), policy, 5, mode)
    assert {k: e.partial[k] for k in COUNTS} == {k: first[k] for k in COUNTS}


def test_a_stop_at_the_final_call_carries_every_count():
    """A true return at the final call: stopped, with the whole run's counts."""
    whole = simulate(KEYS, "lfu", 2, "plain")
    with pytest.raises(SimulationStopped) as info:
        simulate(KEYS, "lfu", 2, "plain", progress=lambda d: d == 10,
                 progress_every=4)
    assert info.value.done == 10
    assert info.value.partial == whole


@pytest.mark.parametrize("per_layer", [False, True])
def test_the_c_call_returns_stopped_and_frees_everything(per_layer):
    """A C-level callback returning 1: XC_SIM_STOPPED, nothing leaked."""
    ffi, lib = _lib.ffi(), _lib.lib()
    seen: list[int] = []

    @ffi.callback("int(void *, uint64_t)")
    def hook(ctx: object, done: int) -> int:
        seen.append(done)
        return 1 if done == 4 else 0

    keys = ffi.new("uint32_t[]", [int(k) for k in KEYS])
    o = ffi.new("xc_sim_opts *")
    spec = ffi.new("char[]", b"s3fifo")
    o.policy, o.n_slots, o.n_keys, o.mode = spec, 2, 4, lib.XC_SIM_PLAIN
    o.per_layer, o.n_experts = int(per_layer), 2
    o.progress, o.progress_every = hook, 2
    out = ffi.new("xc_sim_result *")
    live = lib.xc_alloc_live()
    assert lib.xc_sim_run(o, keys, ffi.NULL, 10, out) == lib.XC_SIM_STOPPED == 1
    assert lib.xc_alloc_live() == live
    assert seen == [2, 4]
    assert out.requests == 4 and out.hits + out.misses == 4
    assert out.reloads == out.misses - out.compulsory


class Boom(Exception):
    """The test's own error, raised inside the hook."""


def test_an_exception_in_the_hook_propagates_with_its_traceback():
    """The hook's exception is raised by simulate, its frames kept; nothing leaked."""
    seen: list[int] = []

    def exploding(done: int) -> None:
        seen.append(done)
        if done == 6:
            raise Boom(f"at {done}")

    live = _lib.lib().xc_alloc_live()
    with pytest.raises(Boom, match="^at 6$") as info:
        simulate(KEYS, "lru", 2, "step", progress=exploding, progress_every=3)
    assert _lib.lib().xc_alloc_live() == live
    assert seen == [3, 6]
    names = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert names[-1] == "exploding"
    assert "simulate" in names


def test_ctrl_c_stops_the_replay_at_the_next_call():
    """A SIGINT arriving during the replay (main thread): KeyboardInterrupt there."""
    seen: list[int] = []

    def interrupted(done: int) -> None:
        seen.append(done)
        if done == 200:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        simulate(synthetic(), "belady", 5, "step", progress=interrupted,
                 progress_every=100)
    assert seen in ([100, 200], [100, 200, 300])  # raised in this call or the next


@pytest.mark.parametrize(("every", "error", "message"), [
    (0, ValueError, "progress_every must be at least 1 access (and below "
                    "2**64), got 0"),
    (-5, ValueError, "progress_every must be at least 1 access (and below "
                     "2**64), got -5"),
    (2**64, ValueError, "progress_every must be at least 1 access (and below "
                        f"2**64), got {2**64}"),
    (2.5, TypeError, "progress_every must be a whole number of accesses, not "
                     "float 2.5"),
    ("3", TypeError, "progress_every must be a whole number of accesses, not "
                     "str '3'"),
    (True, TypeError, "progress_every must be a whole number of accesses, not "
                      "bool True"),
    (None, TypeError, "progress_every must be a whole number of accesses, not "
                      "NoneType None"),
])
def test_a_bad_period_is_named(every, error, message):
    """A period that is not a whole number >= 1 is an error naming progress_every."""
    with pytest.raises(error) as info:
        simulate(KEYS, "lru", 2, "plain", progress=print, progress_every=every)
    assert str(info.value) == message


def test_a_numpy_period_is_a_period():
    """A numpy integer is accepted as progress_every."""
    assert calls(KEYS, np.int64(4)) == [4, 8, 10]


def test_progress_that_is_not_callable_is_named():
    """progress must be callable: TypeError naming it and the type given."""
    with pytest.raises(TypeError) as info:
        simulate(KEYS, "lru", 2, "plain", progress=5)
    assert str(info.value) == "progress must be callable, not int"
