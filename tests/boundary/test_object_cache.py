"""The object cache of engine builds (XC_OBJ_CACHE): reuse that cannot go stale.

A mutation run builds the engine once per mutant; with the cache each build
recompiles only what changed.  These tests build copies of the engine tree
(the real sources are never edited) and count the objects the cache holds.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xcache.engine import _build

ENGINE = Path(__file__).resolve().parents[2] / "engine"

pytestmark = pytest.mark.nosan  # builds the engine (uninstrumented) twice


def _copy_engine(tmp_path: Path) -> Path:
    """A copy of everything a build reads, as tmp_path/engine."""
    dst = tmp_path / "engine"
    shutil.copytree(ENGINE / "csrc", dst / "csrc")
    for name in _build.CDEFS:
        shutil.copy2(ENGINE / name, dst / name)
    return dst


def _build_with_cache(tree: Path, out: Path, cache: Path) -> Path:
    """Build ``tree`` into ``out`` through the object cache ``cache``; the .so."""
    env = {"XC_OBJ_CACHE": str(cache), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "xcache.engine._build",
                           "--out", str(out), "--src", str(tree)], env=env,
                          capture_output=True, text=True, check=True)
    return Path(proc.stdout.strip().splitlines()[-1])


def _load_digest(so: Path) -> str:
    """The source digest the extension ``so`` reports (in a child process)."""
    code = ("import importlib.util, sys\n"
            f"s = importlib.util.spec_from_file_location('_xc', {str(so)!r})\n"
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m)\n"
            "print(m.ffi.string(m.lib.xc_build_digest()).decode())\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, check=True).stdout.strip()


def test_a_changed_source_recompiles_that_object_and_the_digest(tmp_path):
    """An edit of one .c adds two objects (it and the digest); the rest are reused."""
    tree = _copy_engine(tmp_path)
    cache = tmp_path / "objs"
    n_c = len(list((tree / "csrc").glob("*.c")))
    so1 = _build_with_cache(tree, tmp_path / "b1", cache)
    assert len(list(cache.glob("*.o"))) == n_c + 2  # + the wrapper + digest
    assert _load_digest(so1) == _build.source_digest(tree)

    so2 = _build_with_cache(tree, tmp_path / "b2", cache)  # nothing changed
    assert len(list(cache.glob("*.o"))) == n_c + 2
    assert _load_digest(so2) == _build.source_digest(tree)

    c = tree / "csrc" / "xc_trace.c"
    c.write_text(c.read_text() + "\n/* one more line */\n")
    so3 = _build_with_cache(tree, tmp_path / "b3", cache)
    assert len(list(cache.glob("*.o"))) == n_c + 4
    assert _load_digest(so3) == _build.source_digest(tree)


def test_a_changed_header_recompiles_every_object(tmp_path):
    """A header edit reaches every object: nothing built before it is reused."""
    tree = _copy_engine(tmp_path)
    cache = tmp_path / "objs"
    n_c = len(list((tree / "csrc").glob("*.c")))
    _build_with_cache(tree, tmp_path / "b1", cache)
    h = tree / "csrc" / "xc_internal.h"
    h.write_text(h.read_text() + "\n/* one more line */\n")
    so = _build_with_cache(tree, tmp_path / "b2", cache)
    assert len(list(cache.glob("*.o"))) == 2 * (n_c + 2)
    assert _load_digest(so) == _build.source_digest(tree)
