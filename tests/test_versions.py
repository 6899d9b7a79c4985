"""The command-line tools report the version pyproject.toml declares."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def pyproject_version() -> str:
    """The version declared in the repository's pyproject.toml."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


@pytest.mark.parametrize("module", ["fixtures", "engine.inspect"])
def test_version_flag_prints_the_pyproject_version(module):
    """`python -m <tool> --version` prints pyproject's version and exits 0."""
    done = subprocess.run([sys.executable, "-m", module, "--version"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == pyproject_version()


@pytest.mark.parametrize("module", ["fixtures.__main__", "engine.inspect"])
def test_version_falls_back_to_pyproject_when_not_installed(module, monkeypatch):
    """Without installed metadata the version is read from pyproject.toml."""
    mod = pytest.importorskip(module)

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert mod.package_version() == pyproject_version()
