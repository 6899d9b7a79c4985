"""Every tool names itself by how it was run: the installed command, or replay.py.

``xcache-replay``, ``xcache-fixtures`` and ``xcache-inspect`` say their own
names in ``--version``, usage and error lines (and in the labs' and the
gate's); ``python replay.py`` in the clone says ``replay.py``, ``python -m
xcache.fixtures`` says that (``xcache.prog``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xcache import replay
from xcache.prog import FIXTURES, INSPECT, REPLAY, prog_name

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.nosan  # runs the tools' command lines, not the C core

#: the installed commands (pip install -e . put them beside the interpreter)
INSTALLED = ("xcache-replay", "xcache-fixtures", "xcache-inspect")


def _command(name: str) -> str:
    """The installed command's path; the test is skipped where it is missing."""
    path = BIN / name
    if not path.is_file():
        found = shutil.which(name)
        if found is None:
            pytest.skip(f"{name} is not installed (pip install -e .)")
        return found
    return str(path)


def _run(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` from ``cwd``; its output captured."""
    return subprocess.run(list(argv), capture_output=True, text=True, cwd=cwd,
                          timeout=120)


@pytest.mark.parametrize(("argv0", "tool", "name"), [
    ("/venv/bin/xcache-replay", REPLAY, "xcache-replay"),
    ("replay.py", REPLAY, "replay.py"),
    ("/clone/replay.py", REPLAY, "replay.py"),
    ("-c", REPLAY, "replay.py"),
    ("/venv/bin/xcache-fixtures", FIXTURES, "xcache-fixtures"),
    ("/clone/fixtures/__main__.py", FIXTURES, "python -m xcache.fixtures"),
    ("/venv/bin/xcache-inspect", INSPECT, "xcache-inspect"),
    ("/venv/bin/xcache-replay", INSPECT, "python -m xcache.engine.inspector"),
    ("/clone/engine/inspector.py", INSPECT, "python -m xcache.engine.inspector"),
])
def test_prog_name_is_the_command_run_else_the_module_form(argv0, tool, name):
    """The installed command's basename gives its name; anything else the other."""
    assert prog_name(tool, argv0) == name


def test_prog_name_drops_a_windows_exe_suffix():
    """``xcache-fixtures.exe`` is the installed command on Windows."""
    assert prog_name(FIXTURES, "xcache-fixtures.exe") == "xcache-fixtures"


@pytest.mark.parametrize("name", INSTALLED)
def test_installed_version_names_the_installed_command(name, tmp_path):
    """`xcache-X --version` is `xcache-X (xcache) VERSION`, from any folder."""
    done = _run(_command(name), "--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"{name} (xcache) {replay.version()}"
    assert "replay.py" not in done.stdout and "python -m" not in done.stdout


@pytest.mark.parametrize("command", ["gate", "lab", "predict", "time"])
def test_installed_replay_commands_name_themselves(command, tmp_path):
    """`xcache-replay COMMAND --version` and its usage say xcache-replay COMMAND."""
    exe = _command("xcache-replay")
    done = _run(exe, command, "--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (
        f"xcache-replay {command} (xcache) {replay.version()}")
    helped = _run(exe, command, "--help", cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith(f"usage: xcache-replay {command} ")
    assert "replay.py" not in helped.stdout.split("\n\n")[0]  # the usage


def test_installed_replay_help_and_errors_name_xcache_replay(tmp_path):
    """The front door's usage, its unknown-command line and the gate's usage error."""
    exe = _command("xcache-replay")
    helped = _run(exe, "--help", cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    usage = helped.stdout.split("\n\n")[0].splitlines()
    assert usage == ["usage: xcache-replay [gate] <dir> [options]",
                     "       xcache-replay lab TRACE OUTDIR [options]",
                     "       xcache-replay predict TRACE OUTDIR [options]",
                     "       xcache-replay time TRACE OUTDIR [options]",
                     "       xcache-replay [--help | --version]"]
    typo = _run(exe, "gaet", str(tmp_path / "a"), str(tmp_path / "b"),
                cwd=tmp_path)
    assert typo.returncode == 2
    assert typo.stderr == (
        "xcache-replay: unknown command 'gaet' (the commands are gate, lab, "
        "predict, time; gate, the default, takes one folder); did you mean "
        "'gate'?\n")
    bad = _run(exe, "--no-such-option", str(tmp_path), cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.startswith("usage: xcache-replay [-h]")
    assert bad.stderr.splitlines()[-1] == (
        "xcache-replay: error: unrecognized arguments: --no-such-option")


def test_installed_fixtures_and_inspect_usage_errors_name_themselves(tmp_path):
    """A usage error of xcache-fixtures or xcache-inspect names that command."""
    fx = _run(_command("xcache-fixtures"), "no-such-command", cwd=tmp_path)
    assert fx.returncode == 2
    assert fx.stderr.startswith("usage: xcache-fixtures [-h]")
    assert fx.stderr.splitlines()[-1].startswith(
        "xcache-fixtures: error: argument cmd: invalid choice: 'no-such-command'")
    ins = _run(_command("xcache-inspect"), cwd=tmp_path)
    assert ins.returncode == 2
    assert ins.stderr.splitlines() == [
        "usage: xcache-inspect [-h] [--direct] [--layout FILE] [--version] path",
        "xcache-inspect: error: the following arguments are required: path"]


def test_the_clone_file_and_module_forms_keep_their_names(tmp_path):
    """`python replay.py` says replay.py; `python -m xcache.fixtures` says so."""
    door = _run(sys.executable, str(ROOT / "replay.py"), "--version",
                cwd=tmp_path)
    assert door.stdout.splitlines()[0] == f"replay.py (xcache) {replay.version()}"
    module = _run(sys.executable, "-m", "xcache.fixtures", "--version",
                  cwd=tmp_path)
    assert module.stdout == (f"python -m xcache.fixtures (xcache) "
                             f"{replay.version()}\n")
