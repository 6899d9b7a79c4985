"""``replay.py --sanitize``: the whole replay against an ASan + UBSan engine.

Some engine bugs change no output: a read one byte past a buffer, a 9-byte
``memcpy`` into an 8-byte variable, reading slot -1.  Every check passes
and only a sanitizer sees them.  With ``--sanitize`` the gate builds the
candidate engine with ``-fsanitize=address,undefined`` (the same
``XC_SANITIZE`` switch of ``engine/_build.py`` CI's sanitizer stage uses,
through the same object cache, whose keys hold the flags) and runs the
whole replay -- scenarios, programs, differential checks -- against it.

The sanitizer runtime must come first in the process, so the gate cannot
load it into itself: it re-executes itself (:func:`run_parent`) as a child
``python replay.py gate ARGS`` with

- ``LD_PRELOAD`` of the compiler's ``libasan.so`` and ``libubsan.so``
  (``$CC -print-file-name=...``, ``CC`` as the build takes it);
- ``ASAN_OPTIONS`` and ``UBSAN_OPTIONS`` (:func:`child_env`): stop at the
  first report (``halt_on_error=1``) by exiting with :data:`SANITIZER_EXIT`
  rather than aborting (``abort_on_error=0``: no core, no signal), write the
  report to a file of the run's log folder (``log_path``), and no leak
  check (``detect_leaks=0``: the interpreter itself leaks at exit; the
  gate's open probe measures the engine's own leaks at close);
- :data:`CHILD_ENV` naming that log folder, where the child
  (:func:`child_setup`) writes the name of each run as it starts (the
  scenario variant or program and its backend, or the differential check),
  so a report is tied to what was running when it came.

The parent waits, then reads the logs (:func:`read_reports`).  A report is
one failed check, printed on its own line as a failed check is -- the
run's name and the report's first frame -- with the report itself under
it, and added to ``--json`` with ``"check": "sanitizer"``.  Exit status:
the child's (0 every check passed, 1 a check failed, 2 could not run, 130
interrupted), except that a sanitizer report is 1 and a child that ends
with the sanitizer's status yet left no report, or with a status of its
own, is 2.  Ctrl-C reaches the child once (the parent forwards the one it
counts, :class:`_Interrupts`; the child ignores a second from its first
instruction on, :data:`CHILD_PROGRAM`), which removes its work folder as
a plain replay does and says nothing; the parent then removes the log
folder and every folder it made, says "interrupted; nothing of this run
is left" once, and exits 130.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xcache.fixtures.folders import make_folders, unmake_folders
from xcache.fixtures.ownership import write_file
from xcache.gate import EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS, CannotRun
from xcache.gate.report import JSON_WHAT, is_gate_report

#: What ``--sanitize`` instruments the engine with (``XC_SANITIZE``).
SANITIZERS = "address,undefined"
#: The runtimes preloaded into the child, in this order.
RUNTIMES = ("libasan.so", "libubsan.so")
#: Set in the child: the folder of its sanitizer logs and current-run file.
CHILD_ENV = "XC_GATE_SANITIZER_LOGS"
#: The status a sanitizer ends the child with (no other code path uses it).
SANITIZER_EXIT = 86
#: The file of the log folder naming the run under way.
CURRENT = "current"
#: The options of both sanitizers (``log_path`` is added per run).
COMMON_OPTIONS = {"halt_on_error": "1", "abort_on_error": "0",
                  "exitcode": str(SANITIZER_EXIT), "print_stacktrace": "1"}
#: ASan's own: no leak check (the interpreter leaks at exit) and, as CI,
#: no new/delete-vs-free check (libcachesim's C++ trips it at exit).
ASAN_ONLY = {"detect_leaks": "0", "alloc_dealloc_mismatch": "0"}
#: Seconds the parent waits for an interrupted child before killing it.
INTERRUPT_GRACE_S = 30.0


def compiler() -> str:
    """The C compiler the engine build uses: ``$CC``, else Python's ``CC``."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return cc.split()[0]


def runtime_libraries() -> list[Path]:
    """The sanitizer runtimes to preload, as the build's compiler finds them.

    Raises :class:`CannotRun` naming the compiler and the library it did
    not find (a compiler without the sanitizers, or no compiler).
    """
    cc = compiler()
    found = []
    for name in RUNTIMES:
        try:
            out = subprocess.run([cc, f"-print-file-name={name}"],
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise CannotRun(f"--sanitize: cannot ask the compiler {cc!r} "
                            f"where {name} is: {e}") from e
        path = Path(out.stdout.strip()) if out.returncode == 0 else Path()
        if not path.is_absolute() or not path.is_file():
            raise CannotRun(f"--sanitize: no {name} found: `{cc} "
                            f"-print-file-name={name}` gave "
                            f"{out.stdout.strip() or '(nothing)'!r} "
                            "(install the compiler's sanitizer runtimes, e.g. "
                            "libasan8 and libubsan1)")
        found.append(path)
    return found


def _options(opts: dict[str, str]) -> str:
    return ":".join(f"{k}={v}" for k, v in opts.items())


def child_env(logs: Path, preload: list[Path],
              base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the sanitized child writing its logs in ``logs``."""
    env = dict(os.environ if base is None else base)
    env["LD_PRELOAD"] = ":".join(str(p) for p in preload)
    env["ASAN_OPTIONS"] = _options({**COMMON_OPTIONS, **ASAN_ONLY,
                                    "log_path": str(logs / "asan")})
    env["UBSAN_OPTIONS"] = _options({**COMMON_OPTIONS,
                                     "log_path": str(logs / "ubsan")})
    env[CHILD_ENV] = str(logs)
    # the sanitizers' report is the verdict: the engine's runs stay in the
    # child replay (gate/contained.py), whose report they end
    env["XC_GATE_IN_PROCESS"] = "1"
    return env


def in_child() -> Path | None:
    """The log folder when this process is the sanitized child, else None."""
    logs = os.environ.get(CHILD_ENV)
    return Path(logs) if logs else None


# -- the child ---------------------------------------------------------------

def child_setup(logs: Path) -> None:
    """In the child: name each run in ``logs/current``; one Ctrl-C is enough.

    The runs are named where they start: :func:`gate.scenarios.run_bounded`
    (every scenario variant and program, on each backend) and
    :func:`gate.differential._bounded` (each differential check).  A
    second SIGINT (the parent forwards the one the terminal also sent) is
    ignored, so the first one's clean-up runs to its end.
    """
    from xcache.gate import differential, programs, scenarios  # noqa: PLC0415

    current = logs / CURRENT

    def note(label: str) -> None:
        current.write_text(label + "\n", encoding="utf-8")

    note("setup (before the first run)")
    bounded = scenarios.run_bounded

    def run_bounded(run: Any, timeout: float) -> bool:
        note(f"{run.sc['name']}{run.variant} [{run.backend_name}]")
        return bounded(run, timeout)

    scenarios.run_bounded = run_bounded  # type: ignore[assignment]
    programs.run_bounded = run_bounded  # type: ignore[assignment]
    checked = differential._bounded

    def diff_bounded(name: str, report: Any,
                     run: Callable[[Any], list[str]]) -> list[str]:
        note(f"{name} [engine]")
        return checked(name, report, run)

    differential._bounded = diff_bounded  # type: ignore[assignment]

    def once(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, once)


# -- reading the reports -----------------------------------------------------

_FRAME = re.compile(r"^\s*#(\d+) 0x[0-9a-f]+ in (\S+) (\S+)")
_FRAME_NOSYM = re.compile(r"^\s*#(\d+) 0x[0-9a-f]+ \((\S+)\)")


@dataclass
class SanitizerReport:
    """One sanitizer report: what, where first, and the run it came in."""

    sanitizer: str  # AddressSanitizer or UndefinedBehaviorSanitizer
    what: str  # "heap-buffer-overflow", "runtime error: load of ..."
    first_frame: str  # "#0 fn xc_json.c:74"
    engine_frame: str  # the first frame in an engine source, or ""
    during: str  # the run under way, from ``current``
    log: str  # the file it was read from
    text: str  # the report as the sanitizer wrote it

    def frame(self) -> str:
        """The first frame, and the first engine frame when that is another."""
        if self.engine_frame and self.engine_frame != self.first_frame:
            return f"{self.first_frame} (engine: {self.engine_frame})"
        return self.first_frame

    def line(self) -> str:
        """The report as the detail of its failed check."""
        return f"{self.sanitizer}: {self.what} at {self.frame()}"


def _frame_text(m: re.Match[str]) -> str:
    where = m.group(3)
    path, _, rest = where.partition(":")
    return f"#{m.group(1)} {m.group(2)} {Path(path).name}" + (
        f":{rest}" if rest else "")


def parse_report(text: str, during: str = "", log: str = "") -> SanitizerReport:
    """Read one sanitizer log's text: its kind, its first frame, its engine frame."""
    sanitizer, what = "sanitizer", "report"
    for ln in text.splitlines():
        m = re.search(r"ERROR: (AddressSanitizer|LeakSanitizer): (.*)", ln)
        if m:
            sanitizer = m.group(1)
            what = re.sub(r" on (unknown )?address 0x[0-9a-f]+.*", "",
                          m.group(2)).strip()
            break
        m = re.search(r"(\S+): runtime error: (.*)", ln)
        if m:
            sanitizer = "UndefinedBehaviorSanitizer"
            what = f"runtime error: {m.group(2).strip()}"
            break
    first = engine = ""
    for ln in text.splitlines():
        m = _FRAME.match(ln)
        if m:
            f = _frame_text(m)
            first = first or f
            if not engine and re.search(r"/(csrc/)?xc_\w+\.[ch]:", m.group(3)):
                engine = f
        elif not first:
            n = _FRAME_NOSYM.match(ln)
            if n:
                first = f"#{n.group(1)} {Path(n.group(2)).name}"
    if not first:  # a UBSan report without a stack: its source position
        m = re.search(r"(\S+\.[ch]):(\d+):(\d+): runtime error", text)
        if m:
            first = f"{Path(m.group(1)).name}:{m.group(2)}"
    return SanitizerReport(sanitizer, what, first or "(no frame)", engine,
                           during, log, text)


def read_reports(logs: Path) -> list[SanitizerReport]:
    """Every sanitizer report in the log folder ``logs``, oldest first."""
    current = logs / CURRENT
    during = (current.read_text(encoding="utf-8").strip()
              if current.is_file() else "(unknown)")
    files = sorted((p for p in logs.iterdir()
                    if p.name.startswith(("asan.", "ubsan."))),
                   key=lambda p: p.stat().st_mtime)
    out = []
    for p in files:
        text = p.read_text(encoding="utf-8", errors="replace")
        if text.strip():
            out.append(parse_report(text, during, str(p)))
    return out


def _split_run(during: str) -> tuple[str, str]:
    """``NAME [BACKEND]`` as the child notes a run: (name, backend)."""
    name, _, rest = during.partition(" [")
    return name, rest.rstrip("]") or "engine"


def report_check(r: SanitizerReport) -> dict[str, Any]:
    """The failed check of one report, as ``--json`` lists checks."""
    name, backend = _split_run(r.during)
    return {"scenario": name, "backend": backend, "check": "sanitizer",
            "passed": False, "detail": f"during {name}: {r.line()}",
            "expected": "no sanitizer report", "actual": r.line(),
            "first_frame": r.first_frame, "engine_frame": r.engine_frame,
            "report": r.text}


def print_report(r: SanitizerReport, max_lines: int = 16) -> None:
    """Print one report as a failed check line, the report's text under it."""
    check = report_check(r)
    print(f"  FAIL  sanitizer [{check['backend']}] {check['detail']}",
          flush=True)
    lines = [ln for ln in r.text.splitlines() if ln.strip()]
    for ln in lines[:max_lines]:
        print(f"        {ln}")
    if len(lines) > max_lines:
        print(f"        ... ({len(lines) - max_lines} more lines in {r.log})")
    sys.stdout.flush()


# -- the parent --------------------------------------------------------------

def _json_path(argv: list[str]) -> Path | None:
    """The ``--json FILE`` of the gate's ``argv``, if it has one."""
    for i, a in enumerate(argv):
        if a == "--json" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if a.startswith("--json="):
            return Path(a.split("=", 1)[1])
    return None


def _amend_json(dest: Path, checks: list[dict[str, Any]], child_wrote: bool,
                total_s: float) -> None:
    """Add the sanitizer checks to the report ``dest`` (written whole anew)."""
    doc: dict[str, Any] = {}
    if child_wrote:
        try:
            doc = json.loads(dest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            doc = {}
    doc.setdefault("scenarios", [])
    doc.setdefault("checks", [])
    doc.setdefault("timing_s", {"total": total_s})
    doc["checks"] += checks
    doc["passed"] = False
    doc["sanitize"] = SANITIZERS
    text = json.dumps(doc, indent=1, default=str) + "\n"
    write_file(dest, lambda tmp: tmp.write_text(text), option="--json",
               is_ours=is_gate_report, what=JSON_WHAT)


class _Interrupts:
    """SIGINT while the parent works: counted, never raised in the middle of a step.

    Installed only in the main thread, and only where SIGINT is not ignored
    (a background job's); ``count`` is how many came.
    """

    def __init__(self) -> None:
        self.count = 0
        self._old: Any = None

    def _note(self, signum: int, frame: Any) -> None:
        self.count += 1

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            self._old = signal.signal(signal.SIGINT, self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


#: The child's program: SIGINT raises once (a second, the parent's forward of
#: the terminal's, is ignored), from its first instruction on (the parent
#: starts it with SIGINT blocked), and an interrupt is said by the parent.
CHILD_PROGRAM = """\
import signal, sys
def once(signum, frame):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt
if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, once)
try:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    sys.path.insert(0, {home!r})
    from xcache.replay import main
    rc = main(prog={prog!r}, say_interrupted=False)
except KeyboardInterrupt:
    rc = 130
sys.exit(rc)
"""


def run_parent(argv: list[str], out_dir: str | None, keep: bool,
               prog: str = "replay.py") -> int:
    """Run the gate ``argv`` in a sanitized child; its exit status, mapped.

    ``out_dir`` is the gate's ``<dir>``; the log folder is made in it
    (``replay-sanitizer-*``) and removed at the end unless ``keep``; a
    ``<dir>`` (and parents) it made goes too when the run ends without its
    verdict (interrupted, or the child could not run).  ``prog`` is the
    front door's name, the child's too.

    Ctrl-C (:class:`_Interrupts`) never stops the parent between two of
    its steps: it is forwarded to the child once, the parent waits for the
    child's clean-up, removes all it made and says so in one line (the
    child says nothing); exit 130.
    """
    if not out_dir:
        raise CannotRun("missing <dir>: the scratch folder to build into")
    preload = runtime_libraries()
    out = Path(out_dir).resolve()
    # the child runs the front door of the same xcache the parent imported,
    # under the parent's name
    import xcache  # noqa: PLC0415

    home = str(Path(xcache.__file__).resolve().parents[1])
    cmd = [sys.executable, "-c", CHILD_PROGRAM.format(home=home, prog=prog),
           "gate", *argv]
    made: list[str] = []
    logs: Path | None = None
    rc: int | None = None
    interrupted = False  # a Ctrl-C once the child ended is too late to count
    with _Interrupts() as stop:
        try:
            made = make_folders(out)
            logs = Path(tempfile.mkdtemp(prefix="replay-sanitizer-", dir=out))
            t0 = time.perf_counter()
            cpu0 = os.times()
            print(f"sanitizers {SANITIZERS}: replaying in a child with "
                  f"{', '.join(p.name for p in preload)} preloaded; reports "
                  f"go to {logs}", flush=True)
            if not stop.count:
                rc = _wait(_start(cmd, child_env(logs, preload)), stop)
            interrupted = stop.count > 0 or rc == 130
            if interrupted:
                return 130
            assert rc is not None
            wall = time.perf_counter() - t0
            cpu1 = os.times()
            cpu = (cpu1.children_user - cpu0.children_user
                   + cpu1.children_system - cpu0.children_system)
            return _verdict(rc, read_reports(logs), logs, _json_path(argv),
                            wall, cpu)
        finally:
            gone = interrupted or rc in (None, EXIT_CANNOT_RUN)
            if logs is not None and (gone or not keep):
                _remove_left_work(rc, logs, gone)
                shutil.rmtree(logs, ignore_errors=True)
            if gone:  # no verdict: nothing is left
                unmake_folders(made)
            if interrupted:
                print(f"{prog}: interrupted; nothing of this run is left",
                      file=sys.stderr)


def _start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start the child with SIGINT blocked (its program unblocks it)."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return subprocess.Popen(cmd, env=env)
    except OSError as e:
        raise CannotRun(f"--sanitize: cannot start the child replay: {e}") from e
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _remove_left_work(rc: int | None, logs: Path, gone: bool = False) -> None:
    """Remove the work folder of a child that could not (a report, a signal),
    or, when the run is ``gone`` (interrupted), whatever of it is left."""
    noted = logs / "work"
    if (gone or rc == SANITIZER_EXIT or (rc is not None and rc < 0)) \
            and noted.is_file():
        work = Path(noted.read_text(encoding="utf-8").strip())
        if work.name.startswith("replay-work"):
            shutil.rmtree(work, ignore_errors=True)


def _wait(proc: subprocess.Popen[bytes], stop: _Interrupts) -> int:
    """The child's status; on Ctrl-C forward it once and wait for the child's
    clean-up, killing it on a second Ctrl-C or after the grace period."""
    forwarded = 0.0
    while True:
        try:
            return proc.wait(0.05)
        except subprocess.TimeoutExpired:
            pass
        if stop.count and not forwarded:
            try:
                proc.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
            forwarded = time.monotonic()
        if stop.count > 1 or (forwarded and time.monotonic() - forwarded
                              > INTERRUPT_GRACE_S):
            proc.kill()
            return proc.wait()


def _verdict(rc: int, reports: list[SanitizerReport], logs: Path,
             json_path: Path | None, wall: float, cpu: float) -> int:
    """Print the reports and the timing; map the child's status ``rc``."""
    if rc == 130:
        return 130
    timing = f"sanitized replay: {wall:.1f} s wall, {cpu:.1f} s CPU"
    if not reports and rc == SANITIZER_EXIT:
        print(f"CANNOT RUN: the sanitized replay ended with the sanitizers' "
              f"exit status {SANITIZER_EXIT} but left no report in {logs}",
              file=sys.stderr)
        return EXIT_CANNOT_RUN
    checks: list[dict[str, Any]] = []
    for r in reports:
        print_report(r)
        checks.append(report_check(r))
    if rc < 0:
        during = "(unknown)"
        if (logs / CURRENT).is_file():
            during = (logs / CURRENT).read_text(encoding="utf-8").strip()
        sig = signal.Signals(-rc).name if -rc in signal.valid_signals() \
            else str(-rc)
        name, backend = _split_run(during)
        detail = f"during {name}: the sanitized replay was killed by {sig}"
        print(f"  FAIL  sanitizer [{backend}] {detail}", flush=True)
        checks.append({"scenario": name, "backend": backend,
                       "check": f"killed by {sig}",
                       "passed": False, "detail": detail,
                       "expected": "an end", "actual": sig})
    if checks:
        if json_path is not None:
            try:
                _amend_json(json_path, checks, rc in (EXIT_PASS, EXIT_FAIL),
                            wall)
            except OSError as e:
                print(f"CANNOT RUN: cannot write the report: {e}",
                      file=sys.stderr)
                return EXIT_CANNOT_RUN
        first = reports[0] if reports else None
        what = (f"a sanitizer report {report_check(first)['detail']}"
                if first else checks[0]["detail"])
        print(f"FAIL: {what}; {timing}", flush=True)
        return EXIT_FAIL
    print(timing, flush=True)
    if rc in (EXIT_PASS, EXIT_FAIL, EXIT_CANNOT_RUN):
        return rc
    print(f"CANNOT RUN: the sanitized replay ended with exit status {rc}",
          file=sys.stderr)
    return EXIT_CANNOT_RUN
