"""A TOML file's nesting is measured before tomllib parses it (xcache/toml_nesting.py).

tomllib is quadratic in the parts of a dotted key: 200,000 parts (a 400 KB
line, under every size limit) ran ``replay.py time --model`` past a minute,
30,000 exhausted 1.5 GB.  Every reader of a user's TOML file -- the layout
file (engine and generator), a spec, the time lab's model, the ``--cache``
manifest, the gate's spec and layout -- refuses a key, table, inline table
or array nested past 64 levels in one line naming the file, the line and
the limit, in milliseconds.
"""

from __future__ import annotations

import ast
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomllib

from xcache.toml_nesting import MAX_NESTING, check_nesting

ROOT = Path(__file__).resolve().parents[2]
WHY = "(dotted keys, tables, arrays and inline tables)"
#: The 400 KB line that ran tomllib past a minute.
LONG_KEY = "a" + ".a" * 199_999 + " = 1\n"


def _depth(text: str) -> int:
    """The level ``check_nesting`` measures ``text`` at (the least limit it takes)."""
    return next(n for n in range(1, 200) if _takes(text, n))


def _takes(text: str, limit: int) -> bool:
    try:
        check_nesting(text, "f.toml", limit)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("text,depth", [
    ("a = 1\n", 1),
    ("a.b.c = 1\n", 3),
    ("[x.y]\nc.d = 1\n", 4),
    ("[[x.y]]\nc = [[1]]\n", 5),
    ("a = {b.c = {d = [1, {e = 2}]}}\n", 6),
    ("a = { b = 1, c.d = 2 }\n", 3),
    ('"a.b.c" = 1\n', 1),
    ("a = 'x.y.z'\n", 1),
    ('a = """\nq.w.e = [[[[\n"""\nb.c = 1\n', 2),
    ("a = 1.5 # x.y.z [[[[\n", 1),
    ("a = [\n  1.5,\n  [2.5],\n]\nb = 1\n", 3),
    ('a = """x""""\nb.c.d = 1\n', 3),
    ("a = '''it's'''\nb.c = 1\n", 2),
    ('a = "q\\"[.b"\nc.d = 1\n', 2),
    ("x = 1979-05-27T07:32:00.999\n", 1),
])
def test_the_measure_counts_key_parts_tables_and_arrays(text: str, depth: int):
    """Dotted parts, headers, arrays, inline tables count; strings, comments not."""
    tomllib.loads(text)  # every example is valid TOML
    assert _depth(text) == depth


def test_the_refusal_names_the_file_the_line_and_the_limit():
    """The first line past the limit, in one line: WHERE: line N: ... limit of 64."""
    text = "a = 1\n[t]\n" + "b" + ".b" * 63 + " = 2\n"
    with pytest.raises(ValueError) as ei:
        check_nesting(text, "m.toml")
    assert str(ei.value) == (f"m.toml: line 3: nested deeper than the limit of "
                             f"{MAX_NESTING} levels {WHY}")
    check_nesting(text.replace(".b" * 63, ".b" * 62), "m.toml")


@pytest.mark.parametrize("text", [LONG_KEY, "[" + "a." * 199_999 + "a]\n",
                                  "x = " + "{a = " * 100_000 + "1" + "}" * 100_000,
                                  "x = " + "[" * 200_000 + "]" * 200_000])
def test_a_key_of_200000_parts_is_refused_in_milliseconds(text: str):
    """Dotted key, header, inline tables, arrays: refused at line 1 in 0.5 s of CPU."""
    t0 = time.process_time()
    with pytest.raises(ValueError, match="^f.toml: line 1: nested deeper"):
        check_nesting(text, "f.toml")
    assert time.process_time() - t0 < 0.5


def test_long_strings_are_measured_in_linear_time():
    """Strings of escapes and quotes (a regex alternation kept state per character)."""
    text = ('a = """' + 'x\\"' * (1 << 20) + '"""\n' + "b = '" + "y" * (4 << 20)
            + "'\n" + 'c.d = "' + "\\\\" * (1 << 20) + '"\n')
    t0 = time.process_time()
    assert _takes(text, 2) and not _takes(text, 1)
    assert time.process_time() - t0 < 5


def test_every_toml_file_of_the_project_is_taken():
    """Every TOML file shipped (examples, specs, the project's own) is within it."""
    files = [p for p in ROOT.rglob("*.toml")
             if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)]
    assert len(files) >= 8
    for p in files:
        check_nesting(p.read_text(encoding="utf-8"), str(p))


def test_it_imports_nothing_of_the_project():
    """The engine and the oracle both ask it: it sits below both (stdlib only)."""
    tree = ast.parse((ROOT / "xcache" / "toml_nesting.py").read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names == {"__future__", "re"}


def _layout_engine(p: Path) -> Any:
    from xcache.engine.layout import load_file

    return load_file(p)


def _layout_fixtures(p: Path) -> Any:
    from xcache.fixtures.layout_file import read_layout_file

    return read_layout_file(p, set())


def _spec(p: Path) -> Any:
    from xcache.fixtures.spec import load_spec

    return load_spec(p)


def _model(p: Path) -> Any:
    from xcache.lab.timing.model import load_model

    return load_model(p)


def _manifest(p: Path) -> Any:
    from xcache.gate.outside.build import load_manifest

    return load_manifest(p.parent)


def _gate_spec(p: Path) -> Any:
    from xcache.gate.containers import _spec_file

    return _spec_file(p)


def _gate_layout(p: Path) -> Any:
    from xcache.gate.containers import _fallback_layout

    return _fallback_layout(p.parent)


#: Each reader of a user's TOML file, its file's name, and its error line
#: around the nesting's words.
READERS: dict[str, tuple[Callable[[Path], Any], str, str, str]] = {
    "engine layout": (_layout_engine, "lay.toml", "layout file {p}: ", ""),
    "generator layout": (_layout_fixtures, "lay.toml", "{p}: ", ""),
    "spec": (_spec, "spec.toml", "spec field '<file>': {p}: ", ""),
    "time model": (_model, "model.toml", "model {p}: ", ""),
    "manifest": (_manifest, "xcs.toml", "{p}: ", ""),
    "gate spec": (_gate_spec, "spec.toml",
                  "container {p}: not a fixture spec file ({p}: ", ")"),
    "gate layout": (_gate_layout, "xcache-layout.toml",
                    "{p}: not a layout file ({p}: ", ")"),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_toml_reader_refuses_the_long_key_quickly(tmp_path: Path, reader: str):
    """The 400 KB key through each reader: its one error line, in under a second."""
    read, name, start, end = READERS[reader]
    p = tmp_path / name
    p.write_text("# a comment\n" + LONG_KEY)
    t0 = time.process_time()
    with pytest.raises(Exception) as ei:
        read(p)
    assert time.process_time() - t0 < 1
    assert str(ei.value) == (start.format(p=p) + "line 2: nested deeper than the "
                             f"limit of {MAX_NESTING} levels {WHY}" + end)
