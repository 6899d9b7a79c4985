"""Validate a safetensors container and print one summary line.

    python -m engine.inspect <file.safetensors | folder | index.json>

Prints ``OK <path>: <n> tensors, <s> shard(s), <bytes> bytes, dtypes ...``
and exits 0, or prints ``FAIL <kind> <file> byte <offset>: <message>`` and
exits 1 when the container is invalid.  A path that names nothing, or that
cannot be passed to the C reader, is a mistaken command: one line on stderr
naming it, exit 2.  The C reader does every check (docs/DESIGN.md §3); this
only reports.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections import Counter
from pathlib import Path

from engine.container import Container
from engine.errors import EngineError, MisuseError, NotFoundError


def package_version() -> str:
    """The installed xcache version, else the one in this checkout's pyproject.toml.

    ``python -m fixtures`` and ``replay.py`` keep their own copies: the
    generator and the gate must not import the engine to print a version.
    """
    try:
        return importlib.metadata.version("xcache")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    try:
        with open(pyproject, "rb") as f:
            return str(tomllib.load(f)["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


def summarize(path: str, *, direct: bool = False) -> str:
    """Open ``path`` and return its one-line summary (raises EngineError)."""
    with Container(path, direct=direct) as c:
        infos = c.tensors()
        total = sum(t.nbytes for t in infos)
        dtypes = Counter(t.dtype for t in infos)
        dt = " ".join(f"{k}x{v}" for k, v in sorted(dtypes.items())) or "none"
        line = (f"OK {path}: {len(infos)} tensors, {len(c.shards)} shard(s), "
                f"{total} bytes, dtypes {dt}")
        if direct:
            line += f"; {c.direct_note}"
        return line


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    ap = argparse.ArgumentParser(prog="python -m engine.inspect",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("path", help="a .safetensors file, a folder, or an index")
    ap.add_argument("--direct", action="store_true",
                    help="probe O_DIRECT and report whether it is in effect")
    ap.add_argument("--version", action="version", version=package_version(),
                    help="print the xcache version and exit")
    ns = ap.parse_args(argv)
    try:
        print(summarize(ns.path, direct=ns.direct))
    except (NotFoundError, MisuseError) as e:
        print(f"{ap.prog}: {ns.path!r}: {e}", file=sys.stderr)
        return 2
    except EngineError as e:
        where = "" if e.offset is None else f" byte {e.offset}"
        print(f"FAIL {e.kind}{where}: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
