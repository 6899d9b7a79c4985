"""The front door of the project's two tools: ``python replay.py [COMMAND] ...``.

- ``gate`` (the default): ``python replay.py <dir>`` verifies the pinned
  engine sources, builds them and replays the pinned scenarios against the
  engine and the oracle; exit 0 pass, 1 a check failed, 2 could not run
  (:mod:`gate`).
- ``lab``: ``python replay.py lab TRACE OUTDIR`` replays a routing trace
  through every cache policy and size (:mod:`lab`);
  ``python replay.py --trace TRACE ... OUTDIR`` is the same command.
- ``predict``: ``python replay.py predict TRACE OUTDIR`` measures route
  predictors against a cache driven by the trace (:mod:`lab.predict`).
- ``time``: ``python replay.py time TRACE OUTDIR`` predicts seconds per
  token of streaming decode for every cache, schedule and lookahead, on a
  disk and compute model (:mod:`lab.timing`).

The first argument picks the command: a command name, else the lab when
``--trace`` appears anywhere, else the gate with every argument.  Each
command parses its own options (``python replay.py COMMAND --help``).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the clone, or site-packages
COMMANDS = ("gate", "lab", "predict", "time")


def version() -> str:
    """The installed xcache version, else the one pyproject.toml declares."""
    from importlib.metadata import PackageNotFoundError  # noqa: PLC0415
    from importlib.metadata import version as installed  # noqa: PLC0415

    try:
        return installed("xcache")
    except PackageNotFoundError:
        text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
        found = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
        return found.group(1) if found else "unknown"


def parser(prog: str = "replay.py") -> argparse.ArgumentParser:
    """The front door's own options and the list of commands, for ``--help``.

    ``prog`` is the name the front door goes by (:func:`xcache.prog.prog_name`).
    """
    from xcache.gate.cli import SUMMARY as GATE  # noqa: PLC0415
    from xcache.gate.cli import VersionAction  # noqa: PLC0415
    from xcache.lab.cli import SUMMARY as LAB  # noqa: PLC0415
    from xcache.lab.predict.cli import SUMMARY as PREDICT  # noqa: PLC0415
    from xcache.lab.timing.cli import SUMMARY as TIME  # noqa: PLC0415

    ap = argparse.ArgumentParser(
        prog=prog,
        usage=f"{prog} [gate] <dir> [options]\n"
              f"       {prog} lab TRACE OUTDIR [options]\n"
              f"       {prog} predict TRACE OUTDIR [options]\n"
              f"       {prog} time TRACE OUTDIR [options]\n"
              f"       {prog} [--help | --version]",
        description="Pinned replays that gate engine changes, and the policy "
                    "lab.",
        epilog=f"`{prog} COMMAND --help` lists a command's options; "
               f"`{prog} --trace TRACE ... OUTDIR` is `{prog} lab`.")
    ap.add_argument("--version", action=VersionAction)
    commands = ap.add_subparsers(title="commands", metavar="COMMAND",
                                 help="the command to run (default: gate)")
    commands.add_parser("gate", help=GATE, add_help=False)
    commands.add_parser("lab", help=LAB, add_help=False)
    commands.add_parser("predict", help=PREDICT, add_help=False)
    commands.add_parser("time", help=TIME, add_help=False)
    return ap


def main(argv: list[str] | None = None, prog: str | None = None, *,
         say_interrupted: bool = True) -> int:
    """Run the command ``argv`` names (default: the gate); return the exit status.

    ``prog`` is the name the lines it prints give it; by default the one it
    was run by (:func:`xcache.prog.prog_name`: ``xcache-replay`` installed,
    ``replay.py`` otherwise).

    Ctrl-C is exit 130 with one line (none when ``say_interrupted`` is
    false: ``--sanitize``'s child, whose parent says it), never a
    traceback; an output whose reader went away (``| head``) is exit 2
    with one line.  Run as a program
    (``argv`` None), it ends the process at once when a thread is still
    busy (a worker in a C call, a scenario the watchdog gave up on), so the
    process never waits on it.
    """
    from xcache.prog import REPLAY, prog_name  # noqa: PLC0415

    prog = prog or prog_name(REPLAY)
    try:
        rc = _dispatch(sys.argv[1:] if argv is None else list(argv), prog)
    except KeyboardInterrupt:
        if say_interrupted:
            print(f"{prog}: interrupted", file=sys.stderr)
        rc = 130
    except BrokenPipeError:
        # the output's reader went away (`... | head`): the run stopped
        # unfinished, which is exit 2 and one line, never a traceback
        if argv is None:  # no flush at exit may fail again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        print(f"{prog}: the output was closed; stopped before the end",
              file=sys.stderr)
        rc = 2
    except ImportError as e:
        from xcache.engine._lib import BuildError  # noqa: PLC0415

        if not isinstance(e, BuildError):
            raise
        print(f"{prog}: {e}", file=sys.stderr)  # no build: one line
        rc = 2
    if argv is None and threading.active_count() > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return rc


def _dispatch(args: list[str], prog: str = "replay.py") -> int:
    """Run the command ``args`` names (the door going by ``prog``); its exit status."""
    first = args[0] if args else ""
    if first == "gate":
        from xcache.gate.cli import run  # noqa: PLC0415

        return run(args[1:], prog=f"{prog} gate")
    if first == "lab":
        from xcache.lab.cli import run  # noqa: PLC0415

        return run(args[1:])
    if first == "predict":
        from xcache.lab.predict.cli import run as predict  # noqa: PLC0415

        return predict(args[1:])
    if first == "time":
        from xcache.lab.timing.cli import run as time_lab  # noqa: PLC0415

        return time_lab(args[1:])
    if any(a == "--trace" or a.startswith("--trace=") for a in args):
        from xcache.lab.cli import run  # noqa: PLC0415

        return run(args, alias=True)
    if first in ("-h", "--help", "--version"):
        try:
            parser(prog).parse_args([first])
        except SystemExit as e:
            return 2 if e.code else 0
    mistyped = _unknown_command(args, prog)
    if mistyped:
        print(mistyped, file=sys.stderr)
        return 2
    from xcache.gate.cli import run  # noqa: PLC0415

    return run(args, prog=prog)


def _unknown_command(args: list[str], prog: str = "replay.py") -> str:
    """The error for ``args`` that start with a command name this door lacks.

    The gate takes one folder, so a first word followed by another
    positional argument the gate cannot place (``replay.py gaet DIR``) was
    meant as a command; "" otherwise, and the gate parses ``args``.
    """
    import difflib  # noqa: PLC0415

    from xcache.gate.cli import parser as gate_parser  # noqa: PLC0415

    if not args or not re.fullmatch(r"[A-Za-z][\w-]*", args[0]) \
            or os.path.exists(args[0]):
        return ""  # an option or a path: the gate's own message names it
    ap = gate_parser(prog)

    def refuse(message: str) -> None:
        raise ValueError(message)

    ap.error = refuse  # type: ignore[method-assign]  # judge, do not exit
    try:
        _, extra = ap.parse_known_args(args)
    except ValueError:
        return ""  # the gate's own error says it better
    if not [a for a in extra if not a.startswith("-")]:
        return ""
    near = difflib.get_close_matches(args[0], COMMANDS, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return (f"{prog}: unknown command {args[0]!r} (the commands are "
            f"{', '.join(COMMANDS)}; gate, the default, takes one folder){hint}")


if __name__ == "__main__":
    sys.exit(main())
