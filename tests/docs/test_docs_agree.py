"""The lists the docs give are the lists the code has, and every reference lands.

A page that names the policies, the presets, the counters or the commands
goes stale the day someone adds one; these tests read the list from the
page and the list from the code and demand the same set.  The last tests
check that every path a page or a comment names exists and that every
"DESIGN.md §N" names a section DESIGN.md has.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from xcache import fixtures, replay
from xcache.engine import _lib
from xcache.fixtures import __main__ as fixtures_cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [
    ROOT / "README.md", ROOT / "fixtures" / "README.md",
    ROOT / "faults" / "README.md", ROOT / "hunt" / "README.md",
    ROOT / "fixtures" / "traces" / "README.md"]


def _text(rel: str) -> str:
    return (ROOT / rel).read_text(encoding="utf-8")


def _section(text: str, heading: str) -> str:
    """The body of the markdown section whose heading line starts with ``heading``."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("#") and line.lstrip("#").strip().startswith(heading):
            level = len(line) - len(line.lstrip("#"))
            body = []
            for rest in lines[i + 1:]:
                if rest.startswith("#") and len(rest) - len(rest.lstrip("#")) <= level:
                    break
                body.append(rest)
            return "\n".join(body)
    raise AssertionError(f"no section {heading!r}")


def _first_column(table_text: str) -> list[str]:
    """The first cell of every row of the markdown tables in ``table_text``."""
    cells = []
    for line in table_text.splitlines():
        if line.startswith("|") and not re.match(r"\|\s*-", line):
            cells.append(line.split("|")[1].strip())
    return cells[1:] if cells else cells


def _codes(cell: str) -> list[str]:
    """The `code` spans of one cell."""
    return re.findall(r"`([^`]+)`", cell)


def _subcommands(parser: argparse.ArgumentParser) -> list[str]:
    """The names of a parser's subcommands."""
    for action in parser._actions:  # argparse keeps no public list of them
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    raise AssertionError("the parser has no subcommands")


# -- policies ------------------------------------------------------------

def _policy_rows() -> dict[str, str]:
    """CACHE.md's policy table: name -> its parameters cell."""
    body = _section(_text("docs/CACHE.md"), "Victim choice")
    rows = {}
    for line in body.splitlines():
        # a victim cell may hold pipes of its own (`|T1| > p`): take the
        # name from the second cell and the parameters from the last
        named = re.match(r"\|[^|`]*\|\s*`(\w+)`\s*\|", line)
        if named:
            rows[named.group(1)] = line.rstrip().rstrip("|").rsplit("|", 1)[1]
    return rows


def test_cache_md_lists_every_policy_the_engine_offers() -> None:
    """The policy table of CACHE.md names exactly the engine's policy table."""
    assert sorted(_policy_rows()) == sorted(_lib.policy_table())


def test_cache_md_gives_every_policy_parameter_and_default() -> None:
    """Each policy's parameters and defaults in CACHE.md are the engine's."""
    for name, cell in _policy_rows().items():
        documented = {m[0]: int(m[1])
                      for m in re.findall(r"`(\w+)` \((-?\d+)", cell)}
        assert documented == dict(_lib.policy_table()[name]), name


def test_cache_md_cost_table_covers_every_policy() -> None:
    """The per-policy cost table of CACHE.md has a row for every policy."""
    body = _section(_text("docs/CACHE.md"), "Victim choice")
    named = set()
    for line in body.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 4 and cells[1] and not cells[1].startswith("`"):
            named.update(c for c in _codes(cells[0]) if c in _lib.policy_table())
    assert named == set(_lib.policy_table())


# -- presets -------------------------------------------------------------

def test_fixtures_readme_lists_every_preset() -> None:
    """The presets table of fixtures/README.md names exactly fixtures.PRESETS."""
    text = _text("fixtures/README.md")
    rows = [c for line in text.splitlines() if line.startswith("| `")
            for c in _codes(line.split("|")[1])]
    assert sorted(rows) == sorted(fixtures.PRESETS)


# -- counters ------------------------------------------------------------

def _documented_counters() -> set[str]:
    body = _section(_text("docs/CACHE.md"), "Counters")
    table = {c for cell in _first_column(body) for c in _codes(cell)}
    derived = body.split("Derived, never stored:", 1)[1].split("\n\n", 1)[0]
    return table | {c.split(" ")[0] for c in _codes(derived)
                    if re.fullmatch(r"[a-z_]+( = .*)?", c)}


def test_stats_keys_are_the_documented_counters(k3_shard: Path) -> None:
    """ExpertCache.stats() returns exactly the counters CACHE.md documents."""
    from xcache import engine

    with engine.ExpertCache.open(k3_shard.parent, n_slots=8) as cache:
        keys = set(cache.stats())
    documented = _documented_counters()
    assert sorted(keys - documented) == []
    assert sorted(documented - keys) == []


# -- commands ------------------------------------------------------------

def test_front_door_commands_are_documented() -> None:
    """Each replay.py command is named in README, DESIGN §9 and CI.md."""
    commands = _subcommands(replay.parser())
    assert commands == ["gate", "lab", "predict", "time"]
    design = _section(_text("docs/DESIGN.md"), "9.")
    row = next(line for line in design.splitlines() if line.startswith("| `replay.py`"))
    readme = next(line for line in _text("README.md").splitlines()
                  if line.startswith("| `replay.py`"))
    ci_intro = _text("docs/CI.md").split("\n## ", 1)[0]
    for place, text in (("DESIGN §9", row), ("README", readme), ("CI.md", ci_intro)):
        missing = [c for c in commands if f"`{c}`" not in text]
        assert missing == [], f"{place} does not name {missing}"


def test_fixtures_commands_are_documented() -> None:
    """Each `xcache-fixtures` command has a usage line in fixtures/README.md."""
    commands = _subcommands(fixtures_cli._parser())
    readme = _text("fixtures/README.md")
    usage = set(re.findall(r"python -m xcache.fixtures ([a-z-]+)", readme))
    assert sorted(usage) == sorted(commands)


def test_console_scripts_are_documented() -> None:
    """The console scripts pyproject installs are the ones the README names."""
    scripts = re.findall(r"^(xcache-[a-z]+) = ", _text("pyproject.toml"), re.M)
    said = _text("README.md").split("Installing puts", 1)[1].split("\n\n", 1)[0]
    assert sorted(set(re.findall(r"`(xcache-[a-z]+)`", said))) == sorted(scripts)


# -- references ----------------------------------------------------------

TOP = ("engine", "oracle", "fixtures", "gate", "lab", "faults", "tests",
       "bench", "docs", "examples", ".ci")
_TOPS = "|".join(re.escape(t) for t in TOP)
_PATH = re.compile(r"(?<![\w./-])((?:" + _TOPS + r")/[\w./*{},<>-]*[\w*}>])")


def _exists(ref: str) -> bool:
    """Whether a path a page names exists (globs, ``{a,b}`` and ``<name>`` count)."""
    ref = re.sub(r"<[^>]*>", "*", ref.split("::")[0].rstrip("."))
    if "{" in ref:
        head, rest = ref.split("{", 1)
        options, tail = rest.split("}", 1)
        return all(_exists(head + o + tail) for o in options.split(","))
    if any(ch in ref for ch in "*?["):
        return any(ROOT.glob(ref))
    return (ROOT / ref).exists()


def _references(text: str) -> set[str]:
    return {m for m in _PATH.findall(text) if not m.endswith("/...")}


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_page_names_exists(page: Path) -> None:
    """Every repository path a doc page names is a file or folder of the tree."""
    missing = sorted(r for r in _references(page.read_text(encoding="utf-8"))
                     if not _exists(r))
    assert missing == []


def _sources() -> list[Path]:
    out = []
    for top in TOP[:8] + ("replay.py",):
        base = ROOT / top
        if base.is_file():
            out.append(base)
        elif base.is_dir():
            out += [p for p in base.rglob("*") if p.suffix in (".py", ".c", ".h")]
    return sorted(out)


def test_every_docs_page_a_source_cites_exists() -> None:
    """Every docs page a source file cites is a page of docs/."""
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    missing = sorted({f"{p.relative_to(ROOT)}: docs/{m}" for p in _sources()
                      for m in re.findall(r"docs/([A-Z_]+\.md)",
                                          p.read_text(encoding="utf-8",
                                                      errors="replace"))
                      if m not in pages})
    assert missing == []


def _design_sections() -> set[int]:
    return {int(n) for n in re.findall(r"^## (\d+)\.", _text("docs/DESIGN.md"), re.M)}


def test_every_design_section_cited_exists() -> None:
    """Every "DESIGN.md §N" in the sources and the docs names a section there."""
    sections = _design_sections()
    places = _sources() + DOCS
    wrong = sorted({f"{p.relative_to(ROOT)}: §{n}" for p in places
                    for n in re.findall(r"DESIGN(?:\.md)? §(\d+)",
                                        p.read_text(encoding="utf-8",
                                                    errors="replace"))
                    if int(n) not in sections})
    assert wrong == []


def test_the_reference_checks_can_fail(tmp_path: Path) -> None:
    """The path reader finds a missing path and accepts globs and brace forms."""
    text = "see `engine/csrc/xc_nowhere.c`, `gate/scenarios/*.json`, " \
           "`oracle/{cache,sim}.py` and `engine/csrc/xc_policy_<name>.c`"
    refs = _references(text)
    assert refs == {"engine/csrc/xc_nowhere.c", "gate/scenarios/*.json",
                    "oracle/{cache,sim}.py", "engine/csrc/xc_policy_<name>.c"}
    assert [r for r in sorted(refs) if not _exists(r)] == ["engine/csrc/xc_nowhere.c"]
