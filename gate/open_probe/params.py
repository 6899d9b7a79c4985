"""``open-params``: policy parameters at their ranges' ends, and slot budgets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from xcache.gate.open_probe.files import STRIDE
from xcache.gate.open_probe.probe import Probe, open_cache


def param_specs() -> list[str]:
    """Every spec open-params tries: each parameter of each policy at the
    range's ends, one past each, and wrong types; unknown names and keys."""
    from xcache.oracle.policies import POLICIES  # noqa: PLC0415

    top = 2**64 - 1
    values = ["0", "1", "2", "3", "4", "99", "100", "101", str(top),
              str(top + 1), "-1", "x", "", "1.5", " 1", "1 ", "0x3", "+1",
              "0" * 31 + "1", "0" * 32 + "1", "1e2"]
    specs = ["", "lru:", "LRU", "lru ", "belady", "s3fifo:", "s3fifo:,",
             "s3fifo:small=1,", "lfu:sample=1", "arc:x=1", "fifo:=1"]
    for name, params in POLICIES.items():
        specs.append(name)
        specs.append(f"{name}:nope=1")
        for k in params:
            specs += [f"{name}:{k}={v}" for v in values]
            specs.append(f"{name}:{k}")
            specs.append(f"{name}:{k}=1,{k}=0")
    return specs


def table_order() -> tuple[str, ...]:
    """The engine's policy table in its order (the order its "valid:" list
    shows; the oracle's registry is alphabetical), from the C library."""
    from xcache.engine import policy_table  # noqa: PLC0415

    return tuple(policy_table())


def valid_policies() -> str:
    """The oracle's policies and parameters as the engine lists them.

    The names come in the engine table's order; a policy of one side the
    other lacks is listed where it stands (the open-params check then
    fails on the specs that differ, naming them).
    """
    from xcache.oracle.policies import POLICIES  # noqa: PLC0415

    order = [n for n in table_order() if n in POLICIES]
    order += [n for n in POLICIES if n not in order]
    return ", ".join(n + (":" + ",".join(f"{k}=N" for k in POLICIES[n])
                          if POLICIES[n] else "") for n in order)


def oracle_verdict(spec: str) -> str | None:
    """The oracle parser's Misuse message for ``spec``, or None if it accepts.

    The list of an unknown policy's message is given in the engine's table
    order (:func:`valid_policies`).
    """
    from xcache.oracle.errors import Misuse  # noqa: PLC0415
    from xcache.oracle.policies import parse_policy, valid_specs  # noqa: PLC0415

    try:
        parse_policy(spec)
    except Misuse as e:
        msg = str(e)
        if msg.startswith("unknown policy "):
            head, sep, tail = msg.rpartition("; valid: ")
            assert sep and tail == valid_specs(), msg
            msg = f"{head}; valid: {valid_policies()}"
        return msg
    return None


def params(p: Probe) -> None:
    """Policy specs (cache and simulator) and budgets against their contracts."""
    cont = p.engine.Container(str(p.files.one))
    err_t = p.engine.EngineError
    try:
        for spec in param_specs():
            want = oracle_verdict(spec)
            sim_only = spec == "belady"
            faces: list[tuple[str, Callable[[], Any]]] = [
                ("simulate", lambda spec=spec: p.sim.simulate(
                    np.array([0, 1, 2, 0]), spec, 2, "plain"))]
            if not sim_only:
                faces.append(("ExpertCache", lambda spec=spec: open_cache(
                    p, cont, False, n_slots=3, top_k=1, policy=spec)))
            for face, op in faces:
                p.cases += 1
                try:
                    r = op()
                except err_t as e:
                    got: str | None = str(e)
                    if e.kind != "misuse":
                        got = f"{e.kind}: {e}"
                else:
                    got = None
                    if face == "ExpertCache":
                        r.close()
                if sim_only:
                    want = None  # the simulator's own policy
                if got != want:
                    p.fail(f"{face} policy={spec!r}: "
                           + ("accepted" if got is None else repr(got))
                           + ", oracle: "
                           + ("accepted" if want is None else repr(want)))
        budgets(p, cont)
    finally:
        cont.close()


def budget_message(top_k: int, *, n_slots: int | None = None,
                   budget_bytes: int | None = None) -> str:
    """xc_cache_open's XC_E_BUDGET message (its contract in xc.h)."""
    need = top_k + 1
    if n_slots is not None:
        return (f"cache budget too small: top_k {top_k} needs at least {need} "
                f"slots, n_slots gives {n_slots}; n_slots={need} or "
                f"budget_bytes={need * STRIDE} (stride {STRIDE} bytes) works")
    assert budget_bytes is not None
    return (f"cache budget too small: top_k {top_k} needs at least {need} "
            f"slots, budget_bytes={budget_bytes} holds "
            f"{budget_bytes // STRIDE} slots of {STRIDE} bytes; the smallest "
            f"budget_bytes that works is {need * STRIDE}")


def budgets(p: Probe, cont: Any) -> None:
    """top_k + 1 slots open; one slot, or one byte, less is XC_E_BUDGET."""
    err_t = p.engine.EngineError
    for top_k in (1, 2, 4):
        need = top_k + 1
        cases: list[tuple[dict[str, int], str | None]] = [
            ({"n_slots": need}, None),
            ({"n_slots": need - 1}, budget_message(top_k, n_slots=need - 1)),
            ({"budget_bytes": need * STRIDE}, None),
            ({"budget_bytes": need * STRIDE - 1},
             budget_message(top_k, budget_bytes=need * STRIDE - 1)),
        ]
        if top_k == 1:
            cases.append(({"n_slots": 0 + 1},
                          budget_message(1, n_slots=1)))
        for opts, want in cases:
            p.cases += 1
            try:
                c = open_cache(p, cont, False, top_k=top_k, **opts)
            except err_t as e:
                got = (e.kind, e.offset, e.layer, e.expert, str(e))
            else:
                got = None
                if c.n_slots != need:
                    got = ("opened", c.n_slots)
                c.close()
            exp = None if want is None else ("budget", None, None, None, want)
            if got != exp:
                p.fail(f"ExpertCache(top_k={top_k}, {opts}): {got}, not {exp}")
