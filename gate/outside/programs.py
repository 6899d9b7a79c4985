"""The seeded differential programs (gate/programs.py) against an outside cache.

A program is generated for the engine, which offers every operation; an
outside cache declares less.  :class:`Restrict` cuts each generated program
down to what the cache can take, by its declared capabilities:

- a program whose cache options or policy need a capability the cache
  lacks (``option:chunk_bytes``, ``policy:arc``, ...) is N/A, naming it;
- a step that needs one (``op:stream``, ``op:hold_layer``, ``op:trace``,
  ``fault:alloc``, ``fault:scattered`` ...) is left out, with every step
  that depends on it (a release of a hold never taken, the call a fault
  left out was to meet); the steps left out are counted by capability;
- ``pin`` and ``unpin`` need ``pins:flag`` (the op table's need): the
  judge of a cache whose pins are a flag plays flag pins
  (gate/outside/designs.py), so a program's nested pins judge it too;
- a fault (or a truncated shard) that may fail a read while every slot is
  taken -- the keys named so far and by the call it is for are more than
  the slots -- needs ``fault:evict_first``: whether the failed miss has
  evicted its victim is the cache's own choice.

The values every check compares (:data:`gate.programs.COMPARED`) that the
cache does not report are named N/A in each check's line, never compared
(the factory's ``partial_checks``).  :func:`row` sums the programs up as
one conformance row: PASS, FAIL with the first failure shrunk to a
scenario, or N/A naming what the cache lacks.  Nothing is skipped silently:
the row lists the programs run, the programs N/A and the steps left out.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from xcache.gate.backend_api import Capabilities, option_needs
from xcache.gate.containers import Target
from xcache.gate.operations import OPERATIONS, value_needs
from xcache.gate.programs import COMPARED, _rebuild, operations
from xcache.gate.steps import NotApplicable, cache_options, compile_steps

#: Steps that make the call after them fail a read (or an allocation).
FAILING = ("inject", "inject_alloc", "truncate")

#: Steps whose meaning in a program needs more than the op table says.
EXTRA_NEEDS: dict[str, tuple[str, ...]] = {}


class Restrict:
    """``restrict(program, target)`` for :func:`gate.programs.run_programs`.

    Returns the program cut down to the steps the cache can take, or the
    capabilities it lacks for the program as a whole.  ``left_out`` counts
    the steps left out by the first capability each lacked.
    """

    def __init__(self, caps: Capabilities) -> None:
        self.caps = caps
        self.left_out: Counter[str] = Counter()

    def __call__(self, program: dict[str, Any], target: Target
                 ) -> dict[str, Any] | list[str]:
        """The program the cache can run, or what it lacks for all of it."""
        opts = cache_options(program, target, dict(program["cache"]))
        lacks = self.caps.missing(option_needs(opts))
        if lacks:
            return lacks
        try:
            compiled = [s for s in compile_steps(program, target)
                        if s.get("op", "check") != "check"]
        except NotApplicable:
            return program  # run_one reports it as a SKIP with the reason
        kept, lacked = [], []
        ops = operations(program)
        seen: set[Any] = set()  # every key named so far: a bound on residents
        for i, (raw, step) in enumerate(zip(ops, compiled, strict=True)):
            op = step["op"]
            needs = [*OPERATIONS[op].needs_of(step), *step.get("needs", []),
                     *EXTRA_NEEDS.get(op, ())]
            seen |= set(raw.get("keys", []))
            if op in FAILING and i + 1 < len(ops) and len(
                    seen | set(ops[i + 1].get("keys", []))) > opts["n_slots"]:
                needs.append("fault:evict_first")  # a read may fail under pressure
            missing = self.caps.missing(needs)
            if missing:
                self.left_out[missing[0]] += 1
                lacked.append(missing[0])
            else:
                kept.append(raw)
        while kept:
            out = _rebuild(program, kept)
            if out is not None:
                return out
            # a release, unhold or stream step whose label was left out
            # (the rule of _rebuild): it goes too
            taken: set[str] = set()
            for i, st in enumerate(kept):
                label = str(st.get("label", ""))
                if st["op"] in ("hold", "hold_layer", "stream_open"):
                    taken.add(label)
                elif st["op"] in ("release", "unhold_many", "stream_next",
                                  "stream_rest"):
                    if label not in taken:
                        self.left_out[f"{st['op']} of a label left out"] += 1
                        del kept[i]
                        break
                    if st["op"] == "stream_rest":
                        taken.discard(label)
            else:
                break  # nothing found to leave out: give up on the program
        return list(dict.fromkeys(lacked)) or ["a program _rebuild refuses"]


def not_compared(caps: Capabilities) -> list[str]:
    """The compared values the cache does not report, with what each needs."""
    return [f"{k} ({', '.join(caps.missing(value_needs(k)))})"
            for k in COMPARED if caps.missing(value_needs(k))]


def row(report: Any, restrict: Restrict, shrunk: dict[str, Any] | None,
        first: str | None) -> dict[str, Any]:
    """The programs' conformance row from their report.

    ``first``: the first failing program's failing check and its numbers;
    ``shrunk``: that program shrunk, as a scenario with the oracle's values
    pinned.
    """
    passed = sum(1 for c in report.checks if c["passed"])
    failed = sum(1 for c in report.checks if not c["passed"])
    missing = list(dict.fromkeys(m for n in report.not_applicable
                                 for m in n["missing"]))
    verdict = "FAIL" if failed else "PASS" if passed else "N/A"
    out: dict[str, Any] = {
        "contract": "programs",
        "promise": "seeded programs over every operation the cache declares "
                   "match the oracle step by step",
        "verdict": verdict, "passed": passed, "failed": failed,
        "na": len(report.not_applicable), "first_failure": first,
        "missing": missing,
        "skipped": [s["scenario"] for s in report.skipped],
        "left_out": dict(sorted(restrict.left_out.items())),
        "not_compared": not_compared(restrict.caps)}
    if shrunk is not None:
        out["scenario"] = shrunk
    return out
