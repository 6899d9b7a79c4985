"""No two modules of the project import each other, however indirectly.

The graph is read from every module's own import statements: at the top,
inside a function, under ``TYPE_CHECKING`` -- each names a module the
importer needs, so each is an arrow.  A circle of arrows (a strongly
connected component of more than one module) fails, named with the arrows
that tie it, so the fix starts from the message.  A module importing its
own package (``xcache.engine._lib`` loading ``xcache.engine._xc``) is no
arrow: a package's face is loaded before any of its modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The folders that install as ``xcache.<name>``, and ``xcache/`` itself.
TOPS = ("engine", "oracle", "fixtures", "gate", "lab", "faults", "hunt",
        "examples", "xcache")


def _module_name(path: Path, root: Path) -> str:
    """``xcache.gate.cli`` for ``gate/cli.py``; an ``__init__`` is its package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts if parts[0] == "xcache" else ["xcache", *parts])


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every Python module of the project's packages, by its dotted name."""
    found = {}
    for top in TOPS:
        for path in sorted((root / top).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[_module_name(path, root)] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module a dotted import name loads (its longest known prefix)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.AST, here: str, is_pkg: bool) -> list[str]:
    """The dotted names one import statement may load."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        pkg = here if is_pkg else here.rpartition(".")[0]
        for _ in range(node.level - 1):
            pkg = pkg.rpartition(".")[0]
        base = f"{pkg}.{base}" if base else pkg
    return [f"{base}.{a.name}" for a in node.names]


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {module it imports: the line of the first such import}."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        out: dict[str, int] = {}
        for node in ast.walk(tree):
            for target in _targets(node, name, path.name == "__init__.py"):
                to = _resolve(target, modules)
                if to and to != name and not name.startswith(to + "."):
                    out.setdefault(to, node.lineno)
        graph[name] = out
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, {})))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return sorted(found)


def _describe(comp: list[str], graph: dict[str, dict[str, int]],
              modules: dict[str, Path]) -> str:
    """One circle with each of its arrows and the line that draws it."""
    members = set(comp)
    arrows = [f"{a} -> {b} ({modules[a].relative_to(ROOT)}:{graph[a][b]})"
              for a in comp for b in sorted(graph[a]) if b in members]
    return "; ".join(arrows)


def test_the_project_has_no_import_circle() -> None:
    """No set of project modules imports itself round, by any kind of import."""
    modules = project_modules()
    assert len(modules) > 150
    graph = import_graph(modules)
    assert [_describe(c, graph, modules) for c in circles(graph)] == []


def test_a_circle_behind_a_function_local_import_is_found(tmp_path: Path) -> None:
    """Two modules tied by an import inside a function are one circle, named."""
    for top in TOPS:
        (tmp_path / top).mkdir()
    (tmp_path / "gate" / "__init__.py").write_text("")
    (tmp_path / "gate" / "a.py").write_text("from xcache.gate.b import f\n")
    (tmp_path / "gate" / "b.py").write_text(
        "def f():\n    from xcache.gate import a\n    return a\n")
    (tmp_path / "gate" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from xcache.gate.d import D\n")
    (tmp_path / "gate" / "d.py").write_text("from . import c\n")
    (tmp_path / "gate" / "e.py").write_text("from xcache.gate import a\n")
    modules = project_modules(tmp_path)
    graph = import_graph(modules)
    assert graph["xcache.gate.b"] == {"xcache.gate.a": 2}
    assert graph["xcache.gate.d"] == {"xcache.gate.c": 1}
    assert circles(graph) == [["xcache.gate.a", "xcache.gate.b"],
                              ["xcache.gate.c", "xcache.gate.d"]]
