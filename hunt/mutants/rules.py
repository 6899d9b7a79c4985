"""Mutants by rule: universalmutator's C rules over ``engine/csrc``, drawn and filtered.

The hand-written catalogue (:mod:`hunt.mutants.catalogue`) plants the bugs
its authors thought of.  This module plants the ones nobody listed: every
line of every engine source is rewritten by the standard operator rules of
universalmutator (the ``universal`` and ``c_like`` rule sets: relational and
arithmetic operators, constants to 0, 1, -1 and +-1, logical operators,
condition negation and forcing, statement deletion, inserted break/continue,
swapped arguments), and a reproducible sample is drawn from that population.

**The population.**  Each mutant is one line of one file replaced by one
rule.  Lines inside block comments, preprocessor lines and rules that only
change a string literal are left out (a message's wording is not behaviour).
Test instrumentation is not engine code and is not mutated
(:data:`EXCLUDED`).

**The draw.**  A mutant's identity is its file, the original line's text,
the mutated line's text and which occurrence of that pair it is in the file
-- not its line number -- and the sample is the population ordered by
``sha256(seed, identity)``.  An engine edit therefore moves only the mutants
of the lines it touched in or out of a sample; the rest stay, with the same
ids (``G`` and 7 hex digits of that hash).

**The filter.**  Taken in that order, each mutant is compiled (every unit
that includes a mutated header) with the engine's own flags but no debug
information, a call of an undeclared function an error (it would not
link).  One that does not compile is dropped (*did-not-compile*); one
whose object code is byte-identical to the original's is dropped as
*equivalent* (trivial compiler equivalence): it cannot change behaviour, so
no test could kill it.  The first ``n`` left are the sample.

``python -m xcache.hunt.mutants --generated N --seed S`` draws and runs a sample
through the same runner as the catalogue (plant, re-pin, build, replay);
``python -m xcache.hunt.mutants.rules --generated N --seed S --json FILE`` only
draws it and writes it as a catalogue file (``--catalogue FILE``).
docs/QUALITY.md holds the scores and the survivors with their reasons.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from xcache.hunt.mutants.catalogue import Mutant

ROOT = Path(__file__).resolve().parents[2]

#: Files of engine/csrc that are test instrumentation, not engine code: the
#: hooks that corrupt a live cache for check(), the fault-injecting io table.
EXCLUDED: frozenset[str] = frozenset({"xc_testhooks.c", "xc_testhooks_check.c",
                                      "xc_fault.c"})

#: A line that starts with this begins a file's test instrumentation: it and
#: every line after it are not mutated (the policies' test views at the end
#: of their files, xc_policy.h's xc_ptest).
TEST_ONLY_MARK = "/* TEST HOOKS ONLY"

#: The rule sets, as universalmutator names its built-in files.
RULE_FILES: tuple[str, ...] = ("universal.rules", "c_like.rules")

#: Operator classes, in the order docs/QUALITY.md reports them.
CLASSES: tuple[str, ...] = ("relational", "arithmetic", "constant", "logical",
                            "condition", "statement-deletion", "control",
                            "swapped-arguments", "other")

#: The default seed of a draw (CI's sample and the documented one).
DEFAULT_SEED = 2026

#: File of generated survivors with their reasons, keyed by mutant id.
SURVIVORS_FILE = Path(__file__).with_name("generated_survivors.json")


class RulesError(Exception):
    """The generator could not run (no universalmutator, no compiler, ...)."""


_RELATIONAL = {"!=", "==", ">=", "<=", "<", "([^-])>"}
_ARITHMETIC = {"\\+", "-([^>])", "\\*", "([^\\*/])/([^\\*/])", "%", "\\+=", "-=",
               "--", "\\+\\+"}
_LOGICAL = {"&&", "\\|\\|", "!", "([^&])&([^&])", "([^|])\\|([^|])"}


def _klass(lhs: str, rhs: str) -> str:
    """The operator class of one rule, from its pattern and its replacement."""
    if "/*" in rhs or lhs == "else":
        return "statement-deletion"
    if "break;" in rhs or "continue;" in rhs or lhs == "while":
        return "control"
    if lhs.startswith(("if", "while")) or "(0==1)" in rhs or "(1==1)" in rhs:
        return "condition"
    if lhs.startswith("([,\\(\\[\\{])"):
        return "swapped-arguments"
    if lhs == "(\\D)(\\d+)(\\D)":
        return "constant"
    if lhs in _LOGICAL:
        return "logical"
    if lhs in _RELATIONAL:
        return "relational"
    if lhs in _ARITHMETIC:
        return "arithmetic"
    return "other"


@dataclass(frozen=True)
class RuleMutant:
    """One line of one engine file rewritten by one rule."""

    file: str
    line: int
    original: str
    mutated: str
    rule: str
    klass: str
    ordinal: int  #: which occurrence of (original, mutated) in the file

    @property
    def key(self) -> str:
        """The identity: no line number, so unrelated edits keep it."""
        return "\0".join((self.file, self.original.strip(), self.mutated.strip(),
                          str(self.ordinal)))

    def order(self, seed: int) -> str:
        """This mutant's place in the draw of ``seed``."""
        return hashlib.sha256(f"{seed}\0{self.key}".encode()).hexdigest()

    @property
    def id(self) -> str:
        """``G`` and 7 hex digits of the identity's hash (seed-independent)."""
        return "G" + hashlib.sha256(self.key.encode()).hexdigest()[:7]

    def describe(self) -> str:
        """One line for a report: where, and what the rule did."""
        def flat(text: str) -> str:
            return " ".join(text.split())
        return f"line {self.line}: `{flat(self.original)}` -> `{flat(self.mutated)}`"

    def as_mutant(self, text: str) -> Mutant:
        """The runner's form: a snippet that occurs once in ``text``, replaced.

        The mutated line grows context lines above and below until the
        snippet is unique in the file.
        """
        lines = text.splitlines(keepends=True)
        i = self.line - 1
        assert lines[i] == self.original, (self.file, self.line)
        lo, hi = i, i + 1
        while "".join(lines[lo:hi]) and text.count("".join(lines[lo:hi])) != 1:
            if lo > 0:
                lo -= 1
            if hi < len(lines) and text.count("".join(lines[lo:hi])) != 1:
                hi += 1
            if lo == 0 and hi == len(lines):
                break
        before = "".join(lines[lo:hi])
        after = "".join(lines[lo:i]) + self.mutated + "".join(lines[i + 1:hi])
        return Mutant(self.id, self.file, before, after, self.describe(),
                      f"rule:{self.klass}")


def _rules() -> list:
    try:
        from universalmutator import mutator  # noqa: PLC0415
    except ImportError as e:
        raise RulesError("universalmutator is not installed "
                         "(pip install -e '.[dev]')") from e
    return mutator


_PREPROCESSOR = re.compile(r"^\s*#")


def population(engine_dir: Path) -> list[RuleMutant]:
    """Every mutant the rules make of ``engine_dir/csrc``, file by file, line order."""
    mutator = _rules()
    out: list[RuleMutant] = []
    csrc = Path(engine_dir) / "csrc"
    for path in sorted(csrc.glob("*.[ch]")):
        if path.name in EXCLUDED:
            continue
        source = path.read_text(encoding="utf-8").splitlines(keepends=True)
        if source and not source[-1].endswith("\n"):
            source[-1] += "\n"
        with open(os.devnull, "w") as quiet:
            saved, sys.stdout = sys.stdout, quiet
            try:
                found = mutator.mutants_regexp(
                    source, ruleFiles=list(RULE_FILES), ignorePatterns=[],
                    ignoreStringOnly=True)
            finally:
                sys.stdout = saved
        cut = next((i for i, ln in enumerate(source, 1)
                    if ln.startswith(TEST_ONLY_MARK)), len(source) + 1)
        seen: dict[tuple[str, str], int] = {}
        for lineno, mutated, rule, (lhs, rhs) in found:
            if lineno >= cut:
                continue
            original = source[lineno - 1]
            if _PREPROCESSOR.match(original) or '".+"' == lhs.pattern:
                continue
            pair = (original.strip(), mutated.strip())
            n = seen.get(pair, 0)
            seen[pair] = n + 1
            out.append(RuleMutant(path.name, lineno, original, mutated, rule,
                                  _klass(lhs.pattern, rhs), n))
    return out


# -- compiling: did-not-compile and trivial compiler equivalence ------------

def _cflags() -> list[str]:
    from xcache.engine._build import (  # noqa: PLC0415  (the recipe, not the lib)
        CFLAGS,
        SEAM_CFLAGS,
    )

    # the instrumented build, as the mutation run builds and replays it; a
    # call of an undeclared name compiles (with a warning) but cannot link:
    # such a mutant does not build
    return [f for f in CFLAGS if f != "-g"] + SEAM_CFLAGS + [
        "-g0", "-UNDEBUG", "-Werror=implicit-function-declaration", "-c"]


def _units(csrc: Path, name: str) -> list[str]:
    """The .c files whose object code a change to ``name`` can change."""
    if name.endswith(".c"):
        return [name]
    pattern = re.compile(rf'#include\s+"{re.escape(name)}"')
    direct = [p.name for p in csrc.glob("*.[ch]")
              if p.name != name and pattern.search(p.read_text(encoding="utf-8"))]
    units: set[str] = set()
    for d in direct:
        units.update(_units(csrc, d) if d.endswith(".h") else [d])
    return sorted(units)


class _Compiler:
    """Compiles units of one private copy of csrc; remembers the originals."""

    def __init__(self, engine_dir: Path, work: Path) -> None:
        self.src = Path(engine_dir) / "csrc"
        self.dir = work / "csrc"
        shutil.copytree(self.src, self.dir)
        self.flags = _cflags()
        self.base: dict[str, bytes] = {}

    def _object(self, unit: str) -> bytes | None:
        out = self.dir / (unit + ".o")
        done = subprocess.run(
            ["gcc", *self.flags, "-I", str(self.dir), str(self.dir / unit),
             "-o", str(out)], capture_output=True)
        if done.returncode != 0:
            return None
        data = out.read_bytes()
        out.unlink()
        return data

    def verdict(self, m: RuleMutant) -> str:
        """``did-not-compile``, ``equivalent`` or ``kept`` for one mutant."""
        units = _units(self.src, m.file)
        for u in units:
            if u not in self.base:
                obj = self._object(u)
                if obj is None:
                    raise RulesError(f"the unmutated {u} does not compile")
                self.base[u] = obj
        target = self.dir / m.file
        text = target.read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        lines[m.line - 1] = m.mutated
        try:
            target.write_text("".join(lines), encoding="utf-8")
            same = True
            for u in units:
                obj = self._object(u)
                if obj is None:
                    return "did-not-compile"
                same = same and obj == self.base[u]
        finally:
            target.write_text(text, encoding="utf-8")
        return "equivalent" if same else "kept"


@dataclass
class Draw:
    """A sample and what the filter dropped on the way to it."""

    seed: int
    population: int
    kept: list[RuleMutant] = field(default_factory=list)
    equivalent: list[RuleMutant] = field(default_factory=list)
    did_not_compile: list[RuleMutant] = field(default_factory=list)

    def by_class(self) -> dict[str, int]:
        """How many kept mutants each operator class has."""
        return {c: sum(m.klass == c for m in self.kept) for c in CLASSES}


def draw(engine_dir: Path, n: int, seed: int = DEFAULT_SEED, jobs: int = 2,
         progress: Callable[[int, int], None] | None = None) -> Draw:
    """The first ``n`` compiling, non-equivalent mutants in the order of ``seed``."""
    if n < 1:
        raise RulesError(f"--generated {n}: it must be at least 1")
    if shutil.which("gcc") is None:
        raise RulesError("gcc is not on PATH")
    every = population(engine_dir)
    ordered = sorted(every, key=lambda m: m.order(seed))
    result = Draw(seed, len(every))
    with tempfile.TemporaryDirectory(prefix="xc-rules-") as tmp:
        compilers = [_Compiler(engine_dir, Path(tmp) / f"c{j}")
                     for j in range(max(1, jobs))]
        pos = 0
        with ThreadPoolExecutor(len(compilers)) as pool:
            while len(result.kept) < n and pos < len(ordered):
                batch = ordered[pos:pos + len(compilers)]
                pos += len(batch)
                verdicts = list(pool.map(lambda cm: cm[0].verdict(cm[1]),
                                         zip(compilers, batch, strict=False)))
                for m, v in zip(batch, verdicts, strict=True):
                    if v == "kept" and len(result.kept) < n:
                        result.kept.append(m)
                    elif v == "equivalent":
                        result.equivalent.append(m)
                    elif v == "did-not-compile":
                        result.did_not_compile.append(m)
                if progress is not None:
                    progress(len(result.kept), pos)
    return result


def catalogue(engine_dir: Path, mutants: Iterable[RuleMutant]) -> list[Mutant]:
    """The runner's mutants for a sample (snippets unique in today's files)."""
    texts: dict[str, str] = {}
    out = []
    for m in mutants:
        if m.file not in texts:
            texts[m.file] = (Path(engine_dir) / "csrc" / m.file).read_text("utf-8")
        out.append(m.as_mutant(texts[m.file]))
    return out


def listed_survivors(path: Path = SURVIVORS_FILE) -> dict[str, str]:
    """The generated survivors docs/QUALITY.md explains: id -> reason."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {k: v["reason"] for k, v in data.items()}


def main(argv: Sequence[str] | None = None) -> int:
    """Draw a sample and write it as a catalogue file; exit 0, or 2 if it cannot."""
    ap = argparse.ArgumentParser(prog="python -m xcache.hunt.mutants.rules",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--generated", type=int, default=300, metavar="N",
                    help="how many mutants to draw (default 300)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", dest="json_path", required=True, metavar="FILE",
                    help="write the sample here as a --catalogue file")
    ns = ap.parse_args(argv)
    try:
        d = draw(ROOT / "engine", ns.generated, ns.seed, ns.jobs)
    except RulesError as e:
        print(f"hunt.mutants.rules: {e}", file=sys.stderr)
        return 2
    cat = catalogue(ROOT / "engine", d.kept)
    Path(ns.json_path).write_text(json.dumps(
        [m.__dict__ for m in cat], indent=1) + "\n", encoding="utf-8")
    print(f"seed {d.seed}: {len(d.kept)} kept of {d.population} "
          f"({len(d.equivalent)} equivalent, {len(d.did_not_compile)} did not "
          f"compile on the way); by class: "
          + ", ".join(f"{c} {k}" for c, k in d.by_class().items() if k))
    return 0


if __name__ == "__main__":
    sys.exit(main())
