"""The command-line tools report the version pyproject.toml declares."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def pyproject_version() -> str:
    """The version declared in the repository's pyproject.toml."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


#: every command line, by the program name its --version names
CLIS = {"python -m xcache.fixtures": ["-m", "xcache.fixtures"],
        "python -m xcache.engine.inspector": ["-m", "xcache.engine.inspector"],
        "replay.py": [str(ROOT / "replay.py")],
        "replay.py lab": [str(ROOT / "replay.py"), "lab"],
        "replay.py predict": [str(ROOT / "replay.py"), "predict"]}


#: the commands whose --version names the engine build on a second line
GATES = ("replay.py", "replay.py gate")


@pytest.mark.parametrize("prog", sorted([*CLIS, "replay.py gate"]))
def test_version_flag_prints_one_format_everywhere(prog, tmp_path):
    """Every CLI's --version is `PROG (xcache) VERSION`, exit 0, from any folder;
    the gate's adds the engine build it would replay."""
    argv = CLIS.get(prog) or [str(ROOT / "replay.py"), "gate"]
    done = subprocess.run([sys.executable, *argv, "--version"],
                          cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    first = f"{prog} (xcache) {pyproject_version()}\n"
    if prog not in GATES:
        assert done.stdout == first
        return
    from xcache.gate.pins import build_id

    pins = ROOT / "engine" / "pins.json"
    digests = json.loads(pins.read_text())["sha256"]
    assert done.stdout == (
        f"{first}engine build {build_id(digests)}: {len(digests)} pinned "
        f"sources in {pins}; the sources match them\n")


def test_version_falls_back_to_pyproject_when_not_installed(monkeypatch):
    """Without installed metadata the version is read from pyproject.toml."""
    from xcache import prog as mod

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert mod.package_version() == pyproject_version()
