"""The import rules of docs/DESIGN.md §2, read from every module's own imports.

Each package may import only the packages below it: ``engine`` none of the
project's others; ``oracle`` and ``fixtures`` neither the engine nor the tools
built on them; ``faults`` the engine, the oracle and the generator; the gate
and the labs all of those; ``hunt`` (mutants, fuzzers) everything below it.
An import inside a function counts as much as one at the top: the rule is
about what a package needs, not when it loads it.
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
    "gate": {"engine", "oracle", "fixtures", "faults"},
    "lab": {"engine", "oracle", "fixtures", "gate"},
    # the hunters (mutants, fuzzers) drive every tool, the gate included: a
    # package above the gate, which imports faults' injectors, corruptions
    # and kinds and never a hunter
    "hunt": {"engine", "oracle", "fixtures", "faults", "gate", "lab"},
}
PROJECT = set(ALLOWED) | {"replay", "tests", "bench"}
#: The design's top-level folders: importable only as ``xcache.<name>``.
TOPS = ("engine", "oracle", "fixtures", "gate", "lab", "faults", "hunt")


def _package(dotted: str) -> str:
    """The project package a dotted import names (``xcache.gate.cli`` is gate)."""
    parts = dotted.split(".")
    return parts[1] if parts[0] == "xcache" and len(parts) > 1 else parts[0]


def _tree_imports(tree: ast.AST) -> set[str]:
    """The top-level names of every absolute import in ``tree``, xcache's mapped."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(_package(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "xcache":
                names.update(alias.name for alias in node.names)
            else:
                names.add(_package(node.module))
    return names


def _imports(path: Path) -> set[str]:
    """The packages ``path`` imports, anywhere in it (``xcache.X`` counts as X)."""
    return _tree_imports(ast.parse(path.read_text(encoding="utf-8"),
                                   filename=str(path)))


def _code_in_strings(tree: ast.AST) -> list[ast.AST]:
    """The parsed code of every string in ``tree`` that is Python with an import.

    Tests and tools hand code to ``python -c`` as strings; an f-string's
    holes are read as a plain name so that its text still parses.
    """
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "x"
                           for v in node.values)
        else:
            continue
        if "import " not in text:
            continue
        try:
            found.append(ast.parse(text))
        except SyntaxError:
            continue
    return found


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
    """The reader of imports sees one inside a function, in every spelling."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from xcache.engine import cache\n"
                      "    import xcache.gate.cli\n    from xcache import lab\n")
    assert _imports(module) == {"engine", "gate", "lab"}


def _bare_imports(path: Path) -> list[str]:
    """Imports of a design folder by its bare name in ``path``, code strings too."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    bare = []
    for where, sub in [("code", tree)] + [("a string", s)
                                          for s in _code_in_strings(tree)]:
        for node in ast.walk(sub):
            if isinstance(node, ast.Import):
                heads = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                heads = [(node.module or "").split(".")[0]]
            else:
                continue
            bare += [f"{path.relative_to(ROOT)}: {h} (in {where})"
                     for h in heads if h in TOPS]
    return sorted(set(bare))


def test_no_module_imports_a_design_folder_by_its_bare_name() -> None:
    """Every import of the project goes through xcache, in code and in code strings.

    From the clone's root ``import engine`` would load a second copy of the
    package beside ``xcache.engine``, with its own engine binding and
    exception classes, and no installed package has the bare name at all.
    """
    files = [f for f in ROOT.rglob("*.py")
             if not any(part.startswith(".") for part in f.relative_to(ROOT).parts)]
    assert len(files) > 300
    bare = [b for f in sorted(files) for b in _bare_imports(f)]
    assert bare == []


def test_the_bare_import_check_reads_code_strings(tmp_path: Path) -> None:
    """A bare import inside a ``python -c`` string or an f-string is seen."""
    module = ROOT / "tests" / "boundary" / "_probe_bare.py"
    module.write_text('CODE = "import sys, engine\\nprint(1)"\n'
                      'F = f"from gate.cli import x\\n{CODE}"\n'
                      'OK = "import xcache.engine"\n')
    try:
        found = _bare_imports(module)
    finally:
        module.unlink()
    assert found == ["tests/boundary/_probe_bare.py: engine (in a string)",
                     "tests/boundary/_probe_bare.py: gate (in a string)"]


def test_the_generator_is_the_whole_of_fixtures() -> None:
    """fixtures/ holds no gate or lab code: no sub-package is left in it."""
    assert sorted(p.name for p in (ROOT / "fixtures").iterdir()
                  if (p / "__init__.py").exists()) == []


@pytest.mark.parametrize("module", ["prog.py", "layout_rules.py",
                                    "layout_config.py", "weightless.py"])
def test_the_shared_root_modules_import_nothing_of_the_project(module: str) -> None:
    """xcache/prog.py, layout_rules.py, layout_config.py, weightless.py import
    no project package.

    The engine and the generator both import them (the one layout rule set
    lives in layout_rules and its config half; the one advice for a
    checkpoint without weights in weightless), so they must sit below both.
    """
    assert _imports(ROOT / "xcache" / module) & (PROJECT | {"xcache"}) == set()
