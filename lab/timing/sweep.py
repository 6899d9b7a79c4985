"""The time lab's sweep: every configuration, one cell per cache outcome.

A *configuration* is a cache (policy, slots), a lookahead (predictor and
budget, or none), a schedule (readers, queue depth, split threshold) and a
machine (the model file, with any of expert seconds, page-cache share or
expert bytes swept).  The schedule and the machine change time but no
counter, so every configuration of one (policy, slots, predictor) shares
one :func:`~lab.timing.outcomes.replay_outcomes`: that is a *cell*, run on
any executor by :func:`lab.sweep.run_cells` (a process pool, threads, dask,
``--scheduler``), which ships the steps once.  A cell reports its progress
in steps replayed: the outcome replay, then each configuration's.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import asdict, dataclass
from typing import Any

from xcache.lab.cluster import Reporter
from xcache.lab.predict.evaluate import predictions
from xcache.lab.predict.predictors import Step, make_predictor
from xcache.lab.timing.events import Schedule, run_schedule
from xcache.lab.timing.model import Machine
from xcache.lab.timing.outcomes import replay_outcomes

#: Columns of time.csv, in order.
COLUMNS = ("config", "policy", "slots", "threads", "depth", "split", "predictor",
           "budget", "expert_bytes", "expert_s", "layer_s", "access_s",
           "page_cache_share", "requests", "hits", "misses", "miss_ratio",
           "spec_issued", "spec_used", "s_per_token", "tok_per_s", "compute_s",
           "wait_s", "hidden_s", "wasted_s", "io_s", "reads", "spec_unused",
           "max_qd_device", "max_qd_page_cache")


@dataclass(frozen=True)
class Grid:
    """The values each swept parameter takes."""

    policies: tuple[str, ...] = ("lru",)
    slots: tuple[int, ...] = (64,)
    threads: tuple[int, ...] = (0, 1, 2)
    depths: tuple[int, ...] = (64,)
    splits: tuple[int, ...] = (1, 2, 3, 4)
    predictors: tuple[str, ...] = ("", "previous", "oracle")
    budget: int = 0
    expert_s: tuple[float | None, ...] = (None,)
    page_cache_share: tuple[float | None, ...] = (None,)

    def schedules(self, predictor: str) -> list[Schedule]:
        """The schedules of one lookahead: sync once, then readers x depth x split."""
        out = []
        for n in self.threads:
            if n == 0:
                if not predictor:
                    out.append(Schedule())
                continue
            for d, t in itertools.product(self.depths, self.splits):
                out.append(Schedule(n, d, t, predictor, self.budget))
        return out

    def machines(self, base: Machine) -> list[Machine]:
        """``base`` with each swept expert seconds and page-cache share."""
        return [base.with_(expert_s=e, page_cache_share=p)
                for e, p in itertools.product(self.expert_s,
                                              self.page_cache_share)]

    def cells(self) -> list[tuple[str, int, str]]:
        """The (policy, slots, predictor) cells, in report order."""
        return [(pol, n, pred) for pol in self.policies for n in self.slots
                for pred in self.predictors if self.schedules(pred)]


def cell_units(grid: Grid, predictor: str, n_steps: int, n_machines: int) -> int:
    """Steps one cell reports: its outcome replay and each configuration's."""
    return n_steps * (1 + len(grid.schedules(predictor)) * n_machines)


def time_cell(shared: dict[str, Any], policy: str, slots: int, predictor: str,
              reporter: Reporter, index: int) -> list[dict[str, Any]]:
    """Every configuration of one (policy, slots, predictor): one row each.

    Top-level, so process pools and dask workers load it by name.
    """
    steps: list[Step] = shared["test"]
    grid: Grid = shared["grid"]
    machines: list[Machine] = shared["machines"]
    n_layers, n_experts = shared["n_layers"], shared["n_experts"]
    top_k = shared["top_k"]
    budget = grid.budget or top_k
    plan = None
    if predictor:
        pred = make_predictor(predictor, n_layers, n_experts, top_k)
        plan = predictions(pred, shared["train"], steps)
    out = replay_outcomes(steps, n_layers, n_experts, top_k, slots, policy,
                          plan, budget if plan is not None else 0)
    done = len(steps)
    reporter(index, done)
    c = out.counters
    rows = []
    for machine in machines:
        for sch in grid.schedules(predictor):
            if predictor:
                sch = Schedule(sch.threads, sch.depth, sch.split, predictor, budget)
            t = run_schedule(steps, out, sch, machine, n_layers, shared["n_tokens"])
            done += len(steps)
            reporter(index, done)
            comp = asdict(machine.compute)
            rows.append({
                "config": f"{policy} {slots} {sch.name}", "policy": policy,
                "slots": slots, "threads": sch.threads, "depth": sch.depth,
                "split": sch.split, "predictor": predictor or "none",
                "budget": sch.budget, "expert_bytes": machine.expert_bytes,
                **comp, "page_cache_share": machine.page_cache_share,
                "requests": c["requests"], "hits": c["hits"],
                "misses": c["misses"],
                "miss_ratio": c["misses"] / c["requests"] if c["requests"] else 0.0,
                "spec_issued": c.get("spec_issued", 0),
                "spec_used": c.get("spec_used", 0),
                **{k: t[k] for k in ("s_per_token", "compute_s", "wait_s",
                                     "hidden_s", "wasted_s", "io_s", "reads",
                                     "spec_unused")},
                "tok_per_s": 1.0 / t["s_per_token"] if t["s_per_token"] else 0.0,
                "max_qd_device": t["max_qd"]["device"],
                "max_qd_page_cache": t["max_qd"]["page_cache"],
                "per_layer": t["per_layer"]})
    return rows


def run_time_sweep(shared: dict[str, Any], executor: Executor | None,
                   quiet: bool = True) -> list[dict[str, Any]]:
    """Every cell of ``shared["grid"]`` on ``executor``; rows in cell order."""
    from xcache.lab.sweep import run_cells  # noqa: PLC0415

    grid: Grid = shared["grid"]
    cells = grid.cells()
    n = len(shared["test"])
    sizes = [cell_units(grid, pred, n, len(shared["machines"]))
             for _, _, pred in cells]
    results = run_cells(executor, time_cell, [shared], cells, sizes, quiet,
                        unit="step")
    return [row for rows in results for row in rows]


def steps_window(steps: Sequence[Step], tokens: int | None,
                 train_fraction: float) -> tuple[list[Step], list[Step], int]:
    """(train steps, timed steps, timed tokens) of the first ``tokens`` tokens."""
    order = list(dict.fromkeys(st.token for st in steps))
    if tokens is not None:
        keep = set(order[:tokens])
        steps = [st for st in steps if st.token in keep]
        order = order[:tokens]
    cut = int(train_fraction * len(order))
    if train_fraction and (cut < 1 or cut >= len(order)):
        raise ValueError(f"--train-fraction: {train_fraction} of {len(order)} "
                         "tokens leaves no token to train on or none to time")
    train_tokens = set(order[:cut])
    train = [st for st in steps if st.token in train_tokens]
    test = [st for st in steps if st.token not in train_tokens]
    return train, test, len(order) - cut
