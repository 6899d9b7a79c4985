"""replay.py's front door: its commands, their help, --version, and what
``import fixtures`` leaves out."""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

from xcache import replay
from xcache.gate import cli as gate_cli
from xcache.lab import cli as lab_cli

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.nosan  # runs the replay tool, not the C core


def _replay(*args: str) -> subprocess.CompletedProcess[str]:
    """Run replay.py in a fresh interpreter and capture its output."""
    return subprocess.run([sys.executable, str(ROOT / "replay.py"), *args],
                          capture_output=True, text=True, timeout=600)


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """Every parser replay.py can use, by what it parses."""
    return {"front door": replay.parser(), "gate": gate_cli.parser(),
            "lab": lab_cli.parser(), "lab (--trace)": lab_cli.parser(alias=True)}


def test_help_lists_every_command_with_one_line():
    """--help exits 0 and names gate (the default) and lab, one line each."""
    p = _replay("--help")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    for command in replay.COMMANDS:
        (line,) = [ln for ln in lines if ln.split()[:1] == [command]]
        assert len(line.split()) > 2  # the name and its summary
    assert "(the default)" in p.stdout
    assert "--version" in p.stdout


@pytest.mark.parametrize("command", ["gate", "lab"])
def test_command_help_lists_its_options(command):
    """`replay.py COMMAND --help` exits 0 and shows every option of that command."""
    p = _replay(command, "--help")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"usage: replay.py {command}")
    options = [o for a in _parsers()[command]._actions for o in a.option_strings]
    assert options and all(o in p.stdout for o in options)


@pytest.mark.parametrize("name", sorted(_parsers()))
def test_every_option_has_help(name):
    """Every argument and every listed command of every parser has help text."""
    ap = _parsers()[name]
    for action in ap._actions:
        assert (action.help or "").strip(), f"{name}: {action.dest} has no help"
        if isinstance(action, argparse._SubParsersAction):
            listed = [a.dest for a in action._choices_actions]
            assert listed == list(replay.COMMANDS)
            assert all((a.help or "").strip() for a in action._choices_actions)


def test_version_prints_the_package_version():
    """--version prints the installed version, then the engine build; exit 0."""
    p = _replay("--version")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == f"replay.py (xcache) {replay.version()}"
    assert p.stdout.splitlines()[1].startswith("engine build ")


def test_version_falls_back_to_pyproject(monkeypatch):
    """Without an installed distribution the version comes from pyproject.toml."""
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    text = (ROOT / "pyproject.toml").read_text()
    (declared,) = re.findall(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
    assert replay.version() == declared


def test_unknown_first_argument_goes_to_the_gate(tmp_path):
    """An unknown option is the gate's usage error (exit 2), as before commands."""
    p = _replay("--no-such-option", str(tmp_path))
    assert p.returncode == 2
    assert p.stderr.startswith("usage: replay.py [-h]")


def test_import_fixtures_stays_light():
    """`import fixtures` imports neither the gate, the lab nor the engine."""
    code = ("import sys, xcache.fixtures; print(sorted(m for m in sys.modules if "
            "m.startswith(('xcache.gate', 'xcache.lab', 'xcache.engine'))))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_the_gate_imports_no_engine_before_it_builds_one():
    """Loading the gate and the front door leaves the engine unimported."""
    code = ("import sys, xcache.replay, xcache.gate.cli; xcache.replay.parser(); "
            "print('xcache.engine' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"
