"""Every scenario declares its contracts, all in the registry report and docs read."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from tests.helpers import PINNED_SCENARIOS
from xcache.gate import SCENARIO_DIR, CannotRun
from xcache.gate.contracts import (
    CONTRACTS,
    REQUIRES,
    VALUE_OWNERS,
    check_contracts,
    declared,
)
from xcache.gate.outside.conformance import blame, contract_of
from xcache.gate.schema import check_scenario

ROOT = Path(__file__).resolve().parents[2]


def _shipped() -> dict[str, dict]:
    """Every shipped scenario file by its file name, as raw JSON."""
    return {p.name: json.loads(p.read_text())
            for p in sorted(SCENARIO_DIR.glob("*.json"))
            if p.name != "programs.json"}


def undeclared(docs: dict[str, dict]) -> list[str]:
    """The files of ``docs`` that declare no contract or name an unknown one."""
    return [name for name, doc in docs.items()
            if not declared(doc) or not set(declared(doc)) <= set(CONTRACTS)
            or any(c not in CONTRACTS for c, _ in
                   check_contracts(doc).values())]


def test_every_shipped_scenario_declares_known_contracts():
    """No scenario of gate/scenarios/ lacks a contract or names one not registered."""
    docs = _shipped()
    # 64, trace-file, -gapped-layers, -reopen, -over-a-file
    assert len(docs) == PINNED_SCENARIOS
    assert undeclared(docs) == []


def test_a_scenario_without_contracts_is_found():
    """The check above fails on a file with none, or with an unknown name."""
    docs = _shipped()
    none = copy.deepcopy(docs["reset-window-k3-mini.json"])
    del none["contracts"]
    bogus = {**copy.deepcopy(docs["key-bounds-deepseek-mini.json"]),
             "contracts": ["key-bounds", "teleportation"]}
    assert undeclared({"a.json": none, "b.json": bogus,
                       "c.json": docs["faults-io-k3-mini.json"]}) == \
        ["a.json", "b.json"]


def test_every_contract_is_declared_by_some_scenario():
    """The registry names no contract no scenario judges, but those of the
    values every check judges (VALUE_OWNERS)."""
    used = {c for doc in _shipped().values()
            for c, _ in check_contracts(doc).values()}
    assert sorted(set(CONTRACTS) - used) == ["relations"]
    assert set(VALUE_OWNERS.values()) <= set(CONTRACTS)
    assert len(CONTRACTS) == 25
    assert set(REQUIRES) <= set(CONTRACTS)


def test_the_schema_refuses_unknown_and_undeclared_contracts():
    """An unknown contract, or a check's contract its scenario lacks: one line."""
    doc = _shipped()["faults-io-k3-mini.json"]
    bad = {**doc, "contracts": ["short-read", "nope"]}
    with pytest.raises(CannotRun) as e:
        check_scenario(copy.deepcopy(bad), "f.json")
    assert str(e.value).startswith("f.json: contracts[1]: expected one of "
                                   "'serial-reads', ")
    narrow = {**doc, "contracts": ["short-read"]}
    with pytest.raises(CannotRun) as e:
        check_scenario(copy.deepcopy(narrow), "f.json")
    assert str(e.value) == ("f.json: steps[6].contract: 'io-errors' is not one "
                            "of the scenario's contracts (short-read)")
    empty = {**doc, "contracts": []}
    with pytest.raises(CannotRun) as e:
        check_scenario(copy.deepcopy(empty), "f.json")
    assert str(e.value) == "f.json: contracts: 0 items; expected 1..100"


def test_checks_count_for_their_declared_contract():
    """A check's step contract wins, else its scenario's first; variants too."""
    assert contract_of("faults-io", "F2 eio is an I/O error, nothing "
                       "published") == "io-errors"
    assert contract_of("faults-io", "scenario ran to completion") == "short-read"
    assert contract_of("policies (arc)", "routed reads are byte-exact "
                       "(arc)") == "serial-reads"
    assert contract_of("policies (arc)", "policy counters (arc)") == "policies"
    assert contract_of("found-release-twice", "x") == "holds"
    assert contract_of("no-such-scenario", "x") == "other"


def test_value_contracts_take_the_blame_for_their_values():
    """A failure of only the values a step gives another contract counts there."""
    check = {"scenario": "faults-io", "check": "F6 persistent eof publishes "
             "none; afterwards all is well",
             "expected": {"hits": 1, "published": 0},
             "actual": {"hits": 2, "published": 0}}
    assert blame(check) == ["prefetch-not-hit"]
    check["actual"] = {"hits": 2, "published": 1}
    assert blame(check) == ["short-read", "prefetch-not-hit"]


def test_the_documented_contracts_are_the_registry():
    """docs/OUTSIDE_CACHES.md "The contracts" tabulates exactly CONTRACTS, in order."""
    text = (ROOT / "docs" / "OUTSIDE_CACHES.md").read_text()
    section = text.split("## The contracts\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z-]+)` \| (.*) \|$", section, re.M)
    assert rows == list(CONTRACTS.items())


def test_values_every_check_judges_count_against_their_own_contract():
    """A broken relation or a held expert changed counts against relations or
    holds, wherever the check is; with another value wrong, against both."""
    check = {"scenario": "faults-io", "check": "F6 persistent eof publishes "
             "none; afterwards all is well",
             "expected": {"published": 0, "relations": [], "held_changed": 0},
             "actual": {"published": 0, "held_changed": 0,
                        "relations": ["requests 3 != hits 1 + misses 1"]}}
    assert blame(check) == ["relations"]
    check["actual"]["held_changed"] = 1
    assert blame(check) == ["relations", "holds"]
    check["actual"]["published"] = 1
    assert blame(check) == ["short-read", "relations", "holds"]
