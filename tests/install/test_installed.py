"""xcache installed as users install it: from a wheel and from an sdist, into a
fresh venv, run from a folder outside the clone.

The distribution is built with ``python -m build`` from a copy of the clone's
files (the sdist first, then the wheel from the unpacked sdist, so a file the
sdist misses fails the wheel too).  Each venv gets nothing but ``pip install``
of one artifact; every command then runs with the clone out of reach: the
working folder is a temporary one, ``PYTHONPATH`` is unset, and the checks
assert that what ran came from the venv.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERSION_LINE = "(xcache) "

pytestmark = [pytest.mark.nosan, pytest.mark.slow]


def _env() -> dict[str, str]:
    """The environment of a user's shell: no path into the clone, no engine override."""
    drop = {"PYTHONPATH", "XC_ENGINE_LIB", "VIRTUAL_ENV", "LD_PRELOAD"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def run(argv: list[str], cwd: Path, timeout: float = 600,
        ok: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in ``cwd``; with ``ok`` a non-zero exit fails, output shown."""
    p = subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True,
                       timeout=timeout)
    if ok:
        assert p.returncode == 0, (f"{argv} exited {p.returncode}\n"
                                   f"--- stdout\n{p.stdout[-4000:]}\n"
                                   f"--- stderr\n{p.stderr[-4000:]}")
    return p


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel ``python -m build`` makes of the clone's files."""
    src = tmp_path_factory.mktemp("src") / "xcache"
    ignore = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.so",
                                    "__pycache__", "*.egg-info", "_xc.c", "*.o",
                                    ".pytest_cache", ".hypothesis", ".ruff_cache")
    shutil.copytree(ROOT, src, ignore=ignore)
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", str(out), str(src)],
        cwd=out, timeout=900)
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(out.iterdir())
    return {"wheel": wheels[0], "sdist": sdists[0]}


def _venv(where: Path, requirement: str) -> Path:
    """A fresh venv at ``where`` with only ``pip install requirement``; its bin/."""
    run([sys.executable, "-m", "venv", str(where)], cwd=where.parent)
    bin_dir = where / "bin"
    run([str(bin_dir / "python"), "-m", "pip", "install", "-q",
         "--disable-pip-version-check", requirement], cwd=where.parent, timeout=900)
    return bin_dir


@pytest.fixture(scope="module")
def wheel_bin(dist: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin folder of a venv holding the wheel with the labs' extra."""
    return _venv(tmp_path_factory.mktemp("wheel-venv") / "v",
                 f"{dist['wheel']}[lab]")


@pytest.fixture
def away(tmp_path: Path) -> Path:
    """A working folder outside the clone."""
    assert not tmp_path.is_relative_to(ROOT)
    return tmp_path


def _commands(wheel: Path) -> list[str]:
    """The console commands the wheel declares (its entry_points.txt)."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist()
                    if n.endswith(".dist-info/entry_points.txt"))
        text = z.read(name).decode()
    cp = configparser.ConfigParser()
    cp.read_string(text)
    return sorted(cp["console_scripts"])


def test_the_wheel_installs_one_import_name_and_its_engine_sources(
        dist: dict[str, Path]) -> None:
    """Every file of the wheel is under xcache/ or its metadata; the C sources ship."""
    with zipfile.ZipFile(dist["wheel"]) as z:
        names = z.namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"xcache", "xcache-0.1.0.dist-info"}, tops
    for must in ("xcache/engine/csrc/xc.h", "xcache/engine/csrc/xc_cache.c",
                 "xcache/engine/_cdef.h", "xcache/engine/pins.json",
                 "xcache/gate/sim_counts.json", "xcache/oracle/traces/__init__.py",
                 "xcache/gate/open_probe/__init__.py", "xcache/lab/timing/__init__.py",
                 "xcache/hunt/fuzz/targets/__init__.py",
                 "xcache/fixtures/models/mixtral-8x7b.json",
                 "xcache/fixtures/traces/olmoe_299.jsonl",
                 "xcache/examples/tinycache/xcs.toml", "xcache/replay.py"):
        assert must in names, must
    assert any(n.startswith("xcache/engine/_xc") and n.endswith(".so") for n in names)


def test_every_folder_with_python_ships_in_the_wheel(dist: dict[str, Path]) -> None:
    """Each package folder of the clone is in the wheel: none is left out by a list."""
    with zipfile.ZipFile(dist["wheel"]) as z:
        names = set(z.namelist())
    tops = ("engine", "oracle", "fixtures", "gate", "lab", "faults", "hunt",
            "examples")
    missing = [p.relative_to(ROOT).as_posix() for top in tops
               for p in (ROOT / top).rglob("*.py")
               if "__pycache__" not in p.parts
               and f"xcache/{p.relative_to(ROOT).as_posix()}" not in names]
    assert missing == []


def test_every_command_names_itself_and_the_version(wheel_bin: Path, away: Path,
                                                    dist: dict[str, Path]) -> None:
    """Each installed xcache-* command runs from elsewhere and prints its version."""
    commands = _commands(dist["wheel"])
    assert {"xcache-replay", "xcache-fixtures", "xcache-inspect",
            "xcache-data"} <= set(commands)
    for cmd in commands:
        p = run([str(wheel_bin / cmd), "--version"], cwd=away)
        assert p.stdout.startswith(f"{cmd} {VERSION_LINE}0.1.0"), (cmd, p.stdout)


def test_the_installed_package_is_the_one_that_runs(wheel_bin: Path,
                                                    away: Path) -> None:
    """xcache comes from the venv, and no bare design folder name is importable."""
    code = ("import importlib.util, xcache, xcache.engine\n"
            "print(xcache.engine.__file__)\n"
            "print([n for n in ('engine', 'gate', 'oracle', 'lab', 'faults', 'hunt',\n"
            "       'fixtures', 'replay') if importlib.util.find_spec(n)])\n")
    p = run([str(wheel_bin / "python"), "-c", code], cwd=away)
    where, bare = p.stdout.splitlines()
    assert Path(where).is_relative_to(wheel_bin.parent), where
    assert bare == "[]"


def test_the_gate_passes_from_the_wheel(wheel_bin: Path, away: Path) -> None:
    """`xcache-replay OUT` builds the installed engine sources and passes."""
    p = run([str(wheel_bin / "xcache-replay"), str(away / "out")], cwd=away)
    assert p.stdout.splitlines()[-1].startswith(
        f"PASS: {_shipped_scenarios()} scenarios"), p.stdout[-800:]


def test_a_twin_goes_through_the_readme_commands(wheel_bin: Path, away: Path) -> None:
    """checkpoint (a shipped name), from-header, inspect and --container, all pass."""
    run([str(wheel_bin / "xcache-fixtures"), "checkpoint", "mixtral-8x7b", "ck",
         "--layers", "0-2"], cwd=away)
    run([str(wheel_bin / "xcache-fixtures"), "from-header", "ck", "twin",
         "--scale", "0.01"], cwd=away)
    p = run([str(wheel_bin / "xcache-inspect"), "twin"], cwd=away)
    assert "MoE layers: 0-2 (3 layers)\n" in p.stdout
    assert "experts per layer: 8\n" in p.stdout
    p = run([str(wheel_bin / "xcache-replay"), "--container", "twin", "out"],
            cwd=away)
    assert p.stdout.splitlines()[-1].startswith("PASS: "), p.stdout[-800:]


def test_the_shipped_outside_cache_is_judged_by_name(wheel_bin: Path,
                                                     away: Path) -> None:
    """`xcache-replay --cache tinycache OUT` finds the shipped adapter and passes."""
    p = run([str(wheel_bin / "xcache-replay"), "--cache", "tinycache", "out"],
            cwd=away)
    assert p.stdout.rstrip().splitlines()[-1].startswith("PASS: "), p.stdout[-800:]


def _trace(wheel_bin: Path, away: Path) -> str:
    """The installed olmoe trace's path, as `xcache-data --json` prints it."""
    p = run([str(wheel_bin / "xcache-data"), "trace", "--json"], cwd=away)
    path = json.loads(p.stdout)["trace"]["olmoe_299"]
    assert Path(path).is_relative_to(wheel_bin.parent) and Path(path).is_file()
    return path


def test_the_three_labs_run_from_the_wheel(wheel_bin: Path, away: Path) -> None:
    """The policy, prefetch and time labs each write their results, the trace named."""
    _trace(wheel_bin, away)
    trace = "olmoe_299"
    replay = str(wheel_bin / "xcache-replay")
    run([replay, "lab", trace, "lab", "--policies", "lru,belady",
         "--slots", "16,64", "--quiet"], cwd=away)
    run([replay, "predict", trace, "predict", "--quiet"], cwd=away)
    run([replay, "time", trace, "time", "--tokens", "40", "--quiet"], cwd=away)
    assert {lab: sorted(p.name for p in (away / lab).iterdir())
            for lab in ("lab", "predict", "time")} == {
        "lab": ["mrc.png", "results.csv", "results.json"],
        "predict": ["predict.csv", "predict.json", "predict.png"],
        "time": ["time.csv", "time.json", "time.png", "time_layers.csv"]}


def test_the_sdist_builds_and_installs_with_its_own_sources(
        dist: dict[str, Path], tmp_path_factory: pytest.TempPathFactory,
        away: Path) -> None:
    """pip install of the sdist compiles the engine; its gate passes from elsewhere."""
    bin_dir = _venv(tmp_path_factory.mktemp("sdist-venv") / "v", str(dist["sdist"]))
    run([str(bin_dir / "xcache-data")], cwd=away)
    p = run([str(bin_dir / "xcache-replay"), str(away / "out")], cwd=away)
    assert p.stdout.splitlines()[-1].startswith(
        f"PASS: {_shipped_scenarios()} scenarios"), p.stdout[-800:]


def _shipped_scenarios() -> int:
    """The scenario files the repository ships (every replay runs each)."""
    folder = Path(__file__).resolve().parents[2] / "gate" / "scenarios"
    return sum(1 for p in folder.glob("*.json") if p.name != "programs.json")
