"""The what-if's simulated cache equals the live cache, counter for counter.

The live ``engine.ExpertCache`` over mixtral-mini (layers 0-3, 8 experts,
top-2) is driven by :func:`lab.predict.evaluate.drive` -- the
predictor's speculative reads through ``prefetch(keys, speculative=True)``,
then the step's ``get``s -- on the real Mixtral trace's layers 0-3, which
have that very shape.  Its counters, and each step's misses and reads, must
equal the replay of :class:`oracle.cache.CacheModel` the lab reports.
"""

from __future__ import annotations

import pytest

from tests.helpers import load_preset, open_preset, real_trace
from xcache import engine
from xcache.lab.predict.evaluate import (
    drive,
    predictions,
    replay_model,
    split_steps,
    steps_of,
)
from xcache.lab.predict.predictors import PREDICTORS, make_predictor
from xcache.oracle.traces import Trace

COUNTERS = ("requests", "hits", "misses", "evictions", "spec_issued",
            "spec_loads", "spec_used", "spec_evicted_unused",
            "spec_unused_resident")


def mixtral_layers_0_3() -> Trace:
    """The real Mixtral trace cut to its first four layers."""
    full = real_trace("mixtral8x7b_humaneval.jsonl")
    m = full.layer < 4
    return Trace(full.token[m], full.layer[m], full.expert[m], 4, 8, 2,
                 full.sequence[m], "mixtral-0-3")


@pytest.fixture(scope="module")
def container():
    """mixtral-mini's container, opened once for the module."""
    return open_preset(load_preset("mixtral-mini"))


@pytest.mark.parametrize("policy", ["lru", "lfu", "s3fifo", "arc"])
def test_live_equals_simulated(container, policy):
    """Every predictor, budgets 1 and 2, 5 and 9 slots: live counters = the model's."""
    trace = mixtral_layers_0_3()
    steps, _ = steps_of(trace)
    train, test = split_steps(steps, trace.n_tokens, 0.5)
    kwargs = load_preset("mixtral-mini").cache_kwargs()
    seen = dict.fromkeys(("spec_issued", "spec_used", "spec_evicted_unused"), 0)
    for name in PREDICTORS:
        plan = predictions(make_predictor(name, 4, 8, 2), train, test)
        for slots in (5, 9):
            for budget in (1, 2):
                sim = replay_model(test, 4, 8, 2, slots, policy, plan, budget)
                cache = engine.ExpertCache(container, **kwargs, n_slots=slots,
                                           policy=policy, batch_threads=1)
                live = drive(cache, test, lambda x: x.release(), plan, budget)
                cache.check()
                cache.close()
                where = (name, slots, budget)
                assert live["missed"] == sim["missed"], where
                assert live["issued"] == sim["issued"], where
                assert ({c: live["stats"][c] for c in COUNTERS}
                        == {c: sim["stats"][c] for c in COUNTERS}), where
                for c in seen:
                    seen[c] += sim["stats"][c]
    assert all(seen.values()), seen  # reads used, and reads evicted unused
