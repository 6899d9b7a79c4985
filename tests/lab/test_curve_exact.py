"""Exact miss-ratio curves in one pass (``engine.sim.curve``, xc_curve.c): every
point equals the simulator's replay at that size and the oracle's curve, for
LRU and Belady, plain and step mode, global and per-layer capacity, on both
shipped traces and on generated ones; hand-computed curves; misuse; and every
allocation failing cleanly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import REAL, real_trace
from xcache import engine
from xcache.engine import _lib, alloc
from xcache.engine.sim import CURVE_POLICIES, curve, simulate
from xcache.faults.loops import Baseline, alloc_hooks, countdown
from xcache.oracle.curves import largest_step, trace_curve
from xcache.oracle.sim import simulate as oracle_simulate
from xcache.oracle.traces import Trace

MODES = ("plain", "step")


def sim_misses(trace, policy: str, slots: int, mode: str,
               per_layer: bool = False) -> int:
    """The simulator's misses at one size, or -1 where it refuses the size."""
    try:
        return simulate(trace, policy, slots, mode, per_layer)["misses"]
    except engine.MisuseError as exc:
        assert "largest step" in str(exc)
        return -1


def sizes_to_check(w: int) -> list[int]:
    """Every size up to 24, every 7th after it, and both ends of the working set."""
    return sorted({*range(1, min(w, 24) + 1), *range(25, w + 1, 7), w - 1, w})


@pytest.mark.parametrize("name", sorted(REAL))
def test_curve_equals_the_oracles_on_the_shipped_traces(name):
    """C curve == oracle curve at every size: both policies, modes, capacities."""
    trace = real_trace(name)
    for policy in CURVE_POLICIES:
        for mode in MODES:
            for per_layer in (False, True):
                ours = curve(trace, policy, mode, per_layer)
                want = trace_curve(trace, policy, mode, per_layer)
                assert np.array_equal(ours, want), (policy, mode, per_layer)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("policy", CURVE_POLICIES)
@pytest.mark.parametrize("name", sorted(REAL))
def test_curve_equals_the_simulator_at_many_sizes(name, policy, mode):
    """Each checked size (all up to 24, every 7th, the working set's ends) is the
    simulator's replay at that size; past the working set only first accesses miss."""
    trace = real_trace(name)
    m = curve(trace, policy, mode)
    w = len(np.unique(trace.keys()))
    assert len(m) == w
    for c in sizes_to_check(w):
        assert m[c - 1] == sim_misses(trace, policy, c, mode), c
    assert sim_misses(trace, policy, w + 5, mode) == m[-1] == w
    refused = int(np.count_nonzero(m == -1))
    assert refused == (trace.top_k - 1 if mode == "step" else 0)
    assert np.all(np.diff(m[refused:]) <= 0)  # a stack algorithm: never worse


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(REAL))
def test_per_layer_curve_equals_the_simulator_at_every_size(name, mode):
    """Per-layer capacity: every size 1..experts is the simulator's replay."""
    trace = real_trace(name)
    for policy in CURVE_POLICIES:
        m = curve(trace, policy, mode, per_layer=True)
        assert len(m) == max(len(np.unique(trace.expert[trace.layer == g]))
                             for g in np.unique(trace.layer))
        got = [sim_misses(trace, policy, c, mode, True) for c in range(1, len(m) + 1)]
        assert m.tolist() == got, policy


def test_golden_points_of_the_shipped_traces():
    """The recorded plain-mode misses (libCacheSim's too) are points of the curves."""
    for name, sizes in REAL.items():
        trace = real_trace(name)
        curves = {p: curve(trace, p, "plain") for p in CURVE_POLICIES}
        for size, golden in sizes.items():
            for policy, misses in golden.items():
                if policy in curves:
                    m = curves[policy]
                    assert m[min(size, len(m)) - 1] == misses, (name, policy, size)


def one_layer(*steps: list[int]) -> Trace:
    """A one-layer trace: step t (token t) uses the experts listed."""
    return Trace.from_steps([(t, 0, s) for t, s in enumerate(steps)], 1, 8)


def test_curves_by_hand():
    """a b c a b: LRU misses 5 5 3, Belady 5 4 3.  Steps [a] [b c] [a] [c] [b]:
    plain Belady 6 4 3; step mode refuses 1 slot and Belady may not evict b for c
    at 2 slots (5 misses, as LRU's 5)."""
    plain = one_layer([0], [1], [2], [0], [1])
    assert curve(plain, "lru", "plain").tolist() == [5, 5, 3]
    assert curve(plain, "belady", "plain").tolist() == [5, 4, 3]
    steps = one_layer([0], [1, 2], [0], [2], [1])
    assert curve(steps, "belady", "plain").tolist() == [6, 4, 3]
    assert curve(steps, "belady", "step").tolist() == [-1, 5, 3]
    assert curve(steps, "lru", "step").tolist() == [-1, 5, 3]
    assert curve(np.array([7, 7, 7]), "lru", "plain").tolist() == [1]
    assert curve(np.zeros(0, np.int64), "belady", "plain").tolist() == []


@st.composite
def traces(draw) -> Trace:
    """Small routing traces: 1-3 layers, 2-7 experts, steps of 1..k distinct experts."""
    n_layers = draw(st.integers(1, 3))
    n_experts = draw(st.integers(2, 7))
    k = draw(st.integers(1, min(3, n_experts)))
    steps = []
    for t in range(draw(st.integers(1, 25))):
        for layer in range(n_layers):
            if draw(st.booleans()) or layer == 0:
                experts = st.lists(st.integers(0, n_experts - 1), min_size=1,
                                   max_size=k, unique=True)
                steps.append((t, layer, draw(experts)))
    return Trace.from_steps(steps, n_layers, n_experts)


@settings(max_examples=120, deadline=None)
@given(trace=traces(), mode=st.sampled_from(MODES), per_layer=st.booleans())
def test_generated_traces_every_size_three_ways(trace, mode, per_layer):
    """C curve, oracle curve and the oracle's own replay agree at every size."""
    for policy in CURVE_POLICIES:
        m = curve(trace, policy, mode, per_layer)
        assert np.array_equal(m, trace_curve(trace, policy, mode, per_layer)), policy
        for c in range(1, len(m) + 1):
            if mode == "step" and c < trace.top_k:
                assert m[c - 1] == -1
                continue
            want = oracle_simulate(trace, policy, c, mode, per_layer).misses
            assert m[c - 1] == want, (policy, c)


def test_largest_step_is_what_step_mode_refuses_below():
    """The refused sizes are those below the most distinct keys of one step."""
    keys = np.array([1, 2, 2, 3, 1, 4, 5, 6])
    starts = np.array([1, 0, 0, 1, 0, 1, 0, 0])
    assert largest_step(keys, starts) == 3
    m = curve(keys, "belady", "step", step_starts=starts)
    assert m[:2].tolist() == [-1, -1] and m[2] >= 0
    with pytest.raises(engine.MisuseError, match="largest step"):
        simulate(keys, "belady", 2, "step", step_starts=starts)
    assert simulate(keys, "belady", 3, "step", step_starts=starts)["misses"] == m[2]


def test_misuse():
    """Another policy or mode is ValueError; the C call names each bad argument."""
    with pytest.raises(ValueError, match="lru"):
        curve(np.array([1, 2]), "fifo", "plain")
    with pytest.raises(ValueError, match="mode"):
        curve(np.array([1, 2]), "lru", "both")
    ffi, lib = _lib.ffi(), _lib.lib()
    keys = ffi.new("uint32_t[]", [1, 9])
    misses = ffi.new("uint64_t[]", 4)
    out = ffi.new("xc_curve_result *")
    opts = ffi.new("xc_curve_opts *")
    opts.n_keys, opts.mode = 4, lib.XC_SIM_PLAIN
    assert lib.xc_curve_run(opts, keys, ffi.NULL, 2, misses, 4, out) == lib.XC_E_MISUSE
    assert _lib.last_error()[1] == 1
    assert _lib.last_error()[4] == "curve: access 1 has key 9 >= n_keys 4"
    spec = ffi.new("char[]", b"arc")
    opts.policy = spec
    assert lib.xc_curve_run(opts, keys, ffi.NULL, 1, misses, 4, out) == lib.XC_E_MISUSE
    assert "'arc' has no one-pass curve" in _lib.last_error()[4]
    opts.policy = ffi.NULL
    opts.mode = lib.XC_SIM_STEP  # step mode needs the step flags
    assert lib.xc_curve_run(opts, keys, ffi.NULL, 1, misses, 4, out) == lib.XC_E_MISUSE
    opts.mode = lib.XC_SIM_PLAIN
    for args in ((ffi.NULL, keys, ffi.NULL, 1, misses, 4, out),
                 (opts, keys, ffi.NULL, 1, ffi.NULL, 4, out),
                 (opts, keys, ffi.NULL, 1, misses, 4, ffi.NULL)):
        assert lib.xc_curve_run(*args) == lib.XC_E_MISUSE
        assert _lib.last_error()[4] == "curve: NULL options, result, keys or misses"
    # NULL misses with no sizes asked for: the counts alone
    assert lib.xc_curve_run(opts, keys, ffi.NULL, 1, ffi.NULL, 0, out) == 0
    assert (out.requests, out.compulsory, out.working_set,
            out.min_slots) == (1, 1, 1, 1)


@pytest.mark.parametrize("policy", CURVE_POLICIES)
@pytest.mark.parametrize("per_layer", [False, True])
def test_every_allocation_failing_is_a_clean_out_of_memory(policy, per_layer):
    """With allocation N failing: OutOfMemoryError or the undisturbed curve, no leak."""
    rng = np.random.default_rng(5)
    data = (np.repeat(np.arange(40), 4), np.tile([0, 0, 1, 1], 40),
            rng.integers(0, 6, size=160), 6)
    want = curve(data, policy, "step", per_layer)
    base = Baseline.now()

    def check(run) -> None:
        if run.error is not None:
            assert type(run.error) is engine.OutOfMemoryError, run.error
            assert "memory" in str(run.error)
        else:
            assert np.array_equal(run.result, want)
        assert Baseline.now() == base

    arm, disarm = alloc_hooks()
    runs = countdown(lambda: curve(data, policy, "step", per_layer), arm, disarm,
                     check, 40, allowed=(engine.OutOfMemoryError,))
    assert len(runs) >= 5 and runs[-1].error is None
    assert alloc.stats().live == base.live
