"""The small machine and schedule runner the time lab's model tests share."""

from __future__ import annotations

from xcache.lab.predict.predictors import Step
from xcache.lab.timing.events import Schedule, run_schedule
from xcache.lab.timing.model import Compute, Machine, Tier
from xcache.lab.timing.outcomes import Outcomes

MS = 1e-3


def machine(share: float = 0.0) -> Machine:
    """The module's machine, with ``share`` of reads from the page cache."""
    return Machine(device=Tier((1, 2), (1 * MS, 1 * MS), (1e6, 1e6)),
                   page_cache=Tier((1,), (0.5 * MS - 1e-6,), (1e9,)),
                   compute=Compute(expert_s=5 * MS, layer_s=10 * MS),
                   page_cache_share=share, expert_bytes=1000)


ONE = [Step(0, 0, (0, 1))]
BOTH_MISS = Outcomes([(True, True)], [()], {})


def timed(schedule: Schedule, steps=ONE, out=BOTH_MISS, m=None) -> dict:
    """run_schedule on the module's machine, times in ms."""
    r = run_schedule(steps, out, schedule, m or machine(), n_layers=2)
    return {k: round(r[k] / MS, 9) for k in
            ("s_per_token", "compute_s", "wait_s", "hidden_s", "wasted_s")} | {
        "reads": r["reads"], "max_qd": r["max_qd"], "per_layer": r["per_layer"]}


TWO = [Step(0, 0, (0,)), Step(0, 1, (5,))]
