"""The prefetch lab's predictors and measures, hand-computed on a tiny trace.

The trace has 2 layers of 4 experts, top-2, six tokens; the first three
train, the last three test.  The cache has 3 slots under LRU and replays
the test steps in step mode from empty:

    step  token layer route  resident before  missed
    s0    3     0     (0,3)  {}               (0,3)
    s1    3     1     (2,0)  {}               (2,0)   evicts (0,0)
    s2    4     0     (3,1)  {3}              (1,)    evicts (1,2)
    s3    4     1     (1,2)  {0}              (1,2)   evicts (1,0), (0,3)
    s4    5     0     (0,1)  {1}              (0,1)   (0,0) evicts (0,1)
    s5    5     1     (2,3)  {2}              (3,)

10 misses: 7 first-time, 3 reloads ((1,2) after 1 token, (0,0) after 2,
(0,1) after 1).
"""

from __future__ import annotations

import pytest

from xcache.engine.sim import simulate
from xcache.lab.predict.evaluate import (
    measure,
    predictions,
    replay_model,
    split_steps,
    steps_of,
    trace_facts,
)
from xcache.lab.predict.predictors import PREDICTORS, Step, make_predictor
from xcache.oracle.traces import Trace

ROUTES = [(0, 0, (0, 1)), (0, 1, (2, 3)), (1, 0, (0, 2)), (1, 1, (2, 3)),
          (2, 0, (1, 0)), (2, 1, (3, 1)), (3, 0, (0, 3)), (3, 1, (2, 0)),
          (4, 0, (3, 1)), (4, 1, (1, 2)), (5, 0, (0, 1)), (5, 1, (2, 3))]


def tiny() -> Trace:
    """The module's six-token trace."""
    return Trace.from_steps(ROUTES, n_layers=2, n_experts=4, name="tiny")


def parts() -> tuple[list[Step], list[Step], dict[int, int]]:
    """Train and test steps of the tiny trace (split 0.5) and its token sequences."""
    steps, seq = steps_of(tiny())
    train, test = split_steps(steps, 6, 0.5)
    return train, test, seq


def base_run() -> dict:
    """The no-prefetch replay of the test steps: 3 slots, LRU."""
    _, test, _ = parts()
    return replay_model(test, 2, 4, 2, 3, "lru")


def test_steps_and_split():
    """The split gives tokens 0-2 to training and 3-5 to the test."""
    train, test, _ = parts()
    assert [(s.token, s.layer) for s in train] == [(t, layer) for t in range(3)
                                                    for layer in range(2)]
    assert test[0] == Step(3, 0, (0, 3))
    assert len(test) == 6


def test_no_prefetch_replay_is_the_hand_computed_one():
    """Residency and misses per step are the docstring's, and the C simulator agrees."""
    base = base_run()
    assert [sorted(r) for r in base["resident"]] == [[], [], [3], [0], [1], [2]]
    assert base["missed"] == [(0, 3), (2, 0), (1,), (1, 2), (0, 1), (3,)]
    assert base["stats"]["misses"] == 10
    _, test, _ = parts()
    sub = Trace.from_steps([(s.token, s.layer, s.experts) for s in test], 2, 4)
    assert simulate(sub, "lru", 3, "step")["misses"] == 10


EXPECTED = {
    # predictions per test step, then correct, predicted, predicted misses,
    # speculative reads, useful reads (of 12 routed experts, 10 misses)
    "previous": ([[], [], [0, 3], [2, 0], [3, 1], [1, 2]], 4, 8, 2, 4, 1),
    "popularity": ([[0, 1], [3, 2]] * 3, 8, 12, 7, 10, 6),
    "ewma": ([[0, 1], [3, 1], [0, 3], [2, 0], [3, 1], [2, 1]], 5, 12, 3, 8, 2),
    "pair": ([[], [3, 2], [], [3, 1], [], [3, 2]], 4, 6, 3, 5, 3),
    "oracle": ([[0, 3], [2, 0], [3, 1], [1, 2], [0, 1], [2, 3]], 12, 12, 10, 9, 9),
}


@pytest.mark.parametrize("name", list(PREDICTORS))
def test_predictor_measures_are_hand_computed(name):
    """Each predictor's predictions, route recall, precision and demand-miss recall."""
    train, test, _ = parts()
    preds = predictions(make_predictor(name, 2, 4, 2), train, test)
    want, correct, predicted, pmiss, spec, useful = EXPECTED[name]
    assert preds == want
    base = base_run()
    m = measure(test, preds, base["resident"], base["missed"])
    assert m == {"predicted": predicted, "correct": correct, "routed": 12,
                 "route_recall": correct / 12, "precision": correct / predicted,
                 "demand_misses": 10, "predicted_misses": pmiss,
                 "demand_miss_recall": pmiss / 10, "spec_reads": spec,
                 "useful_reads": useful, "spec_precision": useful / spec}


def test_measures_of_the_first_k():
    """With k = 1 only each prediction's first expert counts."""
    train, test, _ = parts()
    preds = predictions(make_predictor("popularity", 2, 4, 2), train, test)
    base = base_run()
    m = measure(test, preds, base["resident"], base["missed"], 1)
    # [0] at layer 0 and [3] at layer 1: routes hold 0 at s0, s4; 3 at s5
    assert (m["predicted"], m["correct"], m["predicted_misses"]) == (6, 3, 3)


def test_ewma_alpha_changes_its_ranking():
    """ewma:alpha=1 is the previous route, ranked by expert id."""
    train, test, _ = parts()
    preds = predictions(make_predictor("ewma:alpha=1", 2, 4, 2), train, test)
    assert preds[:2] == [[0, 1], [1, 3]]


def test_trace_facts_are_hand_computed():
    """Overlap overall and by rank, reload distances and miss kinds of the test part."""
    _, test, seq = parts()
    facts = trace_facts(test, seq, base_run())
    # pairs (t4,L0)/(t3,L0): (3,1) vs (0,3) -> 1/2; (t4,L1): (1,2) vs (2,0)
    # -> 1/2; (t5,L0): (0,1) vs (3,1) -> 1/2; (t5,L1): (2,3) vs (1,2) -> 1/2
    assert facts == {"adjacent_pairs": 4, "adjacent_overlap": 0.5,
                     "overlap_by_rank": [0.5, 0.5],
                     "reload_distance": {"q1": 1.0, "median": 1.0, "q3": 1.5},
                     "misses": 10, "first_time_misses": 7, "reload_misses": 3}


@pytest.mark.parametrize("spec, message", [
    ("nope", "unknown predictor 'nope' (known: previous, popularity, ewma, "
             "pair, oracle)"),
    ("pair:alpha=1", "predictor 'pair:alpha=1': bad parameter 'alpha=1' "
                     "(valid parameters of pair: none)"),
    ("ewma:beta=1", "predictor 'ewma:beta=1': bad parameter 'beta=1' (valid "
                    "parameters of ewma: alpha=F)"),
    ("ewma:alpha=0", "predictor 'ewma:alpha=0': alpha must be a number in (0, 1]"),
    ("ewma:alpha=x", "predictor 'ewma:alpha=x': alpha must be a number in (0, 1]"),
])
def test_bad_predictor_specs(spec, message):
    """A bad spec is ValueError naming it and what is valid."""
    with pytest.raises(ValueError) as e:
        make_predictor(spec, 2, 4, 2)
    assert str(e.value) == message


@pytest.mark.parametrize("fraction, message", [
    (0.1, "--split: 0.1 of 6 tokens leaves no token to train on"),
    (1.0, "--split: 1.0 of 6 tokens leaves no token to test"),
])
def test_split_leaving_a_part_empty(fraction, message):
    """A split whose train or test part is empty is refused, naming --split."""
    steps, _ = steps_of(tiny())
    with pytest.raises(ValueError) as e:
        split_steps(steps, 6, fraction)
    assert str(e.value) == message
