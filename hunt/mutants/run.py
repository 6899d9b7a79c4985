"""Runs engine mutants: plant, re-pin, build and replay each one as CI would.

For each mutant: a scratch copy of the checkout's ``engine/`` (the whole
checkout with ``--pytest``) under a temporary folder, the mutant planted,
``python replay.py --engine-src SCRATCH --repin``, then ``python replay.py
--engine-src SCRATCH OUT --json REPORT`` (which builds it once).  Replay exit
1 is *caught* (the failed checks say by what), 0 *missed*, a build failure
*did-not-compile*, no end within ``--timeout`` *timed-out*, a replay killed
by a signal *crashed*, a snippet that is not there *not-applicable*.  With
``--pytest SELECTION`` the same build (kept by replay) also runs that pytest
selection in the scratch checkout (``XC_ENGINE_LIB``).

Exit status: 0 no applicable mutant survived replay, 1 one did (with
``--allow-known``: one not in ``KNOWN_SURVIVORS``), 2 the tool could not run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from xcache.hunt.mutants import rules
from xcache.hunt.mutants.catalogue import (
    CATALOGUE,
    KNOWN_SURVIVORS,
    Mutant,
    NotApplicable,
    apply_mutant,
)
from xcache.hunt.mutants.selections import BEHAVIOUR_TESTS, targeted_tests

ROOT = Path(__file__).resolve().parents[2]

#: The engine build's object-cache switch (engine/_build.py; faults never
#: imports engine, so the name is repeated here).
OBJ_CACHE_ENV = "XC_OBJ_CACHE"

CAUGHT = "caught"
MISSED = "missed"
TIMED_OUT = "timed-out"
NO_COMPILE = "did-not-compile"
NOT_APPLICABLE = "not-applicable"
CRASHED = "crashed"
ERROR = "error"
#: The replay stage's verdict under ``--pytest-only``.
SKIPPED = "skipped"
#: Verdicts in which the gate (or the tests) failed the mutant.
KILLED = (CAUGHT, CRASHED, TIMED_OUT)

#: Replay's own per-scenario watchdog (its --timeout) during a mutation run:
#: the scenarios take about 2 s in all, so a stuck one is known long before
#: replay's default of 120 s.
DEFAULT_REPLAY_TIMEOUT_S = 30.0
DEFAULT_TIMEOUT_S = 600.0

_IGNORE = shutil.ignore_patterns("__pycache__", "*.so", "*.o", "build",
                                 ".git", ".venv*", ".pytest_cache",
                                 ".hypothesis", ".ruff_cache", "*.egg-info",
                                 "replay-work*")


class ToolError(Exception):
    """The runner itself cannot run (bad option, unreadable catalogue)."""


@dataclass
class Stage:
    """What one stage (replay or pytest) said of one mutant."""

    verdict: str
    rc: int | None = None
    caught_by: list[str] = field(default_factory=list)
    detail: str = ""


@dataclass
class Result:
    """One mutant's outcome."""

    id: str
    contract: str
    file: str
    description: str
    replay: Stage
    pytest: Stage | None = None
    seconds: float = 0.0


def _run(cmd: Sequence[str], cwd: Path, timeout: float,
         env: dict[str, str] | None = None) -> tuple[int | None, str, str]:
    """Run ``cmd``; (rc, stdout, stderr), rc None when it outlived ``timeout``.

    The command runs in a session of its own, so a timeout ends it and
    every process it started (the compiler, a stuck replay's threads).
    """
    p = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return None, out, err


def _tail(text: str, n: int = 6) -> str:
    """The last ``n`` non-empty lines of ``text``, joined by ' | '."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join(lines[-n:])


def failed_checks(report: dict[str, Any]) -> list[str]:
    """``scenario: check`` of every failed check of a replay JSON report, once."""
    seen: list[str] = []
    for c in report.get("checks", []):
        if not c.get("passed", True):
            name = f"{c.get('scenario')}: {c.get('check')}"
            if name not in seen:
                seen.append(name)
    return seen


def _replay(root: Path, scratch: Path, timeout: float, replay_timeout: float,
            keep: bool, sanitize: bool = False) -> Stage:
    """Re-pin and replay the mutated engine in ``scratch``; the replay stage.

    With ``sanitize`` the replay runs ``--sanitize`` (gate/sanitize.py): a
    sanitizer report is a failed check named ``sanitizer``.
    """
    py = sys.executable
    rc, out, err = _run([py, "replay.py", "--engine-src", str(scratch),
                         "--repin"], root, timeout)
    if rc != 0:
        return Stage(ERROR, rc, detail="re-pin failed: " + _tail(err or out))
    report = scratch / "replay.json"
    cmd = [py, "replay.py", "--engine-src", str(scratch), str(scratch / "out"),
           "--json", str(report), "--timeout", f"{replay_timeout:g}"]
    if keep:
        cmd.append("--keep")
    if sanitize:
        cmd.append("--sanitize")
    rc, out, err = _run(cmd, root, timeout)
    if rc is None:
        return Stage(TIMED_OUT, None,
                     detail=f"replay did not end within {timeout:g} s")
    if rc == 0:
        return Stage(MISSED, 0)
    if rc == 1:
        try:
            names = failed_checks(json.loads(report.read_text()))
        except (OSError, ValueError) as e:
            return Stage(CAUGHT, 1, ["(no report)"],
                         f"replay failed but wrote no report ({e})")
        return Stage(CAUGHT, 1, names)
    if rc == 2 and "engine build failed" in err:
        return Stage(NO_COMPILE, 2, detail=_tail(err, 4))
    if rc < 0:
        return Stage(CRASHED, rc, [f"(replay killed by signal {-rc})"],
                     _tail(err, 4))
    return Stage(ERROR, rc, detail=_tail(err or out))


def _kept_build(scratch: Path) -> Path | None:
    """The engine build replay kept under ``scratch/out``, if there is one."""
    found = sorted((scratch / "out").glob("replay-work*/build/**/_xc*.so"))
    return found[0] if found else None


def _pytest(scratch: Path, selection: str, timeout: float) -> Stage:
    """Run the pytest ``selection`` in ``scratch`` against the mutant's build."""
    so = _kept_build(scratch)
    py = sys.executable
    if so is None:  # replay kept none (it did not get that far): build here
        rc, out, err = _run([py, "-m", "xcache.engine._build", "--out",
                             str(scratch / "pybuild"), "--src", "engine"],
                            scratch, timeout)
        if rc != 0:
            return Stage(NO_COMPILE if rc else TIMED_OUT, rc,
                         detail=_tail(err or out, 4))
        so = Path(out.strip().splitlines()[-1])
    env = dict(os.environ, XC_ENGINE_LIB=str(so),
               XC_HYPOTHESIS_PROFILE=os.environ.get("XC_HYPOTHESIS_PROFILE",
                                                    "ci"))
    env.pop("PYTHONPATH", None)
    cmd = [py, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
           *shlex.split(selection)]
    rc, out, err = _run(cmd, scratch, timeout, env)
    if rc is None:
        return Stage(TIMED_OUT, None,
                     detail=f"pytest did not end within {timeout:g} s")
    if rc == 0:
        return Stage(MISSED, 0)
    if rc == 1:
        names = [ln.split(" ", 1)[1].split(" - ")[0] for ln in out.splitlines()
                 if ln.startswith("FAILED ") or ln.startswith("ERROR ")]
        return Stage(CAUGHT, 1, names or ["(pytest failed)"])
    if rc < 0:
        return Stage(CRASHED, rc, [f"(pytest killed by signal {-rc})"])
    return Stage(ERROR, rc, detail=_tail(out + err))


def run_one(m: Mutant, root: Path, timeout: float = DEFAULT_TIMEOUT_S,
            replay_timeout: float = DEFAULT_REPLAY_TIMEOUT_S,
            pytest_sel: str | None = None, pytest_missed: bool = False,
            pytest_only: bool = False, sanitize: bool = False) -> Result:
    """Plant ``m`` in a scratch copy of ``root``, replay it (and pytest).

    ``pytest_sel`` "targeted" is :func:`targeted_tests` of the mutant's
    file; with ``pytest_missed`` pytest runs only when replay missed it.
    """
    if pytest_sel == "targeted":
        pytest_sel = targeted_tests(m.file)
    t0 = time.perf_counter()
    res = Result(m.id, m.contract, m.file, m.description, Stage(ERROR))
    scratch = Path(tempfile.mkdtemp(prefix=f"xc-mutant-{m.id}-"))
    try:
        if pytest_sel is None:
            shutil.copytree(root / "engine", scratch / "engine", ignore=_IGNORE)
        else:
            shutil.copytree(root, scratch, ignore=_IGNORE, dirs_exist_ok=True)
        try:
            apply_mutant(m, scratch / "engine")
        except NotApplicable as e:
            res.replay = Stage(NOT_APPLICABLE, detail=str(e))
            return res
        if pytest_only:  # the mutant's pytest verdict alone (pins current)
            rc, out, err = _run([sys.executable, "replay.py", "--engine-src",
                                 str(scratch), "--repin"], root, timeout)
            res.replay = Stage(SKIPPED if rc == 0 else ERROR, rc,
                               detail="--pytest-only" if rc == 0 else
                               "re-pin failed: " + _tail(err or out))
        else:
            res.replay = _replay(root, scratch, timeout, replay_timeout,
                                 keep=pytest_sel is not None,
                                 sanitize=sanitize)
        if pytest_sel is not None and res.replay.verdict not in (
                NO_COMPILE, ERROR) and (not pytest_missed
                                        or res.replay.verdict in (MISSED,
                                                                  SKIPPED)):
            res.pytest = _pytest(scratch, pytest_sel, timeout)
        return res
    finally:
        res.seconds = time.perf_counter() - t0
        shutil.rmtree(scratch, ignore_errors=True)


def run_all(mutants: Sequence[Mutant], root: Path, jobs: int,
            timeout: float = DEFAULT_TIMEOUT_S,
            replay_timeout: float = DEFAULT_REPLAY_TIMEOUT_S,
            pytest_sel: str | None = None,
            on_result: Callable[[Result], None] | None = None,
            pytest_missed: bool = False,
            pytest_only: bool = False,
            sanitize: bool = False) -> list[Result]:
    """Run every mutant, ``jobs`` at a time; results in catalogue order.

    The builds share one object cache (``XC_OBJ_CACHE``, engine/_build.py)
    for the run unless the caller set one: a mutant recompiles only the file
    it changed.
    """
    def one(m: Mutant) -> Result:
        r = run_one(m, root, timeout, replay_timeout, pytest_sel, pytest_missed,
                    pytest_only, sanitize)
        if on_result is not None:
            on_result(r)
        return r

    before = os.environ.get(OBJ_CACHE_ENV)
    with tempfile.TemporaryDirectory(prefix="xc-mutant-objs-") as objs:
        if before is None:
            os.environ[OBJ_CACHE_ENV] = objs
        try:
            with ThreadPoolExecutor(max_workers=jobs) as ex:
                return list(ex.map(one, mutants))
        finally:
            if before is None:
                os.environ.pop(OBJ_CACHE_ENV, None)


#: The check ``replay.py --sanitize`` names a sanitizer report by.
SANITIZER_CHECK = "sanitizer"


def by_sanitizer(stage: Stage) -> bool:
    """Whether a caught replay stage was caught by sanitizer reports alone."""
    return stage.verdict == CAUGHT and bool(stage.caught_by) and all(
        n.endswith(f": {SANITIZER_CHECK}") for n in stage.caught_by)


def survivors(results: Sequence[Result]) -> list[str]:
    """Ids of the mutants replay missed."""
    return [r.id for r in results if r.replay.verdict == MISSED]


def _checks_cell(stage: Stage | None, width: int = 48) -> str:
    if stage is None or not stage.caught_by:
        return "-" if stage is None or not stage.detail else stage.detail[:width]
    first = stage.caught_by[0]
    more = f" +{len(stage.caught_by) - 1}" if len(stage.caught_by) > 1 else ""
    cell = first + more
    return cell if len(cell) <= width else first[:width - len(more) - 1] + "…" + more


def table(results: Sequence[Result]) -> str:
    """The results as an aligned text table, one mutant a line."""
    head = ("id", "contract", "file", "description", "replay", "caught by",
            "pytest", "s")
    rows = [head]
    for r in results:
        rows.append((r.id, r.contract, r.file, r.description, r.replay.verdict,
                     _checks_cell(r.replay),
                     r.pytest.verdict if r.pytest else "-", f"{r.seconds:.0f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths,
                                                          strict=True)).rstrip()
                     for row in rows)


def load_catalogue(path: Path) -> list[Mutant]:
    """Mutants from a JSON file: a list of objects with the Mutant fields."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ToolError(f"--catalogue {path}: cannot read it: {e}") from e
    if not isinstance(data, list):
        raise ToolError(f"--catalogue {path}: not a JSON list of mutants")
    names = ("id", "file", "original", "replacement", "description",
             "contract")
    out = []
    for i, d in enumerate(data):
        if not isinstance(d, dict) or set(d) != set(names) or not all(
                isinstance(d[k], str) for k in names):
            raise ToolError(f"--catalogue {path}: entry {i} must have exactly "
                            f"the string fields {', '.join(names)}")
        out.append(Mutant(**d))
    return out


def select(mutants: Sequence[Mutant], only: str | None) -> list[Mutant]:
    """The mutants ``--only`` names (comma-separated ids), in catalogue order."""
    if only is None:
        return list(mutants)
    want = [s.strip() for s in only.split(",") if s.strip()]
    known = {m.id for m in mutants}
    bad = [w for w in want if w not in known]
    if not want or bad:
        raise ToolError(f"--only {only!r}: no such mutant "
                        f"{', '.join(bad) or '(empty list)'}; ids are "
                        f"{min(known)}..{max(known)}")
    return [m for m in mutants if m.id in want]


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m xcache.hunt.mutants``."""
    ap = argparse.ArgumentParser(
        prog="python -m xcache.hunt.mutants",
        description="Plant each engine mutant in a scratch copy, re-pin, "
                    "build and replay it as CI gates a candidate; report "
                    "which checks caught it.")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="mutants run at once (default: the cores)")
    ap.add_argument("--only", metavar="IDS",
                    help="comma-separated mutant ids, e.g. M01,M07")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                    metavar="S", help="seconds per mutant and stage "
                    f"(default {DEFAULT_TIMEOUT_S:g})")
    ap.add_argument("--replay-timeout", type=float,
                    default=DEFAULT_REPLAY_TIMEOUT_S, metavar="S",
                    help="replay's own per-scenario watchdog (default "
                    f"{DEFAULT_REPLAY_TIMEOUT_S:g})")
    ap.add_argument("--pytest", metavar="SELECTION",
                    help='also run this pytest selection against each mutant, '
                         'e.g. "tests/ -m \'not slow\'"; "behaviour" names '
                         'the behaviour selection (BEHAVIOUR_TESTS), '
                         '"targeted" the tests of the mutated file (FILE_TESTS)')
    ap.add_argument("--pytest-missed", action="store_true",
                    help="run --pytest only for the mutants replay missed")
    ap.add_argument("--pytest-only", action="store_true",
                    help="run --pytest without replay (for mutants whose "
                         "replay verdict is known)")
    ap.add_argument("--json", dest="json_path", metavar="FILE",
                    help="write the report as JSON")
    ap.add_argument("--sanitize", action="store_true",
                    help="replay each mutant with --sanitize (an ASan + UBSan "
                         "engine): a mutant only a sanitizer report catches "
                         "is caught by the check 'sanitizer'")
    ap.add_argument("--catalogue", metavar="FILE",
                    help="a JSON list of mutants instead of the built-in one")
    ap.add_argument("--allow-known", action="store_true",
                    help="exit 0 when every survivor is in KNOWN_SURVIVORS")
    ap.add_argument("--generated", type=int, metavar="N",
                    help="instead of the catalogue, draw N mutants by rule "
                         "(hunt/mutants/rules.py) and run them; a survivor "
                         "not listed with its reason in "
                         "generated_survivors.json fails the run")
    ap.add_argument("--seed", type=int, default=rules.DEFAULT_SEED,
                    help="the draw's seed with --generated (default "
                         f"{rules.DEFAULT_SEED})")
    ap.add_argument("--root", default=str(ROOT), metavar="DIR",
                    help="the checkout whose engine is mutated (default: "
                         "this one)")
    return ap


def _draw_progress(n: int) -> Callable[[int, int], None]:
    """A progress printer for a draw: a line per tenth of the sample."""
    step = max(1, n // 10)
    last = [0]

    def report(kept: int, tried: int) -> None:
        if kept >= last[0] + step or kept == n:
            last[0] = kept
            print(f"  drawn {kept} of {n} ({tried} tried)", flush=True)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv``; return the exit status (0, 1 or 2)."""
    try:
        ns = parser().parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    try:
        if ns.jobs < 1:
            raise ToolError(f"--jobs {ns.jobs}: it must be at least 1")
        if not ns.timeout > 0:
            raise ToolError(f"--timeout {ns.timeout:g}: it must be above 0")
        if not ns.replay_timeout > 0:
            raise ToolError(f"--replay-timeout {ns.replay_timeout:g}: it must "
                            "be above 0")
        if ns.pytest is not None and ns.pytest.strip() == "behaviour":
            ns.pytest = " ".join(BEHAVIOUR_TESTS)
        if ns.pytest is not None and not ns.pytest.strip():
            raise ToolError("--pytest: an empty selection")
        root = Path(ns.root).resolve()
        if not (root / "replay.py").is_file() or not (root / "engine").is_dir():
            raise ToolError(f"--root {ns.root}: no checkout there (expected "
                            "replay.py and engine/)")
        if ns.generated is not None and ns.catalogue:
            raise ToolError("--generated and --catalogue: give one of them")
        classes: dict[str, str] = {}
        if ns.generated is not None:
            print(f"drawing {ns.generated} mutants by rule, seed {ns.seed}",
                  flush=True)
            d = rules.draw(root / "engine", ns.generated, ns.seed, ns.jobs,
                           _draw_progress(ns.generated))
            print(f"seed {d.seed}: {len(d.kept)} kept of {d.population} "
                  f"({len(d.equivalent)} equivalent by object code, "
                  f"{len(d.did_not_compile)} did not compile, on the way)",
                  flush=True)
            mutants = rules.catalogue(root / "engine", d.kept)
            classes = {m.id: m.klass for m in d.kept}
        else:
            mutants = (load_catalogue(Path(ns.catalogue)) if ns.catalogue
                       else list(CATALOGUE))
        if len({m.id for m in mutants}) != len(mutants):
            raise ToolError("the catalogue has duplicate ids")
        mutants = select(mutants, ns.only)
    except (ToolError, rules.RulesError) as e:
        print(f"hunt.mutants: {e}", file=sys.stderr)
        return 2

    print(f"{len(mutants)} mutants, {ns.jobs} at a time, from {root}",
          flush=True)
    t0 = time.perf_counter()

    def progress(r: Result) -> None:
        extra = f", pytest {r.pytest.verdict}" if r.pytest else ""
        how = " (by the sanitizer)" if by_sanitizer(r.replay) else ""
        print(f"  {r.id} {r.replay.verdict}{how}{extra} ({r.seconds:.0f} s)",
              flush=True)

    if ns.pytest_only and ns.pytest is None:
        print("hunt.mutants: --pytest-only needs --pytest", file=sys.stderr)
        return 2
    results = run_all(mutants, root, ns.jobs, ns.timeout, ns.replay_timeout,
                      ns.pytest, progress, ns.pytest_missed, ns.pytest_only,
                      ns.sanitize)
    total = time.perf_counter() - t0
    print(table(results))
    counts: dict[str, int] = {}
    for r in results:
        counts[r.replay.verdict] = counts.get(r.replay.verdict, 0) + 1
    surv = survivors(results)
    if classes:
        listed = rules.listed_survivors()
        unexpected = [i for i in surv if i not in listed]
        for c in rules.CLASSES:
            of = [r for r in results if classes.get(r.id) == c]
            if of:
                killed = sum(r.replay.verdict != MISSED for r in of)
                both = sum(r.replay.verdict != MISSED or (
                    r.pytest is not None and r.pytest.verdict in KILLED)
                    for r in of)
                extra = (f", replay or pytest {both}" if ns.pytest is not None
                         else "")
                print(f"  {c}: replay killed {killed} of {len(of)}{extra}")
    else:
        unexpected = [i for i in surv if i not in KNOWN_SURVIVORS or
                      ns.catalogue is not None]
    stale = sorted(i for i in KNOWN_SURVIVORS
                   if i in {r.id for r in results} and i not in surv)
    san_kills = [r.id for r in results if by_sanitizer(r.replay)]
    print(f"replay: {', '.join(f'{v} {n}' for v, n in sorted(counts.items()))}"
          f"; {total:.0f} s with --jobs {ns.jobs}")
    if ns.sanitize:
        print(f"caught by a sanitizer report alone: {len(san_kills)}"
              + (f" ({', '.join(san_kills)})" if san_kills else ""))
    if surv:
        print(f"survivors: {', '.join(surv)}")
    if stale:
        print(f"listed in KNOWN_SURVIVORS but now killed: {', '.join(stale)}")
    errors = [r.id for r in results if r.replay.verdict == ERROR]
    if ns.json_path:
        doc = {"date": datetime.date.today().isoformat(), "root": str(root),
               "jobs": ns.jobs, "total_s": round(total, 1),
               "sanitize": ns.sanitize, "sanitizer_kills": san_kills,
               "summary": counts, "survivors": surv,
               "seed": ns.seed if classes else None, "classes": classes,
               "unexpected_survivors": unexpected, "stale_known": stale,
               "mutants": [asdict(r) for r in results]}
        dest = Path(ns.json_path)
        tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
        try:
            tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
            os.replace(tmp, dest)
        except OSError as e:
            print(f"hunt.mutants: --json {dest}: cannot write it: {e}",
                  file=sys.stderr)
            return 2
        finally:
            tmp.unlink(missing_ok=True)
    if errors:
        for r in results:
            if r.replay.verdict == ERROR:
                print(f"hunt.mutants: {r.id}: could not run: "
                      f"{r.replay.detail}", file=sys.stderr)
        return 2
    if unexpected:
        print(f"survivors with no reason listed: {', '.join(unexpected)}")
    if unexpected if (ns.allow_known or classes) else surv:
        return 1
    return 0
