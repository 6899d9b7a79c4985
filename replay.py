"""Pinned replays that gate engine changes: ``python replay.py <dir>``.

1. Verify the SHA-256 of every pinned engine source against ``engine/pins.json``
   of the tree being replayed (exit 2 on a mismatch, naming the files).
2. Build the engine from exactly those sources into ``<dir>`` with the flags
   ``engine/_build.py`` records (exit 2 with the compiler's message if it fails).
3. Generate the fixtures the scenarios name into ``<dir>``.
4. Run every scenario of ``fixtures/scenarios/`` against the fresh engine and
   against the oracle; both must give the pinned values.
5. Print one aligned line per check and a summary; ``--json`` writes every
   check with expected and actual values; generated files are removed unless
   ``--keep``.  Exit 0 all passed, 1 a check failed, 2 could not run.

``--engine-src PATH`` replays a candidate engine tree (the root of another
checkout, or its ``engine`` folder) against its own pins and these scenarios.
``--repin`` rewrites the pins of the tree deliberately and says what changed.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
PINS_NAME = "pins.json"
SCENARIO_DIR = ROOT / "fixtures" / "scenarios"

EXIT_PASS, EXIT_FAIL, EXIT_CANNOT_RUN = 0, 1, 2


class CannotRun(Exception):
    """Replay could not run (bad arguments, digest mismatch, build failure)."""


# --------------------------------------------------------------------------
# Pins
# --------------------------------------------------------------------------


def pinned_files(engine_dir: Path) -> list[Path]:
    """Return the engine sources whose digests are pinned, in a stable order."""
    files = [p for p in engine_dir.glob("*.py")]
    files += [engine_dir / "_cdef.h"]
    files += list((engine_dir / "csrc").glob("*.c"))
    files += list((engine_dir / "csrc").glob("*.h"))
    # _xc.c is what cffi generates from the cdef; never a source.
    files = [p for p in files if p.is_file() and p.name != "_xc.c"]
    return sorted(files, key=lambda p: p.relative_to(engine_dir).as_posix())


def digest(path: Path) -> str:
    """SHA-256 of a file's bytes, in hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def current_digests(engine_dir: Path) -> dict[str, str]:
    """Map each pinned file (relative to the engine folder) to its digest."""
    return {p.relative_to(engine_dir).as_posix(): digest(p)
            for p in pinned_files(engine_dir)}


def verify_pins(engine_dir: Path) -> int:
    """Check every pinned digest; return how many; raise CannotRun naming mismatches."""
    pins_path = engine_dir / PINS_NAME
    if not pins_path.is_file():
        raise CannotRun(f"no pins file at {pins_path}; run `python replay.py "
                        "--repin` to create it deliberately")
    try:
        pins = json.loads(pins_path.read_text())["sha256"]
    except (ValueError, KeyError, TypeError) as e:
        raise CannotRun(f"{pins_path}: not a pins file ({e})") from e
    now = current_digests(engine_dir)
    problems = []
    for name in sorted(set(pins) | set(now)):
        if name not in now:
            problems.append(f"  missing   {name}")
        elif name not in pins:
            problems.append(f"  unpinned  {name}")
        elif pins[name] != now[name]:
            problems.append(f"  changed   {name}")
    if problems:
        raise CannotRun("pinned source digests do not match "
                        f"{pins_path}:\n" + "\n".join(problems) +
                        "\nre-pin deliberately with `python replay.py --repin`"
                        " if the change is intended")
    return len(now)


def repin(engine_dir: Path) -> list[str]:
    """Rewrite the pins file from the current sources; return what changed."""
    pins_path = engine_dir / PINS_NAME
    old: dict[str, str] = {}
    if pins_path.is_file():
        try:
            old = json.loads(pins_path.read_text())["sha256"]
        except (ValueError, KeyError, TypeError):
            old = {}
    now = current_digests(engine_dir)
    changes = [f"{'added' if n not in old else 'changed'} {n}"
               for n in sorted(now) if old.get(n) != now[n]]
    changes += [f"removed {n}" for n in sorted(set(old) - set(now))]
    tmp = pins_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"sha256": now}, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, pins_path)
    return changes


# --------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------


def build_engine(engine_dir: Path, out_dir: Path) -> tuple[Path, list[str]]:
    """Compile the engine sources into out_dir; return (.so path, cflags)."""
    env = dict(os.environ)
    env.pop("XC_SANITIZE", None)
    env.pop("XC_COVERAGE", None)
    proc = subprocess.run(
        [sys.executable, str(engine_dir / "_build.py"), "--out", str(out_dir),
         "--src", str(engine_dir)],
        capture_output=True, text=True, env=env, cwd=str(out_dir),
    )
    if proc.returncode != 0:
        raise CannotRun("engine build failed:\n" + (proc.stderr or proc.stdout)
                        [-4000:])
    so = Path(proc.stdout.strip().splitlines()[-1])
    flags = _recorded_flags(engine_dir)
    return so, flags


def _recorded_flags(engine_dir: Path) -> list[str]:
    spec = importlib.util.spec_from_file_location("_xc_build_flags",
                                                  engine_dir / "_build.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    cwd = os.getcwd()
    try:
        os.chdir(engine_dir.parent)
        spec.loader.exec_module(mod)
    finally:
        os.chdir(cwd)
    return list(mod.CFLAGS)


def load_engine(engine_dir: Path, so_path: Path) -> Any:
    """Import the engine package of engine_dir, bound to the extension so_path."""
    if "engine" in sys.modules:
        mod = sys.modules["engine"]
        if Path(mod.__file__ or "").resolve().parent != engine_dir.resolve():
            raise CannotRun("another engine package is already imported")
    else:
        spec = importlib.util.spec_from_file_location(
            "engine", engine_dir / "__init__.py",
            submodule_search_locations=[str(engine_dir)])
        if spec is None or spec.loader is None:
            raise CannotRun(f"cannot import the engine package at {engine_dir}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["engine"] = mod
        spec.loader.exec_module(mod)
    from engine import _lib  # noqa: PLC0415 - bound after the path is chosen

    _lib.use(so_path)
    return mod


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------


class Report:
    """Collects checks, prints one aligned line each, and writes JSON."""

    def __init__(self, width: int = 44) -> None:
        self.width = width
        self.checks: list[dict[str, Any]] = []

    def add(self, scenario: str, backend: str, name: str, ok: bool,
            detail: str, expected: Any, actual: Any) -> None:
        """Record and print one check."""
        self.checks.append({"scenario": scenario, "backend": backend,
                            "check": name, "passed": ok, "detail": detail,
                            "expected": expected, "actual": actual})
        label = f"{name} [{backend}]"
        print(f"  {'PASS' if ok else 'FAIL'}  {label:<{self.width}} {detail}",
              flush=True)

    @property
    def failed(self) -> list[dict[str, Any]]:
        """Checks that did not pass."""
        return [c for c in self.checks if not c["passed"]]


def _resolve_engine_dir(arg: str | None) -> Path:
    if arg is None:
        return ROOT / "engine"
    p = Path(arg).resolve()
    if (p / "engine" / "_build.py").is_file():
        return p / "engine"
    if (p / "_build.py").is_file():
        return p
    raise CannotRun(f"--engine-src {arg}: no engine tree there (expected "
                    "engine/_build.py or _build.py)")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    ap = argparse.ArgumentParser(
        prog="replay.py", description="Pinned replays that gate engine changes.")
    ap.add_argument("dir", nargs="?", help="scratch folder for the build and fixtures")
    ap.add_argument("--engine-src", help="replay a candidate engine tree")
    ap.add_argument("--repin", action="store_true",
                    help="rewrite the pins of the engine tree and exit")
    ap.add_argument("--json", dest="json_path", help="write every check here")
    ap.add_argument("--keep", action="store_true", help="keep generated files")
    ap.add_argument("--scenario", action="append", default=[],
                    help="run only scenarios whose name contains this")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the replay; return the exit status."""
    try:
        ns = parse_args(argv)
    except SystemExit as e:
        return EXIT_CANNOT_RUN if e.code else EXIT_PASS
    t0 = time.perf_counter()
    try:
        engine_dir = _resolve_engine_dir(ns.engine_src)
        if ns.repin:
            changes = repin(engine_dir)
            print(f"Re-pinned {len(current_digests(engine_dir))} engine sources "
                  f"in {engine_dir / PINS_NAME}")
            for c in changes:
                print(f"  {c}")
            if not changes:
                print("  (no change)")
            return EXIT_PASS
        if not ns.dir:
            raise CannotRun("missing <dir>: the scratch folder to build into")
        n_pins = verify_pins(engine_dir)
        print(f"Verified {n_pins} pinned source digests")
        out = Path(ns.dir).resolve()
        out.mkdir(parents=True, exist_ok=True)
        work = out / "replay-work"
        if work.exists():
            shutil.rmtree(work)
        (work / "build").mkdir(parents=True)
        t_build = time.perf_counter()
        so, cflags = build_engine(engine_dir, work / "build")
        build_s = time.perf_counter() - t_build
        print(f"Built the engine in {build_s:.1f} s ({' '.join(cflags)})")
        engine = load_engine(engine_dir, so)
        from fixtures import scenarios as sc  # noqa: PLC0415

        report = Report()
        t_sc = time.perf_counter()
        names = sc.run_all(engine, work / "fixtures", report, only=ns.scenario)
        sc_s = time.perf_counter() - t_sc
    except CannotRun as e:
        print(f"CANNOT RUN: {e}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    total_s = time.perf_counter() - t0
    failed = report.failed
    word = "FAIL" if failed else "PASS"
    extra = f"{len(failed)} failed; " if failed else ""
    print(f"{word}: {len(names)} scenarios, {len(report.checks)} checks; "
          f"{extra}scenarios {sc_s:.2f} s, total {total_s:.1f} s "
          f"(build {build_s:.1f} s)")
    if ns.json_path:
        Path(ns.json_path).write_text(json.dumps({
            "passed": not failed, "scenarios": names, "cflags": cflags,
            "timing_s": {"build": build_s, "scenarios": sc_s, "total": total_s},
            "checks": report.checks}, indent=1, default=str) + "\n")
    if not ns.keep:
        shutil.rmtree(work, ignore_errors=True)
    return EXIT_FAIL if failed else EXIT_PASS


if __name__ == "__main__":
    sys.exit(main())
