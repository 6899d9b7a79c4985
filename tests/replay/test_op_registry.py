"""The operations registry, its handlers and the run's step API: one way down."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from xcache.gate import CannotRun
from xcache.gate.containers import make_target
from xcache.gate.operations import OPERATIONS
from xcache.gate.ops import HANDLERS, OPS
from xcache.gate.program_gen import MISUSE_OPS, OPTION_SETS, _Gen, generate

ROOT = Path(__file__).resolve().parents[2]
GATE = ROOT / "gate"

#: The modules of the operation layer: the registry, its readers, the
#: handlers and the runner.
LAYER = ("contracts", "operations", "schema", "steps", "ops", "race_ops",
         "state_ops", "trace_check", "check_probe", "scenario_run",
         "scenarios", "program_gen", "programs", "outside.programs",
         "outside.conformance")
#: The modules whose functions are op handlers, given a ScenarioRun.
HANDLER_MODULES = ("ops", "race_ops", "state_ops", "trace_check",
                   "check_probe")


def _path(mod: str) -> Path:
    """The file of gate module ``mod`` (``outside.programs``)."""
    return GATE.joinpath(*mod.split(".")).with_suffix(".py")


def _modules() -> dict[str, Path]:
    """Every module of gate/ by its dotted name below the package."""
    out = {}
    for p in GATE.rglob("*.py"):
        parts = [x for x in p.relative_to(GATE).with_suffix("").parts
                 if x != "__init__"]
        if parts:
            out[".".join(parts)] = p
    return out


def imports(source: str, known: set[str]) -> tuple[set[str], set[str]]:
    """The gate modules ``source`` imports: at module level, and in a function."""
    top: set[str] = set()
    local: set[str] = set()

    def visit(node: ast.AST, inside: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside = True
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and \
                node.module.startswith("xcache.gate"):
            base = node.module.removeprefix("xcache.gate").lstrip(".")
            for a in node.names:
                sub = f"{base}.{a.name}".lstrip(".")
                names.append(sub if sub in known else base)
        elif isinstance(node, ast.Import):
            names += [a.name.removeprefix("xcache.gate.") for a in node.names
                      if a.name.startswith("xcache.gate.")]
        (local if inside else top).update(n for n in names if n in known)
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(ast.parse(source), False)
    return top, local


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``edges`` (strongly connected parts of 2+)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_every_operation_has_its_handler():
    """OPS joins each registry row with its handler, in the registry's order."""
    assert set(HANDLERS) == set(OPERATIONS)
    assert list(OPS) == list(OPERATIONS)
    assert all(OPS[n].operation is OPERATIONS[n] for n in OPERATIONS)
    assert len(OPERATIONS) == 45  # 38, the six face_* and container_read
    # of op:lifetime


def test_the_operation_layer_imports_one_way():
    """No module of the layer is in an import circle, counting function-local ones."""
    mods = _modules()
    edges = {}
    for m, p in mods.items():
        top, local = imports(p.read_text(), set(mods))
        edges[m] = (top | local) - {m}
    assert [c for c in cycles(edges) if set(c) & set(LAYER)] == []
    assert "ops" not in {d for m in ("operations", "schema", "steps",
                                     "check_probe", "program_gen",
                                     "outside.programs") for d in edges[m]}


def test_the_cycle_finder_finds_a_circle():
    """A two-module circle (one side function-local) is reported."""
    top, local = imports("from xcache.gate.b import x\n"
                         "def f():\n    from xcache.gate import a\n",
                         {"a", "b"})
    assert (top, local) == ({"b"}, {"a"})
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_no_gate_import_in_a_function_of_the_layer():
    """The layer's gate imports are all at module level: none hides a circle."""
    mods = _modules()
    found = {m: sorted(imports(_path(m).read_text(), set(mods))[1])
             for m in LAYER}
    assert {m: v for m, v in found.items() if v} == {}


def _run_uses(mod: str) -> list[tuple[str, str]]:
    """Each ``run.<private>`` or ``run.__dict__`` a handler module uses."""
    out = []
    for node in ast.walk(ast.parse(_path(mod).read_text())):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "run" and node.attr.startswith("_"):
            out.append((mod, node.attr))
    return out


def test_handlers_use_only_the_public_step_api():
    """No handler reaches a private member of the run or hangs state on its __dict__."""
    assert [u for m in HANDLER_MODULES for u in _run_uses(m)] == []


def test_every_attribute_a_handler_sets_is_declared():
    """Each ``run.x = ...`` of a handler is an attribute ScenarioRun.__init__ sets."""
    init = next(n for n in ast.walk(ast.parse(_path("scenario_run").read_text()))
                if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    declared = {t.attr for n in ast.walk(init)
                for t in (n.targets if isinstance(n, ast.Assign) else
                          [n.target] if isinstance(n, ast.AnnAssign) else [])
                for t in (t.elts if isinstance(t, ast.Tuple) else [t])
                if isinstance(t, ast.Attribute)}
    set_here = set()
    for m in HANDLER_MODULES:
        for n in ast.walk(ast.parse(_path(m).read_text())):
            targets = n.targets if isinstance(n, ast.Assign) else []
            for t in targets:
                for t2 in (t.elts if isinstance(t, ast.Tuple) else [t]):
                    if isinstance(t2, ast.Attribute) and \
                            isinstance(t2.value, ast.Name) and t2.value.id == "run":
                        set_here.add(t2.attr)
    assert set_here == {"backend", "published", "last_error", "error_offset",
                        "offset_as_claimed", "trace_of", "trace_seen"}
    assert set_here <= declared


def test_the_generator_emits_only_registered_ops(tmp_path):
    """Every op of generated programs is in the registry; an unknown one is refused."""
    assert set(MISUSE_OPS) <= set(OPERATIONS)
    target = make_target("k3-mini", tmp_path)
    seen = {s.get("op", "check") for seed in range(6) for opts in OPTION_SETS
            for s in generate(seed, target, opts)["steps"]}
    assert seen <= set(OPERATIONS)
    assert {"get", "getmany", "check"} <= seen
    gen = _Gen(random.Random(0), target, {}, 4)
    with pytest.raises(CannotRun) as e:
        gen.add({"op": "teleport"})
    assert str(e.value) == ("program generator: op 'teleport' is not in the "
                            "operations registry (gate/operations.py)")
