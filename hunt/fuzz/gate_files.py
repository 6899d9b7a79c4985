"""``python -m xcache.hunt.fuzz.gate_files scenarios|programs PATH``: gate file steps.

``replay.py DIR`` builds the engine (about 20 s) before it reads a scenario
or a programs file, which is too slow to fuzz.  This runs the same steps on
this checkout's engine with the gate's own error handling (``gate/cli.py``):

* ``scenarios FOLDER``: every scenario file of FOLDER, as the gate runs
  ``gate/scenarios/`` (:func:`gate.scenarios.run_scenarios`, engine and
  oracle);
* ``programs FILE``: the programs file as ``--programs-file FILE`` runs it
  (:func:`gate.programs.load_programs`, then every program it lists).

Exit 0 with one ``PASS`` line, 1 with a ``FAIL`` line (a check failed: the
gate's exit 1), or the gate's ``CANNOT RUN: ...`` line on stderr and exit 2.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from xcache.gate import EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS, CannotRun
from xcache.gate.report import Report

#: How long one scenario variant or program may run (seconds): the fuzzer's
#: cases are bounded by its own wall clock too.
TIMEOUT_S = 20.0


def _run(kind: str, path: Path, work: Path) -> tuple[Report, int]:
    """Run the scenarios or programs of ``path``; the report and how many ran."""
    from xcache import engine  # noqa: PLC0415 - this checkout's engine, built in place
    from xcache.gate import programs, scenarios  # noqa: PLC0415

    report = Report()
    scenarios.WATCHDOG.reset(stop_when_stuck=True, cap=TIMEOUT_S)
    if kind == "scenarios":
        names = scenarios.run_scenarios(engine, work, report, [], TIMEOUT_S,
                                        folder=path)
    else:
        plan = programs.load_programs(path)
        names = programs.run_programs(engine, work, report, plan)
    report.end()
    return report, len(names)


def as_gate(body: Callable[[], int]) -> int:
    """``body()``'s exit status, with the gate's error handling (``gate/cli.py``).

    CannotRun is its ``CANNOT RUN: ...`` line on stderr and exit 2, as is
    an OSError, ImportError, KeyError or ValueError (setup that failed);
    a layout file's lines that would settle it go to stdout, as the gate
    prints them (``gate.cli.cannot_run``).
    """
    from xcache.gate.cli import cannot_run  # noqa: PLC0415 - its one printer

    try:
        return body()
    except CannotRun as e:
        cannot_run(str(e))
    except (OSError, ImportError, KeyError, ValueError) as e:  # as gate/cli.py
        cannot_run(f"{type(e).__name__}: {e}")
    return EXIT_CANNOT_RUN


def main(argv: list[str] | None = None) -> int:
    """Run ``argv`` (``scenarios FOLDER`` or ``programs FILE``); the exit status."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in ("scenarios", "programs"):
        print("usage: python -m xcache.hunt.fuzz.gate_files scenarios|programs PATH",
              file=sys.stderr)
        return EXIT_CANNOT_RUN

    def body() -> int:
        with tempfile.TemporaryDirectory() as work:
            report, n = _run(args[0], Path(args[1]), Path(work))
        failed = len(report.failed)
        print(f"{'FAIL' if failed else 'PASS'}: {n} {args[0]}, "
              f"{len(report.checks)} checks, {failed} failed")
        return EXIT_FAIL if failed else EXIT_PASS

    return as_gate(body)

if __name__ == "__main__":
    sys.exit(main())
