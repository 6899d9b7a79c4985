"""Seeded differential programs: generated scenarios judged by the oracle.

A *program* is a scenario (docs/SCENARIOS.md) that no one wrote: a seed, a
container and an option set give, through
:func:`gate.program_gen.generate`, a sequence of steps over every public
operation of the cache -- get, getmany, hold and release, ``hold_layer``
and ``unhold_many``, pin and unpin, prefetch plain and speculative, drain,
streams (taken whole, and opened, taken in part and finished later),
reset, trace records, files replaced, the faults (short reads, EIO, EINTR
storms, partial reads, refused allocations, a truncated shard, a corrupted
one) -- with a share of misuse (keys outside the layout, an expert named
twice, a second release, unpin of an unpinned expert) whose error kinds
are compared. After every step a check compares everything both backends
report (:data:`COMPARED`: bytes served, every counter the oracle models,
residency, holds, pins, the error kind of each call, ``check()``): the
oracle runs first and its values are the expected ones (a derived variant
of :mod:`gate.scenarios`), the engine must match.

Generation is deterministic from (seed, container, option set) and never
depends on timing: with read-ahead threads every prefetch is followed by a
drain, faults are armed only around calls whose reads meet them in a fixed
order, a labelled stream is made only without readers and, outside the
calls into a crowded cache (where its keys are meant to find no slot),
only when its misses surely find one (tracked conservatively from the
holds and pins taken); a
``hold_layer`` is made so too, or with more experts than surely free
slots, or under an armed fault, where it may be refused all or none.

:func:`shrink` reduces a failing program by delta debugging over its steps,
then over the keys of each step, and :func:`pinned` turns the result into a
scenario file with the oracle's values written in (it fails the same way
when pinned: :func:`run_one` on it reports the same first failing check).
``gate/scenarios/programs.json`` lists the programs every replay runs.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xcache import fixtures
from xcache.gate import SCENARIO_DIR, CannotRun
from xcache.gate.backend_api import COUNTERS, Fact, option_needs
from xcache.gate.backend_factory import factory
from xcache.gate.containers import Target, make_target
from xcache.gate.program_gen import OPTION_SETS, generate, with_checks
from xcache.gate.report import Report
from xcache.gate.scenario_run import ScenarioRun
from xcache.gate.scenarios import WATCHDOG, run_bounded
from xcache.gate.schema import check_programs
from xcache.gate.steps import NotApplicable, cache_options, compile_steps
from xcache.gate.trace_check import TRACE_VALUES
from xcache.oracle.bounded import UserFileError, load_json

#: The programs file every replay runs (a JSON object, see docs/SCENARIOS.md).
PROGRAMS_FILE = SCENARIO_DIR / "programs.json"

#: Counters the oracle does not model (time, page-cache origin).
_UNMODELLED = {"spec_adjusted_hits", "load_ns",
               "page_cache_loads", "page_cache_bytes", "device_loads",
               "device_bytes", "unknown_loads"}

#: What every check of a program compares, engine against oracle.
COMPARED: tuple[str, ...] = (
    *(c for c in COUNTERS if c not in _UNMODELLED),
    *(f.value for f in Fact),
    "reads", "errors", "published", "last_error",
    # each failure's layer, expert and offset (gate.error_fields)
    "error_fields",
    # each call of the Python face: outcome and words (gate.face_ops)
    "face",
)

def operations(program: dict[str, Any]) -> list[dict[str, Any]]:
    """The program's steps without its checks."""
    return [s for s in program["steps"] if s.get("op", "check") != "check"]


def _compared(steps: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The derived keys of each check: :data:`COMPARED`, and what its op adds."""
    out: dict[str, list[str]] = {}
    before: dict[str, Any] = {}
    for s in steps:
        if s.get("op", "check") != "check":
            before = s
            continue
        keys = list(COMPARED)
        if before.get("op") == "trace":
            keys += list(TRACE_VALUES)
        out[s["name"]] = keys
    return out


class _Quiet(Report):
    """A report that prints nothing: a program's checks are summed up."""

    def add(self, scenario: str, backend: str, name: str, ok: bool,
            detail: str, expected: Any, actual: Any) -> None:
        """Record one check silently."""
        self.checks.append({"scenario": scenario, "backend": backend,
                            "check": name, "passed": ok, "detail": detail,
                            "expected": expected, "actual": actual})

    def skip(self, scenario: str, reason: str) -> None:
        """Record one skip silently."""
        self.skipped.append({"scenario": scenario, "reason": reason})

    def na(self, scenario: str, backend: str, name: str,
           missing: list[str]) -> None:
        """Record one N/A silently."""
        self.not_applicable.append({"scenario": scenario, "backend": backend,
                                    "check": name, "missing": list(missing)})


class Outcome:
    """One program's run: its checks, and the first that failed (or None)."""

    def __init__(self, report: Report, variant: dict[str, Any]) -> None:
        self.report = report
        self.variant = variant
        self.failure: dict[str, Any] | None = (report.failed or [None])[0]

    @property
    def failed(self) -> bool:
        """Whether a check failed."""
        return self.failure is not None

    def signature(self) -> tuple[str, str] | None:
        """How it failed: (the backend, its first wrong value).

        The first wrong value in the order of :data:`_FIRST` then
        :data:`COMPARED`, so a shrunk program that fails with more or fewer
        counters off still fails the same way.
        """
        if self.failure is None:
            return None
        who = str(self.failure["backend"])
        expected, actual = self.failure.get("expected"), self.failure.get("actual")
        if not isinstance(expected, dict) or not isinstance(actual, dict):
            return who, str(self.failure.get("detail", ""))
        bad = [k for k, v in expected.items() if actual.get(k) != v]
        order = [*_FIRST, *COMPARED]
        bad.sort(key=lambda k: order.index(k) if k in order else len(order))
        return who, bad[0] if bad else ""


#: The wrong values that say most of how a program failed, first.
_FIRST = ("wrong_reads", "invariants", "errors", "last_error", "face",
          "held", "pinned", "resident")


#: ``backends(target, opts)``: the factories a program runs on, the judge
#: (``reference``) first; None is the oracle and the engine.
Backends = Callable[[Target, dict[str, Any]], list[Any]] | None


def run_one(engine: Any, work: Path, program: dict[str, Any],
            target: Target | None = None, timeout: float = 60.0,
            derived: bool = True, backends: Backends = None) -> Outcome:
    """Run one program (or pinned scenario, ``derived=False``) on both backends.

    The oracle runs first; with ``derived`` its values are the expected
    ones of every check's :data:`COMPARED` keys.  The scratch copies live
    under ``work/scratch``.  ``backends`` replaces the engine by another
    cache under test (gate/outside); the variant's ``judged`` names them.
    """
    if target is None:
        target = make_target(str(program["container"]), work)
    report = _Quiet()
    try:
        steps = compile_steps(program, target)
    except NotApplicable as e:
        report.skip(program["name"], str(e))
        return Outcome(report, {})
    opts = cache_options(program, target, dict(program["cache"]))
    variant: dict[str, Any] = {"suffix": "", "cache": {}, "expect": {}}
    if derived:
        variant["derive"] = _compared(steps)
    run_one.serial += 1  # type: ignore[attr-defined]
    makers = (backends(target, opts) if backends is not None else
              [factory(kind, engine, target, opts)
               for kind in ("oracle", "engine")])
    variant["judged"] = [m.name for m in makers if not m.reference]
    for make in makers:
        run = ScenarioRun(program, variant, steps, target,
                          work / "scratch" / f"p{run_one.serial}-{make.name}",  # type: ignore[attr-defined]
                          make, report, option_needs(opts))
        run_bounded(run, timeout)
    return Outcome(report, variant)


run_one.serial = 0  # type: ignore[attr-defined]


def pinned(program: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
    """``program`` as a scenario file: the oracle's values written in as pins."""
    derived = outcome.variant.get("derived", {})
    sc = {k: v for k, v in program.items() if k != "program"}
    steps = []
    for s in program["steps"]:
        if s.get("op", "check") == "check":
            s = {**s, "expect": {**s["expect"], **derived.get(s["name"], {})}}
        steps.append(s)
    sc["steps"] = steps
    return sc


def _rebuild(program: dict[str, Any], ops: list[dict[str, Any]]
             ) -> dict[str, Any] | None:
    """The program with ``ops`` as its steps, or None if it would not run.

    Labels must be taken before they are given back or read on; a step
    joined (``"then"``) to a step no longer after it is checked alone; a
    stream's ``get_first`` keeps only keys the stream still names (as
    generated: a get of a key outside it is another program).
    """
    ops = [{k: v for k, v in s.items() if k != "then"}
           if s.get("then") and (i + 1 == len(ops) or ops[i + 1]["op"] != s["then"])
           else s for i, s in enumerate(ops)]
    ops = [{**s, "get_first": [k for k in s["get_first"] if k in s["keys"]]}
           if "get_first" in s and isinstance(s.get("keys"), list) else s
           for s in ops]
    taken: set[str] = set()
    for s in ops:
        op = s["op"]
        if op in TAKE_LABEL:
            taken.add(str(s.get("label", "")))
        elif op in NEED_LABEL:
            if str(s.get("label", "")) not in taken:
                return None
            if op in ("stream_rest", "face_drop"):
                taken.discard(str(s.get("label", "")))
    return {**program, "steps": with_checks(ops)}


#: The steps that take a label, and those that need one taken before.
TAKE_LABEL = ("hold", "hold_layer", "stream_open", "face_get",
              "face_hold_layer", "face_stream")
NEED_LABEL = ("release", "unhold_many", "stream_next", "stream_rest",
              "face_read", "face_release", "face_drop")


def _ddmin(items: list[Any], fails: Callable[[list[Any]], bool]) -> list[Any]:
    """Delta debugging (ddmin): a 1-minimal sublist of ``items`` that fails."""
    n = 2
    while len(items) >= 2:
        size = max(1, len(items) // n)
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        reduced = False
        for i in range(len(chunks)):
            rest = [x for j, c in enumerate(chunks) if j != i for x in c]
            if rest and fails(rest):
                items, n, reduced = rest, max(n - 1, 2), True
                break
        if not reduced:
            if n >= len(items):
                break
            n = min(len(items), 2 * n)
    return items


def shrink(engine: Any, work: Path, program: dict[str, Any],
           target: Target | None = None, budget_s: float = 120.0,
           log: Callable[[str], None] | None = None,
           backends: Backends = None) -> dict[str, Any]:
    """A minimal program that fails as ``program`` does (:meth:`Outcome.signature`).

    Delta debugging over the operation steps, then over the keys of each
    step that names several; stops improving after ``budget_s`` seconds.
    """
    if target is None:
        target = make_target(str(program["container"]), work)
    want = run_one(engine, work, program, target,
                   backends=backends).signature()
    if want is None:
        raise CannotRun(f"{program['name']}: passes; nothing to shrink")
    end = time.monotonic() + budget_s
    tries = 0

    def fails(ops: list[dict[str, Any]]) -> bool:
        nonlocal tries
        if time.monotonic() > end:
            return False
        cand = _rebuild(program, ops)
        if cand is None:
            return False
        tries += 1
        try:
            got = run_one(engine, work, cand, target,
                          backends=backends).signature()
        except CannotRun:
            return False
        return got == want

    ops = _ddmin(operations(program), fails)
    for i in range(len(ops)):
        keys = ops[i].get("keys")
        if isinstance(keys, list) and len(keys) > 1:
            def fails_keys(ks: list[Any], i: int = i) -> bool:
                return fails([*ops[:i], {**ops[i], "keys": ks}, *ops[i + 1:]])
            ops[i] = {**ops[i], "keys": _ddmin(list(keys), fails_keys)}
    if log is not None:
        log(f"shrunk {program['name']}: {len(operations(program))} -> "
            f"{len(ops)} steps in {tries} runs")
    out = _rebuild(program, ops)
    assert out is not None
    return {**out, "name": program["name"] + "-shrunk"}


def load_programs(path: Path = PROGRAMS_FILE) -> list[dict[str, Any]]:
    """The pinned programs: every (container, option set, seed) the file lists."""
    try:
        data = load_json(path)
    except UserFileError as e:
        raise CannotRun(str(e)) from None
    except OSError as e:
        raise CannotRun(f"{path}: cannot read the programs file "
                        f"({e.strerror or e})") from None
    check_programs(data, path, tuple(OPTION_SETS))
    return [{"container": row["container"], "option_set": opt, "seed": seed,
             "length": row.get("length", data.get("length", 24))}
            for row in data["programs"] for opt in row["option_sets"]
            for seed in row["seeds"]]


def search_plan(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` more programs for a longer search: containers and options by seed."""
    rng = random.Random(seed)
    presets = sorted(p for p in fixtures.PRESETS if p.endswith("-mini"))
    return [{"container": rng.choice(presets),
             "option_set": rng.choice(sorted(OPTION_SETS)),
             "seed": rng.randrange(1 << 30), "length": rng.choice([24, 40])}
            for _ in range(n)]


def run_programs(engine: Any, work: Path, report: Report,
                 plan: list[dict[str, Any]], progress: bool = False,
                 shrink_failures: bool = True,
                 policies: list[str] | None = None,
                 first_failure: bool = False, backends: Backends = None,
                 restrict: Callable[[dict[str, Any], Target],
                                    dict[str, Any] | list[str]] | None = None
                 ) -> list[str]:
    """Run every program of ``plan``: one check line each in ``report``.

    The first failing program is shrunk (:func:`shrink`) and printed as a
    scenario file that can be pinned as it is (the others are listed: a
    broken engine often fails many).  Returns the programs' names.
    ``backends`` as :func:`run_one`; ``restrict(program, target)`` gives
    the program the cache under test can run (gate/outside/programs.py),
    or the capabilities it lacks for any of it: the program is then N/A.
    """
    targets: dict[str, Target] = {}
    names = []
    shrunk = False
    t0 = time.monotonic()
    for i, row in enumerate(plan):
        ref = row["container"]
        if ref not in targets:
            targets[ref] = make_target(ref, work)
        target = targets[ref]
        program = generate(row["seed"], target, row["option_set"],
                           length=row.get("length", 24), policies=policies)
        if restrict is not None:
            kept = restrict(program, target)
            if isinstance(kept, list):  # the capabilities it lacks
                names.append(program["name"])
                report.na(program["name"], "cache", program["name"], kept)
                continue
            program = kept
        out = run_one(engine, work, program, target, backends=backends)
        names.append(program["name"])
        n_checks = len(out.report.checks)
        if out.failed:
            f = out.failure
            assert f is not None
            report.add(program["name"], f["backend"], program["name"], False,
                       f"{f['check']}: {f['detail']}", f["expected"],
                       f["actual"])
            if shrink_failures and shrunk:
                print("  not shrunk: one failing program is shrunk a run")
            elif shrink_failures and WATCHDOG.is_stuck():
                print("  not shrunk: the engine is stuck (a run timed out)")
            elif shrink_failures:
                shrunk = True
                try:
                    small = shrink(engine, work, program, target, log=print,
                                   backends=backends)
                except CannotRun as e:  # it passed when run again
                    print(f"  not shrunk: {e} when run again (a failure "
                          "that does not repeat)")
                else:
                    again = run_one(engine, work, small, target,
                                    backends=backends)
                    print(f"  scenario of {small['name']} (pin it as "
                          f"gate/scenarios/{small['name']}.json):")
                    print(json.dumps(pinned(small, again), indent=1))
            if first_failure:
                break
        elif out.report.skipped:
            report.skip(program["name"], out.report.skipped[0]["reason"])
        else:
            report.add(program["name"], ", ".join(out.variant.get(
                "judged", ["engine"])), program["name"], True,
                       f"{n_checks} checks", None, None)
        if progress and ((i + 1) % 10 == 0 or i + 1 == len(plan)):
            print(f"  programs: {i + 1} of {len(plan)} run, "
                  f"{len(report.failed)} failed, "
                  f"{time.monotonic() - t0:.1f} s", flush=True)
    return names
