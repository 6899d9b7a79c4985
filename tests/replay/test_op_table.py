"""The scenario operation table against its docs and the capability names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from xcache.gate.backend_api import (
    COUNTERS,
    FAMILIES,
    Capabilities,
    Fact,
    Op,
    Pins,
    is_capability,
)
from xcache.gate.backend_factory import EngineBackend, OracleBackend
from xcache.gate.operations import OPERATIONS as OPS
from xcache.gate.operations import VALUE_NEEDS, value_needs

ROOT = Path(__file__).resolve().parents[2]


def _doc_rows() -> dict[str, str]:
    """Each op of docs/SCENARIOS.md's operations table with its ``needs`` cell."""
    text = (ROOT / "docs" / "SCENARIOS.md").read_text()
    section = text.split("### Operations", 1)[1].split("\n### ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        for op in re.findall(r"`([a-z_]+)`", cells[0]):
            assert op not in rows, f"docs/SCENARIOS.md lists {op} twice"
            rows[op] = cells[2]
    return rows


def _needs_cell(op: str) -> str:
    """The ``needs`` cell the table's row of ``op`` should have."""
    spec = OPS[op]
    parts = [f"`{n}`" for n in spec.needs]
    parts += [f"`{n}` (with `{f}`)" for f, more in spec.when.items() for n in more]
    return ", ".join(parts)


def test_the_documented_ops_are_the_table():
    """docs/SCENARIOS.md lists exactly the ops of the registry (gate/operations.py)."""
    assert sorted(_doc_rows()) == sorted(OPS)


def test_the_documented_needs_are_the_declared_ones():
    """Each documented op's needs cell says what its registry row declares."""
    rows = _doc_rows()
    assert {op: rows[op] for op in OPS} == {op: _needs_cell(op) for op in OPS}


def test_every_declared_need_is_a_capability():
    """Every need of every op (``when`` ones included) and value names a capability."""
    for op, spec in OPS.items():
        for need in [*spec.needs, *(n for m in spec.when.values() for n in m)]:
            assert is_capability(need), f"op {op}: {need!r}"
    for key, needs in VALUE_NEEDS.items():
        for need in needs:
            assert is_capability(need), f"value {key}: {need!r}"
    for key in [*COUNTERS, *(f.value for f in Fact)]:
        assert all(is_capability(n) for n in value_needs(key))


def test_capability_names_are_checked():
    """A malformed or unknown name is no capability; has() refuses it."""
    assert is_capability("op:stream") and is_capability("policy:anything")
    for bad in ("stream", "op:", "op:fly", "counter:nope", "weird:x",
                "errors:failed"):
        assert not is_capability(bad), bad
    with pytest.raises(ValueError, match="'op:fly' is not a capability name"):
        Capabilities().has("op:fly")
    with pytest.raises(ValueError, match="unknown counters"):
        Capabilities(counters=frozenset({"hitz"}))


def test_without_removes_exactly_the_named():
    """without() drops each named capability and keeps every other."""
    full = EngineBackend.capabilities
    less = full.without("op:stream", "counter:hits", "pins:count",
                        "errors:typed")
    assert full.missing(["op:stream", "counter:hits"]) == []
    assert less.missing(["op:stream", "op:get", "counter:hits",
                         "counter:misses", "pins:count", "pins:flag",
                         "errors:typed"]) == [
        "op:stream", "counter:hits", "pins:count", "errors:typed"]
    assert less.pins is Pins.FLAG
    assert less.without("pins:flag").pins is Pins.NONE


def test_each_backend_reports_the_counters_it_declares(k3_folder):
    """The engine's and the oracle's stats() keys are their declared counters."""
    from xcache import engine
    from xcache.gate.containers import make_target

    target = make_target("k3-mini", k3_folder)
    opts = {"n_slots": 6}
    eng = EngineBackend(engine, target.pristine, target, opts)
    orc = OracleBackend(target.pristine, target, opts)
    try:
        for b in (eng, orc):
            values = b.values()
            facts = {f.value for f in b.capabilities.facts}
            assert facts <= set(values), b.name
            counters = set(values) - facts - {"invariants"}
            assert counters == set(b.capabilities.counters), b.name
    finally:
        eng.close()
        orc.close()


def test_the_families_are_the_documented_ones():
    """docs/SCENARIOS.md names every capability family the gate knows."""
    text = (ROOT / "docs" / "SCENARIOS.md").read_text()
    section = text.split("## Backends, capabilities and N/A", 1)[1]
    section = section.split("\n## ", 1)[0]
    for family in FAMILIES:
        assert f"`{family}:" in section, family
    for op in Op:
        assert f"`{op.value}`" in section, op


@pytest.fixture(scope="module")
def k3_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A work folder for the k3-mini preset."""
    return tmp_path_factory.mktemp("k3")


def _name_tests(source: str) -> list[str]:
    """The functions comparing a backend's name (``.name``, ``backend_name``,
    ``kind``) with a backend kind's string, once each (``<module>`` outside any)."""
    import ast

    kinds = {"engine", "oracle"}
    found: list[str] = []

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            where = node.name
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = any((isinstance(s, ast.Attribute) and
                         s.attr in ("name", "backend_name")) or
                        (isinstance(s, ast.Name) and s.id in ("kind", "backend"))
                        for s in sides)
            kind = any(isinstance(s, ast.Constant) and s.value in kinds
                       for s in sides)
            if named and kind and where not in found:
                found.append(where)
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(ast.parse(source), "<module>")
    return found


def test_no_gate_module_tests_a_backend_by_name():
    """Only the factory of gate/backend_factory.py maps a kind's name to its class."""
    found = {p.name: _name_tests(p.read_text())
             for p in sorted((ROOT / "gate").glob("*.py"))}
    assert {k: v for k, v in found.items() if v} == {"backend_factory.py": ["factory"]}
    assert _name_tests('def f(run):\n    if run.backend.name == "engine":\n'
                       '        pass\n') == ["f"]
