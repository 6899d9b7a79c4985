"""A checkout used before it is built says so in one line, with the command."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.nosan  # runs the tools as subprocesses of a copy


@pytest.fixture(scope="module")
def unbuilt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout's packages with no compiled extension in it."""
    dest = tmp_path_factory.mktemp("unbuilt") / "clone"
    ignore = shutil.ignore_patterns("*.so", "__pycache__", "_xc.c", "*.o")
    for name in ("xcache", "engine", "oracle", "fixtures", "gate", "lab", "faults",
                 "hunt"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    for name in ("replay.py", "pyproject.toml"):
        shutil.copy2(ROOT / name, dest / name)
    return dest


#: Runs a module or a script as a fresh clone would before `pip install`:
#: the editable install of this checkout (a finder that would hand the copy
#: this checkout's built extension) is taken off the import path first.
BOOT = """import runpy, sys
sys.meta_path[:] = [f for f in sys.meta_path
                    if "editable" not in str(getattr(f, "__module__", ""))]
what, rest = sys.argv[1], sys.argv[2:]
if what == "-m":
    sys.argv = rest
    runpy.run_module(rest[0], run_name="__main__", alter_sys=True)
else:
    sys.argv = [what, *rest]
    runpy.run_path(what, run_name="__main__")
"""


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "XC_ENGINE_LIB"}
    env["PYTHONPATH"] = str(cwd)
    return subprocess.run([sys.executable, "-c", BOOT, *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120)


def test_inspect_before_the_build_names_the_install(unbuilt: Path,
                                                    k3_shard: Path) -> None:
    """xcache-inspect exits 2 with one line naming `pip install -e .` and the folder."""
    done = _run(unbuilt, "-m", "xcache.engine.inspector", str(k3_shard.parent))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(
        "python -m xcache.engine.inspector: the engine is not built: ")
    assert f"run `pip install -e .` in {unbuilt} first" in done.stderr


def test_lab_before_the_build_names_the_install(unbuilt: Path, tmp_path: Path) -> None:
    """replay.py lab exits 2 with one line, no traceback."""
    trace = ROOT / "fixtures" / "traces" / "olmoe_299.jsonl"
    done = _run(unbuilt, str(unbuilt / "replay.py"), "lab", str(trace),
                str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"replay.py: the engine is not built: {unbuilt / 'engine'} has no compiled "
        f"extension (_xc); run `pip install -e .` in {unbuilt} first "
        "(README, 'Two commands')"]


def test_the_gate_needs_no_installed_build(unbuilt: Path) -> None:
    """The gate builds its own engine, so only --help is asked of it here."""
    done = _run(unbuilt, str(unbuilt / "replay.py"), "--help")
    assert done.returncode == 0 and "gate" in done.stdout
