"""The import rules of docs/DESIGN.md §2, read from every module's own imports.

Each package may import only the packages below it: ``engine`` none of the
project's others; ``oracle`` and ``fixtures`` neither the engine nor the tools
built on them; ``faults`` the engine, the oracle and the generator; the gate
and the labs all of those.  An import inside a function counts as much as one
at the top: the rule is about what a package needs, not when it loads it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The project's packages, and the project packages each may import.
ALLOWED: dict[str, set[str]] = {
    "engine": set(),
    "oracle": set(),
    "fixtures": {"oracle"},
    "faults": {"engine", "oracle", "fixtures"},
    # the fuzzers drive every tool, the gate's container step included: a
    # layer of their own above the gate (which imports faults' injectors,
    # corruptions and kinds, never the fuzzers)
    "faults/fuzz": {"engine", "oracle", "fixtures", "faults", "gate", "lab"},
    "gate": {"engine", "oracle", "fixtures", "faults"},
    "lab": {"engine", "oracle", "fixtures", "gate"},
}
PROJECT = set(ALLOWED) | {"replay", "tests", "bench"}


def _imports(path: Path) -> set[str]:
    """The top-level names of every module ``path`` imports, anywhere in it."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _modules(package: str) -> list[Path]:
    """Every Python file of one package (a sub-package with rules of its own apart)."""
    inner = [ROOT / p for p in ALLOWED if p.startswith(package + "/")]
    return sorted(f for f in (ROOT / package).rglob("*.py")
                  if not any(f.is_relative_to(d) for d in inner))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_it_may(package: str) -> None:
    """No module of a package imports a project package the rules forbid it."""
    files = _modules(package)
    assert files, f"{package}/ holds no Python files"
    broken = []
    for path in files:
        wrong = (_imports(path) & PROJECT) - ALLOWED[package] - {package.split("/")[0]}
        if wrong:
            broken.append(f"{path.relative_to(ROOT)} imports {sorted(wrong)}")
    assert broken == []


def test_the_rules_catch_a_forbidden_import(tmp_path: Path) -> None:
    """The reader of imports sees one inside a function, as the rule needs."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from engine import cache\n    import gate.cli\n")
    assert _imports(module) == {"engine", "gate"}


def test_the_generator_is_the_whole_of_fixtures() -> None:
    """fixtures/ holds no gate or lab code: no sub-package is left in it."""
    assert sorted(p.name for p in (ROOT / "fixtures").iterdir()
                  if (p / "__init__.py").exists()) == []
