"""The contracts registry: every promise a scenario judges, by name.

A scenario file declares the contracts its checks judge (``contracts``, the
first its default; docs/SCENARIOS.md "The file"); a check step may name
another of them (``contract``) and give values it pins to others still
(``value_contracts``).  :data:`CONTRACTS` is the one list of their names and
meanings: the schema (:mod:`gate.schema`) refuses a name not in it, the
conformance report of an outside cache (:mod:`gate.outside.conformance`)
has one row per contract in this order, and docs/OUTSIDE_CACHES.md "The
contracts" lists them (tests/replay/test_contracts.py holds all three to
it).  This module imports nothing of the gate: every other reads it.
"""

from __future__ import annotations

from typing import Any

#: contract name -> what it promises, in one line (the report's order).
CONTRACTS: dict[str, str] = {
    "serial-reads": "byte-exact serial reads, misses under pressure",
    "batch-reads": "batch reads byte-exact",
    "batch-residents": "a batch never evicts a resident it names",
    "prefetch-not-hit": "a prefetch or batch load is not a demand hit",
    "counter-windows": "reset starts a new window of every counter",
    "adjusted-hit-rate": "adjusted hits discount prefetch first uses",
    "short-read": "a read ending early (end of file, a truncated shard) is "
                  "never published; the rest survives",
    "eintr": "interrupted and partial reads, and interrupted opens, are "
             "retried",
    "open-failures": "a file that will not open is reported, no descriptor "
                     "is kept, and a later open serves",
    "io-errors": "an I/O error publishes nothing",
    "key-bounds": "keys outside the layout are misuse and change nothing",
    "pins": "a pinned expert is never a victim; unpin frees it",
    "holds": "a held expert is never a victim; release gives it back, once",
    "policies": "every policy's counters on real routing",
    "reader-refusals": "a malformed container is refused at open",
    "replaced-file": "a file replaced while open keeps serving its bytes",
    "changed-file": "with verify, a file changed in place while open is "
                    "refused at the end of a load, by what stat shows",
    "allocation": "a refused allocation changes nothing",
    "direct-io": "O_DIRECT reads widened and checked",
    "streams": "streams yield every key once, in order",
    "victim-order": "a key named twice in a batch is touched once",
    "reads-under-way": "calls racing a read under way wait and are counted",
    "trace": "the access trace records every access",
    "invariant-check": "the cache's check names each broken invariant",
    "relations": "counters and residents agree with one another at every "
                 "check (a request is a hit or a miss, no more residents "
                 "than slots, no fewer bytes read than published)",
}

#: Values a backend may report that every check judges, whatever its step
#: (an outside cache's: gate/outside/backend.py), and the contract each
#: counts against wherever it fails: no scenario declares these contracts
#: for them.
VALUE_OWNERS: dict[str, str] = {"relations": "relations",
                                "held_changed": "holds"}

#: Contracts that rest on capabilities a check may be judged without: a
#: cache lacking any of them gets N/A for the whole contract, naming them,
#: rather than a PASS decided by the other values its checks pin (the
#: adjusted hit rate cannot be judged from invariants and prefetch loads,
#: nor the invariant check by the plain checks between the breaks).
REQUIRES: dict[str, tuple[str, ...]] = {
    "adjusted-hit-rate": ("counter:prefetch_first_uses",),
    "invariant-check": ("op:break_check",),
}

#: The report's row of a check no declared contract claims (a scenario
#: file without ``contracts``: the shipped ones all declare theirs).
UNCLAIMED = "other"


def declared(scenario: dict[str, Any]) -> list[str]:
    """The contracts a scenario declares, its default first (may be empty)."""
    return list(scenario.get("contracts") or [])


def check_contracts(scenario: dict[str, Any]
                    ) -> dict[str, tuple[str, dict[str, tuple[str, ...]]]]:
    """Each check of ``scenario`` by name: its contract and the values it
    pins for others (``value_contracts``: contract -> value names).

    A check's contract is its ``contract`` field, else the scenario's first
    declared one, else :data:`UNCLAIMED`.
    """
    default = (declared(scenario) or [UNCLAIMED])[0]
    out: dict[str, tuple[str, dict[str, tuple[str, ...]]]] = {}
    for step in scenario.get("steps", []):
        if step.get("op", "check") != "check":
            continue
        claims = {c: tuple(v) for c, v in
                  (step.get("value_contracts") or {}).items()}
        out[step["name"]] = (step.get("contract", default), claims)
    return out


def why_not(scenario: dict[str, Any]) -> str | None:
    """What is wrong with a scenario's contract fields, or None.

    Every name must be in :data:`CONTRACTS`; a check's ``contract`` must be
    one its scenario declares; ``value_contracts`` only on a check step.
    """
    names = declared(scenario)
    for i, c in enumerate(names):
        if c not in CONTRACTS:
            return (f"contracts[{i}]: unknown contract {c!r} (contracts: "
                    f"{', '.join(CONTRACTS)})")
    if len(set(names)) != len(names):
        return "contracts: a contract named twice"
    for i, step in enumerate(scenario.get("steps", [])):
        check = step.get("op", "check") == "check"
        for f in ("contract", "value_contracts"):
            if f in step and not check:
                return f"steps[{i}].{f}: only a check step names contracts"
        if "contract" in step and step["contract"] not in names:
            return (f"steps[{i}].contract: {step['contract']!r} is not one "
                    f"of the scenario's contracts ({', '.join(names)})")
        for c in step.get("value_contracts") or {}:
            if c not in CONTRACTS:
                return (f"steps[{i}].value_contracts: unknown contract "
                        f"{c!r}")
    return None
