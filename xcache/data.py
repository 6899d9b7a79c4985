"""The example data xcache ships, found by name from any folder.

Three kinds of files come with the package, so that the README's commands run
from an installed copy as they do from the clone's root:

- ``model``: descriptions of public MoE checkpoints (``fixtures/models``), for
  ``xcache-fixtures checkpoint NAME OUT``;
- ``trace``: real routing traces (``fixtures/traces``), for the labs
  (``xcache-replay lab NAME OUT``);
- ``cache``: an outside expert cache with its adapter (``examples/``), for
  ``xcache-replay --cache NAME OUT``.

Each tool takes a path first: a file or folder that exists is always what it
names.  Only a bare name (no folder in it) that names nothing on disk is
looked up here, by its file name or stem (``mixtral-8x7b``,
``olmoe_299.jsonl``, ``tinycache``).
``xcache-data`` (:func:`main`) prints every shipped name and its path.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from xcache.prog import package_version

#: kind -> (folder under the package, what it is, the command that takes it)
KINDS: dict[str, tuple[str, str, str]] = {
    "model": ("fixtures/models", "public checkpoint descriptions",
              "xcache-fixtures checkpoint NAME OUT"),
    "trace": ("fixtures/traces", "real routing traces",
              "xcache-replay lab NAME OUT"),
    "cache": ("examples", "outside expert caches with their adapters",
              "xcache-replay --cache NAME OUT"),
}


def package_root() -> Path:
    """The folder holding ``engine/``, ``fixtures/``, ... (installed or the clone)."""
    here = Path(__file__).resolve().parent
    return here if (here / "fixtures").is_dir() else here.parent


def shipped(kind: str) -> dict[str, Path]:
    """Every shipped item of ``kind``: its name (file stem or folder) -> its path."""
    folder = package_root() / KINDS[kind][0]
    if kind == "cache":
        items = [p for p in folder.iterdir() if (p / "xcs.toml").is_file()]
        return {p.name: p for p in sorted(items)}
    if kind == "model":  # a nested config's description in a folder below
        found = [*folder.glob("*.json"), *folder.glob("*/*.json")]
        return {p.stem: p for p in sorted(found, key=lambda p: p.stem)}
    return {p.stem: p for p in sorted(folder.glob("*.jsonl"))}


def resolve(kind: str, arg: str | Path) -> Path:
    """The path ``arg`` names: itself when it exists, else the shipped item so named.

    An argument that is neither is returned unchanged, for the caller's own
    "no such file" error (:func:`hint` adds what could have been meant).
    """
    path = Path(arg)
    if path.exists() or os.fspath(arg) != path.name:
        return path  # a path with a folder in it is never a shipped name
    items = shipped(kind)
    name = path.name
    for key in (name, Path(name).stem):
        if key in items and (name == key or items[key].name == name):
            return items[key]
    return path


def path_arg(kind: str) -> Callable[[str], str]:
    """An argparse ``type`` that reads a path or a shipped ``kind``'s name."""
    def resolved(text: str) -> str:
        return os.fspath(resolve(kind, text))

    resolved.__name__ = f"{kind} path"  # argparse names it in its errors
    return resolved


def hint(kind: str) -> str:
    """The sentence an error about a missing ``kind`` argument ends with."""
    names = ", ".join(shipped(kind)) or "none"
    return (f"a shipped {kind} can be named instead of a path ({names}); "
            "`xcache-data` prints where they are")


def main(argv: list[str] | None = None) -> int:
    """``xcache-data [KIND] [--json]``: print the shipped data and where it is."""
    ap = argparse.ArgumentParser(
        prog="xcache-data",
        description="Print the example data xcache ships (checkpoint "
                    "descriptions, routing traces, an outside cache) and "
                    "where each is installed; every tool also takes these "
                    "names in place of a path.")
    ap.add_argument("kind", nargs="?", choices=sorted(KINDS),
                    help="only this kind")
    ap.add_argument("--json", action="store_true", help="one JSON object")
    ap.add_argument("--version", action="version",
                    version=f"%(prog)s (xcache) {package_version()}",
                    help="print the xcache version and exit")
    args = ap.parse_args(argv)
    kinds = [args.kind] if args.kind else list(KINDS)
    if args.json:
        print(json.dumps({k: {n: str(p) for n, p in shipped(k).items()}
                          for k in kinds}, indent=1))
        return 0
    for k in kinds:
        folder, what, command = KINDS[k]
        print(f"{k}: {what} in {package_root() / folder} ({command})")
        for name, path in shipped(k).items():
            print(f"  {name:<28} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
