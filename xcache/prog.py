"""The name a command gives itself in ``--version``, usage and error lines.

One rule for every tool: the name it was run by.  Run as its installed
command (``xcache-replay``, ``xcache-fixtures``, ``xcache-inspect``: the
basename of ``sys.argv[0]``, without a Windows ``.exe``), it says that
name; otherwise -- ``python replay.py`` in the clone, ``python -m
xcache.fixtures``, or called in-process -- it says the spelling that runs
it there (``replay.py``, ``python -m xcache.fixtures``, ``python -m
xcache.engine.inspector``).

This module imports nothing of the project, so every tool may use it; it
also says the version every ``--version`` prints (:func:`package_version`).
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

__all__ = ["FIXTURES", "INSPECT", "REPLAY", "package_version", "prog_name"]

#: (installed command, the name otherwise) of each tool.
REPLAY = ("xcache-replay", "replay.py")
FIXTURES = ("xcache-fixtures", "python -m xcache.fixtures")
INSPECT = ("xcache-inspect", "python -m xcache.engine.inspector")


def prog_name(tool: tuple[str, str], argv0: str | None = None) -> str:
    """The name ``tool`` (:data:`REPLAY`, :data:`FIXTURES` or :data:`INSPECT`) goes by.

    ``argv0`` defaults to ``sys.argv[0]``: its basename is the installed
    command's name when the tool was run as that command.
    """
    installed, otherwise = tool
    if argv0 is None:
        argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    base = os.path.basename(argv0)
    if base.lower().endswith(".exe"):
        base = base[:-4]
    return installed if base == installed else otherwise


def package_version() -> str:
    """The installed xcache version, else the one in this checkout's pyproject.toml."""
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
