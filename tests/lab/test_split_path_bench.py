"""bench/split_path.py: the split-path what-if counts the same misses at every T."""

from __future__ import annotations

import pytest

from bench.split_path import (
    Run,
    fixture_spec,
    main,
    matmul_model,
    misses_per_step,
    open_cache,
    plan_of,
    what_if,
)
from tests.helpers import real_trace
from xcache import fixtures
from xcache.engine import Container
from xcache.oracle.sim import simulate
from xcache.oracle.traces import Trace

TOKENS = 12


def mixtral_layers_0_3() -> Trace:
    """The real Mixtral trace cut to its first four layers."""
    full = real_trace("mixtral8x7b_humaneval.jsonl")
    m = full.layer < 4
    return Trace(full.token[m], full.layer[m], full.expert[m], 4, 8, 2,
                 full.sequence[m], "mixtral-0-3")


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """The Mixtral trace's layers 0-3 and a small container of that shape."""
    trace = mixtral_layers_0_3()
    out = tmp_path_factory.mktemp("split") / "model"
    fixtures.generate(fixture_spec(trace, 16, 8), out)
    cont = Container(str(out))
    yield trace, cont
    cont.close()


def test_plan_of_groups_steps_by_token_and_layer(live):
    """The plan holds the trace's first tokens as (layer, experts) steps."""
    trace, _ = live
    plan = plan_of(trace, TOKENS)
    assert len(plan) == TOKENS
    assert plan[0] == [(0, [6, 5]), (1, [6, 2]), (2, [7, 3]), (3, [3, 2])]
    assert sum(len(e) for steps in plan for _, e in steps) == 96


@pytest.mark.parametrize("policy", ["lru", "lfu"])
def test_misses_identical_at_every_threshold(live, policy):
    """get loop, T=1 and T=2 count the same misses and hits, exactly."""
    trace, cont = live
    plan = plan_of(trace, TOKENS)
    best = what_if(cont, trace, plan, matmul_model(4), slots=12, policy=policy,
                   io_threads=1, rounds=2)
    assert list(best) == ["get", "T=1", "T=2"]
    expected = {"lru": (66, 30), "lfu": (67, 29)}[policy]
    first = trace.token < TOKENS
    sim = simulate(Trace(trace.token[first], trace.layer[first],
                         trace.expert[first], 4, 8, 2), policy, 12, mode="step")
    assert (sim.misses, sim.hits) == expected  # the oracle's step mode agrees
    assert {a: (r.misses, r.hits) for a, r in best.items()} == dict.fromkeys(
        best, expected)
    assert all(isinstance(r, Run) and r.device_loads + r.page_cache_loads
               + r.unknown_loads == r.misses for r in best.values())


def test_steps_split_per_threshold(live):
    """Each step's misses in the get loop sum to the arms' misses."""
    trace, cont = live
    plan = plan_of(trace, TOKENS)
    step = misses_per_step(open_cache(cont, trace, slots=12, policy="lru",
                                      io_threads=0, split=1), plan)
    assert len(step) == 48
    assert sum(step) == 66
    assert [sum(m >= t for m in step) for t in (1, 2)] == [44, 22]  # 22 + 2 * 22 = 66


@pytest.mark.nosan
def test_queue_policy_difference_is_named(tmp_path):
    """Under s3fifo a stream's victims differ: the check names the arms."""
    trace = real_trace("mixtral8x7b_humaneval.jsonl")
    fixtures.generate(fixture_spec(trace, 16, 8), tmp_path / "m")
    cont = Container(str(tmp_path / "m"))
    try:
        with pytest.raises(AssertionError) as e:
            what_if(cont, trace, plan_of(trace, 100), lambda x: None, slots=64,
                    policy="s3fifo", io_threads=1)
    finally:
        cont.close()
    assert str(e.value).startswith(
        "misses differ from the get loop's 4611 misses, 1773 hits: T=1: ")


@pytest.mark.parametrize(("args", "message"), [
    (["--tokens", "0"], "--tokens must be a positive integer, got '0'"),
    (["--slots", "x"], "--slots must be a positive integer, got 'x'"),
    (["--trace", "nope.jsonl"], "--trace: no file 'nope.jsonl'"),
    (["--policy", "arc"], "invalid choice: 'arc'"),
])
def test_bad_options_are_refused(args, message, capsys):
    """A bad option exits 2 with an error naming it."""
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
