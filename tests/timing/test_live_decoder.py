"""The live decode loop makes the calls the model's outcomes assume (no timing).

Over a real container of the Mixtral trace's shape (tiny experts), every
schedule without lookahead -- synchronous, 1-2 readers, thresholds 1-2 --
ends with exactly the counters of :func:`lab.timing.outcomes.replay_outcomes`
(a stream counts as holding gets under LRU: docs/CACHE.md "stream").  With
an oracle lookahead on one reader the live cache issues the speculative
reads the outcomes planned (here, where no victim choice meets a read still
in flight; the validation bench reports any difference on longer runs).
"""

from __future__ import annotations

import pytest

from tests.helpers import real_trace
from xcache.engine import Container
from xcache.lab.predict.evaluate import steps_of
from xcache.lab.timing.events import Schedule
from xcache.lab.timing.live import LiveDecoder, open_live_cache
from xcache.lab.timing.outcomes import TEMPLATE, _container, replay_outcomes
from xcache.lab.timing.sweep import steps_window


@pytest.fixture(scope="module")
def mixtral():
    """The Mixtral trace's first 10 tokens and a container of its shape."""
    tr = real_trace("mixtral8x7b_humaneval.jsonl")
    steps, _ = steps_of(tr)
    _, test, _ = steps_window(steps, 10, 0.0)
    cont: Container = _container(tr.n_layers, tr.n_experts)
    return tr, test, cont


@pytest.mark.parametrize("schedule", [Schedule(0), Schedule(1), Schedule(2),
                                      Schedule(2, split=2), Schedule(2, depth=1)])
@pytest.mark.parametrize("slots", [3, 40])
def test_live_counters_are_the_models(mixtral, schedule, slots):
    """requests, hits, misses and evictions of the live loop equal the outcomes'."""
    tr, steps, cont = mixtral
    out = replay_outcomes(steps, tr.n_layers, tr.n_experts, tr.top_k, slots, "lru")
    cache = open_live_cache(cont, schedule, slots, "lru", tr.n_layers,
                            tr.n_experts, tr.top_k, TEMPLATE, ("w",))
    dec = LiveDecoder(cache, steps, schedule, out.spec, 0.0, 0.0)
    dec.run(0, len(steps) // 2)
    dec.run(len(steps) // 2, len(steps))
    live = dec.close()
    for k in ("requests", "hits", "misses", "evictions"):
        assert int(live[k]) == out.counters[k], k


def test_lookahead_issues_the_planned_reads(mixtral):
    """An oracle lookahead with one reader: the live cache issues the plan's reads."""
    tr, steps, cont = mixtral
    plan = [st.experts for st in steps]
    out = replay_outcomes(steps, tr.n_layers, tr.n_experts, tr.top_k, 40, "lru",
                          plan, tr.top_k)
    sch = Schedule(1, predictor="oracle", budget=tr.top_k)
    cache = open_live_cache(cont, sch, 40, "lru", tr.n_layers, tr.n_experts,
                            tr.top_k, TEMPLATE, ("w",))
    dec = LiveDecoder(cache, steps, sch, out.spec, 0.0, 0.0)
    dec.run(0, len(steps))
    live = dec.close()
    assert int(live["requests"]) == out.counters["requests"]
    assert int(live["spec_issued"]) == out.counters["spec_issued"] > 0
