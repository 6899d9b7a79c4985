"""The tool fuzzer: every file and argument a user hands the tools, made hostile.

``python -m xcache.hunt.fuzz tools --seconds N`` runs it (docs: hunt/README.md,
"Tool fuzzer").  Each *case* is one command of a tool -- ``engine.inspector``,
the gate's container step (``hunt.fuzz.gate_container``, what
``replay.py --container`` does before its scenarios), the gate's scenario
and programs files (``hunt.fuzz.gate_files``), an outside cache's adapter
folder (``hunt.fuzz.gate_cache``: what ``replay.py --cache`` does before
it compiles the cache), ``python -m xcache.fixtures``
new / verify / from-header / identify / checkpoint, ``replay.py`` lab /
predict / time (its trace and its ``--model`` file) -- run in
a fresh folder holding the seed inputs (``hunt/fuzz/corpus-tools/seed``)
with one of them changed.  hypothesis draws the change: a valid document
with one field set to a hostile value (wrong type, NaN, inf, negative,
zero, 1e9, 2**62, 1e12, a deeply nested value, a list for an object), the
whole document replaced, raw byte edits and truncation of a seed, a
sparse file past every reader's size limit, a TOML key, table header,
inline table or array nested past the readers' limit, a FIFO or a folder
in a file's place, or a hostile command-line value.

The modules: :mod:`hunt.fuzz.case` (a case, its limits -- 2 GiB of
address space, :data:`CPU_SECONDS` of CPU, a wall-clock timeout -- and
:func:`judge`: only success, or exit 2 with exactly one line on stderr
that names the changed file or option), :mod:`hunt.fuzz.mutate` (the
hostile edits), one module per group of targets under
:mod:`hunt.fuzz.targets` (containers, fixtures, traces, gate_files, models,
adapters: each its :class:`Target` rows and strategies), and this one: the
run.  A
finding whose signature (target, exception or outcome, innermost project
file) is in :data:`KNOWN` is counted as known and does not fail the run.

Every case in ``hunt/fuzz/corpus-tools/cases/`` is replayed first: the
fixed findings, kept as regressions.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from xcache.hunt.fuzz import case as _case
from xcache.hunt.fuzz.case import (  # noqa: F401 - the fuzzer's names, in one place
    ADDRESS_BYTES,
    CASES,
    CORPUS,
    CPU_SECONDS,
    FILE_BYTES,
    ROOT,
    SEED,
    WALL_SECONDS,
    WRITE_LIMIT_BYTES,
    Case,
    Outcome,
    Target,
    judge,
)
from xcache.hunt.fuzz.mutate import dump_json, dump_toml  # noqa: F401
from xcache.hunt.fuzz.targets import (
    adapters,
    containers,
    fixtures,
    gate_files,
    models,
    traces,
)
from xcache.hunt.fuzz.targets.traces import TRACES  # noqa: F401

_GROUPS = (containers, fixtures, traces, gate_files, models, adapters)
#: Every target by name.
TARGETS: dict[str, Target] = {t.name: t for g in _GROUPS for t in g.TARGETS}
#: Every drawn target's strategy (``new`` draws ``new-toml`` too).
STRATEGIES: dict[str, Callable[[], st.SearchStrategy[Case]]] = {
    k: v for g in _GROUPS for k, v in g.STRATEGIES.items()}


#: Each file a user hands a tool (the tool's parser: command and option,
#: as tests/boundary/test_one_writer_one_reader.py walks them) and the
#: targets that make it hostile; a new input option is fuzzed here or said
#: in :data:`NOT_FUZZED` (that test fails otherwise).
INPUTS: dict[str, tuple[str, ...]] = {
    "gate container": ("gate-container", "gate-spec"),
    "gate cache": ("gate-cache",),
    "gate programs_file": ("gate-programs",),
    "lab trace": ("lab",),
    "predict trace": ("predict",),
    "predict train": ("predict",),
    "time trace": ("time",),
    "time model": ("time", "time-toml"),
    "inspect path": ("inspect",),
    "inspect layout": ("inspect-layout",),
    "fixtures new spec": ("new", "new-toml"),
    "fixtures verify dir": ("verify",),
    "fixtures from-header src": ("from-header",),
    "fixtures checkpoint description": ("checkpoint",),
    "fixtures identify container": ("identify",),
    "fixtures identify file": ("identify",),
}
#: Input options no target fuzzes, and why.
NOT_FUZZED: dict[str, str] = {
    "gate engine_src": "an engine source tree: the gate checks its pinned "
                       "digests before it builds anything (a changed file is "
                       "one refusal naming it); the engine's own parsers are "
                       "fuzzed in hunt/fuzz's reader corpus",
}


def run_case(case: Case, work: Path) -> tuple[Outcome, Path]:
    """Lay out ``case`` in a fresh folder under ``work`` and run it."""
    return _case.run_case(case, TARGETS[case.target], work)


# -- known findings -------------------------------------------------------------------


@dataclass(frozen=True)
class Known:
    """A finding not fixed yet: its signature, the issue it belongs to."""

    target: str
    kind: str  # exception type or outcome ("timeout", "exit 2", ...): a prefix
    where: str  # innermost project file of the traceback ("" for none)
    issue: str
    what: str
    match: str = ""  # a regex the output must hold too ("" for any)


#: Findings not fixed yet, each naming its issue; the list is emptied as
#: they are fixed (their cases kept in ``corpus-tools/cases/``).  Matched on
#: (target, kind, where) and :attr:`Known.match`.
KNOWN: list[Known] = []


# -- running --------------------------------------------------------------------------


@dataclass
class Finding:
    """A case whose outcome :func:`judge` refused."""

    case: Case
    why: str
    kind: str
    where: str
    known: Known | None
    excerpt: str

    def line(self) -> str:
        """One report line."""
        tag = f"known ({self.known.issue})" if self.known else "FINDING"
        return (f"{tag}: {self.case.target}: {self.case.note}: {self.why} "
                f"[{self.kind}{' in ' + self.where if self.where else ''}]")


@dataclass
class Report:
    """Every case run and every finding, by signature."""

    runs: int = 0
    rounds: int = 0  #: rounds of new cases drawn after the corpus
    by_target: dict[str, int] = field(default_factory=dict)
    findings: dict[tuple[str, str, str], list[Finding]] = field(default_factory=dict)

    @property
    def new(self) -> list[Finding]:
        """One finding per signature not in :data:`KNOWN`."""
        return [v[0] for v in self.findings.values() if v[0].known is None]

    @property
    def known(self) -> list[Finding]:
        """One finding per signature in :data:`KNOWN`."""
        return [v[0] for v in self.findings.values() if v[0].known is not None]


def known_for(target: str, kind: str, where: str, text: str = "") -> Known | None:
    """The :data:`KNOWN` entry with this signature, if any."""
    for k in KNOWN:
        if (k.target == target and kind.startswith(k.kind) and k.where == where
                and re.search(k.match, text, re.M)):
            return k
    return None


def check(case: Case, work: Path, report: Report, keep: Path | None = None,
          log: Callable[[str], None] | None = None) -> Finding | None:
    """Run ``case``, judge it, add it to ``report``; return its finding or None."""
    target = TARGETS[case.target]
    out, d = run_case(case, work)
    report.runs += 1
    report.by_target[case.target] = report.by_target.get(case.target, 0) + 1
    why = judge(case, target, out)
    shutil.rmtree(d, ignore_errors=True)
    if why is None:
        return None
    kind, where = out.signature()
    text = (out.stderr or out.stdout).strip().splitlines()
    excerpt = " | ".join(text[-3:])[:300]
    f = Finding(case, why, kind, where,
                known_for(case.target, kind, where, out.stdout + out.stderr),
                excerpt)
    sig = (case.target, kind, where)
    first = sig not in report.findings
    report.findings.setdefault(sig, []).append(f)
    if first:
        if log is not None:
            log(f.line() + "\n    " + excerpt)
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9]+", "-", f"{case.target}-{kind}-{where}")
            (keep / f"finding-{name}.json").write_text(
                json.dumps(case.to_json(), indent=1) + "\n")
    return f


def corpus_cases(known: bool = True) -> list[Case]:
    """The cases kept in ``corpus-tools/cases/``.

    ``known-*.json`` reproduce :data:`KNOWN` findings (the issue's examples
    in files not fixed yet); ``known=False`` leaves them out, so only the
    fixed findings, the regressions, are run.
    """
    return [Case.from_json(json.loads(p.read_text()))
            for p in sorted(CASES.glob("*.json"))
            if known or not p.name.startswith("known-")]


def explore(targets: list[str], work: Path, report: Report, *, examples: int,
            derandomize: bool, keep: Path | None = None,
            log: Callable[[str], None] | None = None,
            seed: int | None = None) -> None:
    """Draw ``examples`` cases over ``targets`` with hypothesis and check each.

    With ``seed`` the draw is that seed's, the same on every machine.
    """

    @settings(max_examples=examples, deadline=None, database=None,
              derandomize=derandomize, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(targets))
        case = data.draw(STRATEGIES[name]())
        check(case, work, report, keep, log)

    if seed is not None:
        one = hypothesis_seed(seed)(one)
    one()


def prepare(work: Path) -> None:
    """Make the session's fixture (the verify/identify targets need it)."""
    fixtures.prepare(work)


def run(seconds: float, targets: list[str] | None = None, *,
        keep: Path | None = None, log: Callable[[str], None] = print,
        replay_corpus: bool = True, seed: int | None = None,
        rounds: int | None = None) -> Report:
    """Replay the corpus, then fuzz for ``seconds``; return the report.

    With ``seed``, round i draws with seed ``seed + i`` (the same cases on
    every machine, in the same order); ``rounds`` caps the rounds (5 cases
    each), so a run is a fixed set of cases whatever the machine's speed.
    """
    targets = targets or list(STRATEGIES)
    report = Report()
    with tempfile.TemporaryDirectory(prefix="xc-toolfuzz-") as w:
        work = Path(w)
        prepare(work)
        if replay_corpus:
            for case in corpus_cases():
                check(case, work, report, keep, log)
        end = time.monotonic() + seconds
        done = 0
        while time.monotonic() < end and (rounds is None or done < rounds):
            explore(targets, work, report, examples=5, derandomize=False,
                    keep=keep, log=log,
                    seed=None if seed is None else seed + done)
            done += 1
        report.rounds = done
    return report
