"""Mutants by rule (hunt/mutants/rules.py): the population, the draw and its filter.

A tiny engine folder of one C file stands in for engine/: small enough that
every mutant of it can be listed and compiled here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from xcache.hunt.mutants import catalogue, rules

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")

SOURCE = """\
/* a block comment: 1 + 2 is not mutated */
#include <stddef.h>
int scale(int a) {
    return a * 1;
}
int pick(int a, int b) {
    if (a < b)
        return a;
    return b;
}
"""


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def engine_dir(tmp_path: Path) -> Path:
    """An engine folder whose csrc holds one small C file."""
    csrc = tmp_path / "engine" / "csrc"
    csrc.mkdir(parents=True)
    (csrc / "tiny.c").write_text(SOURCE, encoding="utf-8")
    return tmp_path / "engine"


def test_population_leaves_comments_and_preprocessor_lines_alone(
        engine_dir: Path) -> None:
    """No mutant rewrites the block comment or the #include line."""
    lines = {m.line for m in rules.population(engine_dir)}
    assert 1 not in lines and 2 not in lines
    assert lines == {3, 4, 5, 6, 7, 8, 9, 10}


def test_test_instrumentation_is_not_mutated(engine_dir: Path) -> None:
    """Test instrumentation (a TEST HOOKS ONLY tail, the hook files) is left out."""
    csrc = engine_dir / "csrc"
    (csrc / "tiny.c").write_text(SOURCE + "/* TEST HOOKS ONLY: a view */\n"
                                 "int view(int a) {\n    return a + 1;\n}\n",
                                 encoding="utf-8")
    (csrc / "xc_testhooks_check.c").write_text("int poke(int a) { return a - 1; }\n",
                                               encoding="utf-8")
    every = rules.population(engine_dir)
    assert {m.file for m in every} == {"tiny.c"}
    assert {m.line for m in every} == {3, 4, 5, 6, 7, 8, 9, 10}


def test_each_rule_lands_in_its_operator_class(engine_dir: Path) -> None:
    """The relational, arithmetic, constant and condition rules are told apart."""
    got = {(_flat(m.mutated), m.klass) for m in rules.population(engine_dir)}
    assert ("if (a > b)", "relational") in got
    assert ("return a / 1;", "arithmetic") in got
    assert ("return a * 0;", "constant") in got
    assert ("if (!(a < b))", "condition") in got
    assert ("/*return b;*/", "statement-deletion") in got
    assert ("int pick ( int b,int a) {", "swapped-arguments") in got


def test_the_filter_drops_equivalent_and_uncompilable_mutants(
        engine_dir: Path) -> None:
    """`a * 1` to `a / 1` compiles to the same code; a `break;` outside a loop fails."""
    every = rules.population(engine_dir)
    d = rules.draw(engine_dir, len(every), seed=1, jobs=1)
    verdict = {_flat(m.mutated): "kept" for m in d.kept}
    verdict.update({_flat(m.mutated): "equivalent" for m in d.equivalent})
    verdict.update({_flat(m.mutated): "did-not-compile" for m in d.did_not_compile})
    assert verdict["return a / 1;"] == "equivalent"
    assert verdict["return a * 0;"] == "kept"
    assert verdict["return a; break;"] == "did-not-compile"
    assert len(d.kept) + len(d.equivalent) + len(d.did_not_compile) == len(every)
    assert d.population == len(every)


def test_the_draw_is_reproducible_and_seeded(engine_dir: Path) -> None:
    """One seed gives one sample; another seed another order of the same mutants."""
    a = rules.draw(engine_dir, 5, seed=7, jobs=1).kept
    b = rules.draw(engine_dir, 5, seed=7, jobs=1).kept
    c = rules.draw(engine_dir, 5, seed=8, jobs=1).kept
    assert [m.id for m in a] == [m.id for m in b]
    assert [m.id for m in a] != [m.id for m in c]


def test_ids_survive_an_edit_elsewhere_in_the_file(engine_dir: Path) -> None:
    """Adding lines above moves line numbers but keeps every mutant's id."""
    before = {m.id: m.line for m in rules.population(engine_dir)}
    path = engine_dir / "csrc" / "tiny.c"
    path.write_text("int unused_first(void);\n\n" + SOURCE, encoding="utf-8")
    after = {m.id: m.line for m in rules.population(engine_dir)}
    assert set(before) <= set(after)
    assert all(after[i] == before[i] + 2 for i in before)


def test_catalogue_snippets_are_unique_and_plant_the_mutant(engine_dir: Path) -> None:
    """Each mutant becomes a snippet found once, which plants exactly its line."""
    (engine_dir / "csrc" / "tiny.c").write_text(
        SOURCE + "int again(int a) {\n    return a * 1;\n}\n", encoding="utf-8")
    every = rules.population(engine_dir)
    twice = [m for m in every if m.mutated.strip() == "return a * 0;"]
    assert [m.ordinal for m in twice] == [0, 1]
    for rm, m in zip(twice, rules.catalogue(engine_dir, twice), strict=True):
        copy = engine_dir.parent / f"copy-{rm.ordinal}"
        shutil.copytree(engine_dir, copy)
        catalogue.apply_mutant(m, copy)
        lines = (copy / "csrc" / "tiny.c").read_text().splitlines()
        assert lines[rm.line - 1].strip() == "return a * 0;"
        assert sum(ln.strip() == "return a * 0;" for ln in lines) == 1


def test_a_draw_of_nothing_is_refused(engine_dir: Path) -> None:
    """Asking for no mutants is an error naming the option."""
    with pytest.raises(rules.RulesError, match="--generated 0"):
        rules.draw(engine_dir, 0)


def test_every_targeted_test_path_exists_and_a_file_without_one_gets_all() -> None:
    """--pytest targeted names only test paths that exist; an engine file with no
    entry gets the behaviour selection."""
    from xcache.hunt.mutants import selections as sel

    root = Path(__file__).resolve().parents[2]
    named = {p for paths in sel.FILE_TESTS.values() for p in paths}
    assert sorted(p for p in named if not (root / p).exists()) == []
    assert sel.targeted_tests("xc_json.c").split() == list(sel.FILE_TESTS["xc_json.c"])
    assert sel.targeted_tests("no_such.c").split() == list(sel.BEHAVIOUR_TESTS)


def test_every_listed_survivor_has_a_reason_and_a_rule_id() -> None:
    """generated_survivors.json: each entry a G-id with a reason that says whether
    it is equivalent, unreachable or a gap."""
    listed = rules.listed_survivors()
    assert listed
    for mid, reason in listed.items():
        assert mid.startswith("G") and len(mid) == 8, mid
        assert reason.startswith(("equivalent", "unreachable", "gap",
                                  "not shown equivalent")), (mid, reason)
        assert not reason.startswith("gap closed"), (mid, reason)
